// TEST FIXTURE, shared by `contract-0-3` and `contract-0-2` (each `include!`s it after generating
// the bindings of its own contract line, and names itself in `NAME`): a policy that counts what it
// hears and says so through `snapshot`, one line per event kind (`session-end 3`), and scores an
// item by its last access (+1, so that a score of 0 is the host's, not the guest's).

use std::cell::RefCell;
use std::collections::BTreeMap;

use agentrt::policy::types::{Event, Forecast, Item, PolicyInfo, SideEffect};
use exports::agentrt::policy::guest::Guest;

thread_local! {
    static HEARD: RefCell<BTreeMap<&'static str, u64>> = const { RefCell::new(BTreeMap::new()) };
}

fn heard(kind: &'static str) {
    HEARD.with(|h| *h.borrow_mut().entry(kind).or_default() += 1);
}

// Only exported (and so only constructed) in the wasm32 build.
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
struct Heard;

impl Guest for Heard {
    fn info() -> PolicyInfo {
        PolicyInfo {
            name: NAME.into(),
            version: "0.1.0".into(),
            description: "test fixture: says what it heard".into(),
        }
    }

    fn init(_config: Vec<(String, String)>) -> Result<(), String> {
        Ok(())
    }

    fn observe(events: Vec<Event>) {
        for event in events {
            heard(match event {
                Event::AgentRegistered(_) => "agent-registered",
                Event::RequestArrival(_) => "request-arrival",
                Event::RequestFinish(_) => "request-finish",
                Event::ToolCall(_) => "tool-call",
                Event::ToolReturn(_) => "tool-return",
                Event::SessionEnd(_) => "session-end",
                Event::EngineLoad(_) => "engine-load",
                Event::Block(_) => "block",
            });
        }
    }

    fn observe_blocks(packed: Vec<u64>) {
        for _ in packed.chunks_exact(3) {
            heard("packed-block");
        }
    }

    fn score(items: Vec<Item>) -> Vec<f32> {
        items.iter().map(|i| i.last_access as f32 + 1.0).collect()
    }

    fn score_packed(packed: Vec<u64>) -> Vec<f32> {
        packed.chunks_exact(5).map(|w| w[2] as f32 + 1.0).collect()
    }

    fn predict(_horizon: u32) -> Vec<Forecast> {
        Vec::new()
    }

    fn act() -> Vec<SideEffect> {
        Vec::new()
    }

    fn snapshot() -> Vec<u8> {
        HEARD.with(|h| {
            h.borrow()
                .iter()
                .map(|(kind, n)| format!("{kind} {n}\n"))
                .collect::<String>()
                .into_bytes()
        })
    }

    fn restore(_state: Vec<u8>) -> Result<(), String> {
        Ok(())
    }
}

#[cfg(target_arch = "wasm32")]
export!(Heard);

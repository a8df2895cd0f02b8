//! TEST FIXTURE — a policy built against the previous contract line, `agentrt:policy@0.3.0`
//! (`wit/compat/0.3.0`), without the SDK (which builds the current line). It counts what it
//! hears and says so through `snapshot`, as one line per event kind (`session-end 3`), so that a
//! test can check that a 0.4 host still talks to a 0.3 component in its own words: every session
//! end as `session-end(session-id)`, no waits or handoffs.

wit_bindgen::generate!({ path: "../../../wit/compat/0.3.0", world: "policy" });

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
struct Contract03;

impl Guest for Contract03 {
    fn info() -> PolicyInfo {
        PolicyInfo {
            name: "contract-0-3".into(),
            version: "0.3.0".into(),
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
        vec![0.0; items.len()]
    }

    fn score_packed(packed: Vec<u64>) -> Vec<f32> {
        vec![0.0; packed.len() / 5]
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
export!(Contract03);

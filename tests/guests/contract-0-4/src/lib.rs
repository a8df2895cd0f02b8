//! TEST FIXTURE — a policy built against the previous contract line, `agentrt:policy@0.4.0`
//! (`wit/compat/0.4.0`), without the SDK (which builds the current line). It counts what it
//! hears — typed events by kind, packed events by their kind's ordinal (`packed-10` would be
//! 0.5's `engine-capacity`, which a 0.4 guest must never get) — and the items it was asked to
//! score by kind ordinal (`item-3` would be 0.5's `session`), and says so through `snapshot`,
//! one line per kind, so that a test can check that a 0.5 host talks to a 0.4 component in its
//! own words. Every item it scores gets 1.

wit_bindgen::generate!({ path: "../../../wit/compat/0.4.0", world: "policy" });

use std::cell::RefCell;
use std::collections::BTreeMap;

use agentrt::policy::types::{Event, Forecast, Item, PolicyInfo, SideEffect};
use exports::agentrt::policy::guest::Guest;

thread_local! {
    static HEARD: RefCell<BTreeMap<String, u64>> = const { RefCell::new(BTreeMap::new()) };
}

fn heard(kind: String) {
    HEARD.with(|h| *h.borrow_mut().entry(kind).or_default() += 1);
}

// Only exported (and so only constructed) in the wasm32 build.
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
struct Contract04;

impl Guest for Contract04 {
    fn info() -> PolicyInfo {
        PolicyInfo {
            name: "contract-0-4".into(),
            version: "0.4.0".into(),
            description: "test fixture: says what it heard and scored".into(),
        }
    }

    fn init(_config: Vec<(String, String)>) -> Result<(), String> {
        Ok(())
    }

    fn observe(events: Vec<Event>) {
        for event in events {
            heard(
                match event {
                    Event::AgentRegistered(_) => "agent-registered",
                    Event::RequestArrival(_) => "request-arrival",
                    Event::RequestFinish(_) => "request-finish",
                    Event::ToolCall(_) => "tool-call",
                    Event::ToolReturn(_) => "tool-return",
                    Event::SessionEnd(_) => "session-end",
                    Event::EngineLoad(_) => "engine-load",
                    Event::Block(_) => "block",
                    Event::SessionWait(_) => "session-wait",
                    Event::Handoff(_) => "handoff",
                }
                .to_string(),
            );
        }
    }

    fn observe_packed(packed: Vec<u64>) {
        let mut words = packed.as_slice();
        while let Some((&head, rest)) = words.split_first() {
            let len = ((head >> 8) & 0xff) as usize;
            heard(format!("packed-{}", head & 0xff));
            words = rest.get(len..).unwrap_or(&[]);
        }
    }

    fn observe_blocks(packed: Vec<u64>) {
        for _ in packed.chunks_exact(3) {
            heard("packed-block".into());
        }
    }

    fn score(items: Vec<Item>) -> Vec<f32> {
        vec![1.0; items.len()]
    }

    fn score_packed(packed: Vec<u64>) -> Vec<f32> {
        for item in packed.chunks_exact(5) {
            heard(format!("item-{}", (item[4] >> 32) & 0xff));
        }
        vec![1.0; packed.len() / 5]
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
export!(Contract04);

//! TEST FIXTURE — a policy built against the previous contract line, `agentrt:policy@0.3.0`
//! (`wit/compat/0.3.0`), without the SDK (which builds the current line). It counts what it
//! hears and says so through `snapshot`, as one line per event kind (`session-end 3`), so that a
//! test can check that a 0.4 host still talks to a 0.3 component in its own words: every session
//! end as `session-end(session-id)`, no waits or handoffs.

wit_bindgen::generate!({ path: "../../../wit/compat/0.3.0", world: "policy" });

const NAME: &str = "contract-0-3";

include!("../../heard.rs");

//! TEST FIXTURE — a policy built against the oldest contract line the host loads,
//! `agentrt:policy@0.2.0` (`wit/compat/0.2.0`), the line before the KV tier. It counts what it
//! hears and says so through `snapshot`, and scores items by their last access, so that a test
//! can check that a 0.4 host tells it of the GPU tier only and answers its share of a host-tier
//! ranking itself.

wit_bindgen::generate!({ path: "../../../wit/compat/0.2.0", world: "policy" });

const NAME: &str = "contract-0-2";

include!("../../heard.rs");

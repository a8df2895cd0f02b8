//! A router between agentrt and the replicas (`--upstream-router`): what that router reads to
//! keep a session on one replica and to know the agent program a call belongs to, filled in
//! from agentrt's own identity of the call.
//!
//! An operator whose replicas already sit behind vLLM's router (`vllm-router`) points
//! `--upstream` at it and keeps it; agentrt still tags each request for the engines behind it
//! (`vllm_xargs`, `cache_salt`: the router passes both through) and adds, for the router:
//!
//! - the header `x-session-id`: the session as the policies see it (a 64-bit id scoped to the
//!   tenant, in hex — never the client's own session name, which another tenant may share).
//!   `consistent_hash` and `sticky_least_loaded` hash it; `kv_aware` with
//!   `--kv-aware-session-affinity-ttl-secs` binds the session to a replica by it;
//! - `vllm_xargs.agentic_context`: the program the call belongs to, for
//!   `--enable-program-scheduling` (and `kv_aware`'s affinity, which prefers it to the header):
//!   one program per agentrt session (`program_id` = `task_id` = `session_id` = the session id
//!   above; a client's own `agentic_context` is replaced), sent as a JSON string: the form
//!   vLLM's `vllm_xargs` accepts (values are strings or numbers) and the router reads. Keying the program on the session rather than on
//!   (session, agent) keeps every agent of a session on one replica, where agentrt's warm-up
//!   for the session's next agent lands (docs/replicas.md measures both keyings). No `agent_id`
//!   is sent: the router would take any agent but `lead` for a sub-agent blocking a parent it
//!   does not know.
//!
//! Warm-ups carry neither: a warm-up belongs to no session, and program scheduling would count
//! it as a step of one.

use axum::http::{HeaderName, HeaderValue};
use serde_json::{json, Map, Value};

/// The router in front of the replicas, when there is one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum UpstreamRouter {
    /// The upstream is an engine (or a router agentrt does not tag for).
    #[default]
    None,
    /// vLLM's router (`vllm-router`, PyPI; 0.1.17 checked).
    VllmRouter,
}

/// The header vLLM's router reads a session from first.
pub const SESSION_HEADER: &str = "x-session-id";

impl UpstreamRouter {
    /// The header that keeps `session`'s calls together, when the router reads one.
    pub fn session_header(self, session: u64) -> Option<(HeaderName, HeaderValue)> {
        match self {
            Self::None => None,
            Self::VllmRouter => Some((
                HeaderName::from_static(SESSION_HEADER),
                HeaderValue::from_str(&session_id(session)).expect("hex is a valid header value"),
            )),
        }
    }

    /// Put the program `session`'s call belongs to into `xargs` (the body's `vllm_xargs`). A
    /// client's own `agentic_context` is replaced: a program is the router's unit of placement
    /// and of holding KV across tool calls, and a client naming one could join another
    /// tenant's.
    pub fn tag_program(self, xargs: &mut Map<String, Value>, session: u64) {
        match self {
            Self::None => {}
            Self::VllmRouter => {
                let id = session_id(session);
                let context = json!({"program_id": id, "task_id": id, "session_id": id});
                xargs.insert("agentic_context".into(), json!(context.to_string()));
            }
        }
    }
}

/// A session id as routers see it: 16 hex digits.
fn session_id(session: u64) -> String {
    format!("{session:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vllm_router_gets_the_session_as_a_header_and_as_a_program_and_none_gets_nothing() {
        let (name, value) = UpstreamRouter::VllmRouter.session_header(0xab).unwrap();
        assert_eq!(name, "x-session-id");
        assert_eq!(value, "00000000000000ab");
        let mut xargs = Map::new();
        UpstreamRouter::VllmRouter.tag_program(&mut xargs, 0xab);
        let context: Value = serde_json::from_str(xargs["agentic_context"].as_str().unwrap()).unwrap();
        assert_eq!(
            context,
            json!({"program_id": "00000000000000ab", "task_id": "00000000000000ab", "session_id": "00000000000000ab"})
        );

        assert!(UpstreamRouter::None.session_header(0xab).is_none());
        let mut untouched = Map::new();
        UpstreamRouter::None.tag_program(&mut untouched, 0xab);
        assert!(untouched.is_empty());
    }

    #[test]
    fn a_clients_own_agentic_context_is_replaced_by_its_sessions() {
        let mut xargs = Map::new();
        xargs.insert("agentic_context".into(), json!("{\"program_id\":\"someone-elses\"}"));
        UpstreamRouter::VllmRouter.tag_program(&mut xargs, 1);
        let context: Value = serde_json::from_str(xargs["agentic_context"].as_str().unwrap()).unwrap();
        assert_eq!(context["program_id"], "0000000000000001");
    }
}

//! Which engine serves behind the proxy (`--engine`), and so which request fields carry agentrt's
//! tags: the policies, the contract and the eviction wire are the same for every engine; only the
//! field names an engine reads differ.
//!
//! | what | vLLM (`--engine vllm`, the default) | SGLang (`--engine sglang`) |
//! |---|---|---|
//! | agent, session, warm-up flag (read by the engine plugin to tag blocks) | `vllm_xargs.agentrt_*` (`SamplingParams.extra_args`) | `custom_params.agentrt_*` (`SamplingParams.custom_params`) |
//! | the session, for the engine itself | — | `session_id`: the tenant-scoped session (`agentrt-` + 16 hex digits), what SGLang's session-aware radix cache keys on |
//! | a policy's demotion (`--engine-priorities`) | `priority` = +N (vLLM serves lower values first) | `priority` = −N (SGLang serves higher values first unless started with `--schedule-low-priority-values-first`) |
//! | the tenant's salt | `cache_salt` | `cache_salt` (SGLang namespaces its radix tree by it) |
//! | a new agent's anchor size | `/tokenize` with chat messages | the byte estimate (SGLang's `/tokenize` takes a prompt, not messages) |
//!
//! Under SGLang a client's `session_id` is replaced by the proxy's (a client-chosen one could
//! name another tenant's session in SGLang's session cache), and a client's `session_params` (SGLang's
//! stateful sessions, opened with `/open_session`, which the proxy does not serve) is refused:
//! its id names an engine session of whichever tenant opened it.

use serde_json::{json, Map, Value};

use super::upstream_router::UpstreamRouter;

/// The engine behind `--upstream`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum EngineKind {
    /// vLLM with the agentrt plugin (`adapters/vllm`).
    #[default]
    Vllm,
    /// SGLang with the agentrt plugin (`adapters/sglang`).
    Sglang,
}

/// The prefix of the tag keys agentrt puts into the engine's tag field: the proxy's alone.
pub const RESERVED_TAG_PREFIX: &str = "agentrt_";

/// Every engine's tag field, so a client cannot forge agentrt's tags in any of them, whichever
/// engine is configured (a proxy's `--engine` may not match what is actually behind it).
pub const TAG_FIELDS: [&str; 2] = ["vllm_xargs", "custom_params"];

/// The prefix of the `session_id` the proxy sends SGLang.
pub const SGLANG_SESSION_PREFIX: &str = "agentrt-";

impl EngineKind {
    /// The engine's name, as `--engine` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Vllm => "vllm",
            Self::Sglang => "sglang",
        }
    }

    /// The body field whose `agentrt_*` keys the engine plugin reads.
    pub fn tag_field(self) -> &'static str {
        match self {
            Self::Vllm => "vllm_xargs",
            Self::Sglang => "custom_params",
        }
    }

    /// The session as the engine itself reads it, when it reads one from the body.
    pub fn session_id(session: u64) -> String {
        format!("{SGLANG_SESSION_PREFIX}{session:016x}")
    }

    /// Refuse what a client may not send this engine (the message names the field and why).
    pub fn check_client_fields(self, body: &Map<String, Value>) -> Result<(), String> {
        match self {
            Self::Vllm => Ok(()),
            Self::Sglang => match body.get("session_params") {
                Some(v) if !v.is_null() => Err(
                    "`session_params` names an SGLang engine session, which any tenant may have opened; \
                     behind agentrt the session is the proxy's (the `x-session-id` header), sent as `session_id`"
                        .to_string(),
                ),
                _ => Ok(()),
            },
        }
    }

    /// Tag a user request: agent and session (as the policy sees them), not a warm-up; for SGLang
    /// also its own `session_id`. Keeps whatever else the client put into the tag field.
    pub fn tag_request(self, body: &mut Value, agent: u32, session: u64, router: UpstreamRouter) {
        let object = body.as_object_mut().expect("request bodies are objects");
        let tags = object.entry(self.tag_field()).or_insert_with(|| json!({}));
        if !tags.is_object() {
            // A client's non-object value cannot carry tags; the engine would refuse it anyway.
            *tags = json!({});
        }
        let map = tags.as_object_mut().expect("made an object above");
        map.insert("agentrt_agent".into(), json!(agent));
        map.insert("agentrt_session".into(), json!(session));
        map.insert("agentrt_warmup".into(), json!(false));
        match self {
            Self::Vllm => router.tag_program(map, session),
            Self::Sglang => {
                object.insert("session_id".into(), json!(Self::session_id(session)));
            }
        }
    }

    /// Tag a warm-up: the agent, no session (a warm-up belongs to none), the warm-up flag.
    pub fn tag_warmup(self, body: &mut Value, agent: u32) {
        body[self.tag_field()] = json!({"agentrt_agent": agent, "agentrt_session": 0, "agentrt_warmup": true});
    }

    /// The `priority` a demotion by `demotion` (> 0) is sent as.
    pub fn demotion_priority(self, demotion: u32) -> i64 {
        match self {
            Self::Vllm => i64::from(demotion),
            Self::Sglang => -i64::from(demotion),
        }
    }

    /// Whether the engine's `/tokenize` counts chat messages (vLLM's does; SGLang's takes a
    /// prompt), so a new agent's anchor can be measured exactly.
    pub fn tokenizes_chat(self) -> bool {
        matches!(self, Self::Vllm)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vllm_tags_go_into_vllm_xargs_and_sglang_tags_into_custom_params_and_session_id() {
        let mut vllm = json!({"vllm_xargs": {"kv_cache_report_mode": "full"}});
        EngineKind::Vllm.tag_request(&mut vllm, 3, 0xabc, UpstreamRouter::None);
        assert_eq!(
            vllm,
            json!({"vllm_xargs": {"kv_cache_report_mode": "full", "agentrt_agent": 3, "agentrt_session": 0xabc, "agentrt_warmup": false}})
        );

        let mut sglang = json!({"custom_params": {"mine": 1}, "session_id": "client-chosen"});
        EngineKind::Sglang.tag_request(&mut sglang, 3, 0xabc, UpstreamRouter::None);
        assert_eq!(
            sglang,
            json!({
                "custom_params": {"mine": 1, "agentrt_agent": 3, "agentrt_session": 0xabc, "agentrt_warmup": false},
                "session_id": "agentrt-0000000000000abc",
            }),
            "the client's session_id is replaced by the tenant-scoped one"
        );
        assert!(sglang.get("vllm_xargs").is_none());
    }

    #[test]
    fn warmups_carry_no_session_and_the_flag() {
        let mut body = json!({});
        EngineKind::Sglang.tag_warmup(&mut body, 9);
        assert_eq!(
            body,
            json!({"custom_params": {"agentrt_agent": 9, "agentrt_session": 0, "agentrt_warmup": true}})
        );
        assert!(body.get("session_id").is_none(), "a warm-up belongs to no session");
    }

    #[test]
    fn demotions_have_each_engines_sign_and_session_params_is_refused_only_for_sglang() {
        assert_eq!(EngineKind::Vllm.demotion_priority(5), 5);
        assert_eq!(EngineKind::Sglang.demotion_priority(5), -5);
        let body = json!({"session_params": {"id": "someone-elses"}});
        let body = body.as_object().unwrap();
        assert!(EngineKind::Vllm.check_client_fields(body).is_ok());
        let e = EngineKind::Sglang.check_client_fields(body).unwrap_err();
        assert!(e.contains("session_params"), "{e}");
        let null = json!({"session_params": null});
        assert!(EngineKind::Sglang
            .check_client_fields(null.as_object().unwrap())
            .is_ok());
    }
}

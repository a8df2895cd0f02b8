//! Who is calling: the agent and the session of a request, without framework changes.
//!
//! - Agent: the `x-agent-id` header, else the body's `user` field, else the request's **anchor** —
//!   the content hash of its system/developer messages and tool definitions. Agents of a
//!   multi-agent system differ exactly there, so the anchor names them for free.
//! - Session: the `x-session-id` header, else the body's `session_id`, else a hint dialect's name
//!   (Dynamo's `nvext.session_control.session_id`, ThunderAgent's `program_id`), else the hash of the first
//!   user message — in a multi-agent workflow every agent's prompt carries the original task.
//!
//! Pure functions of a request: nothing here remembers anything (a tenant's agents, anchors and
//! sessions live in [`crate::tenant::agents`]). Session ids mix in the tenant
//! ([`Identity::scope_to_tenant`]).

pub mod agent_api;

use axum::http::HeaderMap;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::identity::agent_api::AgentApi;
use crate::names::check_name;

/// What the proxy learned about one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Identity {
    /// The agent: `x-agent-id`, else the body's `user`, else `anchor-<hash>` (`completions` for
    /// a plain completion); by the rule of [`check_name`] (at most [`crate::names::MAX_NAME_BYTES`]).
    pub agent_name: String,
    /// [`stable_hash`] of the anchor (leading system/developer messages and tools); 0 for a
    /// plain completion, which has none.
    pub anchor_hash: u64,
    /// Rough size of the anchor in tokens (bytes / 4).
    pub anchor_tokens: u32,
    /// The session as the client names it: `x-session-id`, else the body's `session_id`, else
    /// `task-<hash>` of the first user message (`prompt-<hash>` of a completion's prompt).
    pub session_key: String,
    /// The session id policies and the engine's block tags see: [`stable_hash`] of
    /// `session_key`, mixed with the tenant's name once [`Identity::scope_to_tenant`] ran.
    pub session: u64,
    /// Rough prompt size in tokens (bytes / 4): the upstream's usage gives the exact figure later.
    pub prompt_tokens: u32,
}

/// The part of a chat request that identifies its agent: leading system/developer messages + tools.
#[derive(Debug, Clone, PartialEq)]
pub struct Anchor {
    /// The leading system/developer messages, in the chat view of the request.
    pub messages: Vec<Value>,
    /// The request's `tools`, as sent.
    pub tools: Option<Value>,
    /// The request's `model` (empty if it had none): warm-ups ask the same model.
    pub model: String,
    /// The `cache_salt` the agent's requests went upstream with: its warm-ups must carry it too.
    pub cache_salt: Option<String>,
    /// The API the agent speaks: its warm-ups go through the same one, so that the engine renders
    /// the same prefix.
    pub api: AgentApi,
    /// The anchor as that API spells it (`instructions`/`system`, `tools`); `None` for chat
    /// completions, whose anchor is `messages` and `tools`.
    pub fields: Option<Value>,
}

/// A stable 64-bit hash (the first 8 bytes of SHA-256): stable across restarts and versions,
/// unlike `std`'s hasher, because policies keep anchor hashes in their snapshots.
pub fn stable_hash(bytes: &[u8]) -> u64 {
    let digest = Sha256::digest(bytes);
    u64::from_le_bytes(digest[..8].try_into().expect("sha256 has 32 bytes"))
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)?
        .to_str()
        .ok()
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

/// What a request's headers say of who calls — `x-agent-id` and `x-session-id` — read once with
/// the rest of its head, before its body.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IdentityHeaders {
    /// `x-agent-id`, trimmed, when present and not empty.
    pub agent: Option<String>,
    /// `x-session-id`, trimmed, when present and not empty.
    pub session: Option<String>,
}

impl IdentityHeaders {
    /// The identity headers of `headers`.
    pub fn read(headers: &HeaderMap) -> Self {
        Self {
            agent: header(headers, "x-agent-id").map(str::to_string),
            session: header(headers, "x-session-id").map(str::to_string),
        }
    }
}

/// Split a chat request into its anchor and identify it.
pub fn identify_chat(headers: &IdentityHeaders, body: &Value) -> Result<(Identity, Anchor), String> {
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .ok_or("`messages` must be an array of chat messages")?;
    let leading: Vec<Value> = messages
        .iter()
        .take_while(|m| matches!(m.get("role").and_then(Value::as_str), Some("system" | "developer")))
        .cloned()
        .collect();
    let tools = body.get("tools").cloned();
    // serde_json's map is ordered by key, so equal anchors serialize to equal bytes.
    let canonical = serde_json::to_vec(&json!({ "system": leading, "tools": tools })).expect("values serialize");
    let anchor_hash = stable_hash(&canonical);
    let agent_name = headers
        .agent
        .clone()
        .or_else(|| body.get("user").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_else(|| format!("anchor-{anchor_hash:016x}"));
    let first_user = messages
        .iter()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"));
    let session_key = headers
        .session
        .clone()
        .or_else(|| body.get("session_id").and_then(Value::as_str).map(str::to_string))
        .or_else(|| first_user.map(|m| format!("task-{:016x}", stable_hash(m.to_string().as_bytes()))))
        .unwrap_or_else(|| format!("anchor-{anchor_hash:016x}"));
    let prompt_bytes: usize =
        messages.iter().map(|m| m.to_string().len()).sum::<usize>() + tools.as_ref().map_or(0, |t| t.to_string().len());
    check_agent_name(&agent_name)?;
    let identity = Identity {
        agent_name,
        anchor_hash,
        anchor_tokens: (canonical.len() / 4) as u32,
        session: stable_hash(session_key.as_bytes()),
        session_key,
        prompt_tokens: (prompt_bytes / 4) as u32,
    };
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    Ok((
        identity,
        Anchor {
            messages: leading,
            tools,
            model,
            cache_salt: None,
            api: AgentApi::ChatCompletions,
            fields: None,
        },
    ))
}

/// Identify a plain completion request (no messages: identity from headers, session from them).
pub fn identify_completion(headers: &IdentityHeaders, body: &Value) -> Result<Identity, String> {
    let prompt = body.get("prompt").map(Value::to_string).unwrap_or_default();
    let agent_name = headers
        .agent
        .clone()
        .or_else(|| body.get("user").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_else(|| "completions".to_string());
    let session_key = headers
        .session
        .clone()
        .or_else(|| body.get("session_id").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_else(|| format!("prompt-{:016x}", stable_hash(prompt.as_bytes())));
    check_agent_name(&agent_name)?;
    Ok(Identity {
        anchor_hash: 0,
        anchor_tokens: 0,
        session: stable_hash(session_key.as_bytes()),
        session_key,
        prompt_tokens: (prompt.len() / 4) as u32,
        agent_name,
    })
}

/// Whether the request names its session in agentrt's own way (`x-session-id`, or the body's
/// `session_id`), which a hint dialect's name ([`Identity::name_session`]) does not override.
pub fn names_session(headers: &IdentityHeaders, body: &Value) -> bool {
    headers.session.is_some() || body.get("session_id").and_then(Value::as_str).is_some()
}

impl Identity {
    /// Name the session `key` (a hint dialect's: Dynamo's `session_control.session_id`,
    /// ThunderAgent's `program_id`), for a request that does not name it itself.
    pub fn name_session(&mut self, key: String) {
        self.session = stable_hash(key.as_bytes());
        self.session_key = key;
    }

    /// Make the session id the tenant's own: two tenants that use the same session key (an
    /// `x-session-id`, or the same first task) must not share a session id in the engine's block
    /// tags or in what their policies hear.
    pub fn scope_to_tenant(&mut self, tenant: &str) {
        self.session = tenant_session(tenant, &self.session_key);
    }
}

/// The session id of `session_key` in `tenant`: a stable hash of both, kept apart by a separator
/// that neither a tenant name nor the length prefix can contain.
pub fn tenant_session(tenant: &str, session_key: &str) -> u64 {
    let mut bytes = Vec::with_capacity(tenant.len() + session_key.len() + 9);
    bytes.extend_from_slice(&(tenant.len() as u64).to_le_bytes());
    bytes.extend_from_slice(tenant.as_bytes());
    bytes.push(0);
    bytes.extend_from_slice(session_key.as_bytes());
    stable_hash(&bytes)
}

/// Refuse an agent name that breaks the names' rule ([`check_name`]): visible characters, at
/// most [`crate::names::MAX_NAME_BYTES`].
fn check_agent_name(name: &str) -> Result<(), String> {
    check_name(name).map_err(|fault| format!("the agent name (`x-agent-id` or `user`) is {fault}"))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A chat request of `system` and one `user` message, with one tool (other modules' tests use it too).
    pub(crate) fn chat(system: &str, user: &str) -> Value {
        json!({"model": "m", "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": user},
            {"role": "assistant", "content": "…"},
        ], "tools": [{"type": "function", "function": {"name": "calc"}}]})
    }

    #[test]
    fn agents_are_named_by_anchor_and_sessions_by_task() {
        let h = IdentityHeaders::default();
        let (a, anchor) = identify_chat(&h, &chat("You are the planner.", "Task 17")).unwrap();
        let (b, _) = identify_chat(&h, &chat("You are the coder.", "Task 17")).unwrap();
        let (c, _) = identify_chat(&h, &chat("You are the planner.", "Task 18")).unwrap();
        assert_ne!(a.agent_name, b.agent_name, "different system prompts, different agents");
        assert_eq!(a.agent_name, c.agent_name, "same anchor, same agent");
        assert_eq!(a.session, b.session, "same task, same session");
        assert_ne!(a.session, c.session);
        assert_eq!(anchor.messages.len(), 1);
        assert!(anchor.tools.is_some());
    }

    #[test]
    fn explicit_identity_wins() {
        let mut h = HeaderMap::new();
        h.insert("x-agent-id", "coder".parse().unwrap());
        h.insert("x-session-id", "s-1".parse().unwrap());
        let (id, _) = identify_chat(&IdentityHeaders::read(&h), &chat("x", "y")).unwrap();
        assert_eq!((id.agent_name.as_str(), id.session_key.as_str()), ("coder", "s-1"));
        let mut body = chat("x", "y");
        body["user"] = json!("reviewer");
        let (id, _) = identify_chat(&IdentityHeaders::default(), &body).unwrap();
        assert_eq!(id.agent_name, "reviewer");
    }

    #[test]
    fn a_request_without_messages_is_refused_with_a_reason() {
        let err = identify_chat(&IdentityHeaders::default(), &json!({"model": "m"})).unwrap_err();
        assert!(err.contains("`messages`"));
    }
}

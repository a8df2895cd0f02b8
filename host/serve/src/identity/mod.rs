//! Who is calling: the agent and the session of a request, without framework changes.
//!
//! - Agent: the `x-agent-id` header, else the body's `user` field, else the request's **anchor** —
//!   the content hash of its system/developer messages and tool definitions. Agents of a
//!   multi-agent system differ exactly there, so the anchor names them for free.
//! - Session: the `x-session-id` header, else the body's `session_id`, else the hash of the first
//!   user message — in a multi-agent workflow every agent's prompt carries the original task.
//!
//! [`AgentDirectory`] interns agent names into policy handles (one directory per tenant, so one
//! tenant's policy never hears of another's agents; handles drawn from one counter for all
//! tenants, so no two tenants share a handle in the engine's block tags) and remembers each anchor
//! so a warm-up can be rebuilt. Session ids mix in the tenant ([`Identity::scope_to_tenant`]).

pub mod agent_api;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use agentrt_runtime::types::{AgentRegistered, Event};

use crate::identity::agent_api::AgentApi;
use crate::table::{LruTable, TableLimits, MAX_AGENT_NAME_BYTES};
use crate::tenant::handles::Handles;

/// What the proxy learned about one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Identity {
    pub agent_name: String,
    pub anchor_hash: u64,
    /// Rough size of the anchor in tokens (bytes / 4).
    pub anchor_tokens: u32,
    pub session_key: String,
    pub session: u64,
    /// Rough prompt size in tokens (bytes / 4): the upstream's usage gives the exact figure later.
    pub prompt_tokens: u32,
}

/// The part of a chat request that identifies its agent: leading system/developer messages + tools.
#[derive(Debug, Clone, PartialEq)]
pub struct Anchor {
    pub messages: Vec<Value>,
    pub tools: Option<Value>,
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

/// An anchor as the directory keeps it: its JSON as text, one allocation per part. Parsed JSON
/// costs several times its text (every object a map), so a table that weighed anchors by their
/// text while holding parsed values held far more than it counted (100,000 tools: 1.5 GB
/// held, 16 MiB counted). The text is exactly what is counted, and goes back to the allocator
/// whole when the anchor is forgotten; a warm-up parses it again.
#[derive(Debug, Clone)]
struct HeldAnchor {
    /// `[messages, tools, fields]` as one JSON array.
    json: Box<str>,
    model: Box<str>,
    cache_salt: Option<Box<str>>,
    api: AgentApi,
}

impl HeldAnchor {
    fn of(anchor: Anchor) -> Self {
        let parts = json!([anchor.messages, anchor.tools, anchor.fields]);
        Self {
            json: parts.to_string().into_boxed_str(),
            model: anchor.model.into_boxed_str(),
            cache_salt: anchor.cache_salt.map(Into::into),
            api: anchor.api,
        }
    }

    /// What the table counts for it: the bytes it holds.
    fn bytes(&self) -> usize {
        self.json.len() + self.model.len() + self.cache_salt.as_ref().map_or(0, |s| s.len())
    }

    fn anchor(&self) -> Anchor {
        let mut parts = match serde_json::from_str::<Value>(&self.json) {
            Ok(Value::Array(parts)) => parts.into_iter(),
            _ => unreachable!("written by `of` as a JSON array"),
        };
        let mut next = || parts.next().filter(|v| !v.is_null());
        let messages = match next() {
            Some(Value::Array(messages)) => messages,
            _ => Vec::new(),
        };
        Anchor {
            messages,
            tools: next(),
            fields: next(),
            model: self.model.to_string(),
            cache_salt: self.cache_salt.as_deref().map(str::to_string),
            api: self.api,
        }
    }
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

/// Split a chat request into its anchor and identify it.
pub fn identify_chat(headers: &HeaderMap, body: &Value) -> Result<(Identity, Anchor), String> {
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
    let agent_name = header(headers, "x-agent-id")
        .map(str::to_string)
        .or_else(|| body.get("user").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_else(|| format!("anchor-{anchor_hash:016x}"));
    let first_user = messages
        .iter()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"));
    let session_key = header(headers, "x-session-id")
        .map(str::to_string)
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
pub fn identify_completion(headers: &HeaderMap, body: &Value) -> Result<Identity, String> {
    let prompt = body.get("prompt").map(Value::to_string).unwrap_or_default();
    let agent_name = header(headers, "x-agent-id")
        .map(str::to_string)
        .or_else(|| body.get("user").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_else(|| "completions".to_string());
    let session_key = header(headers, "x-session-id")
        .map(str::to_string)
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

impl Identity {
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

/// One tenant's agents: names → handles, anchors by hash, and live sessions. Every table is
/// bounded ([`TableLimits`]) and forgets its least recently used entry first.
///
/// Handles come from a counter shared by every tenant's directory ([`Handles`]), so no two
/// tenants ever share an agent handle: the engine tags KV blocks with it.
pub struct AgentDirectory {
    inner: Mutex<Directory>,
    tenant: Arc<str>,
    handles: Handles,
}

struct Directory {
    handles: LruTable<String, u32>,
    anchors: LruTable<u64, (u32, HeldAnchor)>,
    /// Live sessions → when their last request arrived or finished.
    sessions: LruTable<u64, Instant>,
    sessions_seen: u64,
}

impl Default for AgentDirectory {
    fn default() -> Self {
        Self::new(crate::names::DEFAULT_TENANT, TableLimits::default(), Handles::default())
    }
}

/// `name`, cut to at most [`MAX_AGENT_NAME_BYTES`] at a character boundary.
fn truncate_name(name: &str) -> &str {
    let mut end = name.len().min(MAX_AGENT_NAME_BYTES);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    &name[..end]
}

/// Refuse an agent name longer than [`MAX_AGENT_NAME_BYTES`].
fn check_agent_name(name: &str) -> Result<(), String> {
    if name.len() > MAX_AGENT_NAME_BYTES {
        return Err(format!(
            "the agent name (`x-agent-id` or `user`) is {} bytes, over the limit of {MAX_AGENT_NAME_BYTES}",
            name.len()
        ));
    }
    Ok(())
}

impl AgentDirectory {
    /// `tenant`'s directory, taking handles from `handles`.
    pub fn new(tenant: &str, limits: TableLimits, handles: Handles) -> Self {
        Self {
            inner: Mutex::new(Directory {
                handles: LruTable::new(
                    limits.max_agents,
                    limits.max_agents.saturating_mul(MAX_AGENT_NAME_BYTES),
                ),
                anchors: LruTable::new(limits.max_anchors, limits.max_anchor_bytes),
                sessions: LruTable::new(limits.max_sessions, usize::MAX),
                sessions_seen: 0,
            }),
            tenant: tenant.into(),
            handles,
        }
    }

    /// The handle for `identity`'s agent, and the registration event to send if it is new (or
    /// was forgotten: it then registers again under a new handle).
    pub fn intern(&self, identity: &Identity) -> (u32, Option<Event>) {
        // The proxy refuses longer names; the engine adapter's names are cut here.
        let name = truncate_name(&identity.agent_name);
        let mut d = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(&mut handle) = d.handles.get_mut(&name.to_string()) {
            return (handle, None);
        }
        let handle = self.handles.next_for(&self.tenant);
        for (_, forgotten) in d.handles.insert(name.to_string(), handle, name.len()) {
            self.handles.forget(forgotten);
        }
        let event = Event::AgentRegistered(AgentRegistered {
            agent: handle,
            name: name.to_string(),
            anchor_hash: identity.anchor_hash,
            anchor_tokens: identity.anchor_tokens,
        });
        (handle, Some(event))
    }

    /// The handle of agent `name` if the directory knows it; never registers (the MCP gateway's
    /// callers: a registration carries the anchor, which only the agent's model calls show).
    pub fn handle_of(&self, name: &str) -> Option<u32> {
        let d = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        d.handles.peek(&truncate_name(name).to_string()).copied()
    }

    /// Remember `anchor` (of agent `handle`) under its hash.
    pub fn record_anchor(&self, hash: u64, handle: u32, anchor: Anchor) {
        let mut d = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, known)) = d.anchors.get_mut(&hash) {
            // A reload may have made the anchor public (or private again): its warm-ups must
            // carry the salt its requests carry now.
            known.cache_salt = anchor.cache_salt.map(Into::into);
            return;
        }
        let held = HeldAnchor::of(anchor);
        let bytes = held.bytes();
        d.anchors.insert(hash, (handle, held), bytes);
    }

    /// The anchor recorded under `hash`, with its agent's handle.
    pub fn anchor(&self, hash: u64) -> Option<(u32, Anchor)> {
        let d = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let (handle, held) = d.anchors.peek(&hash)?;
        Some((*handle, held.anchor()))
    }

    /// Agents known now (at most `max_agents`).
    pub fn agents(&self) -> usize {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).handles.len()
    }

    /// Anchors kept now, and their bytes.
    pub fn anchors(&self) -> (usize, usize) {
        let d = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        (d.anchors.len(), d.anchors.bytes())
    }

    /// Agent names, in handle order.
    pub fn agent_names(&self) -> Vec<String> {
        self.named_agents().into_iter().map(|(_, n)| n).collect()
    }

    /// (anchor hash, agent handle) of every anchor kept now, in hash order.
    pub fn anchor_hashes(&self) -> Vec<(u64, u32)> {
        let d = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let mut all: Vec<(u64, u32)> = d.anchors.iter().map(|(h, (agent, _))| (*h, *agent)).collect();
        all.sort();
        all
    }

    /// (handle, name) of every agent known now, in handle order.
    pub fn named_agents(&self) -> Vec<(u32, String)> {
        let d = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let mut named: Vec<(u32, String)> = d.handles.iter().map(|(n, h)| (*h, n.clone())).collect();
        named.sort();
        named
    }

    /// Note that a request of `session` arrived or finished.
    pub fn record_session(&self, session: u64) -> SessionRecord {
        self.record_session_at(session, Instant::now())
    }

    pub fn record_session_at(&self, session: u64, now: Instant) -> SessionRecord {
        let mut d = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(last) = d.sessions.get_mut(&session) {
            *last = now;
            return SessionRecord::default();
        }
        let forgotten = d.sessions.insert(session, now, 0).into_iter().map(|(s, _)| s).collect();
        d.sessions_seen += 1;
        SessionRecord { new: true, forgotten }
    }

    /// Forget the sessions with no request for at least `idle` and return them: the caller reports
    /// them as ended. The proxy cannot see a workflow finish; silence is the only sign of it.
    pub fn expire_sessions(&self, idle: Duration, now: Instant) -> Vec<u64> {
        let mut d = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        d.sessions
            .remove_where(|_, last| now.saturating_duration_since(*last) >= idle)
    }

    /// Sessions live now (seen, not ended, not forgotten).
    pub fn live_sessions(&self) -> usize {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).sessions.len()
    }

    /// Distinct sessions seen so far.
    pub fn sessions(&self) -> u64 {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).sessions_seen
    }
}

/// What noting a session's activity did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct SessionRecord {
    /// The session was not live (first seen, or seen again after it ended).
    pub new: bool,
    /// Sessions forgotten to make room (the table was at `--max-sessions`): the caller reports
    /// them ended, as it does idle ones, so the policy stops valuing their blocks.
    pub forgotten: Vec<u64>,
}

/// The vLLM plugin may name agents by string (clients that bypass the proxy); resolve them in the
/// same directory so both paths agree on handles.
impl agentrt_vllm::AgentResolver for AgentDirectory {
    fn resolve(&self, name: &str, policy: &dyn agentrt_vllm::EngineRanker) -> u32 {
        let identity = Identity {
            agent_name: name.to_string(),
            anchor_hash: 0,
            anchor_tokens: 0,
            session_key: String::new(),
            session: 0,
            prompt_tokens: 0,
        };
        let (handle, registration) = self.intern(&identity);
        if let Some(event) = registration {
            if let Err(e) = policy.announce(&[event]) {
                tracing::warn!(agent = name, error = %e, "policy refused agent-registered");
            }
        }
        handle
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(system: &str, user: &str) -> Value {
        json!({"model": "m", "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": user},
            {"role": "assistant", "content": "…"},
        ], "tools": [{"type": "function", "function": {"name": "calc"}}]})
    }

    #[test]
    fn agents_are_named_by_anchor_and_sessions_by_task() {
        let h = HeaderMap::new();
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
        let (id, _) = identify_chat(&h, &chat("x", "y")).unwrap();
        assert_eq!((id.agent_name.as_str(), id.session_key.as_str()), ("coder", "s-1"));
        let mut body = chat("x", "y");
        body["user"] = json!("reviewer");
        let (id, _) = identify_chat(&HeaderMap::new(), &body).unwrap();
        assert_eq!(id.agent_name, "reviewer");
    }

    #[test]
    fn a_request_without_messages_is_refused_with_a_reason() {
        let err = identify_chat(&HeaderMap::new(), &json!({"model": "m"})).unwrap_err();
        assert!(err.contains("`messages`"));
    }

    #[test]
    fn the_directory_interns_once_and_bounds_anchors() {
        let d = AgentDirectory::default();
        let (id, anchor) = identify_chat(&HeaderMap::new(), &chat("p", "t")).unwrap();
        let (h1, reg) = d.intern(&id);
        assert!(matches!(reg, Some(Event::AgentRegistered(ref r)) if r.agent == h1 && r.anchor_hash == id.anchor_hash));
        assert_eq!(d.intern(&id), (h1, None));
        let max_anchors = TableLimits::default().max_anchors;
        for i in 0..(max_anchors as u64 + 5) {
            d.record_anchor(i, h1, anchor.clone());
        }
        assert!(d.anchor(0).is_none(), "the oldest anchor was forgotten");
        assert!(d.anchor(max_anchors as u64 + 4).is_some());
    }

    #[test]
    fn an_anchor_comes_back_as_it_was_recorded_and_weighs_what_it_holds() {
        let d = AgentDirectory::default();
        let (id, mut anchor) = identify_chat(&HeaderMap::new(), &chat("You plan.", "t")).unwrap();
        anchor.cache_salt = Some("salt".into());
        anchor.fields = Some(json!({"instructions": "You plan."}));
        d.record_anchor(id.anchor_hash, 3, anchor.clone());
        assert_eq!(d.anchor(id.anchor_hash), Some((3, anchor.clone())));
        let held = HeldAnchor::of(anchor);
        assert_eq!(d.anchors(), (1, held.bytes()));
        assert_eq!(held.bytes(), held.json.len() + "m".len() + "salt".len());
    }

    #[test]
    fn the_directory_counts_distinct_sessions_and_lists_agents() {
        let d = AgentDirectory::default();
        let h = HeaderMap::new();
        for (system, task) in [("planner", "T1"), ("coder", "T1"), ("planner", "T2"), ("coder", "T2")] {
            let (id, _) = identify_chat(&h, &chat(system, task)).unwrap();
            d.intern(&id);
            d.record_session(id.session);
        }
        assert_eq!(d.sessions(), 2, "one session per task, whichever agent calls");
        assert_eq!(d.agent_names().len(), 2);
        assert!(d.agent_names()[0].starts_with("anchor-"));
        let max_sessions = TableLimits::default().max_sessions;
        let mut forgotten = Vec::new();
        for s in 100..(100 + max_sessions as u64 + 10) {
            forgotten.extend(d.record_session(s).forgotten);
        }
        assert_eq!(d.sessions(), 2 + max_sessions as u64 + 10);
        assert_eq!(d.live_sessions(), max_sessions, "bounded");
        // The two task sessions and the first ten numbered ones went, oldest first, to be ended.
        assert_eq!(forgotten.len(), 12);
        assert_eq!(&forgotten[2..], &(100..110).collect::<Vec<u64>>()[..]);
    }

    #[test]
    fn idle_sessions_expire_and_active_ones_do_not() {
        let d = AgentDirectory::default();
        let t0 = Instant::now();
        let idle = Duration::from_secs(10);
        assert!(d.record_session_at(1, t0).new);
        assert!(d.record_session_at(2, t0).new);
        assert!(
            !d.record_session_at(2, t0 + Duration::from_secs(8)).new,
            "known: its clock moves on"
        );
        assert!(d.expire_sessions(idle, t0 + Duration::from_secs(9)).is_empty());
        assert_eq!(d.expire_sessions(idle, t0 + Duration::from_secs(12)), vec![1]);
        assert_eq!(d.live_sessions(), 1);
        assert_eq!(d.expire_sessions(idle, t0 + Duration::from_secs(18)), vec![2]);
        assert!(
            d.record_session_at(1, t0 + Duration::from_secs(20)).new,
            "an ended session that returns is new"
        );
        assert_eq!((d.sessions(), d.live_sessions()), (3, 1));
    }
}

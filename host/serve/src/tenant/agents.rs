//! One tenant's agents: names → policy handles, anchors by hash (kept for warm-ups), and live
//! sessions. Every table is bounded and forgets its least recently used entry first. Handles are
//! drawn from one counter for all tenants ([`Handles`]), so no two tenants share a handle in the
//! engine's block tags; the vLLM plugin's agent names resolve in the same directory.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use agentrt_runtime::types::{AgentRegistered, Event};

use crate::identity::agent_api::AgentApi;
use crate::identity::{Anchor, Identity};
use crate::names::{shown_name, MAX_NAME_BYTES};
use crate::table::{LruTable, TableLimits};
use crate::tenant::handles::Handles;

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

/// A tenant's agent directory, as saved.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct SavedDirectory {
    /// (name, handle), least recently used first.
    pub agents: Vec<(String, u32)>,
    /// Live sessions, least recently used first.
    pub sessions: Vec<u64>,
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

impl AgentDirectory {
    /// `tenant`'s directory, taking handles from `handles`.
    pub fn new(tenant: &str, limits: TableLimits, handles: Handles) -> Self {
        Self {
            inner: Mutex::new(Directory {
                handles: LruTable::new(limits.max_agents, limits.max_agents.saturating_mul(MAX_NAME_BYTES)),
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
        // The proxy refuses names that break the names' rule; the engine adapter's are made to
        // follow it here (a no-op for every name the proxy accepted).
        let name = shown_name(&identity.agent_name);
        let mut d = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(&mut handle) = d.handles.get_mut(&name) {
            return (handle, None);
        }
        let handle = self.handles.next_for(&self.tenant);
        let weight = name.len();
        for (_, forgotten) in d.handles.insert(name.clone(), handle, weight) {
            self.handles.forget(forgotten);
        }
        let event = Event::AgentRegistered(AgentRegistered {
            agent: handle,
            name,
            anchor_hash: identity.anchor_hash,
            anchor_tokens: identity.anchor_tokens,
        });
        (handle, Some(event))
    }

    /// The handle of agent `name` if the directory knows it; never registers (the MCP gateway's
    /// callers: a registration carries the anchor, which only the agent's model calls show).
    pub fn handle_of(&self, name: &str) -> Option<u32> {
        let d = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        d.handles.peek(&shown_name(name)).copied()
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

    /// The agents (least recently used first) and live sessions, as a state directory keeps
    /// them (`--state-dir`).
    pub fn saved(&self) -> SavedDirectory {
        let d = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        SavedDirectory {
            agents: d.handles.oldest_first().map(|(n, h)| (n.clone(), *h)).collect(),
            sessions: d.sessions.oldest_first().map(|(s, _)| *s).collect(),
        }
    }

    /// Take back a saved directory's agents under their handles (reserved for this tenant when
    /// the process started) and its sessions, live from now; nothing is announced: the policy's
    /// restored state knows them. Names that break the names' rule are left out.
    pub fn restore(&self, saved: SavedDirectory) {
        let mut d = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        for (name, handle) in saved.agents {
            if crate::names::check_name(&name).is_err() {
                self.handles.forget(handle);
                continue;
            }
            let weight = name.len();
            for (_, forgotten) in d.handles.insert(name, handle, weight) {
                self.handles.forget(forgotten);
            }
        }
        let now = Instant::now();
        for session in saved.sessions {
            d.sessions.insert(session, now, 0);
        }
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

    /// [`Self::record_session`] at `now`, so the tests set the clock.
    fn record_session_at(&self, session: u64, now: Instant) -> SessionRecord {
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

    /// Forget `session` (the framework closed it): the idle sweep will not end it again. Returns
    /// whether it was live.
    pub fn forget_session(&self, session: u64) -> bool {
        let mut d = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        d.sessions.remove(&session).is_some()
    }

    /// Whether `session` is live (seen, not ended, not forgotten).
    pub fn is_live(&self, session: u64) -> bool {
        let d = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        d.sessions.contains(&session)
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

#[cfg(test)]
mod tests {
    use super::*;

    use crate::identity::tests::chat;
    use crate::identity::{identify_chat, IdentityHeaders};

    #[test]
    fn the_directory_interns_once_and_bounds_anchors() {
        let d = AgentDirectory::default();
        let (id, anchor) = identify_chat(&IdentityHeaders::default(), &chat("p", "t")).unwrap();
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
        let (id, mut anchor) = identify_chat(&IdentityHeaders::default(), &chat("You plan.", "t")).unwrap();
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
        let h = IdentityHeaders::default();
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

//! The ledger: every live session, whether it is resident (its calls go to the engine, its
//! context counts against the cache) or held, and the tokens the resident ones need cached —
//! each agent's anchor (system prompt + tools, shared by all its sessions) counted once, not once
//! per session as a per-program ledger counts it.

use std::collections::HashMap;

use crate::{SessionId, TenantId};

/// Where a session stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionState {
    /// Resident, a call in the engine.
    Running,
    /// Resident, waiting for a tool or its user: its blocks are kept for its next call.
    Idle,
    /// Held while idle: not resident, no call waiting. Its next call waits unless there is room.
    Held,
    /// Not resident, its call waiting in the proxy since `since_us`.
    Waiting { since_us: u64 },
}

impl SessionState {
    pub fn resident(self) -> bool {
        matches!(self, SessionState::Running | SessionState::Idle)
    }
}

/// One live session.
#[derive(Debug, Clone)]
pub struct Session {
    pub tenant: TenantId,
    pub agent: u32,
    pub anchor_hash: u64,
    pub anchor_tokens: u32,
    /// Its context: the prompt in flight, or the last prompt + answer (what its next call needs
    /// cached).
    pub context_tokens: u32,
    pub state: SessionState,
    /// The last call or answer (µs).
    pub last_activity_us: u64,
    /// Its call was let go from a hold and has not been answered yet: its blocks are kept.
    pub resumed: bool,
    /// Held when its running call's answer ends (no idle session was left to hold).
    pub marked: bool,
    /// When its last answer ended (the start of its pause), while it is paused.
    pub paused_since_us: Option<u64>,
    /// It has not been answered yet: its call in flight or waiting is its first.
    pub first_call: bool,
}

impl Session {
    /// Tokens of its own (its context beyond its agent's shared anchor).
    pub fn private_tokens(&self) -> u64 {
        u64::from(self.context_tokens.saturating_sub(self.anchor_tokens))
    }
}

/// The live sessions and the resident ones' tokens.
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    sessions: HashMap<SessionId, Session>,
    /// Anchor hash → (its tokens, resident sessions using it).
    anchors: HashMap<u64, (u32, u32)>,
    private_tokens: u64,
    anchor_tokens: u64,
    running: u64,
    tenant_tokens: HashMap<TenantId, u64>,
}

impl Ledger {
    pub fn get(&self, id: SessionId) -> Option<&Session> {
        self.sessions.get(&id)
    }

    pub fn sessions(&self) -> impl Iterator<Item = (SessionId, &Session)> {
        self.sessions.iter().map(|(&id, s)| (id, s))
    }

    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// The tokens the resident sessions need cached, with `reserve` more for each running call's
    /// answer.
    pub fn resident_tokens(&self, reserve: u64) -> u64 {
        self.private_tokens + self.anchor_tokens + self.running * reserve
    }

    /// What tenant `t`'s resident sessions' contexts add up to (anchors counted per session).
    pub fn tenant_tokens(&self, t: TenantId) -> u64 {
        self.tenant_tokens.get(&t).copied().unwrap_or(0)
    }

    /// Tenants with live sessions.
    pub fn tenants(&self) -> Vec<TenantId> {
        let mut t: Vec<TenantId> = self.sessions.values().map(|s| s.tenant).collect();
        t.sort_unstable();
        t.dedup();
        t
    }

    /// The tokens `session` would add if it became resident now.
    pub fn cost_of(&self, session: &Session) -> u64 {
        let anchor = match self.anchors.get(&session.anchor_hash) {
            Some(&(_, users)) if users > 0 && session.anchor_hash != 0 => 0,
            _ => u64::from(session.anchor_tokens),
        };
        session.private_tokens() + anchor
    }

    /// A new session, not yet counted.
    pub fn insert(&mut self, id: SessionId, session: Session) {
        let resident = session.state.resident();
        let state = session.state;
        let mut session = session;
        session.state = SessionState::Held;
        self.sessions.insert(id, session);
        if resident {
            self.set_state(id, state);
        } else {
            self.sessions.get_mut(&id).expect("inserted").state = state;
        }
    }

    /// The session leaves the ledger (closed, ended); it is returned as it stood.
    pub fn remove(&mut self, id: SessionId) -> Option<Session> {
        let state = self.sessions.get(&id)?.state;
        self.set_state(id, SessionState::Held);
        let mut session = self.sessions.remove(&id)?;
        session.state = state;
        Some(session)
    }

    /// Change a session's state, keeping the resident tokens right.
    pub fn set_state(&mut self, id: SessionId, state: SessionState) {
        let Some(s) = self.sessions.get(&id) else { return };
        let (was, now) = (s.state.resident(), state.resident());
        let was_running = s.state == SessionState::Running;
        let is_running = state == SessionState::Running;
        if was && !now {
            self.count(id, -1);
        } else if !was && now {
            self.count(id, 1);
        }
        self.running = self.running + u64::from(is_running) - u64::from(was_running);
        self.sessions.get_mut(&id).expect("checked").state = state;
    }

    /// Change a session's context, keeping the resident tokens right.
    pub fn set_context(&mut self, id: SessionId, tokens: u32) {
        let Some(s) = self.sessions.get(&id) else { return };
        if s.state.resident() {
            self.count(id, -1);
            self.sessions.get_mut(&id).expect("checked").context_tokens = tokens;
            self.count(id, 1);
        } else {
            self.sessions.get_mut(&id).expect("checked").context_tokens = tokens;
        }
    }

    pub fn update(&mut self, id: SessionId, f: impl FnOnce(&mut Session)) {
        if let Some(s) = self.sessions.get_mut(&id) {
            let (state, context) = (s.state, s.context_tokens);
            f(s);
            debug_assert!(
                s.state == state && s.context_tokens == context,
                "use set_state / set_context"
            );
        }
    }

    /// Add (`sign` = 1) or take away (−1) a resident session's tokens.
    fn count(&mut self, id: SessionId, sign: i64) {
        let s = &self.sessions[&id];
        let (private, tenant, hash, anchor) = (s.private_tokens(), s.tenant, s.anchor_hash, s.anchor_tokens);
        let context = u64::from(s.context_tokens);
        let apply = |total: &mut u64, v: u64| {
            *total = if sign > 0 { *total + v } else { total.saturating_sub(v) };
        };
        apply(&mut self.private_tokens, private);
        apply(self.tenant_tokens.entry(tenant).or_default(), context);
        if hash == 0 {
            apply(&mut self.private_tokens, u64::from(anchor));
            return;
        }
        let entry = self.anchors.entry(hash).or_insert((anchor, 0));
        if sign > 0 {
            if entry.1 == 0 {
                self.anchor_tokens += u64::from(entry.0);
            }
            entry.1 += 1;
        } else {
            entry.1 = entry.1.saturating_sub(1);
            if entry.1 == 0 {
                self.anchor_tokens = self.anchor_tokens.saturating_sub(u64::from(entry.0));
                self.anchors.remove(&hash);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(tenant: TenantId, anchor_hash: u64, context: u32, state: SessionState) -> Session {
        Session {
            tenant,
            agent: 1,
            anchor_hash,
            anchor_tokens: 1_000,
            context_tokens: context,
            state,
            last_activity_us: 0,
            resumed: false,
            marked: false,
            paused_since_us: None,
            first_call: true,
        }
    }

    #[test]
    fn an_anchor_shared_by_resident_sessions_counts_once() {
        let mut l = Ledger::default();
        l.insert(1, session(0, 7, 5_000, SessionState::Idle));
        l.insert(2, session(0, 7, 3_000, SessionState::Running));
        // 4,000 + 2,000 private + one 1,000-token anchor, + 100 for the running call's answer.
        assert_eq!(l.resident_tokens(100), 7_100);
        // A third session of the same agent costs only its own tokens.
        let third = session(1, 7, 2_500, SessionState::Held);
        assert_eq!(l.cost_of(&third), 1_500);
        l.insert(3, third);
        assert_eq!(l.resident_tokens(0), 7_000, "held sessions count nothing");
        // Holding both users of the anchor frees it too.
        l.set_state(1, SessionState::Held);
        l.set_state(2, SessionState::Held);
        assert_eq!(l.resident_tokens(100), 0);
        assert_eq!(l.tenant_tokens(0), 0);
        l.set_state(3, SessionState::Running);
        assert_eq!(l.resident_tokens(0), 2_500);
        l.set_context(3, 4_000);
        assert_eq!((l.resident_tokens(0), l.tenant_tokens(1)), (4_000, 4_000));
        l.remove(3);
        assert_eq!((l.resident_tokens(0), l.len()), (0, 2));
    }
}

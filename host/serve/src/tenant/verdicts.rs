//! What a tenant's policies decided about its sessions: those denied (`deny`, and why) and the
//! priorities they set (`set-priority`). Both tables are bounded like the tenant's session table:
//! a session pushed out may call again (its guard, which still remembers it, denies it again).

use std::sync::Mutex;

use crate::table::LruTable;

/// A tenant's denials and priorities.
pub struct Verdicts {
    denials: Mutex<Denials>,
    /// Each session's priority as the tenant's policies last set it (0 when never set): higher
    /// is served earlier.
    priorities: Mutex<LruTable<u64, i32>>,
}

struct Denials {
    sessions: LruTable<u64, String>,
    /// A `deny` of session 0: every session of the tenant.
    whole_tenant: Option<String>,
}

impl Verdicts {
    /// Room for `max_sessions` sessions' verdicts.
    pub fn new(max_sessions: usize) -> Self {
        Self {
            denials: Mutex::new(Denials {
                sessions: LruTable::new(max_sessions, usize::MAX),
                whole_tenant: None,
            }),
            priorities: Mutex::new(LruTable::new(max_sessions, usize::MAX)),
        }
    }

    /// Refuse `session`'s further requests (session 0: every session of the tenant).
    pub fn deny(&self, session: u64, reason: String) {
        let mut denials = self.denials.lock().unwrap_or_else(|p| p.into_inner());
        if session == 0 {
            denials.whole_tenant.get_or_insert(reason);
        } else if !denials.sessions.contains(&session) {
            let bytes = reason.len();
            denials.sessions.insert(session, reason, bytes);
        }
    }

    /// Why `session`'s requests are refused, if a policy denied it (or the whole tenant).
    pub fn denial(&self, session: u64) -> Option<String> {
        let denials = self.denials.lock().unwrap_or_else(|p| p.into_inner());
        denials
            .whole_tenant
            .clone()
            .or_else(|| denials.sessions.peek(&session).cloned())
    }

    /// Set `session`'s priority (a policy's `set-priority`); 0 forgets it.
    pub fn set_priority(&self, session: u64, priority: i32) {
        let mut priorities = self.priorities.lock().unwrap_or_else(|p| p.into_inner());
        if priority == 0 {
            priorities.remove(&session);
        } else if let Some(p) = priorities.get_mut(&session) {
            *p = priority;
        } else {
            priorities.insert(session, priority, 0);
        }
    }

    /// `session`'s priority (0 unless a policy set one).
    pub fn priority(&self, session: u64) -> i32 {
        let priorities = self.priorities.lock().unwrap_or_else(|p| p.into_inner());
        priorities.peek(&session).copied().unwrap_or(0)
    }
}

//! Live sessions: where each one is (the agent that ran last), whether that call is still running,
//! and since when it has been waiting (a tool, a user, the framework).

use std::collections::HashMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveSession {
    pub id: u64,
    /// The agent of the session's latest call.
    pub agent: u32,
    /// Host clock of that call's arrival and, once it finished, of its finish (0 while running).
    pub arrived_us: u64,
    pub finished_us: u64,
    /// Requests arrived and not finished (a call may be queued, its prefix hit not yet taken).
    pub in_flight: u16,
    /// The latest call's answer asked for a tool (`tool-call`): the session waits on the tool, not
    /// on a user.
    pub tool_wait: bool,
    /// Prompt tokens of the latest call (what a next call may carry forward).
    pub prompt_tokens: u32,
}

impl LiveSession {
    /// The latest time anything happened in the session.
    pub fn active_us(&self) -> u64 {
        self.arrived_us.max(self.finished_us)
    }

    /// One of its requests finished at `at_us`.
    pub fn finish(&mut self, at_us: u64) {
        self.in_flight = self.in_flight.saturating_sub(1);
        if self.in_flight == 0 {
            self.finished_us = at_us.max(self.arrived_us);
        }
    }
}

/// At most `capacity` sessions; a new one beyond that replaces the one idle longest.
#[derive(Debug, Clone, Default)]
pub struct Sessions {
    live: HashMap<u64, LiveSession>,
    capacity: usize,
}

impl Sessions {
    pub fn new(capacity: usize) -> Self {
        Self {
            live: HashMap::new(),
            capacity,
        }
    }

    pub fn get(&self, id: u64) -> Option<&LiveSession> {
        self.live.get(&id)
    }

    /// A request of `agent` arrived in session `id`. Returns the session as it was before.
    pub fn arrive(&mut self, id: u64, agent: u32, at_us: u64) -> Option<LiveSession> {
        if !self.live.contains_key(&id) && self.live.len() >= self.capacity {
            if let Some(idle) = self.live.values().min_by_key(|s| (s.active_us(), s.id)).map(|s| s.id) {
                self.live.remove(&idle);
            }
        }
        let before = self.live.get(&id).copied();
        let in_flight = before.map_or(0, |s| s.in_flight);
        self.live.insert(
            id,
            LiveSession {
                id,
                agent,
                arrived_us: at_us,
                finished_us: 0,
                in_flight: in_flight.saturating_add(1),
                tool_wait: false,
                prompt_tokens: 0,
            },
        );
        before
    }

    pub fn get_mut(&mut self, id: u64) -> Option<&mut LiveSession> {
        self.live.get_mut(&id)
    }

    /// A request of session `id` finished. Returns the session after.
    pub fn finish(&mut self, id: u64, at_us: u64) -> Option<LiveSession> {
        let s = self.live.get_mut(&id)?;
        s.finish(at_us);
        Some(*s)
    }

    pub fn remove(&mut self, id: u64) -> Option<LiveSession> {
        self.live.remove(&id)
    }

    /// Sessions whose latest call was `agent`'s are told it is gone.
    pub fn forget_agent(&mut self, agent: u32) {
        self.live.retain(|_, s| s.agent != agent);
    }

    pub fn insert(&mut self, s: LiveSession) {
        self.live.insert(s.id, s);
    }

    pub fn len(&self) -> usize {
        self.live.len()
    }

    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &LiveSession> {
        self.live.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_is_running_until_its_last_request_finishes() {
        let mut s = Sessions::new(4);
        assert!(s.arrive(7, 1, 100).is_none());
        s.arrive(7, 2, 200);
        assert_eq!(s.finish(7, 300).unwrap().finished_us, 0, "one request still in flight");
        let done = s.finish(7, 400).unwrap();
        assert_eq!((done.agent, done.in_flight, done.finished_us), (2, 0, 400));
    }

    #[test]
    fn a_full_table_drops_the_session_idle_longest() {
        let mut s = Sessions::new(2);
        s.arrive(1, 1, 100);
        s.arrive(2, 1, 50);
        s.arrive(3, 1, 200);
        assert!(s.get(2).is_none());
        assert_eq!(s.len(), 2);
    }
}

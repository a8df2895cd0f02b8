//! Live sessions: where each one is (the agent that ran last), whether that call is still running,
//! and since when it has been waiting (a tool, a user, the framework).

use std::collections::HashMap;

use agentrt_sdk::RequestArrival;

use crate::bounded::make_room;

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

/// The live sessions, by id.
pub type Sessions = HashMap<u64, LiveSession>;

/// A request arrived in its session, now at that request's agent; returns the session as it was
/// before, if it was live. A new session in a table of `capacity` replaces the one idle longest.
pub fn arrive(live: &mut Sessions, capacity: usize, r: &RequestArrival) -> Option<LiveSession> {
    make_room(live, capacity, r.session, |s| (s.active_us(), s.id));
    let before = live.get(&r.session).copied();
    let now = LiveSession {
        id: r.session,
        agent: r.agent,
        arrived_us: r.at_us,
        finished_us: 0,
        in_flight: before.map_or(0, |s| s.in_flight).saturating_add(1),
        tool_wait: false,
        prompt_tokens: r.prompt_tokens,
    };
    live.insert(r.session, now);
    before
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arrival(session: u64, agent: u32, at_us: u64) -> RequestArrival {
        RequestArrival {
            request_id: at_us,
            agent,
            session,
            anchor_hash: 0,
            prompt_tokens: 100,
            continues: None,
            warmup: false,
            at_us,
        }
    }

    #[test]
    fn a_session_is_running_until_its_last_request_finishes() {
        let mut s = Sessions::new();
        assert!(arrive(&mut s, 4, &arrival(7, 1, 100)).is_none());
        arrive(&mut s, 4, &arrival(7, 2, 200));
        let live = s.get_mut(&7).unwrap();
        live.finish(300);
        assert_eq!(live.finished_us, 0, "one request still in flight");
        live.finish(400);
        assert_eq!((live.agent, live.in_flight, live.finished_us), (2, 0, 400));
    }

    #[test]
    fn a_full_table_drops_the_session_idle_longest() {
        let mut s = Sessions::new();
        for (id, at_us) in [(1, 100), (2, 50), (3, 200)] {
            arrive(&mut s, 2, &arrival(id, 1, at_us));
        }
        assert!(!s.contains_key(&2));
        assert_eq!(s.len(), 2);
    }
}

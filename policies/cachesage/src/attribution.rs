//! Whose a block event is: the session of the request that stored or touched the block, which the
//! host's block events do not say (they name the agent), for the guard's closed-first shadow.
//!
//! When the agent has requests in flight for one session, that is the session. When it has
//! several (one agent serving many conversations at once, as every chained Mooncake conversation
//! does), the block is followed along its prefix chain: a request's blocks come as a chain from
//! position 0 (its cached prefix touched when it is admitted, then its new blocks stored as they
//! are computed, each naming its parent), and requests are admitted in the order they arrived
//! (vLLM's FCFS). So the first block of a chain belongs to the earliest arrived request of the
//! agent not yet started, and a block whose parent is where some chains stand continues the
//! earliest of them. A request preempted and admitted again starts a second chain with no arrival
//! of its own; the order is put right when it finishes. Wrong guesses cost the shadow accuracy,
//! not correctness: every ranking's candidates, which carry their session, correct the shadow.
//! Everything here is bounded by the requests in flight.

use std::collections::{HashMap, VecDeque};

/// Most entries (sessions waiting to start, chain ends) kept: beyond, the dead ones are dropped,
/// and if that is not enough everything is (the shadow then learns from rankings alone).
pub const MAX_TRACKED: usize = 65_536;

#[derive(Debug, Clone, Default)]
pub struct Attribution {
    /// Requests in flight per session, and the sessions (with their counts) per agent.
    live: HashMap<u64, u32>,
    by_agent: HashMap<u32, Vec<(u64, u32)>>,
    /// Per agent, the sessions of requests arrived and not yet seen to start, in arrival order.
    pending: HashMap<u32, VecDeque<u64>>,
    pending_len: usize,
    /// Chains in progress: the sessions whose latest block is this one, earliest first.
    tips: HashMap<u64, VecDeque<u64>>,
    tips_len: usize,
}

impl Attribution {
    /// A request of `agent` in `session` arrived (not a warm-up).
    pub fn arrived(&mut self, agent: u32, session: u64) {
        *self.live.entry(session).or_default() += 1;
        let sessions = self.by_agent.entry(agent).or_default();
        match sessions.iter_mut().find(|(s, _)| *s == session) {
            Some((_, n)) => *n += 1,
            None => sessions.push((session, 1)),
        }
        self.pending.entry(agent).or_default().push_back(session);
        self.pending_len += 1;
        if self.pending_len > MAX_TRACKED || self.live.len() > MAX_TRACKED {
            self.pending.clear();
            self.pending_len = 0;
        }
    }

    /// A request of `agent` in `session` finished: if it never seemed to start, its place in the
    /// arrival order was taken by another (a preempted request's second start): drop it.
    pub fn finished(&mut self, agent: u32, session: u64) {
        if let Some(n) = self.live.get_mut(&session) {
            *n -= 1;
            if *n == 0 {
                self.live.remove(&session);
            }
        }
        if let Some(sessions) = self.by_agent.get_mut(&agent) {
            if let Some(i) = sessions.iter().position(|(s, _)| *s == session) {
                sessions[i].1 -= 1;
                if sessions[i].1 == 0 {
                    sessions.swap_remove(i);
                }
            }
            if sessions.is_empty() {
                self.by_agent.remove(&agent);
            }
        }
        if let Some(queue) = self.pending.get_mut(&agent) {
            if let Some(i) = queue.iter().position(|&s| s == session) {
                queue.remove(i);
                self.pending_len -= 1;
            }
            if queue.is_empty() {
                self.pending.remove(&agent);
            }
        }
    }

    /// The one session `agent` has requests in flight for; `None` for none or several.
    fn only_session(&self, agent: u32) -> Option<u64> {
        match self.by_agent.get(&agent).map(Vec::as_slice) {
            Some([(session, _)]) => Some(*session),
            _ => None,
        }
    }

    /// The session of a block event of `agent` (`hash`, its `parent`, its `position`), when it
    /// can be told.
    pub fn session_of(&mut self, agent: u32, hash: u64, parent: u64, position: u32) -> Option<u64> {
        // Followed even when the agent's one session says it: the chains stay in step.
        let chained = if position == 0 {
            let queue = self.pending.get_mut(&agent);
            let next = queue.and_then(VecDeque::pop_front);
            if next.is_some() {
                self.pending_len -= 1;
            }
            next
        } else {
            self.continue_chain(parent)
        };
        let session = self.only_session(agent).or(chained)?;
        self.tips.entry(hash).or_default().push_back(session);
        self.tips_len += 1;
        if self.tips_len > MAX_TRACKED {
            self.drop_dead_chains();
        }
        Some(session)
    }

    /// The earliest live chain standing at `parent`, moved on.
    fn continue_chain(&mut self, parent: u64) -> Option<u64> {
        let queue = self.tips.get_mut(&parent)?;
        let mut found = None;
        while let Some(s) = queue.pop_front() {
            self.tips_len -= 1;
            if self.live.contains_key(&s) {
                found = Some(s);
                break;
            }
        }
        if queue.is_empty() {
            self.tips.remove(&parent);
        }
        found
    }

    /// Drop the chains of sessions with nothing in flight; all of them if that is not enough.
    fn drop_dead_chains(&mut self) {
        let live = &self.live;
        self.tips.retain(|_, queue| {
            queue.retain(|s| live.contains_key(s));
            !queue.is_empty()
        });
        self.tips_len = self.tips.values().map(VecDeque::len).sum();
        if self.tips_len > MAX_TRACKED / 2 {
            self.tips.clear();
            self.tips_len = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_agent_serving_two_conversations_at_once_is_followed_along_each_chain() {
        let mut a = Attribution::default();
        a.arrived(1, 10);
        a.arrived(1, 20);
        // Both start from the same shared block (position 0), the earlier arrival first.
        assert_eq!(a.session_of(1, 100, 0, 0), Some(10));
        assert_eq!(a.session_of(1, 100, 0, 0), Some(20));
        // Their own blocks, interleaved as chunks are computed: the earliest chain standing at the
        // shared block continues first, then each follows its own parent.
        assert_eq!(a.session_of(1, 11, 100, 16), Some(10));
        assert_eq!(a.session_of(1, 21, 100, 16), Some(20));
        assert_eq!(a.session_of(1, 22, 21, 32), Some(20));
        assert_eq!(a.session_of(1, 12, 11, 32), Some(10));
        a.finished(1, 10);
        // The agent has one session in flight: that is the session, whatever the chain.
        assert_eq!(a.session_of(1, 77, 999, 48), Some(20));
        a.finished(1, 20);
        assert_eq!(a.session_of(1, 78, 22, 48), None, "nothing in flight: nobody's");
    }

    #[test]
    fn a_request_that_never_seemed_to_start_gives_its_place_back_when_it_finishes() {
        let mut a = Attribution::default();
        a.arrived(1, 10);
        a.arrived(1, 20);
        a.arrived(1, 30);
        // A second start of some request (preempted, admitted again) took 10's place …
        assert_eq!(a.session_of(1, 100, 0, 0), Some(10));
        assert_eq!(a.session_of(1, 100, 0, 0), Some(20));
        a.finished(1, 30); // … so 30 finishes never having started: dropped, the order is whole
        a.arrived(1, 40);
        assert_eq!(a.session_of(1, 100, 0, 0), Some(40));
    }
}

//! # closed-first — the blocks of closed sessions go first, LRU otherwise
//!
//! The reference of the rule in [SPEC.md](../SPEC.md), which the Python, JavaScript, C and Go
//! versions beside it implement alike (`tests/closed_first.rs`): what a framework's closings
//! (`session-end` with reason `closed`) are worth to a policy that does nothing else.

use std::collections::{HashSet, VecDeque};

use agentrt_sdk::state::{Reader, Writer};
use agentrt_sdk::{info, Config, EndReason, Event, Item, Policy, PolicyInfo};

const MAGIC: [u8; 4] = *b"CLFT";
const FORMAT: u16 = 1;
const DEFAULT_MAX_SESSIONS: usize = 16384;
const MAX_SESSIONS_LIMIT: usize = 1 << 20;

#[derive(Debug)]
pub struct ClosedFirst {
    max_sessions: usize,
    /// Closed sessions, oldest closing first; `closed` holds the same ids for lookups.
    order: VecDeque<u64>,
    closed: HashSet<u64>,
}

impl Default for ClosedFirst {
    fn default() -> Self {
        Self {
            max_sessions: DEFAULT_MAX_SESSIONS,
            order: VecDeque::new(),
            closed: HashSet::new(),
        }
    }
}

impl ClosedFirst {
    fn close(&mut self, session: u64) {
        if session == 0 || !self.closed.insert(session) {
            return;
        }
        self.order.push_back(session);
        if self.order.len() > self.max_sessions {
            let forgotten = self.order.pop_front().expect("more than max-sessions");
            self.closed.remove(&forgotten);
        }
    }

    fn reopen(&mut self, session: u64) {
        if self.closed.remove(&session) {
            // A wrong closing is rare: a linear search is cheaper than a second index.
            self.order.retain(|&s| s != session);
        }
    }
}

impl Policy for ClosedFirst {
    fn info() -> PolicyInfo {
        info(
            "closed-first",
            "the blocks of sessions the framework closed go first, LRU otherwise; Rust (SPEC.md)",
        )
    }

    fn init(&mut self, config: &Config) -> Result<(), String> {
        config.expect_only(&["max-sessions"])?;
        self.max_sessions = config.parse_or("max-sessions", DEFAULT_MAX_SESSIONS)?;
        if !(1..=MAX_SESSIONS_LIMIT).contains(&self.max_sessions) {
            return Err(format!(
                "config key `max-sessions`: {} is outside 1..={MAX_SESSIONS_LIMIT}",
                self.max_sessions
            ));
        }
        Ok(())
    }

    fn observe(&mut self, event: &Event) {
        match event {
            Event::SessionEnd(end) if end.reason == EndReason::Closed => self.close(end.session),
            Event::RequestArrival(arrival) if !arrival.warmup => self.reopen(arrival.session),
            _ => {}
        }
    }

    fn score(&mut self, items: &[Item]) -> Vec<f32> {
        let oldest = items.iter().map(|i| i.last_access).min().unwrap_or(0);
        let newest = items.iter().map(|i| i.last_access).max().unwrap_or(0);
        let open_bonus = newest - oldest + 1;
        items
            .iter()
            .map(|i| {
                let closed = i.session != 0 && self.closed.contains(&i.session);
                ((i.last_access - oldest) + if closed { 0 } else { open_bonus }) as f32
            })
            .collect()
    }

    fn snapshot(&self) -> Vec<u8> {
        let mut w = Writer::new(MAGIC, FORMAT);
        w.u32(self.order.len() as u32);
        for &session in &self.order {
            w.u64(session);
        }
        w.finish()
    }

    fn restore(&mut self, state: &[u8]) -> Result<(), String> {
        if state.is_empty() {
            return Ok(());
        }
        let mut r = Reader::of_format(state, MAGIC, FORMAT, "closed-first")?;
        let count = r.u32()? as usize;
        if count > self.max_sessions {
            return Err(format!(
                "snapshot holds {count} closed sessions; max-sessions is {}",
                self.max_sessions
            ));
        }
        let (mut order, mut closed) = (VecDeque::with_capacity(count), HashSet::with_capacity(count));
        for _ in 0..count {
            let session = r.u64()?;
            if session == 0 || !closed.insert(session) {
                return Err(format!("snapshot lists session {session} twice or as 0"));
            }
            order.push_back(session);
        }
        r.finish()?;
        (self.order, self.closed) = (order, closed);
        Ok(())
    }
}

agentrt_sdk::export_policy!(ClosedFirst);

#[cfg(test)]
mod tests {
    use super::*;
    use agentrt_sdk::testing::{gpu_block, rank, session_end_for, Harness};
    use agentrt_sdk::RequestArrival;

    fn block(key: u64, session: u64, last_access: u64) -> Item {
        Item {
            session,
            ..gpu_block(key, last_access)
        }
    }

    fn arrival(session: u64, warmup: bool) -> Event {
        Event::RequestArrival(RequestArrival {
            request_id: 1,
            agent: 1,
            session,
            anchor_hash: 0,
            prompt_tokens: 16,
            continues: None,
            warmup,
            at_us: 0,
        })
    }

    #[test]
    fn a_closed_sessions_blocks_go_first_oldest_first_then_lru() {
        let mut p = Harness::<ClosedFirst>::new([]).unwrap();
        let items = [
            block(1, 7, 10),
            block(2, 9, 20),
            block(3, 7, 30),
            block(4, 9, 40),
            block(5, 0, 5),
        ];
        assert_eq!(rank(&items, &p.score(&items)), [3, 2, 1, 0, 4], "nothing closed: LRU");
        p.observe(&[session_end_for(9, EndReason::Closed)]);
        assert_eq!(
            rank(&items, &p.score(&items)),
            [2, 0, 4, 3, 1],
            "9's blocks last, oldest last"
        );
    }

    #[test]
    fn idle_and_evicted_ends_change_nothing_and_a_call_reopens() {
        let mut p = Harness::<ClosedFirst>::new([]).unwrap();
        let items = [block(1, 7, 10), block(2, 9, 20)];
        let lru = p.score(&items);
        p.observe(&[
            session_end_for(7, EndReason::Idle),
            session_end_for(7, EndReason::Evicted),
        ]);
        assert_eq!(p.score(&items), lru);
        p.observe(&[session_end_for(7, EndReason::Closed), arrival(7, true)]);
        assert_ne!(p.score(&items), lru, "a warm-up does not reopen");
        p.observe(&[arrival(7, false)]);
        assert_eq!(p.score(&items), lru, "its own call does");
    }

    #[test]
    fn the_oldest_closing_is_forgotten_beyond_max_sessions_and_the_snapshot_keeps_the_order() {
        let mut p = Harness::<ClosedFirst>::new([("max-sessions", "2")]).unwrap();
        p.observe(&[3, 1, 3, 2].map(|s| session_end_for(s, EndReason::Closed)));
        let state = p.snapshot();
        let mut want = Writer::new(MAGIC, FORMAT);
        want.u32(2).u64(1).u64(2);
        assert_eq!(state, want.finish(), "3 forgotten; 1 then 2");
        let mut fresh = Harness::<ClosedFirst>::new([("max-sessions", "2")]).unwrap();
        fresh.restore(&state).unwrap();
        assert_eq!(fresh.snapshot(), state);
        let mut small = Harness::<ClosedFirst>::new([("max-sessions", "1")]).unwrap();
        assert!(small.restore(&state).unwrap_err().contains("max-sessions is 1"));
        let mut twice = Writer::new(MAGIC, FORMAT);
        twice.u32(2).u64(5).u64(5);
        assert!(fresh.restore(&twice.finish()).unwrap_err().contains("twice"));
        assert_eq!(fresh.snapshot(), state, "a refused snapshot changes nothing");
    }

    #[test]
    fn configuration_is_checked_by_key() {
        for (key, value) in [("max-sessions", "0"), ("max-sessions", "x"), ("max-session", "2")] {
            let err = Harness::<ClosedFirst>::new([(key, value)]).unwrap_err();
            assert!(err.contains(key), "{err}");
        }
    }
}

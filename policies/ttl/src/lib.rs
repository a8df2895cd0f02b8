//! # TTL pinning — Continuum-style
//!
//! Continuum (arXiv 2511.02230) keeps a multi-turn agent's KV cache pinned for a while after each
//! of its calls, betting that the agent comes back (after its tool call) before the time-to-live
//! runs out. Here: after every call of a session finishes, that session's blocks are *protected*
//! for `ttl-ms`; a protected block scores above every unprotected one (ties among protected blocks
//! go by recency), an unprotected block scores by recency alone. A session that ends loses its
//! protection at once.
//!
//! Time is the host clock carried by request events (`at-us`): the policy never reads a wall
//! clock, so a replay is deterministic and a simulator's clock works as well as a server's.
//!
//! Config: `ttl-ms` (default 5000: a few seconds covers most tool calls — web searches, code runs —
//! reported by agent traces; Continuum sizes its TTL from tool-latency statistics of the same
//! order), `max-sessions` (default 4096: protection records kept; the oldest go first).

use std::collections::HashMap;

use agentrt_sdk::state::{Reader, Writer};
use agentrt_sdk::{info, recency_scores, Config, Event, Item, Policy, PolicyInfo};

const MAGIC: [u8; 4] = *b"TTL1";
const FORMAT: u16 = 1;
/// Added to a protected block's score: above any recency score (recency scores are ≤ 0).
const PROTECTED: f32 = 1.0e9;

/// The TTL policy's state: when each session's protection ends.
#[derive(Debug)]
pub struct Ttl {
    ttl_us: u64,
    max_sessions: usize,
    /// session → protected until (µs, host clock).
    until: HashMap<u64, u64>,
    /// Latest host time seen in an event.
    now_us: u64,
}

impl Default for Ttl {
    fn default() -> Self {
        Self {
            ttl_us: 5_000_000,
            max_sessions: 4096,
            until: HashMap::new(),
            now_us: 0,
        }
    }
}

impl Ttl {
    /// Whether `session`'s blocks are protected now.
    pub fn is_protected(&self, session: u64) -> bool {
        session != 0 && self.until.get(&session).is_some_and(|&t| t > self.now_us)
    }

    fn protect(&mut self, session: u64, at_us: u64) {
        self.now_us = self.now_us.max(at_us);
        if session == 0 {
            return;
        }
        if self.until.len() >= self.max_sessions && !self.until.contains_key(&session) {
            // Drop expired records first; if none, the one expiring soonest.
            let now = self.now_us;
            self.until.retain(|_, t| *t > now);
            if self.until.len() >= self.max_sessions {
                if let Some((&oldest, _)) = self.until.iter().min_by_key(|(_, t)| **t) {
                    self.until.remove(&oldest);
                }
            }
        }
        self.until.insert(session, at_us + self.ttl_us);
    }
}

impl Policy for Ttl {
    fn info() -> PolicyInfo {
        info(
            "ttl",
            "Continuum-style TTL pinning: a session's blocks are kept for ttl-ms after each of its calls; recency otherwise",
        )
    }

    fn init(&mut self, config: &Config) -> Result<(), String> {
        config.expect_only(&["ttl-ms", "max-sessions"])?;
        self.ttl_us = config.parse_or("ttl-ms", 5000u64)? * 1000;
        self.max_sessions = config.parse_or("max-sessions", 4096usize)?.max(1);
        Ok(())
    }

    fn observe(&mut self, event: &Event) {
        match event {
            Event::RequestArrival(r) => self.now_us = self.now_us.max(r.at_us),
            // Warm-ups are not calls of the session.
            Event::RequestFinish(r) if !r.warmup => self.protect(r.session, r.at_us),
            Event::RequestFinish(r) => self.now_us = self.now_us.max(r.at_us),
            Event::EngineLoad(l) => self.now_us = self.now_us.max(l.at_us),
            Event::SessionEnd(end) => {
                self.until.remove(&end.session);
            }
            _ => {}
        }
    }

    fn score(&mut self, items: &[Item]) -> Vec<f32> {
        let mut scores = recency_scores(items);
        for (score, item) in scores.iter_mut().zip(items) {
            if self.is_protected(item.session) {
                *score += PROTECTED;
            }
        }
        scores
    }

    fn snapshot(&self) -> Vec<u8> {
        let mut w = Writer::new(MAGIC, FORMAT);
        w.u64(self.ttl_us).u64(self.now_us).u32(self.until.len() as u32);
        let mut entries: Vec<_> = self.until.iter().collect();
        entries.sort_unstable();
        for (&s, &t) in entries {
            w.u64(s).u64(t);
        }
        w.finish()
    }

    fn restore(&mut self, state: &[u8]) -> Result<(), String> {
        let mut r = Reader::of_format(state, MAGIC, FORMAT, "TTL")?;
        // The configured TTL wins over the snapshot's: a new version may be configured differently.
        let _snapshot_ttl = r.u64()?;
        self.now_us = r.u64()?;
        let n = r.u32()?;
        let mut until = HashMap::with_capacity(n as usize);
        for _ in 0..n {
            until.insert(r.u64()?, r.u64()?);
        }
        r.finish()?;
        self.until = until;
        Ok(())
    }
}

agentrt_sdk::export_policy!(Ttl);

#[cfg(test)]
mod tests {
    use super::*;
    use agentrt_sdk::testing::{rank, Harness};
    use agentrt_sdk::{ItemKind, RequestArrival, RequestFinish};

    fn block(key: u64, session: u64, last_access: u64) -> Item {
        Item {
            kind: ItemKind::KvBlock,
            key,
            agent: 1,
            session,
            last_access,
            tokens: 16,
            position: 0,
            tier: agentrt_sdk::Tier::Gpu,
        }
    }

    fn finish(session: u64, at_us: u64, warmup: bool) -> Event {
        Event::RequestFinish(RequestFinish {
            request_id: 1,
            agent: 1,
            session,
            prompt_tokens: 100,
            cached_tokens: 0,
            output_tokens: 10,
            warmup,
            ok: true,
            at_us,
        })
    }

    fn arrival(at_us: u64) -> Event {
        Event::RequestArrival(RequestArrival {
            request_id: 2,
            agent: 1,
            session: 99,
            anchor_hash: 0,
            prompt_tokens: 10,
            continues: None,
            warmup: false,
            at_us,
        })
    }

    #[test]
    fn a_session_is_protected_for_the_ttl_after_each_call() {
        let mut ttl = Harness::<Ttl>::new([("ttl-ms", "1000")]).unwrap();
        // Session 7 finished a call at t = 0; session 8 has no call. 7's block is older.
        ttl.observe(&[finish(7, 0, false)]);
        let items = [block(1, 7, 10), block(2, 8, 20)];
        let order = rank(&items, &ttl.score(&items));
        assert_eq!(
            order,
            vec![0, 1],
            "the protected (older) block is kept over the recent one"
        );
        // Past the TTL, recency again.
        ttl.observe(&[arrival(1_000_001)]);
        let order = rank(&items, &ttl.score(&items));
        assert_eq!(order, vec![1, 0]);
        // A new call renews the protection.
        ttl.observe(&[finish(7, 1_500_000, false)]);
        assert!(ttl.policy().is_protected(7));
    }

    #[test]
    fn warmups_do_not_protect_and_session_end_unprotects() {
        let mut ttl = Harness::<Ttl>::new([]).unwrap();
        ttl.observe(&[finish(5, 10, true)]);
        assert!(!ttl.policy().is_protected(5));
        ttl.observe(&[finish(5, 10, false)]);
        assert!(ttl.policy().is_protected(5));
        ttl.observe(&[agentrt_sdk::testing::session_end(5)]);
        assert!(!ttl.policy().is_protected(5));
    }

    #[test]
    fn unprotected_blocks_rank_exactly_like_lru() {
        let mut ttl = Harness::<Ttl>::new([]).unwrap();
        let items = [block(1, 1, 5), block(2, 2, 50), block(3, 3, 7)];
        assert_eq!(rank(&items, &ttl.score(&items)), vec![1, 2, 0]);
        // Among protected blocks, recency decides too.
        ttl.observe(&[finish(1, 0, false), finish(2, 0, false), finish(3, 0, false)]);
        assert_eq!(rank(&items, &ttl.score(&items)), vec![1, 2, 0]);
    }

    #[test]
    fn state_round_trips_and_bad_config_is_rejected() {
        let mut ttl = Harness::<Ttl>::new([("ttl-ms", "2000")]).unwrap();
        ttl.observe(&[finish(3, 100, false), finish(4, 200, false)]);
        let state = ttl.snapshot();
        let mut other = Harness::<Ttl>::new([("ttl-ms", "2000")]).unwrap();
        other.restore(&state).unwrap();
        assert!(other.policy().is_protected(3) && other.policy().is_protected(4));
        assert!(other.restore(b"nope").is_err());
        assert!(Harness::<Ttl>::new([("ttl", "5")]).unwrap_err().contains("ttl"));
        assert!(Harness::<Ttl>::new([("ttl-ms", "x")]).unwrap_err().contains("ttl-ms"));
    }

    #[test]
    fn the_session_table_is_bounded() {
        let mut ttl = Harness::<Ttl>::new([("max-sessions", "2")]).unwrap();
        ttl.observe(&[finish(1, 0, false), finish(2, 10, false), finish(3, 20, false)]);
        assert_eq!(ttl.policy().until.len(), 2);
        assert!(!ttl.policy().is_protected(1));
        assert!(ttl.policy().is_protected(3));
    }
}

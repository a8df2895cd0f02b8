//! # Session-aware retention — a baseline after SGLang's session radix cache
//!
//! SGLang's `--enable-session-radix-cache` keeps the KV of a session that is still open (requests
//! carry a `session_id`) and lets the rest go first. Here, with what the runtime layer knows: a
//! session is live from its first request until the host reports it ended (`session-end`: with
//! `agentrt serve`, silence for `--session-idle-ms`); a block is *live* if its session is, or —
//! content several sessions shared (session 0: a system prompt, tool definitions) — if its agent
//! has a live session. Live blocks score 1, others 0, and the host's tie rule makes each group
//! LRU inside: exactly LRU while no session is live, and never an agent model.
//!
//! Config: `max-sessions` (default 65,536 live sessions tracked; the one silent longest is
//! dropped, as the proxy's session table drops it).

use std::collections::HashMap;

use agentrt_sdk::state::{Reader, Writer};
use agentrt_sdk::{info, Config, Event, Item, Policy, PolicyInfo};

const MAGIC: [u8; 4] = *b"SRT1";
const FORMAT: u16 = 1;

/// One live session: its agent and when it was last active (host µs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Live {
    agent: u32,
    active_us: u64,
}

/// The policy's state: the live sessions, and how many each agent has.
#[derive(Debug)]
pub struct SessionRetain {
    max_sessions: usize,
    sessions: HashMap<u64, Live>,
    agents: HashMap<u32, u32>,
}

impl Default for SessionRetain {
    fn default() -> Self {
        Self {
            max_sessions: 65_536,
            sessions: HashMap::new(),
            agents: HashMap::new(),
        }
    }
}

impl SessionRetain {
    /// Whether `item` belongs to a live session (its own, or — shared content — its agent's).
    pub fn is_live(&self, item: &Item) -> bool {
        if item.session == 0 {
            self.agents.get(&item.agent).is_some_and(|&n| n > 0)
        } else {
            self.sessions.contains_key(&item.session)
        }
    }

    fn end(&mut self, session: u64) {
        if let Some(live) = self.sessions.remove(&session) {
            if let Some(n) = self.agents.get_mut(&live.agent) {
                *n -= 1;
                if *n == 0 {
                    self.agents.remove(&live.agent);
                }
            }
        }
    }

    fn arrive(&mut self, session: u64, agent: u32, at_us: u64) {
        if session == 0 {
            return;
        }
        if let Some(live) = self.sessions.get(&session).copied() {
            if live.agent != agent {
                // The session moved on to another agent: its shared blocks go with it.
                self.end(session);
            } else {
                self.sessions.insert(
                    session,
                    Live {
                        agent,
                        active_us: at_us,
                    },
                );
                return;
            }
        }
        if self.sessions.len() >= self.max_sessions {
            if let Some((&oldest, _)) = self.sessions.iter().min_by_key(|(id, l)| (l.active_us, **id)) {
                self.end(oldest);
            }
        }
        self.sessions.insert(
            session,
            Live {
                agent,
                active_us: at_us,
            },
        );
        *self.agents.entry(agent).or_default() += 1;
    }
}

impl Policy for SessionRetain {
    fn info() -> PolicyInfo {
        info(
            "session-retain",
            "SGLang-style session retention: blocks of live sessions (until session-end) are evicted after the rest; LRU within each",
        )
    }

    fn init(&mut self, config: &Config) -> Result<(), String> {
        config.expect_only(&["max-sessions"])?;
        self.max_sessions = config.parse_or("max-sessions", 65_536usize)?.max(1);
        Ok(())
    }

    fn observe(&mut self, event: &Event) {
        match event {
            // Warm-ups are not the session's calls.
            Event::RequestArrival(r) if !r.warmup => self.arrive(r.session, r.agent, r.at_us),
            Event::RequestFinish(r) if !r.warmup => {
                if let Some(live) = self.sessions.get_mut(&r.session) {
                    live.active_us = live.active_us.max(r.at_us);
                }
            }
            Event::SessionEnd(e) => self.end(e.session),
            _ => {}
        }
    }

    fn score(&mut self, items: &[Item]) -> Vec<f32> {
        items.iter().map(|i| if self.is_live(i) { 1.0 } else { 0.0 }).collect()
    }

    fn snapshot(&self) -> Vec<u8> {
        let mut w = Writer::new(MAGIC, FORMAT);
        let mut live: Vec<_> = self.sessions.iter().collect();
        live.sort_unstable_by_key(|(id, _)| **id);
        w.u32(live.len() as u32);
        for (&id, l) in live {
            w.u64(id).u32(l.agent).u64(l.active_us);
        }
        w.finish()
    }

    fn restore(&mut self, state: &[u8]) -> Result<(), String> {
        if state.is_empty() {
            return Ok(()); // from a stateless policy (LRU): start afresh
        }
        let mut r = Reader::of_format(state, MAGIC, FORMAT, "session-retain")?;
        let n = r.u32()?;
        let mut fresh = SessionRetain {
            max_sessions: self.max_sessions,
            ..SessionRetain::default()
        };
        for _ in 0..n {
            let (id, agent, at) = (r.u64()?, r.u32()?, r.u64()?);
            fresh.arrive(id, agent, at);
        }
        r.finish()?;
        *self = fresh;
        Ok(())
    }
}

agentrt_sdk::export_policy!(SessionRetain);

#[cfg(test)]
mod tests {
    use super::*;
    use agentrt_sdk::testing::{rank, Harness};
    use agentrt_sdk::{ItemKind, RequestArrival};

    fn block(key: u64, agent: u32, session: u64, last_access: u64) -> Item {
        Item {
            kind: ItemKind::KvBlock,
            key,
            agent,
            session,
            last_access,
            tokens: 16,
            position: 0,
            tier: agentrt_sdk::Tier::Gpu,
        }
    }

    fn arrival(session: u64, agent: u32, at_us: u64) -> Event {
        Event::RequestArrival(RequestArrival {
            request_id: at_us,
            agent,
            session,
            anchor_hash: 0,
            prompt_tokens: 10,
            continues: None,
            warmup: false,
            at_us,
        })
    }

    #[test]
    fn live_sessions_blocks_go_after_ended_ones_lru_within_each() {
        let mut p = Harness::<SessionRetain>::new([]).unwrap();
        p.observe(&[arrival(7, 1, 0), arrival(8, 2, 0)]);
        p.observe(&[agentrt_sdk::testing::session_end(8)]);
        let items = [
            block(1, 1, 7, 1), // live, old
            block(2, 2, 8, 9), // ended, newest
            block(3, 1, 0, 2), // shared content of an agent with a live session
            block(4, 2, 0, 8), // shared content of an agent with none
        ];
        let order = rank(&items, &p.score(&items));
        assert_eq!(
            order,
            vec![2, 0, 1, 3],
            "live first (by recency), then the rest by recency"
        );
        // With no live session at all it is LRU exactly.
        p.observe(&[agentrt_sdk::testing::session_end(7)]);
        let lru: Vec<usize> = rank(&items, &agentrt_sdk::recency_scores(&items));
        assert_eq!(rank(&items, &p.score(&items)), lru);
    }

    #[test]
    fn a_full_table_drops_the_session_silent_longest_and_state_round_trips() {
        let mut p = Harness::<SessionRetain>::new([("max-sessions", "2")]).unwrap();
        p.observe(&[arrival(1, 1, 10), arrival(2, 1, 20), arrival(3, 1, 30)]);
        let live = |p: &Harness<SessionRetain>, s: u64| p.policy().is_live(&block(0, 1, s, 0));
        assert!(!live(&p, 1) && live(&p, 2) && live(&p, 3));
        let state = p.snapshot();
        let mut q = Harness::<SessionRetain>::new([]).unwrap();
        q.restore(&state).unwrap();
        assert!(live(&q, 2) && live(&q, 3) && !live(&q, 1));
        assert!(q.restore(b"junk").is_err());
    }
}

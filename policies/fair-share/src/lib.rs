//! # Fair share — no session or agent swarm takes more than its share
//!
//! A slot beside the cache policy (`agentrt serve --slot fair=fair-share --engine-priorities`).
//! It follows each session's use of the engine — prompt and output tokens, decayed with a
//! half-life, and calls in flight — and demotes a session that takes more than its share, with
//! `set-priority(session, -demotion)`; the proxy sends that as vLLM's request priority, so the
//! engine serves everyone else's waiting requests first. A session back within its share is
//! restored (`set-priority(session, 0)`). What only the runtime layer knows makes this
//! per-session rather than per-connection: a swarm of sub-agents in one session is one session.
//!
//! Rules (a session is demoted while either holds):
//!
//! - **Share** (`max-share`, default 0.5): the session's decayed tokens exceed this fraction of
//!   all sessions' together, while other sessions have used the engine recently too (at least one
//!   decayed token: alone, a session takes nobody's share). The demotion holds while the share
//!   does, not only while another call waits: vLLM orders its waiting queue by priority when a
//!   request arrives, so a flood demoted only when a light call shows up would already sit ahead
//!   of it.
//! - **In flight** (`max-in-flight`, default 8): more of its calls are in flight at once.
//!
//! Settings: `half-life-ms` (default 10000), `demotion` (default 10), `max-sessions` (default
//! 4096). Scores: a `request` item scores by its session's decayed use, lightest first; other items
//! score 0. Time is the host clock of the events, so a replay decides as the live run did.

use std::collections::{BTreeSet, HashMap};

use agentrt_sdk::state::{Reader, Writer};
use agentrt_sdk::{info, Config, Event, Item, ItemKind, Policy, PolicyInfo, SetPriority, SideEffect};

const MAGIC: [u8; 4] = *b"FAIR";
const FORMAT: u16 = 1;

#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct SessionUse {
    /// Decayed tokens as of `at_us`.
    tokens: f64,
    at_us: u64,
    in_flight: u32,
}

#[derive(Debug)]
pub struct FairShare {
    max_share: f64,
    max_in_flight: u32,
    half_life_us: f64,
    demotion: i32,
    max_sessions: usize,
    sessions: HashMap<u64, SessionUse>,
    /// Sessions demoted now (the proxy has been told).
    demoted: BTreeSet<u64>,
    now_us: u64,
}

impl Default for FairShare {
    fn default() -> Self {
        Self {
            max_share: 0.5,
            max_in_flight: 8,
            half_life_us: 10_000_000.0,
            demotion: 10,
            max_sessions: 4096,
            sessions: HashMap::new(),
            demoted: BTreeSet::new(),
            now_us: 0,
        }
    }
}

impl FairShare {
    /// `session`'s decayed tokens at `now_us`.
    fn tokens_at(&self, use_: &SessionUse, now_us: u64) -> f64 {
        let elapsed = now_us.saturating_sub(use_.at_us) as f64;
        use_.tokens * (0.5f64).powf(elapsed / self.half_life_us)
    }

    fn session(&mut self, session: u64, at_us: u64) -> &mut SessionUse {
        self.now_us = self.now_us.max(at_us);
        if self.sessions.len() >= self.max_sessions && !self.sessions.contains_key(&session) {
            // Forget the least active session (the one with the fewest decayed tokens).
            let now = self.now_us;
            let lightest = self
                .sessions
                .iter()
                .filter(|(_, u)| u.in_flight == 0)
                .map(|(s, u)| (*s, self.tokens_at(u, now)))
                .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)))
                .map(|(s, _)| s);
            if let Some(s) = lightest {
                self.sessions.remove(&s);
            }
        }
        let (half_life, now) = (self.half_life_us, self.now_us);
        let use_ = self.sessions.entry(session).or_default();
        // Bring the decay up to now before adding.
        let elapsed = now.saturating_sub(use_.at_us) as f64;
        use_.tokens *= (0.5f64).powf(elapsed / half_life);
        use_.at_us = now;
        use_
    }

    /// Whether a session with `use_` takes more than its share now, of `total` decayed tokens.
    fn over_share(&self, use_: &SessionUse, total: f64) -> bool {
        let mine = self.tokens_at(use_, self.now_us);
        let others = total - mine;
        use_.in_flight > self.max_in_flight || (others >= 1.0 && mine / total > self.max_share)
    }
}

impl Policy for FairShare {
    fn info() -> PolicyInfo {
        info(
            "fair-share",
            "demotes a session past its share of the tenant's recent tokens or calls in flight (set-priority); request items lightest first",
        )
    }

    fn init(&mut self, config: &Config) -> Result<(), String> {
        config.expect_only(&["max-share", "max-in-flight", "half-life-ms", "demotion", "max-sessions"])?;
        self.max_share = config.parse_or("max-share", 0.5f64)?;
        if !(self.max_share > 0.0 && self.max_share <= 1.0) {
            return Err(format!("max-share must be in (0, 1], got {}", self.max_share));
        }
        self.max_in_flight = config.parse_or("max-in-flight", 8u32)?;
        self.half_life_us = config.parse_or("half-life-ms", 10_000u64)?.max(1) as f64 * 1000.0;
        self.demotion = config.parse_or("demotion", 10i32)?.max(1);
        self.max_sessions = config.parse_or("max-sessions", 4096usize)?.max(1);
        Ok(())
    }

    fn observe(&mut self, event: &Event) {
        match event {
            // Counted at arrival: a flood is seen while it waits, not after it was served.
            Event::RequestArrival(r) if !r.warmup => {
                let use_ = self.session(r.session, r.at_us);
                use_.tokens += f64::from(r.prompt_tokens);
                use_.in_flight += 1;
            }
            Event::RequestFinish(r) if !r.warmup => {
                let use_ = self.session(r.session, r.at_us);
                use_.tokens += f64::from(r.output_tokens);
                use_.in_flight = use_.in_flight.saturating_sub(1);
            }
            Event::SessionEnd(end) => {
                if let Some(u) = self.sessions.get(&end.session) {
                    if u.in_flight == 0 {
                        self.sessions.remove(&end.session);
                    }
                }
            }
            _ => {}
        }
    }

    fn score(&mut self, items: &[Item]) -> Vec<f32> {
        items
            .iter()
            .map(|item| match (item.kind, self.sessions.get(&item.session)) {
                (ItemKind::Request, Some(u)) => -(self.tokens_at(u, self.now_us) as f32),
                _ => 0.0,
            })
            .collect()
    }

    fn act(&mut self) -> Vec<SideEffect> {
        let now = self.now_us;
        let total: f64 = self.sessions.values().map(|u| self.tokens_at(u, now)).sum();
        let mut sessions: Vec<(&u64, &SessionUse)> = self.sessions.iter().collect();
        sessions.sort_unstable_by_key(|(s, _)| **s);
        let over: BTreeSet<u64> = sessions
            .into_iter()
            .filter(|(_, u)| self.over_share(u, total))
            .map(|(s, _)| *s)
            .collect();
        let mut effects = Vec::new();
        for &session in over.difference(&self.demoted) {
            effects.push(SideEffect::SetPriority(SetPriority {
                session,
                priority: -self.demotion,
            }));
        }
        for &session in self.demoted.difference(&over) {
            effects.push(SideEffect::SetPriority(SetPriority { session, priority: 0 }));
        }
        self.demoted = over;
        effects
    }

    fn snapshot(&self) -> Vec<u8> {
        let mut w = Writer::new(MAGIC, FORMAT);
        w.u64(self.now_us);
        let mut sessions: Vec<_> = self.sessions.iter().collect();
        sessions.sort_unstable_by_key(|(s, _)| **s);
        w.u32(sessions.len() as u32);
        for (&s, u) in sessions {
            w.u64(s).u64(u.tokens.to_bits()).u64(u.at_us).u32(u.in_flight);
        }
        w.u32(self.demoted.len() as u32);
        for &s in &self.demoted {
            w.u64(s);
        }
        w.finish()
    }

    fn restore(&mut self, state: &[u8]) -> Result<(), String> {
        let mut r = Reader::of_format(state, MAGIC, FORMAT, "fair-share")?;
        let now_us = r.u64()?;
        let n = r.u32()?;
        let mut sessions = HashMap::with_capacity((n as usize).min(self.max_sessions));
        for _ in 0..n {
            let s = r.u64()?;
            sessions.insert(
                s,
                SessionUse {
                    tokens: f64::from_bits(r.u64()?),
                    at_us: r.u64()?,
                    in_flight: r.u32()?,
                },
            );
        }
        let mut demoted = BTreeSet::new();
        for _ in 0..r.u32()? {
            demoted.insert(r.u64()?);
        }
        r.finish()?;
        (self.now_us, self.sessions, self.demoted) = (now_us, sessions, demoted);
        Ok(())
    }
}

agentrt_sdk::export_policy!(FairShare);

#[cfg(test)]
mod tests {
    use super::*;
    use agentrt_sdk::testing::Harness;
    use agentrt_sdk::{RequestArrival, RequestFinish};

    fn arrival(session: u64, prompt_tokens: u32, at_us: u64) -> Event {
        Event::RequestArrival(RequestArrival {
            request_id: 1,
            agent: 1,
            session,
            anchor_hash: 0,
            prompt_tokens,
            continues: None,
            warmup: false,
            at_us,
        })
    }

    fn finish(session: u64, at_us: u64) -> Event {
        Event::RequestFinish(RequestFinish {
            request_id: 1,
            agent: 1,
            session,
            prompt_tokens: 0,
            cached_tokens: 0,
            output_tokens: 10,
            warmup: false,
            ok: true,
            at_us,
        })
    }

    fn priorities(effects: Vec<SideEffect>) -> Vec<(u64, i32)> {
        effects
            .into_iter()
            .map(|e| match e {
                SideEffect::SetPriority(p) => (p.session, p.priority),
                other => panic!("fair-share only sets priorities: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn a_session_past_its_share_is_demoted_and_restored_when_it_calms_down() {
        let mut fair = Harness::<FairShare>::new([("half-life-ms", "1000")]).unwrap();
        fair.observe(&[arrival(2, 5000, 0), finish(2, 5)]);
        assert!(fair.act().is_empty(), "one session alone has no one to be unfair to");
        fair.observe(&[arrival(1, 100, 10), finish(1, 20)]);
        assert_eq!(priorities(fair.act()), vec![(2, -10)]);
        assert!(fair.act().is_empty(), "told once");
        // Session 2 falls silent; session 1 keeps calling: after a few half-lives they swap roles.
        for t in 1..=6u64 {
            fair.observe(&[arrival(1, 100, t * 1_000_000), finish(1, t * 1_000_000 + 10)]);
        }
        assert_eq!(priorities(fair.act()), vec![(1, -10), (2, 0)]);
        // Ten half-lives on, session 2 has left less than a token: session 1 is alone again.
        fair.observe(&[arrival(1, 1, 60_000_000)]);
        assert_eq!(priorities(fair.act()), vec![(1, 0)]);
    }

    #[test]
    fn too_many_calls_in_flight_demote_even_alone() {
        let mut fair = Harness::<FairShare>::new([("max-in-flight", "2")]).unwrap();
        fair.observe(&[arrival(7, 10, 0), arrival(7, 10, 1), arrival(7, 10, 2)]);
        assert_eq!(priorities(fair.act()), vec![(7, -10)]);
        fair.observe(&[finish(7, 3)]);
        assert_eq!(priorities(fair.act()), vec![(7, 0)]);
    }

    #[test]
    fn waiting_requests_of_light_sessions_score_higher() {
        let mut fair = Harness::<FairShare>::new([]).unwrap();
        fair.observe(&[arrival(1, 100, 0), arrival(2, 9000, 0)]);
        let request = |session| Item {
            kind: ItemKind::Request,
            key: session,
            agent: 1,
            session,
            last_access: 0,
            tokens: 10,
            position: 0,
            tier: agentrt_sdk::Tier::Gpu,
        };
        let scores = fair.score(&[request(1), request(2)]);
        assert!(scores[0] > scores[1], "{scores:?}");
    }

    #[test]
    fn state_round_trips_and_bad_config_is_refused() {
        let mut fair = Harness::<FairShare>::new([]).unwrap();
        fair.observe(&[arrival(1, 100, 0), arrival(2, 5000, 5)]);
        fair.act();
        let state = fair.snapshot();
        let mut other = Harness::<FairShare>::new([]).unwrap();
        other.restore(&state).unwrap();
        assert_eq!(other.snapshot(), state);
        assert!(other.act().is_empty(), "the demotion carried over: nothing new to say");
        assert!(other.restore(b"FAIR").is_err());
        assert!(Harness::<FairShare>::new([("max-share", "2")])
            .unwrap_err()
            .contains("max-share"));
        assert!(Harness::<FairShare>::new([("share", "0.5")]).is_err());
    }
}

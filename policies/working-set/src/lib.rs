//! # Working set — which sessions stay resident past the engine's knee
//!
//! The policy of a tenant's `admission` slot for working-set admission (contract 0.5.0; the
//! host's rules — the ledger, the gate, the aging bound, tenant shares — are the
//! `agentrt-admission` crate's). The host asks it to score its live sessions as `session` items;
//! a session's score is **minus the expected seconds until its next call**, and the host holds
//! the lowest first: a session whose agent waits for a long tool or for its user before one
//! about to return.
//!
//! - A call in flight (its `request-arrival` without its `request-finish`) scores 0: due now.
//! - A paused session scores minus its expected remaining pause. The expected pause is the
//!   framework's own figure when a hinted `session-wait` gave one (`expected-us`), else what was
//!   learned for its class — (agent, wait kind, tool) from the `session-wait` that followed its
//!   answer, or (agent, unsaid) without one: a running mean of the pauses seen, from an answer to
//!   the session's next `request-arrival` — else a prior (`tool-prior-ms` 3,000, `user-prior-ms`
//!   60,000, `unsaid-prior-ms` 10,000). Past its expected end a pause is taken to last half as
//!   long again as it has (waits are heavy-tailed: the longer a session has been away, the longer
//!   it is likely to stay away).
//! - A session that ended (`session-end`) is forgotten; it scores as unknown (`-unsaid-prior`)
//!   until it calls again.
//!
//! It ranks no blocks (every other item scores 0) and takes no side effects: holds are the
//! host's, made from these scores. State: the class means (at most `max-classes`, 1,024) and the
//! live sessions (at most `max-sessions`, 4,096: the least recently active forgotten first).

use std::collections::HashMap;

use agentrt_sdk::state::{Reader, Writer};
use agentrt_sdk::{info, Config, Event, Item, ItemKind, Policy, PolicyInfo, WaitKind};

const MAGIC: [u8; 4] = *b"WSET";
const FORMAT: u16 = 1;
/// Weight of a new pause in its class's running mean.
const LEARNING_RATE: f64 = 0.2;

/// A pause's class: agent, wait kind (0 tool, 1 user, 2 unsaid), tool hash.
type Class = (u32, u8, u64);
const UNSAID: u8 = 2;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Live {
    InFlight,
    /// Paused since `since_us`, in `class`, with the framework's expected duration if it gave one.
    Paused {
        since_us: u64,
        class: Class,
        expected_us: Option<u64>,
    },
}

#[derive(Debug)]
pub struct WorkingSetScores {
    priors_us: [f64; 3],
    max_sessions: usize,
    max_classes: usize,
    /// Class → (mean pause µs, pauses seen).
    classes: HashMap<Class, (f64, u64)>,
    sessions: HashMap<u64, (Live, u64)>,
    now_us: u64,
}

impl Default for WorkingSetScores {
    fn default() -> Self {
        Self {
            priors_us: [3_000_000.0, 60_000_000.0, 10_000_000.0],
            max_sessions: 4096,
            max_classes: 1024,
            classes: HashMap::new(),
            sessions: HashMap::new(),
            now_us: 0,
        }
    }
}

impl WorkingSetScores {
    fn expected_pause_us(&self, class: Class, hinted: Option<u64>) -> f64 {
        if let Some(us) = hinted {
            return us as f64;
        }
        match self.classes.get(&class) {
            Some(&(mean, _)) => mean,
            None => self.priors_us[class.1 as usize],
        }
    }

    /// Expected seconds until `session`'s next call.
    fn expected_return_s(&self, session: u64) -> f64 {
        match self.sessions.get(&session) {
            Some((Live::InFlight, _)) => 0.0,
            Some((
                Live::Paused {
                    since_us,
                    class,
                    expected_us,
                },
                _,
            )) => {
                let elapsed = self.now_us.saturating_sub(*since_us) as f64;
                let expected = self.expected_pause_us(*class, *expected_us);
                (expected - elapsed).max(elapsed / 2.0) / 1e6
            }
            None => self.priors_us[UNSAID as usize] / 1e6,
        }
    }

    fn learn(&mut self, class: Class, pause_us: f64) {
        if !self.classes.contains_key(&class) && self.classes.len() >= self.max_classes {
            return;
        }
        let entry = self.classes.entry(class).or_insert((pause_us, 0));
        entry.0 = if entry.1 == 0 {
            pause_us
        } else {
            entry.0 + LEARNING_RATE * (pause_us - entry.0)
        };
        entry.1 += 1;
    }

    fn set(&mut self, session: u64, live: Live, at_us: u64) {
        if !self.sessions.contains_key(&session) && self.sessions.len() >= self.max_sessions {
            let oldest = self
                .sessions
                .iter()
                .min_by_key(|(s, (_, t))| (*t, **s))
                .map(|(s, _)| *s);
            if let Some(s) = oldest {
                self.sessions.remove(&s);
            }
        }
        self.sessions.insert(session, (live, at_us));
    }
}

fn kind_ordinal(kind: WaitKind) -> u8 {
    match kind {
        WaitKind::Tool => 0,
        WaitKind::User => 1,
    }
}

impl Policy for WorkingSetScores {
    fn info() -> PolicyInfo {
        info(
            "working-set",
            "session items: minus the expected seconds until each live session's next call (learned per agent, wait kind and tool); for working-set admission's `admission` slot",
        )
    }

    fn init(&mut self, config: &Config) -> Result<(), String> {
        config.expect_only(&[
            "tool-prior-ms",
            "user-prior-ms",
            "unsaid-prior-ms",
            "max-sessions",
            "max-classes",
        ])?;
        let ms =
            |key: &str, default: u64| -> Result<f64, String> { Ok(config.parse_or(key, default)? as f64 * 1000.0) };
        self.priors_us = [
            ms("tool-prior-ms", 3_000)?,
            ms("user-prior-ms", 60_000)?,
            ms("unsaid-prior-ms", 10_000)?,
        ];
        self.max_sessions = config.parse_or("max-sessions", 4096usize)?.max(1);
        self.max_classes = config.parse_or("max-classes", 1024usize)?.max(1);
        Ok(())
    }

    fn observe(&mut self, event: &Event) {
        match event {
            Event::RequestArrival(r) if !r.warmup => {
                self.now_us = self.now_us.max(r.at_us);
                if let Some((Live::Paused { since_us, class, .. }, _)) = self.sessions.get(&r.session).copied() {
                    self.learn(class, r.at_us.saturating_sub(since_us) as f64);
                }
                self.set(r.session, Live::InFlight, r.at_us);
            }
            Event::RequestFinish(r) if !r.warmup => {
                self.now_us = self.now_us.max(r.at_us);
                let paused = Live::Paused {
                    since_us: r.at_us,
                    class: (r.agent, UNSAID, 0),
                    expected_us: None,
                };
                self.set(r.session, paused, r.at_us);
            }
            Event::SessionWait(w) => {
                self.now_us = self.now_us.max(w.at_us);
                let since_us = match self.sessions.get(&w.session) {
                    Some((Live::Paused { since_us, .. }, _)) => *since_us,
                    _ => w.at_us,
                };
                let agent = if w.agent != 0 {
                    w.agent
                } else {
                    match self.sessions.get(&w.session) {
                        Some((Live::Paused { class, .. }, _)) => class.0,
                        _ => 0,
                    }
                };
                let paused = Live::Paused {
                    since_us,
                    class: (agent, kind_ordinal(w.kind), w.tool),
                    expected_us: (w.expected_us > 0).then_some(w.expected_us),
                };
                self.set(w.session, paused, w.at_us);
            }
            Event::SessionEnd(e) => {
                self.now_us = self.now_us.max(e.at_us);
                self.sessions.remove(&e.session);
            }
            Event::EngineCapacity(c) => self.now_us = self.now_us.max(c.at_us),
            Event::EngineLoad(l) => self.now_us = self.now_us.max(l.at_us),
            _ => {}
        }
    }

    fn score(&mut self, items: &[Item]) -> Vec<f32> {
        items
            .iter()
            .map(|item| match item.kind {
                ItemKind::Session => -(self.expected_return_s(item.session) as f32),
                _ => 0.0,
            })
            .collect()
    }

    fn snapshot(&self) -> Vec<u8> {
        let mut w = Writer::new(MAGIC, FORMAT);
        w.u64(self.now_us);
        let mut classes: Vec<_> = self.classes.iter().collect();
        classes.sort_unstable_by_key(|(c, _)| **c);
        w.u32(classes.len() as u32);
        for (&(agent, kind, tool), &(mean, n)) in classes {
            w.u32(agent).u8(kind).u64(tool).u64(mean.to_bits()).u64(n);
        }
        let mut sessions: Vec<_> = self.sessions.iter().collect();
        sessions.sort_unstable_by_key(|(s, _)| **s);
        w.u32(sessions.len() as u32);
        for (&s, &(live, at)) in sessions {
            w.u64(s).u64(at);
            match live {
                Live::InFlight => {
                    w.u8(0);
                }
                Live::Paused {
                    since_us,
                    class,
                    expected_us,
                } => {
                    w.u8(1)
                        .u64(since_us)
                        .u32(class.0)
                        .u8(class.1)
                        .u64(class.2)
                        .u64(expected_us.unwrap_or(0));
                }
            }
        }
        w.finish()
    }

    fn restore(&mut self, state: &[u8]) -> Result<(), String> {
        let mut r = Reader::of_format(state, MAGIC, FORMAT, "working-set")?;
        let now_us = r.u64()?;
        let mut classes = HashMap::new();
        for _ in 0..r.u32()? {
            let class = (r.u32()?, r.u8()?, r.u64()?);
            if class.1 > UNSAID {
                return Err(format!(
                    "working-set state: wait kind {} is not one this policy writes",
                    class.1
                ));
            }
            classes.insert(class, (f64::from_bits(r.u64()?), r.u64()?));
        }
        let mut sessions = HashMap::new();
        for _ in 0..r.u32()? {
            let (s, at) = (r.u64()?, r.u64()?);
            let live = match r.u8()? {
                0 => Live::InFlight,
                1 => {
                    let since_us = r.u64()?;
                    let class = (r.u32()?, r.u8()?, r.u64()?);
                    let expected = r.u64()?;
                    Live::Paused {
                        since_us,
                        class,
                        expected_us: (expected > 0).then_some(expected),
                    }
                }
                other => {
                    return Err(format!(
                        "working-set state: session state {other} is not one this policy writes"
                    ))
                }
            };
            sessions.insert(s, (live, at));
        }
        r.finish()?;
        (self.now_us, self.classes, self.sessions) = (now_us, classes, sessions);
        Ok(())
    }
}

agentrt_sdk::export_policy!(WorkingSetScores);

#[cfg(test)]
mod tests {
    use super::*;
    use agentrt_sdk::testing::Harness;
    use agentrt_sdk::{RequestArrival, RequestFinish, SessionEnd, SessionWait, Tier};

    fn arrival(session: u64, at_us: u64) -> Event {
        Event::RequestArrival(RequestArrival {
            request_id: 1,
            agent: 1,
            session,
            anchor_hash: 0,
            prompt_tokens: 1000,
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
            prompt_tokens: 1000,
            cached_tokens: 0,
            output_tokens: 10,
            warmup: false,
            ok: true,
            at_us,
        })
    }

    fn wait(session: u64, kind: WaitKind, tool: u64, expected_us: u64, at_us: u64) -> Event {
        Event::SessionWait(SessionWait {
            session,
            agent: 1,
            kind,
            tool,
            expected_us,
            hinted: expected_us > 0,
            at_us,
        })
    }

    fn item(session: u64) -> Item {
        Item {
            kind: ItemKind::Session,
            key: session,
            agent: 1,
            session,
            last_access: 0,
            tokens: 1000,
            position: 0,
            tier: Tier::Gpu,
        }
    }

    #[test]
    fn a_session_waiting_for_its_user_is_held_before_one_in_a_short_tool() {
        let mut p = Harness::<WorkingSetScores>::new([]).unwrap();
        p.observe(&[
            arrival(1, 0),
            arrival(2, 0),
            arrival(3, 0),
            finish(1, 1_000_000),
            wait(1, WaitKind::User, 0, 0, 1_000_000),
            finish(2, 1_000_000),
            wait(2, WaitKind::Tool, 7, 0, 1_000_000),
        ]);
        let s = p.score(&[item(1), item(2), item(3)]);
        // 3 is in flight: due now. 2 waits for a tool (prior 3 s), 1 for its user (prior 60 s).
        assert_eq!(s[2], 0.0);
        assert!(s[1] < 0.0 && s[0] < s[1], "{s:?}");
        assert!((s[1] + 3.0).abs() < 1e-3 && (s[0] + 60.0).abs() < 1e-3, "{s:?}");
    }

    #[test]
    fn pauses_are_learned_per_tool_and_a_framework_figure_wins() {
        let mut p = Harness::<WorkingSetScores>::new([]).unwrap();
        // Tool 7 takes 10 s every time it runs.
        for k in 0..10u64 {
            let t = k * 20_000_000;
            p.observe(&[
                arrival(1, t),
                finish(1, t + 1_000),
                wait(1, WaitKind::Tool, 7, 0, t + 1_000),
            ]);
            p.observe(&[arrival(1, t + 10_001_000)]);
        }
        p.observe(&[finish(1, 300_000_000), wait(1, WaitKind::Tool, 7, 0, 300_000_000)]);
        let learned = p.score(&[item(1)])[0];
        assert!((learned + 10.0).abs() < 0.1, "{learned}");
        // A framework that says 0.5 s is believed over what was learned.
        p.observe(&[
            arrival(1, 301_000_000),
            finish(1, 302_000_000),
            wait(1, WaitKind::Tool, 7, 500_000, 302_000_000),
        ]);
        assert!((p.score(&[item(1)])[0] + 0.5).abs() < 1e-3);
        // An ended session is forgotten; the same state comes back through a snapshot.
        let snap = p.snapshot();
        let mut q = Harness::<WorkingSetScores>::new([]).unwrap();
        q.restore(&snap).unwrap();
        assert_eq!(q.score(&[item(1)]), p.score(&[item(1)]));
        p.observe(&[Event::SessionEnd(SessionEnd {
            session: 1,
            reason: agentrt_sdk::EndReason::Closed,
            at_us: 303_000_000,
        })]);
        assert!(
            (p.score(&[item(1)])[0] + 10.0).abs() < 1e-3,
            "unknown again: the unsaid prior"
        );
    }

    #[test]
    fn the_longer_a_session_has_been_away_the_longer_it_is_expected_to_stay() {
        let mut p = Harness::<WorkingSetScores>::new([("tool-prior-ms", "1000")]).unwrap();
        p.observe(&[arrival(1, 0), finish(1, 0), wait(1, WaitKind::Tool, 0, 0, 0)]);
        p.observe(&[Event::EngineLoad(agentrt_sdk::EngineLoad {
            queue_depth: 0,
            running: 0,
            free_blocks: 0,
            total_blocks: 0,
            at_us: 20_000_000,
        })]);
        // Expected 1 s, away 20 s: expected 10 s more.
        assert!((p.score(&[item(1)])[0] + 10.0).abs() < 1e-3);
        assert!(Harness::<WorkingSetScores>::new([("tool-prior", "5")]).is_err());
    }
}

//! What a replay tells the policy of the trace's lifecycle hints (`sim run --hints`,
//! `--hint-coverage`): which kinds, and for which share of the sessions. A hint becomes the
//! contract's event at the simulated time a framework would send it — `closes` as `session-end`
//! (reason `closed`) right after the request's answer is complete, `wait` as `session-wait` at
//! the answer — so a policy hears what an agent framework knows, not the trace's future.

use agentrt_runtime::types::{EndReason, Event, SessionEnd, SessionWait, WaitKind};
use clap::{Args, ValueEnum};

use crate::prepare::PreparedTrace;
use crate::trace::{self, Hints};

/// Which of the trace's hints the replay tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum HintKinds {
    /// None: the trace's hints are ignored (every result before hints existed).
    #[default]
    None,
    /// Session closings only (`hints.closes`).
    Closed,
    /// Closings and waits (`hints.closes`, `hints.wait`).
    All,
}

/// The hints told, and to which sessions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HintsTold {
    pub kinds: HintKinds,
    /// The share of sessions whose hints are told, chosen by a seeded hash of the session id
    /// (the same sessions in every replay of the trace, whichever the policy).
    pub coverage: f64,
}

impl Default for HintsTold {
    fn default() -> Self {
        Self {
            kinds: HintKinds::None,
            coverage: 1.0,
        }
    }
}

/// The seed of the coverage hash: fixed, so every policy hears the same sessions' hints.
const COVERAGE_SEED: u64 = 0x6869_6e74_735f_3335;

impl HintsTold {
    /// The hints in words, for a report's heading and the JSON (`hints`).
    pub fn name(&self) -> String {
        let kinds = match self.kinds {
            HintKinds::None => return "none".to_string(),
            HintKinds::Closed => "closed",
            HintKinds::All => "closed + waits",
        };
        if self.coverage >= 1.0 {
            kinds.to_string()
        } else {
            format!("{kinds}, {:.0} % of sessions", self.coverage * 100.0)
        }
    }

    /// Whether session `session` (its id, as the policy hears it) is among those signalled.
    pub fn covers(&self, session: u64) -> bool {
        if self.kinds == HintKinds::None {
            return false;
        }
        if self.coverage >= 1.0 {
            return true;
        }
        let h = crate::rng::Rng::new(session ^ COVERAGE_SEED).next_u64();
        (h >> 11) as f64 / (1u64 << 53) as f64 <= self.coverage
    }

    /// The events a covered session's request with `hints` gives at its answer (`at_us`): its
    /// wait (under `all`), then its close. `oracle_last`: the request is its session's last and
    /// `--session-ends oracle` ends the session there already (an end is not told twice).
    pub fn events(&self, hints: &Hints, session: u64, agent: u32, at_us: u64, oracle_last: bool) -> Vec<Event> {
        let mut out = Vec::new();
        if !self.covers(session) {
            return out;
        }
        if let (HintKinds::All, Some(wait)) = (self.kinds, &hints.wait) {
            out.push(Event::SessionWait(SessionWait {
                session,
                agent,
                kind: match wait.kind {
                    trace::WaitKind::Tool => WaitKind::Tool,
                    trace::WaitKind::User => WaitKind::User,
                },
                tool: wait.tool.as_deref().map_or(0, crate::tokens::hash_str),
                expected_us: wait.expected_ms.map_or(0, |ms| (ms * 1000.0) as u64),
                hinted: true,
                at_us,
            }));
        }
        if hints.closes && !oracle_last {
            out.push(Event::SessionEnd(SessionEnd {
                session,
                reason: EndReason::Closed,
                at_us,
            }));
        }
        out
    }
}

impl HintsTold {
    /// What to warn when the replay is to tell hints that `trace` does not carry: `None` when
    /// some request carries a kind asked for, or none was asked for.
    pub fn missing_from(&self, trace: &PreparedTrace) -> Option<String> {
        let (flag, fields) = match self.kinds {
            HintKinds::None => return None,
            HintKinds::Closed => ("closed", "`hints.closes`"),
            HintKinds::All => ("all", "`hints.closes` or `hints.wait`"),
        };
        let carried = |h: &Hints| h.closes || (self.kinds == HintKinds::All && h.wait.is_some());
        if trace.requests.iter().any(|r| carried(&r.hints)) {
            return None;
        }
        Some(format!(
            "--hints {flag}: the trace carries no lifecycle hints ({fields} on no request), so every \
             policy hears what it would without --hints. Traces that carry them: `sim gen` (each \
             session closes at its task's end), `sim import kv-cache-tester`, `sim import mooncake \
             --sessions chained` (docs/workloads.md)"
        ))
    }
}

/// `sim run`'s hint flags.
#[derive(Args, Debug, Clone)]
pub struct HintArgs {
    /// Which of the trace's lifecycle hints the policy hears: none (the default: ignored),
    /// closed (`session-end` reason closed after a session's closing request), all (closings and
    /// `session-wait` at each answer that has a wait hint).
    #[arg(long, value_enum, default_value = "none")]
    pub hints: HintKinds,
    /// Tell hints for only this share of the sessions (0 < F ≤ 1), chosen by a seeded hash of
    /// the session id.
    #[arg(long, default_value_t = 1.0)]
    pub hint_coverage: f64,
}

impl Default for HintArgs {
    fn default() -> Self {
        Self {
            hints: HintKinds::None,
            hint_coverage: 1.0,
        }
    }
}

impl HintArgs {
    pub fn told(&self) -> anyhow::Result<HintsTold> {
        anyhow::ensure!(
            self.hint_coverage > 0.0 && self.hint_coverage <= 1.0,
            "--hint-coverage {}: must be in (0, 1] (the share of sessions whose hints are told)",
            self.hint_coverage
        );
        Ok(HintsTold {
            kinds: self.hints,
            coverage: self.hint_coverage,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coverage_picks_about_that_share_of_sessions_and_none_picks_none() {
        let half = HintsTold {
            kinds: HintKinds::Closed,
            coverage: 0.5,
        };
        let picked = (0..10_000u64)
            .filter(|&s| half.covers(crate::tokens::hash_str(&s.to_string())))
            .count();
        assert!((4_700..=5_300).contains(&picked), "{picked} of 10,000");
        let none = HintsTold::default();
        assert!((0..100).all(|s| !none.covers(s)));
    }

    #[test]
    fn hints_asked_of_a_trace_without_them_are_warned_about_and_generated_traces_carry_closings() {
        use crate::workloads::{generate, Workload};
        let told = |kinds| HintsTold { kinds, coverage: 1.0 };
        let mut params = Workload::Gsm8k.headline();
        params.sessions = 4;
        let mut trace = generate(Workload::Gsm8k, &params);
        let prepared = |t: &crate::trace::Trace| PreparedTrace::new(t, 16, false);
        assert_eq!(told(HintKinds::Closed).missing_from(&prepared(&trace)), None);
        assert_eq!(told(HintKinds::All).missing_from(&prepared(&trace)), None);
        for request in &mut trace.requests {
            request.hints = Hints::default();
        }
        let bare = prepared(&trace);
        let warning = told(HintKinds::Closed).missing_from(&bare).expect("a warning");
        assert!(
            warning.starts_with("--hints closed: the trace carries no lifecycle hints"),
            "{warning}"
        );
        assert!(told(HintKinds::All).missing_from(&bare).is_some());
        assert_eq!(
            told(HintKinds::None).missing_from(&bare),
            None,
            "no hints asked, nothing to warn"
        );
    }
}

//! The conditions a replay runs under, as flags every replay command shares: what the policy is
//! told about session ends, and the load — a time scale (every time of the trace), an arrival
//! scale (when sessions start: more or fewer of them at once, each keeping its own tool and think
//! times), or a target utilisation the replay reaches by scaling the arrivals.
//!
//! Utilisation is the fraction of the makespan the engine spends running steps
//! ([`crate::report::PolicySummary::utilisation`]). A target is reached with native LRU replays
//! (bisection over the arrival scale on a log scale), so the load is fixed before any other policy
//! runs and is the same for all of them.

use clap::{Args, ValueEnum};

use crate::policies::NativeLru;
use crate::prepare::PreparedTrace;
use crate::scheduler::{SessionEnds, Sim, SimConfig, DEFAULT_SESSION_IDLE_MS};

/// `--session-ends`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SessionEndRule {
    /// A session silent for --session-idle-ms is reported ended, as `agentrt serve` infers it.
    Idle,
    /// Reported right after the session's last request: knowledge of the future no host has.
    Oracle,
}

/// What the policy is told about session ends.
#[derive(Args, Debug, Clone)]
pub struct SessionEndArgs {
    /// When a replay tells the policy a session ended: `idle` (what `serve` can know: silence for
    /// --session-idle-ms) or `oracle` (right after its last request: the trace's future).
    #[arg(long, value_enum, default_value = "idle")]
    pub session_ends: SessionEndRule,
    /// With `--session-ends idle`: the silence after which a session is reported ended
    /// (`serve --session-idle-ms`'s default).
    #[arg(long, default_value_t = DEFAULT_SESSION_IDLE_MS)]
    pub session_idle_ms: f64,
}

impl Default for SessionEndArgs {
    fn default() -> Self {
        Self {
            session_ends: SessionEndRule::Idle,
            session_idle_ms: DEFAULT_SESSION_IDLE_MS,
        }
    }
}

impl SessionEndArgs {
    pub fn rule(&self) -> anyhow::Result<SessionEnds> {
        Ok(match self.session_ends {
            SessionEndRule::Oracle => SessionEnds::Oracle,
            SessionEndRule::Idle => {
                anyhow::ensure!(
                    self.session_idle_ms.is_finite() && self.session_idle_ms > 0.0,
                    "--session-idle-ms must be a positive number of milliseconds"
                );
                SessionEnds::Idle {
                    ms: self.session_idle_ms,
                }
            }
        })
    }
}

/// The load a replay runs at.
#[derive(Args, Debug, Clone, Default)]
pub struct LoadArgs {
    /// Multiply every time of the trace (session starts, think and tool times) by this.
    #[arg(long)]
    pub time_scale: Option<f64>,
    /// Multiply the sessions' start times by this (4 = sessions start four times further apart);
    /// the waits inside a session stay the trace's.
    #[arg(long, conflicts_with = "target_utilisation")]
    pub arrival_scale: Option<f64>,
    /// Scale the sessions' start times until LRU keeps the engine busy this fraction of the time
    /// (0 < U < 1), then replay every policy at that arrival scale.
    #[arg(long)]
    pub target_utilisation: Option<f64>,
}

/// The load settled on: the scales, and LRU's utilisation there when it was measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Load {
    pub time_scale: f64,
    pub arrival_scale: f64,
    pub lru_utilisation: Option<f64>,
}

impl Load {
    /// The load in words, for a report's heading.
    pub fn describe(&self) -> String {
        let scales = format!(
            "time scale {}, arrival scale {:.3}",
            self.time_scale, self.arrival_scale
        );
        match self.lru_utilisation {
            Some(u) => format!("{scales} (LRU utilisation {:.0} %)", u * 100.0),
            None => scales,
        }
    }
}

/// The distinct prompt blocks `trace` touches.
pub fn distinct_blocks(trace: &PreparedTrace) -> usize {
    trace
        .requests
        .iter()
        .flat_map(|r| r.prompt.hashes.iter().copied())
        .collect::<std::collections::HashSet<u64>>()
        .len()
}

/// `fraction` of the trace's distinct prompt blocks, in blocks (at least 2: the null block and
/// one more).
pub fn capacity_of(trace: &PreparedTrace, fraction: f64) -> anyhow::Result<usize> {
    anyhow::ensure!(
        fraction.is_finite() && fraction > 0.0,
        "--capacity-fraction must be a positive number"
    );
    Ok(((distinct_blocks(trace) as f64 * fraction).round() as usize).max(2))
}

/// The cache a replay gets when no flag sizes it, from the trace itself: a third of the distinct
/// blocks it touches — so the engine must evict and every policy must rank (a cache that holds
/// everything makes every policy tie and proves nothing) — never smaller than four times its
/// longest request (so requests still run side by side).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FittedCapacity {
    pub distinct_blocks: usize,
    pub blocks: usize,
}

impl FittedCapacity {
    pub fn of(trace: &PreparedTrace) -> FittedCapacity {
        let distinct_blocks = distinct_blocks(trace);
        let longest = trace
            .requests
            .iter()
            .map(|r| (r.prompt.tokens + r.output_tokens) as usize / trace.block_size + 1)
            .max()
            .unwrap_or(1);
        FittedCapacity {
            distinct_blocks,
            blocks: (distinct_blocks / 3).max(4 * longest).max(16),
        }
    }

    /// How the output names this choice.
    pub fn describe(&self) -> String {
        format!(
            "sized from the trace: a third of its {} distinct blocks; --capacity-blocks or --capacity-fraction sets it",
            self.distinct_blocks
        )
    }
}

/// The search for the arrival scale at which LRU's utilisation is the target: the closest
/// probe so far, and how many probes were spent (at most [`MAX_PROBES`]).
struct ScaleSearch<F: FnMut(f64) -> anyhow::Result<f64>> {
    target: f64,
    probes: usize,
    best: (f64, f64),
    measure: F,
}

impl<F: FnMut(f64) -> anyhow::Result<f64>> ScaleSearch<F> {
    /// Utilisation at `scale`, kept as the best when closest to the target.
    fn probe(&mut self, scale: f64) -> anyhow::Result<f64> {
        let u = (self.measure)(scale)?;
        self.probes += 1;
        if self.best.1.is_nan() || (u - self.target).abs() < (self.best.1 - self.target).abs() {
            self.best = (scale, u);
        }
        Ok(u)
    }

    /// From scale 1, steps of ×4 (or ÷4) until the target lies between `lo` (busier than the
    /// target) and `hi` (idler).
    fn bracket(&mut self) -> anyhow::Result<(f64, f64)> {
        let (mut lo, mut hi) = (1.0f64, 1.0f64);
        if self.probe(1.0)? > self.target {
            while self.probes < MAX_PROBES {
                hi *= 4.0;
                if self.probe(hi)? <= self.target {
                    break;
                }
                lo = hi;
            }
        } else {
            while self.probes < MAX_PROBES {
                lo /= 4.0;
                if self.probe(lo)? >= self.target {
                    break;
                }
                hi = lo;
            }
        }
        Ok((lo, hi))
    }

    /// Bisect `lo..hi` in log scale until the best probe is within [`TOLERANCE`] or the probes
    /// are spent; the best (scale, utilisation).
    fn bisect(&mut self, mut lo: f64, mut hi: f64) -> anyhow::Result<(f64, f64)> {
        while self.probes < MAX_PROBES && (self.best.1 - self.target).abs() > TOLERANCE {
            let mid = (lo * hi).sqrt();
            if self.probe(mid)? > self.target {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Ok(self.best)
    }
}

/// Native LRU's utilisation of `trace` under `cfg` at arrival scale `scale`.
fn lru_utilisation(trace: &PreparedTrace, cfg: &SimConfig, scale: f64) -> anyhow::Result<f64> {
    let mut c = cfg.clone();
    c.arrival_scale = scale;
    c.slots.clear();
    let r = Sim::new(c, trace, &mut NativeLru).run()?;
    Ok(if r.makespan_us > 0.0 {
        (r.busy_us / r.makespan_us).min(1.0)
    } else {
        0.0
    })
}

/// Replays a target search may use; it stops at the closest scale found.
const MAX_PROBES: usize = 12;
/// A probe within this of the target is close enough (absolute utilisation).
const TOLERANCE: f64 = 0.02;

impl LoadArgs {
    /// Set `cfg`'s scales from the flags (a target: found by native LRU replays, each reported
    /// through `probe` as (arrival scale, utilisation)).
    pub fn settle(
        &self,
        trace: &PreparedTrace,
        cfg: &mut SimConfig,
        mut probe: impl FnMut(f64, f64),
    ) -> anyhow::Result<Load> {
        let positive = |x: Option<f64>, flag: &str| -> anyhow::Result<Option<f64>> {
            match x {
                Some(v) if !(v.is_finite() && v > 0.0) => anyhow::bail!("{flag} must be a positive number"),
                other => Ok(other),
            }
        };
        if let Some(scale) = positive(self.time_scale, "--time-scale")? {
            cfg.time_scale = scale;
        }
        if let Some(scale) = positive(self.arrival_scale, "--arrival-scale")? {
            cfg.arrival_scale = scale;
        }
        let Some(target) = self.target_utilisation else {
            return Ok(Load {
                time_scale: cfg.time_scale,
                arrival_scale: cfg.arrival_scale,
                lru_utilisation: None,
            });
        };
        anyhow::ensure!(
            target > 0.0 && target < 1.0,
            "--target-utilisation must be between 0 and 1 (exclusive)"
        );
        // Utilisation falls as the scale grows. Bracket the target, then bisect in log scale.
        let mut search = ScaleSearch {
            target,
            probes: 0,
            best: (1.0, f64::NAN),
            measure: |scale: f64| -> anyhow::Result<f64> {
                let u = lru_utilisation(trace, cfg, scale)?;
                probe(scale, u);
                Ok(u)
            },
        };
        let (lo, hi) = search.bracket()?;
        let best = search.bisect(lo, hi)?;
        cfg.arrival_scale = best.0;
        Ok(Load {
            time_scale: cfg.time_scale,
            arrival_scale: best.0,
            lru_utilisation: Some(best.1),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::Trace;

    /// Sessions of three calls each, starting 200 ms apart, 500 ms between a session's calls.
    fn trace() -> PreparedTrace {
        let mut text = String::new();
        for s in 0..30 {
            for k in 0..3 {
                let after = if k == 0 { s * 200 } else { 500 };
                text.push_str(&format!(
                    r#"{{"session": "s{s}", "agent": "a", "after_ms": {after}, "prompt": [{{"seg": "sys/a", "tokens": 64}}, {{"seg": "s{s}/{k}", "tokens": 2000}}], "output_tokens": 20}}"#
                ));
                text.push('\n');
            }
        }
        PreparedTrace::new(&Trace::parse(&text).unwrap(), 16, false)
    }

    #[test]
    fn a_target_utilisation_is_reached_by_spreading_session_starts() {
        let trace = trace();
        let mut cfg = SimConfig::new(4000);
        let at_one = lru_utilisation(&trace, &cfg, 1.0).unwrap();
        let target = at_one / 2.0;
        let args = LoadArgs {
            target_utilisation: Some(target),
            ..LoadArgs::default()
        };
        let mut probes = 0;
        let load = args.settle(&trace, &mut cfg, |_, _| probes += 1).unwrap();
        assert!(load.arrival_scale > 1.0, "half the load: starts spread ({load:?})");
        assert_eq!(load.time_scale, 1.0, "waits inside sessions unchanged");
        let u = load.lru_utilisation.unwrap();
        assert!((u - target).abs() <= TOLERANCE + 0.01, "{u} vs {target}");
        assert_eq!(cfg.arrival_scale, load.arrival_scale);
        assert!((2..=MAX_PROBES).contains(&probes));
        // Re-measured at the scale found: the same utilisation (replays are deterministic).
        assert_eq!(lru_utilisation(&trace, &cfg, cfg.arrival_scale).unwrap(), u);
    }

    #[test]
    fn scales_stretch_starts_and_waits() {
        let trace = trace();
        let cfg = SimConfig::new(4000);
        let run = |time: f64, arrival: f64| {
            let mut c = cfg.clone();
            c.time_scale = time;
            c.arrival_scale = arrival;
            Sim::new(c, &trace, &mut NativeLru).run().unwrap().makespan_us
        };
        let one = run(1.0, 1.0);
        // 29 × 200 ms of starts and 2 × 500 ms of waits per session: both stretch with time.
        let stretched = run(4.0, 1.0);
        assert!(stretched > 2.5 * one, "{one} → {stretched}");
        // Starts alone: the last session starts 4 × 5.8 s in, its two waits still 500 ms each.
        let spread = run(1.0, 4.0);
        assert!(spread > 2.5 * one, "{one} → {spread}");
        assert!(
            stretched - spread > 2.5e6,
            "the waits stretched by 3 s: {stretched} vs {spread}"
        );
        let bad = LoadArgs {
            time_scale: Some(0.0),
            ..LoadArgs::default()
        };
        assert!(bad.settle(&trace, &mut cfg.clone(), |_, _| {}).is_err());
    }
}

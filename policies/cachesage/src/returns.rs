//! How likely a waiting session is to call again before the cache turns over: return-time curves
//! learned online (every wait that ended in a call adds its duration, every wait ended by a
//! close counts as never returning: [`GapHistogram`]), one per wait kind (tool, user) and one per
//! tool, and the cache's turnover time measured from block removals.

use crate::model::gaps::GapHistogram;

/// Most tools with a return curve of their own (the least used is dropped).
pub const MAX_TOOL_CURVES: usize = 64;
/// Returns a curve must have seen before it says anything.
pub const MIN_RETURNS: u32 = 8;
/// The curves: one per wait kind (`[tool, user]`), and one per tool by its name's hash.
#[derive(Debug, Clone, Default)]
pub struct ReturnCurves {
    by_kind: [GapHistogram; 2],
    by_tool: Vec<(u64, GapHistogram)>,
}

impl ReturnCurves {
    /// A wait of `kind` (0 tool, 1 user) for `tool` (0: unnamed) ended: `Some(ms)` in a call
    /// after that long, `None` by a close.
    pub fn record(&mut self, kind: usize, tool: u64, returned_after_ms: Option<f32>) {
        let record = |c: &mut GapHistogram| match returned_after_ms {
            Some(ms) => c.record(ms),
            None => c.record_never(),
        };
        record(&mut self.by_kind[kind]);
        if tool != 0 {
            record(self.tool_mut(tool));
        }
    }

    /// The tool's own curve, created (the least used dropped from a full table) if new.
    fn tool_mut(&mut self, tool: u64) -> &mut GapHistogram {
        if let Some(i) = self.by_tool.iter().position(|(t, _)| *t == tool) {
            return &mut self.by_tool[i].1;
        }
        if self.by_tool.len() >= MAX_TOOL_CURVES {
            let least = (0..self.by_tool.len())
                .min_by_key(|&i| self.by_tool[i].1.samples())
                .expect("a full table is not empty");
            self.by_tool.swap_remove(least);
        }
        self.by_tool.push((tool, GapHistogram::default()));
        &mut self.by_tool.last_mut().expect("just pushed").1
    }

    /// The curve that times a wait: its tool's once it has seen enough waits end, else its
    /// kind's once that has; `None` when neither can tell yet.
    pub fn curve(&self, kind: usize, tool: u64) -> Option<&GapHistogram> {
        let own = self
            .by_tool
            .iter()
            .find(|(t, _)| tool != 0 && *t == tool)
            .map(|(_, c)| c);
        own.into_iter()
            .chain([&self.by_kind[kind]])
            .find(|c| c.samples() >= MIN_RETURNS)
    }
}

/// How fast the cache turns over: the time the engine takes to evict as many blocks as it
/// holds, measured from block removals.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Turnover {
    pub total_blocks: u32,
    removed: u32,
    mark_us: u64,
    measured_us: Option<u64>,
}

impl Turnover {
    pub fn removed(&mut self, now_us: u64) {
        if self.measured_us.is_none() && self.removed == 0 {
            // The first eviction: the cache is full from here on.
            self.mark_us = now_us;
        }
        self.removed += 1;
        if self.total_blocks > 0 && self.removed >= self.total_blocks {
            let took = now_us.saturating_sub(self.mark_us);
            self.measured_us = Some(self.measured_us.map_or(took, |before| (before + took) / 2));
            self.mark_us = now_us;
            self.removed = 0;
        }
    }

    /// The latest estimate (µs): a full turnover measured, else the current one extrapolated
    /// once a sixteenth of the cache has gone; `None` before.
    pub fn estimate_us(&self, now_us: u64) -> Option<u64> {
        if let Some(t) = self.measured_us {
            return Some(t);
        }
        let enough = (self.total_blocks / 16).max(1);
        (self.total_blocks > 0 && self.removed >= enough).then(|| {
            let took = now_us.saturating_sub(self.mark_us) as f64;
            (took * f64::from(self.total_blocks) / f64::from(self.removed)) as u64
        })
    }
}

#[cfg(test)]
impl ReturnCurves {
    pub fn tools(&self) -> usize {
        self.by_tool.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_curve_says_how_likely_a_return_is_given_the_wait_so_far() {
        let mut c = GapHistogram::default();
        for _ in 0..9 {
            c.record(2_000.0);
        }
        c.record_never();
        assert!((c.p_return(0.0, 10_000.0) - 0.9).abs() < 1e-6);
        assert!(c.p_return(0.0, 100.0) < 0.01, "not back within 0.1 s");
        assert_eq!(c.p_return(10_000.0, 10_000.0), 0.0, "past every return: only the never");
        let mut curves = ReturnCurves::default();
        assert!(curves.curve(0, 7).is_none(), "nothing seen: no curve");
        for _ in 0..8 {
            curves.record(0, 7, Some(100.0));
        }
        assert!(
            curves.curve(0, 7).is_some() && curves.curve(0, 8).is_some(),
            "the tool's, then the kind's"
        );
        for tool in 100..100 + MAX_TOOL_CURVES as u64 {
            curves.record(0, tool, None);
        }
        assert_eq!(curves.tools(), MAX_TOOL_CURVES, "the least used tool is dropped");
    }

    #[test]
    fn the_turnover_is_the_time_to_evict_a_cacheful() {
        let mut t = Turnover {
            total_blocks: 32,
            ..Turnover::default()
        };
        assert_eq!(t.estimate_us(0), None);
        t.removed(1_000);
        t.removed(2_000);
        assert_eq!(t.estimate_us(3_000), Some(32_000), "2 of 32 in 2 ms: 32 ms a turnover");
        for at in 0..32 {
            t.removed(10_000 + at * 1_000);
        }
        assert!(t.estimate_us(0).is_some());
    }
}

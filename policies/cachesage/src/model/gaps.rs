//! How long a session waits between two calls, as a distribution rather than a mean. Tool waits
//! are seconds, user think times are heavy-tailed (Claude Code's traces: median 12 s, p90 three
//! minutes): a mean says a session that has waited past it is about to call — an overdue one is
//! imminent — when it is more likely gone. A histogram says how likely a session that has waited
//! `w` is to come back at all, and how much longer it will take if it does.
//!
//! One histogram serves both places waits are timed: the model's, per agent and after an answer
//! or a tool call, where every wait ended in a call; and the framework's waits
//! ([`crate::returns`]), where a wait can also end in a close (`never`).
//!
//! Log₂ bins of milliseconds (the first below 64 ms, the last from ~9 h), counts halved at 4,096
//! so that the shape follows what the traffic does now. Kept in memory, not in snapshots: it is
//! relearned in a few dozen calls.

pub const BINS: usize = 21;
const FIRST_EDGE_MS: f32 = 64.0;
const HALVE_AT: u32 = 4096;
/// Samples needed before the histogram is used instead of the mean gap.
pub const TRUSTED: u32 = 16;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct GapHistogram {
    counts: [u16; BINS],
    total: u32,
    /// Waits that ended in no call (the session was closed first).
    never: u32,
}

/// The lower edge of bin `i` (ms): the upper edge of the bin before.
fn lower(i: usize) -> f32 {
    i.checked_sub(1).map_or(0.0, upper)
}

/// The upper edge of bin `i` (ms); the last bin's is taken as twice its lower edge.
fn upper(i: usize) -> f32 {
    FIRST_EDGE_MS * (1u64 << i) as f32
}

fn bin(ms: f32) -> usize {
    if ms < FIRST_EDGE_MS {
        return 0;
    }
    let i = (ms / FIRST_EDGE_MS).log2().floor() as usize + 1;
    i.min(BINS - 1)
}

impl GapHistogram {
    pub fn record(&mut self, ms: f32) {
        let i = bin(ms.max(0.0));
        self.counts[i] = self.counts[i].saturating_add(1);
        self.total += 1;
        self.halve_if_full();
    }

    pub fn record_never(&mut self) {
        self.never += 1;
        self.halve_if_full();
    }

    fn halve_if_full(&mut self) {
        if self.total + self.never >= HALVE_AT {
            self.total = 0;
            for c in &mut self.counts {
                *c /= 2;
                self.total += u32::from(*c);
            }
            self.never /= 2;
        }
    }

    /// Waits seen to their end, in a call or not.
    pub fn samples(&self) -> u32 {
        self.total + self.never
    }

    pub fn trusted(&self) -> bool {
        self.total >= TRUSTED
    }

    /// Samples above `w_ms`, counting a bin's share above `w` linearly within it.
    fn mass_above(&self, w_ms: f32) -> f32 {
        let b = bin(w_ms);
        let (lo, hi) = (lower(b), upper(b));
        let part = ((hi - w_ms) / (hi - lo)).clamp(0.0, 1.0);
        let above: u32 = self.counts[b + 1..].iter().map(|&c| u32::from(c)).sum();
        above as f32 + part * f32::from(self.counts[b])
    }

    /// P(gap > w): of the sessions that came back, the share that waited longer than `w`.
    pub fn survival(&self, w_ms: f32) -> f32 {
        if self.total == 0 {
            return 1.0;
        }
        (self.mass_above(w_ms) / self.total as f32).clamp(0.0, 1.0)
    }

    /// P(a call within `horizon_ms` more | no call in the `w_ms` waited), counting the waits that
    /// never ended in a call as still waiting.
    pub fn p_return(&self, w_ms: f32, horizon_ms: f32) -> f32 {
        let waiting = self.mass_above(w_ms);
        let still = waiting + self.never as f32;
        if still <= 0.0 {
            return 0.0;
        }
        ((waiting - self.mass_above(w_ms + horizon_ms)) / still).clamp(0.0, 1.0)
    }

    /// How much longer a session that waited `w` takes to come back, if it does (ms), as the
    /// harmonic mean of `gap − w` over the gaps longer than `w`: `1 / E[1 / (gap − w)]`, so that
    /// `p / remaining` is the expected rate of the next use. An arithmetic mean would let a long
    /// tail hide the returns that come soon (a user who answers at once, most tool calls).
    /// Each bin's samples sit at its middle (the part above `w`, for `w`'s own bin); a residual
    /// counts as at least `floor_ms`.
    pub fn remaining_ms(&self, w_ms: f32, floor_ms: f32) -> f32 {
        let b = bin(w_ms);
        let mut mass = 0.0;
        let mut inverse = 0.0;
        let (lo, hi) = (lower(b), upper(b));
        let part = ((hi - w_ms) / (hi - lo)).clamp(0.0, 1.0) * f32::from(self.counts[b]);
        if part > 0.0 {
            mass += part;
            inverse += part / ((w_ms.max(lo) + hi) / 2.0 - w_ms).max(floor_ms);
        }
        for i in b + 1..BINS {
            let c = f32::from(self.counts[i]);
            if c > 0.0 {
                mass += c;
                inverse += c / ((lower(i) + upper(i)) / 2.0 - w_ms).max(floor_ms);
            }
        }
        if inverse > 0.0 {
            mass / inverse
        } else {
            // Waited longer than anything seen: at least as long again.
            w_ms.max(FIRST_EDGE_MS)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_that_waited_past_most_gaps_is_unlikely_and_not_imminent() {
        let mut h = GapHistogram::default();
        // Tool waits of ~2 s, and a tail of user think times of ~3 min.
        for _ in 0..90 {
            h.record(2_000.0);
        }
        for _ in 0..10 {
            h.record(180_000.0);
        }
        assert!(h.trusted());
        assert!((h.survival(0.0) - 1.0).abs() < 1e-6);
        assert!((h.survival(10_000.0) - 0.1).abs() < 0.01, "{}", h.survival(10_000.0));
        assert!(h.survival(1_000_000.0) < 1e-6);
        // Just finished: the tool waits set the pace (the tail barely moves a harmonic mean);
        // having waited 10 s: minutes more, not "overdue".
        let fresh = h.remaining_ms(0.0, 50.0);
        assert!(fresh > 1_000.0 && fresh < 2_500.0, "{fresh}");
        let late = h.remaining_ms(10_000.0, 50.0);
        assert!(late > 60_000.0, "{late}");
        assert!(
            h.remaining_ms(10_000_000.0, 50.0) >= 10_000_000.0,
            "past everything seen"
        );
    }

    #[test]
    fn counts_halve_so_the_shape_follows_the_traffic() {
        let mut h = GapHistogram::default();
        for _ in 0..HALVE_AT {
            h.record(100.0);
        }
        assert!(h.samples() < HALVE_AT);
        for _ in 0..3 * HALVE_AT {
            h.record(100_000.0);
        }
        assert!(h.survival(50_000.0) > 0.9, "the old shape washed out");
    }
}

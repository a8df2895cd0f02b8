//! Maps the engine's `last-access` clock (a counter of free-queue insertions, not time) to the
//! host's clock, so that a block the model knows nothing about can be valued by how long ago it
//! was used — the estimate behind LRU — in the same units as every other estimate.
//!
//! Each `score` call pairs the newest `last-access` among its candidates with the current time;
//! older stamps are placed by interpolating between those pairs.

use std::collections::VecDeque;

/// Pairs kept. Rankings come every ~100 ms; 256 cover the last half minute or more, and a block
/// older than that is old enough that its exact age no longer changes its rank among the unknowns.
const PAIRS: usize = 256;

#[derive(Debug, Clone, Default)]
pub struct StampClock {
    /// (stamp, host µs), both increasing.
    pairs: VecDeque<(u64, u64)>,
}

impl StampClock {
    pub fn record(&mut self, stamp: u64, now_us: u64) {
        if let Some(&(s, t)) = self.pairs.back() {
            if stamp <= s || now_us < t {
                return;
            }
        }
        if self.pairs.len() == PAIRS {
            self.pairs.pop_front();
        }
        self.pairs.push_back((stamp, now_us));
    }

    /// The stamp the engine had reached at host time `t_us`: interpolated between rankings;
    /// `None` before the first ranking or before the oldest pair kept.
    pub fn stamp_at(&self, t_us: u64) -> Option<u64> {
        let &(_, first_t) = self.pairs.front()?;
        if t_us < first_t {
            return None;
        }
        let i = self.pairs.partition_point(|&(_, t)| t < t_us);
        let Some(&(s1, t1)) = self.pairs.get(i) else {
            return self.pairs.back().map(|&(s, _)| s);
        };
        if i == 0 || t1 == t_us {
            return Some(s1);
        }
        let (s0, t0) = self.pairs[i - 1];
        let f = (t_us - t0) as f64 / (t1 - t0).max(1) as f64;
        Some(s0 + ((s1 - s0) as f64 * f) as u64)
    }

    /// Host time (µs) at which `stamp` was taken: interpolated, or the oldest time known.
    pub fn time_of(&self, stamp: u64) -> Option<u64> {
        let &(first_s, first_t) = self.pairs.front()?;
        if stamp <= first_s {
            return Some(first_t);
        }
        let i = self.pairs.partition_point(|&(s, _)| s < stamp);
        let Some(&(s1, t1)) = self.pairs.get(i) else {
            return self.pairs.back().map(|&(_, t)| t);
        };
        let (s0, t0) = self.pairs[i - 1];
        let f = (stamp - s0) as f64 / (s1 - s0) as f64;
        Some(t0 + ((t1 - t0) as f64 * f) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_between_rankings_are_interpolated() {
        let mut c = StampClock::default();
        assert_eq!(c.time_of(5), None);
        c.record(100, 1_000);
        c.record(200, 3_000);
        c.record(150, 4_000); // out of order: ignored
        assert_eq!(c.time_of(150), Some(2_000));
        assert_eq!(c.time_of(10), Some(1_000));
        assert_eq!(c.time_of(500), Some(3_000));
        assert_eq!(c.stamp_at(2_000), Some(150));
        assert_eq!(c.stamp_at(500), None, "before anything recorded");
        assert_eq!(c.stamp_at(9_000), Some(200));
    }
}

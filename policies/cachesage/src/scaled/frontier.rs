//! The eviction frontier: what the engine would evict next, and how much it is worth. A warm-up of
//! `n` blocks pushes out the `n` lowest-ranked candidates, so it pays only if the anchor it brings
//! is expected to be used sooner than they are. Under load every cached block is about to be used
//! and warm-ups would only trade one miss for another (and spend prefill on it); with room to spare
//! the frontier holds dead content and warming is free.

/// Lowest scores kept from the latest ranking: more blocks than the largest anchors have.
const KEPT: usize = 2048;
/// A frontier older than this (µs) says nothing: the engine has not needed to evict since, so it
/// has room.
const STALE_US: u64 = 5_000_000;

#[derive(Debug, Clone, Default)]
pub struct Frontier {
    /// The lowest scores of the latest ranking, ascending.
    lowest: Vec<f32>,
    at_us: u64,
}

impl Frontier {
    pub fn record(&mut self, scores: &[f32], now_us: u64) {
        let mut lowest: Vec<f32> = scores.iter().map(|s| if s.is_finite() { *s } else { 0.0 }).collect();
        if lowest.len() > KEPT {
            lowest.select_nth_unstable_by(KEPT, f32::total_cmp);
            lowest.truncate(KEPT);
        }
        lowest.sort_unstable_by(f32::total_cmp);
        self.lowest = lowest;
        self.at_us = now_us;
    }

    /// Expected uses per second of the most valuable of the next `blocks` evictions.
    pub fn cost(&self, blocks: usize, now_us: u64) -> f32 {
        if blocks == 0 || self.lowest.is_empty() || now_us.saturating_sub(self.at_us) > STALE_US {
            return 0.0;
        }
        self.lowest[blocks.min(self.lowest.len()) - 1]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cost_is_the_nth_lowest_score_of_a_recent_ranking() {
        let mut f = Frontier::default();
        assert_eq!(f.cost(4, 0), 0.0);
        let scores: Vec<f32> = (0..5000).rev().map(|i| i as f32).collect();
        f.record(&scores, 1_000_000);
        assert_eq!(f.cost(1, 1_000_000), 0.0);
        assert_eq!(f.cost(10, 1_000_000), 9.0);
        assert_eq!(f.cost(100_000, 1_000_000), 2047.0);
        assert_eq!(f.cost(10, 1_000_000 + STALE_US + 1), 0.0, "stale");
    }
}

//! A shadow of the robust order over the engine's block accesses: what LRU would have hit on the
//! same requests, measured online, so that the guard can compare it with what the engine, following
//! the learned order, hit. Every access — a block stored (a miss) or touched (a hit) — is an access
//! of the shadow too; it holds as many blocks as the engine and counts a hit when an accessed block
//! is still in it, the least recently accessed going first.
//!
//! Closed sessions' blocks go first in both orders (by construction, [`crate::classes`]), so
//! whichever block the engine evicted from that class the shadow evicts too: what differs between
//! the shadow and the engine is the order of the rest alone. No block event says whose a block is;
//! the engine's rankings do, and the guard tells the shadow.
//!
//! Caches larger than 65,536 blocks are sampled by hash at 65,536 / blocks (SHARDS, Waldspurger et
//! al., FAST '15: an LRU over a hash-sampled subset of the stream, with the cache scaled by the same
//! rate, has about the full cache's hit ratio), so its memory and its cost per event stay bounded.

use crate::bounded::{Bounded, Spread};

/// Most blocks the shadow tracks.
pub const MAX_ENTRIES: usize = 65_536;

#[derive(Debug, Clone, Default)]
pub struct Shadow {
    capacity: usize,
    /// A block is sampled iff `spread(hash) & 0xffff < threshold`.
    threshold: u64,
    /// The sampled blocks it holds, the least recently accessed going first.
    lru: Bounded<(), Spread>,
}

fn spread(h: u64) -> u64 {
    let h = h.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^ (h >> 31)
}

impl Shadow {
    /// Size the shadow for an engine of `blocks` blocks (emptied when the size changes).
    pub fn resize(&mut self, blocks: usize) {
        let rate = (MAX_ENTRIES as f64 / blocks.max(1) as f64).min(1.0);
        let threshold = (rate * 65_536.0).round().max(1.0) as u64;
        let capacity = ((blocks as f64 * rate).round() as usize).max(1);
        if (threshold, capacity) != (self.threshold, self.capacity) {
            *self = Shadow {
                capacity,
                threshold,
                lru: Bounded::new(capacity),
            };
        }
    }

    fn sampled(&self, hash: u64) -> bool {
        spread(hash) & 0xffff < self.threshold
    }

    /// A request accessed `hash`: whether the shadow had it (`None` when it is not sampled).
    pub fn access(&mut self, hash: u64) -> Option<bool> {
        if self.capacity == 0 || !self.sampled(hash) {
            return None;
        }
        let hit = self.lru.contains(hash);
        self.lru.insert(hash, ());
        Some(hit)
    }

    /// The engine evicted `hash` from the class both orders put first: so does the shadow.
    pub fn evict(&mut self, hash: u64) {
        self.lru.remove(hash);
    }

    /// Forget the cache (the engine cleared it).
    pub fn clear(&mut self) {
        self.lru.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_hits_what_an_lru_of_the_same_size_would_and_evicts_what_the_engine_evicted_first() {
        let mut s = Shadow::default();
        s.resize(3);
        let hits: Vec<Option<bool>> = [1, 2, 3, 1, 4, 2, 1].iter().map(|&h| s.access(h)).collect();
        let (hit, miss) = (Some(true), Some(false));
        assert_eq!(
            hits,
            [miss, miss, miss, hit, miss, miss, hit],
            "4 pushes out 2, 2 pushes out 3"
        );
        s.evict(1);
        assert_eq!(s.access(1), miss, "the engine evicted it first: gone");
    }

    #[test]
    fn a_large_cache_is_sampled_within_the_bound() {
        let mut s = Shadow::default();
        s.resize(2_000_000);
        let sampled = (0..200_000u64).filter_map(|h| s.access(h)).count();
        let expected = 200_000.0 * MAX_ENTRIES as f64 / 2_000_000.0;
        assert!(
            (sampled as f64 - expected).abs() < 0.1 * expected,
            "{sampled} vs {expected}"
        );
        assert!(s.lru.len() <= MAX_ENTRIES);
    }
}

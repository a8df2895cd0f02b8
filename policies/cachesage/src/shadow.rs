//! A shadow LRU over the engine's block stream: what vLLM's LRU would have hit, measured online on
//! the same accesses, so the guard can compare the blocks the engine hit, following the model,
//! with the blocks LRU would have hit (the regret the guard acts on).
//!
//! Every access — a block stored (a miss) or touched (a hit) — is an access of the shadow too; the
//! shadow holds as many blocks as the engine and counts a hit when an accessed block is still in
//! it. Its order is vLLM's free queue: a block is in use from the access until a request of the
//! accessing agent finishes (the host says which agent finished, not which blocks it held), and
//! then goes to the queue's tail with that request's others, deepest first — so what the shadow
//! keeps of a prompt is a prefix, as in vLLM; the least recently freed goes first. Caches larger
//! than 65,536 blocks are sampled by hash at 65,536 / blocks (SHARDS, Waldspurger et al., FAST
//! '15: an LRU over a hash-sampled subset of the stream, with the cache scaled by the same rate,
//! has about the full cache's hit ratio), so its memory and its cost per event stay bounded.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// Most blocks the shadow tracks.
pub const MAX_ENTRIES: usize = 65_536;

/// The outcome of one access in the shadow, when the block is sampled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shadowed {
    Hit,
    Miss,
}

/// Where a sampled block is: in use by a request of `agent` (and at `position`), or free since
/// `key` (freed at host time, deepest first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    InUse { agent: u32, position: u32 },
    Free { key: (u64, u32) },
}

#[derive(Debug, Clone, Default)]
pub struct ShadowLru {
    blocks: HashMap<u64, Place>,
    /// Free blocks by key, least recently freed on top; entries whose block moved are stale.
    free: BinaryHeap<Reverse<((u64, u32), u64)>>,
    /// Blocks in use, by the agent whose request uses them.
    in_use: HashMap<u32, Vec<u64>>,
    capacity: usize,
    /// A block is sampled iff `spread(hash) & 0xffff < threshold`.
    threshold: u32,
}

fn spread(h: u64) -> u64 {
    let h = h.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^ (h >> 31)
}

impl ShadowLru {
    /// Size the shadow for an engine of `blocks` blocks (a no-op while the size is unchanged).
    pub fn resize(&mut self, blocks: usize) {
        let rate = (MAX_ENTRIES as f64 / blocks.max(1) as f64).min(1.0);
        let threshold = (rate * 65_536.0).round().max(1.0) as u32;
        let capacity = ((blocks as f64 * rate).round() as usize).max(1);
        if (threshold, capacity) != (self.threshold, self.capacity) {
            *self = ShadowLru {
                capacity,
                threshold,
                ..ShadowLru::default()
            };
        }
    }

    /// A request of `agent` accesses `hash` (at depth `position`); `None` when it is not sampled.
    pub fn access(&mut self, hash: u64, position: u32, agent: u32) -> Option<Shadowed> {
        if self.capacity == 0 || (spread(hash) & 0xffff) as u32 >= self.threshold {
            return None;
        }
        let outcome = match self.blocks.insert(hash, Place::InUse { agent, position }) {
            Some(_) => Shadowed::Hit,
            None => Shadowed::Miss,
        };
        self.in_use.entry(agent).or_default().push(hash);
        // Full: the least recently freed go (blocks in use cannot, as in vLLM).
        while self.blocks.len() > self.capacity {
            let Some(Reverse((key, h))) = self.free.pop() else {
                break;
            };
            if self.blocks.get(&h) == Some(&Place::Free { key }) {
                self.blocks.remove(&h);
            }
        }
        if self.free.len() > 4 * self.capacity + 1024 {
            let blocks = &self.blocks;
            self.free = self
                .free
                .drain()
                .filter(|Reverse((key, h))| blocks.get(h) == Some(&Place::Free { key: *key }))
                .collect();
        }
        Some(outcome)
    }

    /// A request of `agent` finished at `now_us`: the blocks its requests used go to the free
    /// queue's tail, deepest first.
    pub fn finished(&mut self, agent: u32, now_us: u64) {
        let Some(used) = self.in_use.remove(&agent) else { return };
        for h in used {
            if let Some(place) = self.blocks.get_mut(&h) {
                if let Place::InUse { agent: a, position } = *place {
                    if a == agent {
                        let key = (now_us, u32::MAX - position);
                        *place = Place::Free { key };
                        self.free.push(Reverse((key, h)));
                    }
                }
            }
        }
    }

    /// Forget everything (the engine cleared its cache).
    pub fn clear(&mut self) {
        self.blocks.clear();
        self.free.clear();
        self.in_use.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One request of agent 1 using `hashes` (depth = index) and finishing at `t`.
    fn request(s: &mut ShadowLru, hashes: &[u64], t: u64) -> Vec<Option<Shadowed>> {
        let out = hashes
            .iter()
            .enumerate()
            .map(|(i, &h)| s.access(h, i as u32 * 16, 1))
            .collect();
        s.finished(1, t);
        out
    }

    #[test]
    fn it_hits_what_an_lru_of_the_same_size_would() {
        use Shadowed::{Hit, Miss};
        let mut s = ShadowLru::default();
        s.resize(3);
        assert_eq!(request(&mut s, &[1], 10), [Some(Miss)]);
        assert_eq!(request(&mut s, &[2], 20), [Some(Miss)]);
        assert_eq!(request(&mut s, &[3], 30), [Some(Miss)]);
        assert_eq!(request(&mut s, &[1], 40), [Some(Hit)]);
        assert_eq!(request(&mut s, &[4], 50), [Some(Miss)]); // 2 was freed longest ago
        assert_eq!(request(&mut s, &[2], 60), [Some(Miss)]);
        assert_eq!(request(&mut s, &[1], 70), [Some(Hit)]);
    }

    #[test]
    fn a_prompt_loses_its_deepest_blocks_first_and_blocks_in_use_stay() {
        use Shadowed::{Hit, Miss};
        let mut s = ShadowLru::default();
        s.resize(3);
        request(&mut s, &[10, 11, 12], 100);
        // A request of agent 2 in flight holds one block; one new block of agent 1 evicts the
        // prompt's last block, not its first and not the block in use.
        assert_eq!(s.access(50, 0, 2), Some(Miss));
        assert_eq!(request(&mut s, &[99], 200), [Some(Miss)]);
        assert_eq!(s.access(50, 0, 2), Some(Hit), "in use: never evicted");
        assert_eq!(request(&mut s, &[10, 11, 12], 300), [Some(Hit), Some(Miss), Some(Miss)]);
    }

    #[test]
    fn a_large_cache_is_sampled_within_the_bound() {
        let mut s = ShadowLru::default();
        s.resize(2_000_000);
        let sampled = (0..200_000u64).filter_map(|h| s.access(h, 0, 1)).count();
        let expected = 200_000.0 * MAX_ENTRIES as f64 / 2_000_000.0;
        assert!(
            (sampled as f64 - expected).abs() < 0.1 * expected,
            "{sampled} vs {expected}"
        );
        s.finished(1, 5);
        assert!(s.blocks.len() <= MAX_ENTRIES);
    }
}

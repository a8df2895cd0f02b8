//! Bélády's offline optimum: the ceiling of every table, not a contender.

use std::collections::BinaryHeap;

use crate::block_pool::{BlockId, BlockPool, FastMap, PoolObserver};
use crate::offload::ranked::{HostBlock, HostRanker};

use super::SimPolicy;

/// Bélády's offline optimum for eviction: evict the cached free block whose next use is farthest
/// in the future.
///
/// "The future" is the order in which trace requests are admitted in a reference replay (the LRU
/// run of the same trace and cache): admission order depends on timing, which depends on hits, so
/// the exact future of *this* run is not known in advance; the reference order differs from it
/// only where hits changed the timing. A block's next use is the first not-yet-admitted request in
/// that order whose prompt contains the block's hash. Among blocks used by the same request the
/// deeper one goes first (evicting a parent would orphan its children), then the older one.
/// Later duplicates of a hash are never hit while the first exists, so they go first of all.
pub struct Belady {
    /// hash → reference indices of the requests whose prompts contain it, ascending.
    future: FastMap<Vec<u32>>,
    /// hash → how many leading entries of `future[hash]` are already admitted (a lazy cursor).
    cursor: FastMap<u32>,
    /// uid → reference index.
    ref_index: Vec<u32>,
    admitted: Vec<bool>,
    heap: BinaryHeap<Entry>,
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Entry {
    next_use: u32,
    position: u32,
    /// Older (smaller stamp) first among equals.
    age: std::cmp::Reverse<u64>,
    block: BlockId,
    epoch: u32,
}

const NEVER: u32 = u32::MAX;

impl Belady {
    /// `order`: trace request uids in the reference admission order; `prompts[uid]`: the block
    /// hashes of each request's prompt.
    pub fn new(order: &[u32], prompts: &[&[u64]]) -> Self {
        let mut ref_index = vec![NEVER; prompts.len()];
        let mut future: FastMap<Vec<u32>> = FastMap::default();
        for (i, &uid) in order.iter().enumerate() {
            ref_index[uid as usize] = i as u32;
            for &h in prompts[uid as usize] {
                let list = future.entry(h).or_default();
                // A hash appears once per prompt (the chain makes each position unique).
                if list.last() != Some(&(i as u32)) {
                    list.push(i as u32);
                }
            }
        }
        Self {
            future,
            cursor: FastMap::default(),
            ref_index,
            admitted: vec![false; order.len()],
            heap: BinaryHeap::new(),
        }
    }

    fn next_use(&mut self, hash: u64) -> u32 {
        let Some(list) = self.future.get(&hash) else {
            return NEVER;
        };
        let c = self.cursor.entry(hash).or_insert(0);
        while (*c as usize) < list.len() && self.admitted[list[*c as usize] as usize] {
            *c += 1;
        }
        list.get(*c as usize).copied().unwrap_or(NEVER)
    }

    fn effective_next_use(&mut self, pool: &BlockPool, id: BlockId) -> u32 {
        if pool.is_primary(id) {
            self.next_use(pool.block(id).hash)
        } else {
            NEVER
        }
    }

    fn push(&mut self, pool: &BlockPool, id: BlockId) {
        let next_use = self.effective_next_use(pool, id);
        let b = pool.block(id);
        self.heap.push(Entry {
            next_use,
            position: b.position,
            age: std::cmp::Reverse(b.stamp),
            block: id,
            epoch: b.epoch,
        });
    }
}

impl PoolObserver for Belady {
    fn freed(&mut self, pool: &BlockPool, block: BlockId) {
        self.push(pool, block);
    }

    fn victim(&mut self, pool: &BlockPool) -> Option<BlockId> {
        while let Some(top) = self.heap.peek() {
            let b = pool.block(top.block);
            if !(b.in_free && b.hash != 0 && b.epoch == top.epoch) {
                self.heap.pop();
                continue;
            }
            let (id, recorded) = (top.block, top.next_use);
            let now = self.effective_next_use(pool, id);
            if now != recorded {
                // Its next use moved (a request that used it was admitted without reaching it,
                // or it became the primary copy): file it again under the right key.
                self.heap.pop();
                self.push(pool, id);
                continue;
            }
            return Some(id);
        }
        None
    }

    fn consumed(&mut self, _block: BlockId) {
        self.heap.pop();
    }
}

/// Two-tier Bélády: the host pool keeps the blocks used soonest (in the reference order) and
/// stores none that no later request uses. It chooses among a window of the host pool's
/// [`BELADY_HOST_WINDOW`] least recently used blocks, not the whole pool (a whole-pool scan per
/// eviction would cost more than the replay): a ceiling for the policies, which see 256 or 4×.
impl HostRanker for Belady {
    fn host_scores(&mut self, blocks: &[HostBlock]) -> Option<Vec<f32>> {
        Some(
            blocks
                .iter()
                .map(|b| match self.next_use(b.key) {
                    NEVER => -1.0,
                    next => 1.0 / (1.0 + next as f32),
                })
                .collect(),
        )
    }

    fn host_window(&self, n: usize) -> usize {
        BELADY_HOST_WINDOW.max(n)
    }
}

/// Host-tier keys two-tier Bélády chooses among per eviction.
pub const BELADY_HOST_WINDOW: usize = 8192;

impl SimPolicy for Belady {
    fn name(&self) -> &str {
        "belady"
    }

    fn admitted(&mut self, pool: &BlockPool, uid: u32, hashes: &[u64], hit_blocks: usize) {
        let r = self.ref_index.get(uid as usize).copied().unwrap_or(NEVER);
        if r == NEVER {
            return;
        }
        self.admitted[r as usize] = true;
        // Blocks past the hit that are cached and free had this request as their next use.
        for &h in &hashes[hit_blocks.min(hashes.len())..] {
            if let Some(id) = pool.lookup(h) {
                if pool.block(id).in_free {
                    self.push(pool, id);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block_pool::BlockPool;

    /// Three one-block prompts cached and freed in order a, b, c; the reference order asks for
    /// c, then a, and never b again.
    fn pool_with(belady: &mut Belady) -> (BlockPool, [BlockId; 3]) {
        // The null block and these three: a fourth allocation must evict.
        let mut pool = BlockPool::new(4);
        let ids = pool.allocate(3, belady);
        for (i, &id) in ids.iter().enumerate() {
            pool.cache_block(id, 100 + i as u64, 0, 0, 1, 1, belady);
        }
        pool.free(ids.iter().copied(), belady);
        (pool, [ids[0], ids[1], ids[2]])
    }

    #[test]
    fn the_block_never_used_again_goes_first_then_the_one_used_last() {
        // uid 0 = [a], 1 = [b], 2 = [c]; the future (after the three first admissions): c, a.
        let prompts: Vec<&[u64]> = vec![&[100], &[101], &[102], &[102], &[100]];
        let mut belady = Belady::new(&[0, 1, 2, 3, 4], &prompts);
        // The first three requests are in: what is left of the future is c, then a.
        belady.admitted[..3].fill(true);
        let (pool, [a, b, c]) = pool_with(&mut belady);
        // LRU would take a (freed first); Bélády takes b: nothing asks for it again.
        assert_eq!(belady.victim(&pool), Some(b));
        assert_eq!(pool.oldest_cached_free(), Some(a));
        let mut pool = pool;
        let taken = pool.allocate(1, &mut belady);
        assert_eq!(taken, vec![b]);
        // Then a (next asked for by the 5th request) before c (the 4th).
        assert_eq!(belady.victim(&pool), Some(a));
        assert_ne!(belady.victim(&pool), Some(c));
    }
}

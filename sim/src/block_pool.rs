//! vLLM V1's block pool, at block granularity, rule for rule (`vllm/v1/core/block_pool.py`,
//! `kv_cache_utils.py`):
//!
//! - A fixed number of blocks; block 0 is the *null block*, taken out at start and never used.
//! - A block is *cached* once it is full and its chained hash is recorded; a hash may map to more
//!   than one block (vLLM does not de-duplicate), and a lookup returns the first one inserted.
//! - Reference counts: a block in use by a running request has `ref_cnt > 0`. At 0 it sits in the
//!   *free queue* — still cached, so still hittable, but an eviction candidate.
//! - The free queue is LRU: freed cached blocks are appended at the tail, in the order the caller
//!   gives (a finished request frees its blocks tail-first, so a prompt's last blocks go first).
//!   Freed blocks that hold nothing cached (a partial last block) are *prepended*, so they are
//!   reused before any cached block is evicted (vLLM 0.32 `free_blocks`: `prepend_n` for
//!   unhashed blocks, `append_n` for hashed ones).
//! - A prefix hit *touches* its blocks: `ref_cnt += 1`, and a block at 0 leaves the free queue.
//! - A new allocation pops from the head of the free queue; a cached block popped there is evicted
//!   (its hash dropped: `BlockRemoved`).
//!
//! A policy can take over the choice of *which cached block* is evicted ([`PoolObserver::victim`]):
//! empty free blocks still go first (they sit at the head of vLLM's queue), and when a cached block
//! must go, the policy's victim goes instead of the queue head. With the victim chosen by recency
//! that is exactly vLLM's pop order, so an LRU policy run through the host reproduces vLLM's hits.

use std::collections::{HashMap, VecDeque};

use agentrt_runtime::types::BlockOp;

/// Index of a block in the pool.
pub type BlockId = u32;

const NIL: BlockId = BlockId::MAX;

/// What the pool knows about one block.
#[derive(Debug, Clone)]
pub struct Block {
    pub ref_cnt: u32,
    /// Chained hash while cached, 0 when the block holds no cached content.
    pub hash: u64,
    pub parent: u64,
    /// Position in vLLM's free-queue order: a counter taken each time the block is appended to
    /// the free queue. Larger = freed more recently. Used as `last_access` by policies.
    pub stamp: u64,
    /// Bumped every time the block (re)enters the free queue, so a ranking taken earlier can tell
    /// that its entry for this block is stale.
    pub epoch: u32,
    /// The agent whose request stored the block, and its session — 0 once a request of another
    /// session has hit the block: shared content belongs to no one session.
    pub agent: u32,
    pub session: u64,
    /// Token offset of the block's first token in its prompt.
    pub position: u32,
    pub in_free: bool,
    prev: BlockId,
    next: BlockId,
}

/// Receives what the pool does and, optionally, chooses eviction victims.
pub trait PoolObserver {
    /// A block event (`Stored` when a full block is cached, `Touched` on a prefix hit, `Removed`
    /// on eviction).
    fn block_event(&mut self, _op: BlockOp, _block: &Block) {}

    /// A cached block entered the free queue.
    fn freed(&mut self, _pool: &BlockPool, _block: BlockId) {}

    /// The cached free block the policy would evict next, or `None` for vLLM's choice (the
    /// oldest). Must be a block with `in_free && hash != 0`; it is checked.
    fn victim(&mut self, _pool: &BlockPool) -> Option<BlockId> {
        None
    }

    /// The block returned by the last `victim` call was evicted.
    fn consumed(&mut self, _block: BlockId) {}

    /// Whether a new request of `agent` may take `blocks` blocks off the free queue now. Cache
    /// shares say no when that would cut into another tenant's guarantee; the request then waits,
    /// and requests behind it are considered (as vLLM skips a waiting request it cannot schedule
    /// for a reason of its own, e.g. a LoRA limit).
    fn may_take(&self, _pool: &BlockPool, _agent: u32, _blocks: usize) -> bool {
        true
    }
}

/// An observer that only watches: vLLM's own LRU.
pub struct VllmLru;
impl PoolObserver for VllmLru {}

/// Hash map keyed by already-random 64-bit hashes: no need for SipHash.
#[derive(Default, Clone, Copy)]
pub struct IdentityHasher(u64);
impl std::hash::Hasher for IdentityHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}
pub type FastMap<V> = HashMap<u64, V, std::hash::BuildHasherDefault<IdentityHasher>>;

/// The block pool.
pub struct BlockPool {
    blocks: Vec<Block>,
    /// hash → first block inserted with that hash (what a lookup returns).
    cached: FastMap<BlockId>,
    /// hash → later blocks with the same hash, in insertion order (rare).
    duplicates: FastMap<Vec<BlockId>>,
    /// Cached blocks in the free queue, oldest first (a doubly linked list through the blocks).
    head: BlockId,
    tail: BlockId,
    cached_free: usize,
    /// Free blocks holding nothing: the head of vLLM's free queue.
    empty_free: VecDeque<BlockId>,
    next_stamp: u64,
    pub stats: PoolStats,
}

/// Counters of what the pool did.
#[derive(Debug, Clone, Default)]
pub struct PoolStats {
    pub evictions: u64,
    pub stored: u64,
    pub touched: u64,
}

impl BlockPool {
    /// A pool of `num_blocks` blocks (vLLM's `num_gpu_blocks`, null block included).
    pub fn new(num_blocks: usize) -> Self {
        assert!(num_blocks >= 2, "a pool needs the null block and at least one more");
        let blocks = (0..num_blocks)
            .map(|i| Block {
                ref_cnt: 0,
                hash: 0,
                parent: 0,
                stamp: i as u64,
                epoch: 0,
                agent: 0,
                session: 0,
                position: 0,
                in_free: i != 0,
                prev: NIL,
                next: NIL,
            })
            .collect();
        Self {
            blocks,
            cached: FastMap::default(),
            duplicates: FastMap::default(),
            head: NIL,
            tail: NIL,
            cached_free: 0,
            // vLLM's initial free queue is every block in id order; the null block is popped first.
            empty_free: (1..num_blocks as BlockId).collect(),
            next_stamp: num_blocks as u64,
            stats: PoolStats::default(),
        }
    }

    pub fn block(&self, id: BlockId) -> &Block {
        &self.blocks[id as usize]
    }

    pub fn num_blocks(&self) -> usize {
        self.blocks.len()
    }

    /// Blocks in the free queue (cached or not): what an allocation can take.
    pub fn num_free(&self) -> usize {
        self.cached_free + self.empty_free.len()
    }

    /// Free blocks holding nothing cached: what an allocation takes before evicting anything.
    pub fn num_empty_free(&self) -> usize {
        self.empty_free.len()
    }

    /// Cached blocks in the free queue: the eviction candidates.
    pub fn num_cached_free(&self) -> usize {
        self.cached_free
    }

    /// Blocks whose hash is recorded (in use or free).
    pub fn num_cached(&self) -> usize {
        self.cached.len() + self.duplicates.values().map(Vec::len).sum::<usize>()
    }

    /// The cached free blocks, oldest first (vLLM's free-queue order restricted to cached blocks).
    pub fn cached_free_blocks(&self) -> CachedFreeIter<'_> {
        CachedFreeIter {
            pool: self,
            at: self.head,
        }
    }

    /// The oldest cached free block (vLLM's next victim among cached blocks).
    pub fn oldest_cached_free(&self) -> Option<BlockId> {
        (self.head != NIL).then_some(self.head)
    }

    /// The block a lookup of `hash` returns.
    pub fn lookup(&self, hash: u64) -> Option<BlockId> {
        self.cached.get(&hash).copied()
    }

    /// Whether `id` is the block a lookup of its hash returns (not a later duplicate).
    pub fn is_primary(&self, id: BlockId) -> bool {
        let b = &self.blocks[id as usize];
        b.hash != 0 && self.cached.get(&b.hash) == Some(&id)
    }

    /// vLLM's `find_longest_cache_hit` for full attention: the cached blocks of the longest
    /// prefix of `hashes`, at most `max_tokens / block_size` of them.
    pub fn longest_hit(&self, hashes: &[u64], max_blocks: usize) -> Vec<BlockId> {
        let mut hit = Vec::new();
        for h in hashes.iter().take(max_blocks) {
            match self.cached.get(h) {
                Some(&b) => hit.push(b),
                None => break,
            }
        }
        hit
    }

    /// How many of `blocks` are in the free queue (a hit on them takes them out of it).
    pub fn count_free(&self, blocks: &[BlockId]) -> usize {
        blocks.iter().filter(|&&b| self.blocks[b as usize].ref_cnt == 0).count()
    }

    /// `BlockPool.touch`: a prefix hit on `blocks` by a request of `agent` in `session`.
    pub fn touch(&mut self, blocks: &[BlockId], agent: u32, session: u64, obs: &mut dyn PoolObserver) {
        for &id in blocks {
            if self.blocks[id as usize].ref_cnt == 0 {
                self.unlink(id);
            }
            let b = &mut self.blocks[id as usize];
            b.ref_cnt += 1;
            if session != b.session {
                // Another session reuses it: from now on it is shared content, not one session's
                // (the host's convention for `item.session`, see wit/policy.wit).
                b.session = 0;
            }
            self.stats.touched += 1;
            // The event carries the toucher: that is who is using the block now.
            let mut shown = b.clone();
            shown.agent = agent;
            obs.block_event(BlockOp::Touched, &shown);
        }
    }

    /// `BlockPool.get_new_blocks`: take `n` blocks off the free queue, evicting cached ones.
    /// The caller checks [`BlockPool::num_free`] first.
    pub fn allocate(&mut self, n: usize, obs: &mut dyn PoolObserver) -> Vec<BlockId> {
        assert!(n <= self.num_free(), "allocate({n}) with {} free", self.num_free());
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let id = self.take_one(obs);
            let b = &mut self.blocks[id as usize];
            debug_assert!(b.ref_cnt == 0 && b.hash == 0);
            b.ref_cnt = 1;
            b.in_free = false;
            out.push(id);
        }
        out
    }

    fn take_one(&mut self, obs: &mut dyn PoolObserver) -> BlockId {
        if let Some(empty) = self.empty_free.pop_front() {
            return empty;
        }
        let victim = obs.victim(self).unwrap_or(self.head);
        let b = &self.blocks[victim as usize];
        assert!(
            b.in_free && b.hash != 0,
            "policy chose block {victim}, which is not a cached free block"
        );
        self.evict(victim, obs);
        victim
    }

    fn evict(&mut self, id: BlockId, obs: &mut dyn PoolObserver) {
        self.unlink(id);
        obs.consumed(id);
        self.stats.evictions += 1;
        obs.block_event(BlockOp::Removed, &self.blocks[id as usize]);
        self.drop_hash(id);
        self.blocks[id as usize].in_free = false;
    }

    fn drop_hash(&mut self, id: BlockId) {
        let hash = self.blocks[id as usize].hash;
        if self.cached.get(&hash) == Some(&id) {
            match self.duplicates.get_mut(&hash) {
                Some(dups) => {
                    let next = dups.remove(0);
                    if dups.is_empty() {
                        self.duplicates.remove(&hash);
                    }
                    self.cached.insert(hash, next);
                }
                None => {
                    self.cached.remove(&hash);
                }
            }
        } else if let Some(dups) = self.duplicates.get_mut(&hash) {
            dups.retain(|&d| d != id);
            if dups.is_empty() {
                self.duplicates.remove(&hash);
            }
        }
        let b = &mut self.blocks[id as usize];
        b.hash = 0;
        b.parent = 0;
    }

    /// `BlockPool.cache_full_blocks`: record hashes for blocks that just became full.
    #[allow(clippy::too_many_arguments)]
    pub fn cache_block(
        &mut self,
        id: BlockId,
        hash: u64,
        parent: u64,
        position: u32,
        agent: u32,
        session: u64,
        obs: &mut dyn PoolObserver,
    ) {
        let b = &mut self.blocks[id as usize];
        debug_assert_eq!(b.hash, 0, "caching an already cached block");
        b.hash = hash;
        b.parent = parent;
        b.position = position;
        b.agent = agent;
        b.session = session;
        self.stats.stored += 1;
        obs.block_event(BlockOp::Stored, &self.blocks[id as usize]);
        match self.cached.get(&hash) {
            None => {
                self.cached.insert(hash, id);
            }
            Some(_) => self.duplicates.entry(hash).or_default().push(id),
        }
    }

    /// `BlockPool.free_blocks`: release `ordered` (first = evicted first); blocks whose count
    /// drops to 0 are appended to the free queue in that order.
    pub fn free(&mut self, ordered: impl IntoIterator<Item = BlockId>, obs: &mut dyn PoolObserver) {
        let mut empties = Vec::new();
        for id in ordered {
            let b = &mut self.blocks[id as usize];
            debug_assert!(b.ref_cnt > 0, "freeing block {id} with ref_cnt 0");
            b.ref_cnt -= 1;
            if b.ref_cnt > 0 {
                continue;
            }
            b.epoch = b.epoch.wrapping_add(1);
            b.in_free = true;
            if b.hash == 0 {
                empties.push(id);
            } else {
                b.stamp = self.next_stamp;
                self.next_stamp += 1;
                self.link_tail(id);
                obs.freed(self, id);
            }
        }
        // `prepend_n` keeps the list's order at the head of the queue.
        for id in empties.into_iter().rev() {
            self.empty_free.push_front(id);
        }
    }

    fn link_tail(&mut self, id: BlockId) {
        let tail = self.tail;
        {
            let b = &mut self.blocks[id as usize];
            b.prev = tail;
            b.next = NIL;
        }
        if tail == NIL {
            self.head = id;
        } else {
            self.blocks[tail as usize].next = id;
        }
        self.tail = id;
        self.cached_free += 1;
    }

    fn unlink(&mut self, id: BlockId) {
        let (prev, next) = {
            let b = &self.blocks[id as usize];
            debug_assert!(
                b.in_free && b.hash != 0,
                "unlinking block {id} not in the cached free list"
            );
            (b.prev, b.next)
        };
        if prev == NIL {
            self.head = next;
        } else {
            self.blocks[prev as usize].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.blocks[next as usize].prev = prev;
        }
        let b = &mut self.blocks[id as usize];
        b.prev = NIL;
        b.next = NIL;
        b.in_free = false;
        self.cached_free -= 1;
    }
}

/// Iterates cached free blocks oldest first.
pub struct CachedFreeIter<'a> {
    pool: &'a BlockPool,
    at: BlockId,
}

impl Iterator for CachedFreeIter<'_> {
    type Item = BlockId;
    fn next(&mut self) -> Option<BlockId> {
        if self.at == NIL {
            return None;
        }
        let id = self.at;
        self.at = self.pool.blocks[id as usize].next;
        Some(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Log(Vec<(BlockOp, u64)>);
    impl PoolObserver for Log {
        fn block_event(&mut self, op: BlockOp, block: &Block) {
            self.0.push((op, block.hash));
        }
    }

    /// Allocate `hashes.len()` blocks and cache them as one chain, as a request would.
    fn store(pool: &mut BlockPool, hashes: &[u64], obs: &mut dyn PoolObserver) -> Vec<BlockId> {
        let ids = pool.allocate(hashes.len(), obs);
        for (i, (&id, &h)) in ids.iter().zip(hashes).enumerate() {
            let parent = if i == 0 { 0 } else { hashes[i - 1] };
            pool.cache_block(id, h, parent, i as u32 * 16, 1, 1, obs);
        }
        ids
    }

    #[test]
    fn null_block_is_never_handed_out() {
        let mut pool = BlockPool::new(4);
        assert_eq!(pool.num_free(), 3);
        let ids = pool.allocate(3, &mut VllmLru);
        assert_eq!(ids, vec![1, 2, 3]);
        assert_eq!(pool.num_free(), 0);
    }

    #[test]
    fn freed_blocks_go_back_tail_first_and_are_evicted_in_that_order() {
        let mut pool = BlockPool::new(5);
        let mut log = Log::default();
        let ids = store(&mut pool, &[10, 11, 12, 13], &mut log);
        // A finished request frees its blocks tail-first.
        pool.free(ids.iter().rev().copied(), &mut log);
        let order: Vec<u64> = pool.cached_free_blocks().map(|b| pool.block(b).hash).collect();
        assert_eq!(order, vec![13, 12, 11, 10]);
        // Two new blocks evict the prompt's last two blocks, not its first.
        pool.allocate(2, &mut log);
        assert_eq!(log.0[4..], [(BlockOp::Removed, 13), (BlockOp::Removed, 12)]);
        assert_eq!(pool.longest_hit(&[10, 11, 12, 13], 4).len(), 2);
    }

    #[test]
    fn a_hit_touches_blocks_out_of_the_free_queue() {
        let mut pool = BlockPool::new(4);
        let mut log = Log::default();
        let a = store(&mut pool, &[1, 2], &mut log);
        pool.free(a.iter().rev().copied(), &mut log);
        assert_eq!(pool.num_cached_free(), 2);
        let hit = pool.longest_hit(&[1, 2, 99], 3);
        assert_eq!(hit, a);
        assert_eq!(pool.count_free(&hit), 2);
        pool.touch(&hit, 2, 0, &mut log);
        assert_eq!(pool.num_cached_free(), 0);
        assert_eq!(pool.block(a[0]).ref_cnt, 1);
        // Only the empty block is left to allocate: the touched ones cannot be evicted.
        assert_eq!(pool.num_free(), 1);
        let fresh = pool.allocate(1, &mut log);
        assert!(!a.contains(&fresh[0]));
        assert!(log.0.iter().all(|(op, _)| *op != BlockOp::Removed));
        // Freed again, they re-enter at the tail with new stamps.
        let before = pool.block(a[0]).stamp;
        pool.free(hit.iter().rev().copied(), &mut log);
        assert!(pool.block(a[0]).stamp > before);
    }

    #[test]
    fn a_block_another_session_hits_becomes_shared() {
        let mut pool = BlockPool::new(4);
        let mut log = Log::default();
        let a = store(&mut pool, &[1, 2], &mut log); // stored by session 1
        pool.free(a.iter().rev().copied(), &mut log);
        pool.touch(&a[..1], 1, 1, &mut log);
        assert_eq!(
            pool.block(a[0]).session,
            1,
            "its own session's hit keeps it that session's"
        );
        pool.touch(&a[..1], 2, 7, &mut log);
        assert_eq!(pool.block(a[0]).session, 0, "session 7 reused it: shared");
        assert_eq!(
            pool.block(a[1]).session,
            1,
            "the block session 7 did not reach is unchanged"
        );
    }

    #[test]
    fn empty_free_blocks_are_reused_before_any_cached_block() {
        let mut pool = BlockPool::new(5);
        let mut obs = VllmLru;
        let a = store(&mut pool, &[1], &mut obs);
        let b = pool.allocate(2, &mut obs); // e.g. a partial tail, never cached
        assert_eq!(pool.num_free(), 1);
        pool.free(a.clone(), &mut obs);
        pool.free(b.iter().rev().copied(), &mut obs); // freed after the cached block, yet first
        let order: Vec<BlockId> = (0..4).map(|_| pool.allocate(1, &mut obs)[0]).collect();
        assert_eq!(order, vec![b[1], b[0], 4, a[0]]);
    }

    #[test]
    fn duplicates_are_kept_and_the_first_wins_lookups() {
        let mut pool = BlockPool::new(4);
        let mut obs = VllmLru;
        let x = store(&mut pool, &[7], &mut obs);
        let y = store(&mut pool, &[7], &mut obs);
        assert_eq!(pool.lookup(7), Some(x[0]));
        assert!(pool.is_primary(x[0]) && !pool.is_primary(y[0]));
        assert_eq!(pool.num_cached(), 2);
        pool.free(x.clone(), &mut obs);
        pool.free(y.clone(), &mut obs);
        pool.allocate(2, &mut obs); // evicts the empty block, then x (older)
        assert_eq!(pool.lookup(7), Some(y[0]));
    }

    struct Newest;
    impl PoolObserver for Newest {
        fn victim(&mut self, pool: &BlockPool) -> Option<BlockId> {
            pool.cached_free_blocks().last()
        }
    }

    #[test]
    fn a_policy_chooses_among_cached_blocks_once_empty_ones_are_used() {
        let mut pool = BlockPool::new(6);
        let mut obs = VllmLru;
        let a = store(&mut pool, &[1, 2, 3], &mut obs);
        pool.free(a.iter().rev().copied(), &mut obs);
        // Free queue: empty 4, empty 5, then cached 3, 2, 1.
        assert_eq!(pool.allocate(2, &mut Newest), vec![4, 5]);
        let next = pool.allocate(1, &mut Newest);
        assert_eq!(next, vec![a[0]]); // the newest cached block (hash 1), not the LRU one (hash 3)
        assert_eq!(pool.lookup(1), None);
        assert!(pool.lookup(3).is_some());
    }
}

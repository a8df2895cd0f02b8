//! The host's rule in the ranker that lets working-set admission act *with* the cache policy
//! rather than replace it: when a cached block must be evicted, a held session's blocks go before
//! any other (its next call waits in the proxy anyway, and will recompute what it lost), a
//! just-resumed session's blocks are kept until its call is admitted, and every other choice is
//! the cache policy's — so CacheSage, LRU or any component ranks beside admission unchanged.
//! `serve`'s ranker applies the same classes from [`agentrt_admission::WorkingSet::eviction_class`].

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::rc::Rc;

use agentrt_runtime::types::{BlockOp, Event, SideEffect};

use crate::block_pool::{Block, BlockId, BlockPool, PoolObserver};
use crate::offload::host_pool::TierOp;
use crate::offload::ranked::{BlockOwner, HostBlock, HostRanker};
use crate::policies::{PolicyStats, SimPolicy};

/// Which sessions' blocks go first and which are kept, as the admission stage last decided.
#[derive(Debug, Default)]
pub struct EvictionClasses {
    pub first: BTreeSet<u64>,
    pub keep: BTreeSet<u64>,
}

/// Blocks a `victim` call scans at most to find one not kept (the kept sessions' blocks at the
/// evict-first end are few: one resumed call each).
const KEEP_SCAN: usize = 4096;

/// A cache policy with the held-first rule in front of it.
pub struct HeldFirst {
    inner: Box<dyn SimPolicy>,
    classes: Rc<RefCell<EvictionClasses>>,
    /// Cached blocks each session freed, oldest first (entries go stale as blocks are reused).
    freed_by: HashMap<u64, VecDeque<BlockId>>,
    /// The last victim was the inner policy's (its `consumed` is then due).
    inner_victim: bool,
    /// Blocks evicted because their session was held.
    pub evicted_held: u64,
}

impl HeldFirst {
    pub fn new(inner: Box<dyn SimPolicy>, classes: Rc<RefCell<EvictionClasses>>) -> Self {
        Self {
            inner,
            classes,
            freed_by: HashMap::new(),
            inner_victim: false,
            evicted_held: 0,
        }
    }

    /// The oldest-freed cached free block of a held session.
    fn held_victim(&mut self, pool: &BlockPool) -> Option<BlockId> {
        let classes = self.classes.borrow();
        for session in classes.first.iter() {
            let Some(blocks) = self.freed_by.get_mut(session) else {
                continue;
            };
            while let Some(&b) = blocks.front() {
                let block = pool.block(b);
                if block.in_free && block.hash != 0 && block.session == *session {
                    return Some(b);
                }
                blocks.pop_front();
            }
        }
        None
    }
}

impl PoolObserver for HeldFirst {
    fn block_event(&mut self, op: BlockOp, block: &Block) {
        self.inner.block_event(op, block);
    }

    fn freed(&mut self, pool: &BlockPool, block: BlockId) {
        let session = pool.block(block).session;
        if session != 0 {
            self.freed_by.entry(session).or_default().push_back(block);
        }
        self.inner.freed(pool, block);
    }

    fn victim(&mut self, pool: &BlockPool) -> Option<BlockId> {
        if let Some(b) = self.held_victim(pool) {
            self.inner_victim = false;
            self.evicted_held += 1;
            return Some(b);
        }
        let choice = self.inner.victim(pool);
        self.inner_victim = true;
        let classes = self.classes.borrow();
        if classes.keep.is_empty() {
            return choice;
        }
        let candidate = choice.or_else(|| pool.oldest_cached_free());
        match candidate {
            Some(b) if classes.keep.contains(&pool.block(b).session) => {
                // A resumed session's block: the oldest block of anyone else goes instead.
                let other = pool
                    .cached_free_blocks()
                    .take(KEEP_SCAN)
                    .find(|&x| !classes.keep.contains(&pool.block(x).session));
                if other.is_some() {
                    self.inner_victim = false;
                    return other;
                }
                choice
            }
            _ => choice,
        }
    }

    fn consumed(&mut self, block: BlockId) {
        if self.inner_victim {
            self.inner.consumed(block);
        }
    }

    fn may_take(&self, pool: &BlockPool, agent: u32, blocks: usize) -> bool {
        self.inner.may_take(pool, agent, blocks)
    }
}

impl HostRanker for HeldFirst {
    fn host_scores(&mut self, blocks: &[HostBlock]) -> Option<Vec<f32>> {
        self.inner.host_scores(blocks)
    }
    fn host_window(&self, n: usize) -> usize {
        self.inner.host_window(n)
    }
}

impl SimPolicy for HeldFirst {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn host_block_event(&mut self, op: TierOp, key: u64, owner: BlockOwner) {
        self.inner.host_block_event(op, key, owner);
    }
    fn event(&mut self, event: Event) {
        self.inner.event(event);
    }
    fn admitted(&mut self, pool: &BlockPool, uid: u32, hashes: &[u64], hit_blocks: usize) {
        self.inner.admitted(pool, uid, hashes, hit_blocks);
    }
    fn begin_step(&mut self, now_us: u64) {
        self.inner.begin_step(now_us);
    }
    fn act(&mut self) -> Vec<SideEffect> {
        self.inner.act()
    }
    fn sample_state(&mut self) {
        self.inner.sample_state();
    }
    fn stats(&self) -> PolicyStats {
        self.inner.stats()
    }
}

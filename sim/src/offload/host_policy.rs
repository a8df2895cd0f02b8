//! vLLM's host-tier cache policies (`vllm/v1/kv_offload/cpu/policies/`, vLLM 0.32), rule for
//! rule: which evictable chunk `CPUOffloadingManager.prepare_store` gives up when the host pool is
//! full. The pool ([`super::host_pool`]) owns chunk states and reference counts; a policy only
//! orders the resident keys.
//!
//! - `lru` (`lru.py`): one global rank counter; a key gets a new rank when inserted and each time a
//!   request that stored or reused it finishes, the request's keys re-ranked in *reversed* prefix
//!   order (its first block ends newest, so its last block is evicted first); `evict` takes the
//!   lowest ranks among evictable keys outside `protected`, all or nothing. vLLM keeps a lazy
//!   min-heap; a map ordered by rank gives the same order.
//! - `arc` (`arc.py`): T1 (seen once) and T2 (reused) with ghost lists B1/B2 and an adaptive
//!   `target_t1_size`; inserts go to T1; a request's reuse moves a ready key T1→T2 at its finish;
//!   a store miss that hits a ghost moves the target; `evict` scans T1 while `|T1| ≥ ⌊target⌋`,
//!   else T2, else T1, each scan monotonic, and trims the ghosts to the capacity.

use std::collections::{BTreeMap, HashSet};

use crate::block_pool::{FastMap, IdentityHasher};

/// A host-tier key: the block hash agentrt uses for the GPU block it copies (one block a chunk).
pub type HostKey = u64;

/// A set of keys, hashed as the pool's maps are.
pub type KeySet = HashSet<HostKey, std::hash::BuildHasherDefault<IdentityHasher>>;

/// One chunk of the host pool (`ChunkStatus`, `policies/base.py:25-45`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    /// -1: its store is in flight (not loadable); 0: evictable; k > 0: pinned by k loads.
    pub ref_cnt: i32,
    /// The slot in the host buffer.
    pub id: u32,
}

impl Chunk {
    pub fn is_ready(&self) -> bool {
        self.ref_cnt >= 0
    }
}

/// Which of vLLM's built-in policies (`eviction_policy` in the connector's extra config).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostPolicyKind {
    Lru,
    Arc,
    /// agentrt's: vLLM's `lru` bookkeeping, its evict-first end re-ranked by the replay's policy
    /// ([`super::ranked`]).
    Ranked,
}

impl HostPolicyKind {
    pub fn parse(name: &str) -> anyhow::Result<Self> {
        match name {
            "lru" => Ok(Self::Lru),
            "arc" => Ok(Self::Arc),
            "policy" => Ok(Self::Ranked),
            other => anyhow::bail!(
                "host policy {other:?}: expected lru or arc (vLLM's built-in cache policies) or policy (the replay's \
                 policy ranks the host tier)"
            ),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Self::Lru => "lru",
            Self::Arc => "arc",
            Self::Ranked => "policy",
        }
    }
}

/// A host-tier cache policy.
pub enum HostPolicy {
    Lru(LruPolicy),
    Arc(Box<ArcPolicy>),
    /// vLLM's `lru` bookkeeping; the pool chooses victims from its evict-first end with the ranker.
    Ranked(LruPolicy),
}

impl HostPolicy {
    pub fn new(kind: HostPolicyKind, capacity: usize) -> Self {
        match kind {
            HostPolicyKind::Lru => Self::Lru(LruPolicy::default()),
            HostPolicyKind::Arc => Self::Arc(Box::new(ArcPolicy::new(capacity))),
            HostPolicyKind::Ranked => Self::Ranked(LruPolicy::default()),
        }
    }

    /// `insert`: a key allocated by `prepare_store` (write-pending, so not yet evictable).
    pub fn insert(&mut self, key: HostKey) {
        match self {
            Self::Lru(p) | Self::Ranked(p) => p.insert(key),
            Self::Arc(p) => p.insert(key),
        }
    }

    /// `remove`: a failed store's key.
    pub fn remove(&mut self, key: HostKey) {
        match self {
            Self::Lru(p) | Self::Ranked(p) => p.remove(key),
            Self::Arc(p) => p.remove(key),
        }
    }

    /// `on_store_miss`: keys a request offers that are not resident, once per request and key.
    pub fn on_store_miss(&mut self, keys: &[HostKey]) {
        match self {
            // The base class's default touches them; LRU's touch skips absent keys.
            Self::Lru(_) | Self::Ranked(_) => {}
            Self::Arc(p) => p.on_store_miss(keys),
        }
    }

    /// `on_request_finished`: the keys a request stored or reused, in prefix order.
    pub fn on_request_finished(&mut self, ordered: &[HostKey], insertion_only: &KeySet, reused: &KeySet) {
        match self {
            Self::Lru(p) | Self::Ranked(p) => p.on_request_finished(ordered),
            Self::Arc(p) => p.on_request_finished(ordered, insertion_only, reused),
        }
    }

    /// `evict`: exactly `n` evictable keys outside `protected`, or `None` and nothing changed.
    pub fn evict(&mut self, n: usize, protected: &KeySet, chunks: &FastMap<Chunk>) -> Option<Vec<HostKey>> {
        match self {
            Self::Lru(p) | Self::Ranked(p) => p.evict(n, protected, chunks),
            Self::Arc(p) => p.evict(n, protected, chunks),
        }
    }

    /// A chunk's reference count reached 0 (store completed, or its last load).
    pub fn mark_evictable(&mut self, key: HostKey) {
        if let Self::Lru(p) | Self::Ranked(p) = self {
            p.mark_evictable(key);
        }
    }

    /// A chunk's reference count left 0 (a load pinned it).
    pub fn mark_non_evictable(&mut self, key: HostKey) {
        if let Self::Lru(p) | Self::Ranked(p) = self {
            p.mark_non_evictable(key);
        }
    }
}

/// vLLM 0.32's `LRUCachePolicy`.
#[derive(Default)]
pub struct LruPolicy {
    /// Current rank of every resident key.
    ranks: FastMap<u64>,
    /// Evictable keys by current rank (ranks are unique): the heap's valid entries, in order.
    evictable: BTreeMap<u64, HostKey>,
    next_rank: u64,
}

impl LruPolicy {
    fn insert(&mut self, key: HostKey) {
        self.next_rank += 1;
        self.ranks.insert(key, self.next_rank);
    }

    fn remove(&mut self, key: HostKey) {
        if let Some(rank) = self.ranks.remove(&key) {
            self.evictable.remove(&rank);
        }
    }

    /// `_assign_new_rank` over `keys` in the order given.
    fn rerank(&mut self, keys: impl Iterator<Item = HostKey>) {
        for key in keys {
            let Some(rank) = self.ranks.get_mut(&key) else { continue };
            self.next_rank += 1;
            let old = std::mem::replace(rank, self.next_rank);
            if self.evictable.remove(&old).is_some() {
                self.evictable.insert(self.next_rank, key);
            }
        }
    }

    fn on_request_finished(&mut self, ordered: &[HostKey]) {
        self.rerank(ordered.iter().rev().copied());
    }

    fn evict(&mut self, n: usize, protected: &KeySet, chunks: &FastMap<Chunk>) -> Option<Vec<HostKey>> {
        if n == 0 {
            return Some(Vec::new());
        }
        let selected: Vec<(u64, HostKey)> = self
            .evictable
            .iter()
            .filter(|(_, key)| !protected.contains(key))
            .take(n)
            .map(|(&rank, &key)| (rank, key))
            .collect();
        if selected.len() < n {
            return None;
        }
        let mut out = Vec::with_capacity(n);
        for (rank, key) in selected {
            debug_assert_eq!(chunks.get(&key).map(|c| c.ref_cnt), Some(0));
            self.evictable.remove(&rank);
            self.ranks.remove(&key);
            out.push(key);
        }
        Some(out)
    }

    /// Up to `n` evictable keys outside `protected`, evict-first first, with their ranks.
    pub fn evict_first(&self, n: usize, protected: &KeySet) -> Vec<(u64, HostKey)> {
        self.evictable
            .iter()
            .filter(|(_, key)| !protected.contains(key))
            .take(n)
            .map(|(&rank, &key)| (rank, key))
            .collect()
    }

    /// Drop evictable `key` (a ranked eviction's victim).
    pub fn take(&mut self, key: HostKey) {
        if let Some(rank) = self.ranks.remove(&key) {
            self.evictable.remove(&rank);
        }
    }

    fn mark_evictable(&mut self, key: HostKey) {
        let rank = self.ranks[&key];
        self.evictable.insert(rank, key);
    }

    fn mark_non_evictable(&mut self, key: HostKey) {
        let rank = self.ranks[&key];
        self.evictable.remove(&rank);
    }
}

/// Python's `OrderedDict` as ARC uses it: insertion order, `move_to_end`, `popitem(last=False)`.
#[derive(Default)]
struct OrderedKeys {
    order: BTreeMap<u64, HostKey>,
    seq: FastMap<u64>,
    next: u64,
}

impl OrderedKeys {
    fn len(&self) -> usize {
        self.seq.len()
    }

    fn contains(&self, key: HostKey) -> bool {
        self.seq.contains_key(&key)
    }

    /// `d[key] = …`: appended when absent; a present key keeps its place.
    fn set(&mut self, key: HostKey) {
        if !self.seq.contains_key(&key) {
            self.push_back(key);
        }
    }

    fn push_back(&mut self, key: HostKey) {
        self.next += 1;
        self.seq.insert(key, self.next);
        self.order.insert(self.next, key);
    }

    fn pop(&mut self, key: HostKey) -> bool {
        match self.seq.remove(&key) {
            Some(s) => {
                self.order.remove(&s);
                true
            }
            None => false,
        }
    }

    fn move_to_end(&mut self, key: HostKey) {
        if self.pop(key) {
            self.push_back(key);
        }
    }

    fn pop_front(&mut self) {
        if let Some((_, key)) = self.order.pop_first() {
            self.seq.remove(&key);
        }
    }

    fn iter(&self) -> impl Iterator<Item = HostKey> + '_ {
        self.order.values().copied()
    }
}

/// vLLM 0.32's `ARCCachePolicy`.
pub struct ArcPolicy {
    capacity: usize,
    target_t1: f64,
    t1: OrderedKeys,
    t2: OrderedKeys,
    b1: OrderedKeys,
    b2: OrderedKeys,
}

impl ArcPolicy {
    fn new(capacity: usize) -> Self {
        Self {
            capacity,
            target_t1: 0.0,
            t1: OrderedKeys::default(),
            t2: OrderedKeys::default(),
            b1: OrderedKeys::default(),
            b2: OrderedKeys::default(),
        }
    }

    /// The adaptive target for T1's size (for tests and reports).
    pub fn target_t1(&self) -> f64 {
        self.target_t1
    }

    fn insert(&mut self, key: HostKey) {
        self.t1.set(key);
        self.b1.pop(key);
        self.b2.pop(key);
    }

    fn remove(&mut self, key: HostKey) {
        if !self.t1.pop(key) {
            self.t2.pop(key);
        }
    }

    /// `_adapt_to_ghost_hit` (arc.py:76-87).
    fn adapt(&mut self, key: HostKey) {
        if self.b1.contains(key) {
            let delta = (self.b2.len() as f64 / self.b1.len() as f64).max(1.0);
            self.target_t1 = (self.target_t1 + delta).min(self.capacity as f64);
            self.b1.move_to_end(key);
        } else if self.b2.contains(key) {
            let delta = (self.b1.len() as f64 / self.b2.len() as f64).max(1.0);
            self.target_t1 = (self.target_t1 - delta).max(0.0);
            self.b2.move_to_end(key);
        }
    }

    fn on_store_miss(&mut self, keys: &[HostKey]) {
        for &key in keys.iter().rev() {
            self.adapt(key);
        }
    }

    fn on_request_finished(&mut self, ordered: &[HostKey], insertion_only: &KeySet, reused: &KeySet) {
        for &key in ordered.iter().rev() {
            if insertion_only.contains(&key) {
                // A store is not a frequency hit: only recency is restored.
                if self.t1.contains(key) {
                    self.t1.move_to_end(key);
                } else if self.t2.contains(key) {
                    self.t2.move_to_end(key);
                }
                continue;
            }
            if reused.contains(&key) {
                if self.t1.pop(key) {
                    self.t2.set(key);
                } else if self.t2.contains(key) {
                    self.t2.move_to_end(key);
                }
            }
        }
    }

    /// The `n` keys ARC's `evict` takes, without changing anything (arc.py:154-194).
    fn select(&self, n: usize, evictable: &dyn Fn(&HostKey) -> bool) -> Option<Vec<(HostKey, bool)>> {
        let mut candidates: Vec<(HostKey, bool)> = Vec::with_capacity(n);
        let mut virtual_t1 = self.t1.len() as i64;
        let target = self.target_t1 as i64; // int(): truncation, the target is never negative
        let mut t1 = self.t1.iter();
        let mut t2 = self.t2.iter();
        for _ in 0..n {
            let mut candidate = None;
            if virtual_t1 >= target {
                if let Some(key) = t1.by_ref().find(|k| evictable(k)) {
                    candidate = Some((key, true));
                    virtual_t1 -= 1;
                }
            }
            if candidate.is_none() {
                candidate = t2.by_ref().find(|k| evictable(k)).map(|key| (key, false));
            }
            if candidate.is_none() {
                let key = t1.by_ref().find(|k| evictable(k))?;
                candidate = Some((key, true));
                virtual_t1 -= 1;
            }
            candidates.extend(candidate);
        }
        Some(candidates)
    }

    fn evict(&mut self, n: usize, protected: &KeySet, chunks: &FastMap<Chunk>) -> Option<Vec<HostKey>> {
        if n == 0 {
            return Some(Vec::new());
        }
        let evictable = |key: &HostKey| chunks.get(key).is_some_and(|c| c.ref_cnt == 0) && !protected.contains(key);
        let candidates = self.select(n, &evictable)?;
        let mut out = Vec::with_capacity(n);
        for (key, from_t1) in candidates {
            if from_t1 {
                self.t1.pop(key);
                self.b1.set(key);
            } else {
                self.t2.pop(key);
                self.b2.set(key);
            }
            out.push(key);
        }
        for ghost in [&mut self.b1, &mut self.b2] {
            while ghost.len() > self.capacity {
                ghost.pop_front();
            }
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(keys: &[HostKey]) -> FastMap<Chunk> {
        keys.iter()
            .enumerate()
            .map(|(i, &k)| {
                (
                    k,
                    Chunk {
                        ref_cnt: 0,
                        id: i as u32,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn lru_evicts_a_finished_requests_last_block_first() {
        let mut p = HostPolicy::new(HostPolicyKind::Lru, 8);
        for k in [1, 2, 3] {
            p.insert(k);
            p.mark_evictable(k);
        }
        p.on_request_finished(&[1, 2, 3], &KeySet::default(), &KeySet::default());
        let chunks = ready(&[1, 2, 3]);
        assert_eq!(p.evict(2, &KeySet::default(), &chunks), Some(vec![3, 2]));
    }

    #[test]
    fn evict_is_all_or_nothing_and_skips_protected_keys() {
        for kind in [HostPolicyKind::Lru, HostPolicyKind::Arc] {
            let mut p = HostPolicy::new(kind, 8);
            for k in [1, 2, 3] {
                p.insert(k);
                p.mark_evictable(k);
            }
            let chunks = ready(&[1, 2, 3]);
            let protected: KeySet = [1].into_iter().collect();
            assert_eq!(p.evict(3, &protected, &chunks), None, "{kind:?}");
            assert_eq!(p.evict(2, &protected, &chunks), Some(vec![2, 3]), "{kind:?}");
        }
    }

    #[test]
    fn arc_keeps_a_reused_prefix_through_a_flood_of_one_shot_keys() {
        let mut p = HostPolicy::new(HostPolicyKind::Arc, 4);
        let mut chunks = FastMap::default();
        for k in [1, 2] {
            p.insert(k);
            chunks.insert(k, Chunk { ref_cnt: 0, id: 0 });
        }
        let reused: KeySet = [1, 2].into_iter().collect();
        p.on_request_finished(&[1, 2], &KeySet::default(), &reused); // both to T2
        for k in [10, 11] {
            p.insert(k);
            chunks.insert(k, Chunk { ref_cnt: 0, id: 0 });
        }
        // T1 = [10, 11] ≥ target 0: T1 goes first, the reused prefix stays.
        assert_eq!(p.evict(2, &KeySet::default(), &chunks), Some(vec![10, 11]));
    }
}

//! vLLM's host-memory pool, scheduler side: `CPUOffloadingManager`
//! (`vllm/v1/kv_offload/cpu/manager.py`, vLLM 0.32), rule for rule.
//!
//! - A fixed number of chunk slots, handed out fresh first, then from a LIFO free list (97-114).
//! - `prepare_store` (251-362): offered keys already resident and ready are *reuses*, absent ones
//!   are stored; `on_store_miss` sees each absent key once per request; when the free slots do not
//!   cover the new keys it evicts exactly the shortfall through the policy, never one of the offered
//!   keys, or returns `None` (nothing changes; the connector retries next step) when the evictable
//!   chunks cannot cover it. New chunks are write-pending (`ref_cnt` −1) until `complete_store`.
//! - `lookup` (189-195) has no side effect: HIT only when ready, HIT_PENDING while the store runs.
//! - `prepare_load` / `complete_load` (204-248) pin and unpin chunks.
//! - `on_request_finished` (400-426) hands the policy every key the request stored or reused, in
//!   prefix order (by the end-token positions the connector recorded): recency is committed there.
//! - Events (`OffloadingEvent`): one `removed` per eviction batch, one `stored` per completed store.
//!
//! Not modelled: `store_threshold` (the spec passes 0: off), `reset_cache`, the tiering manager.

use super::host_policy::{Chunk, HostKey, HostPolicy, HostPolicyKind, KeySet};
use super::ranked::{self, BlockOwner, HostBlock, HostRanker};
use crate::block_pool::FastMap;

/// `LookupResult` of one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    Miss,
    /// Resident, its store still in flight.
    HitPending,
    Hit,
}

/// `PrepareStoreOutput`: the keys to copy, their slots, and the keys evicted to make room.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreOutput {
    pub keys_to_store: Vec<HostKey>,
    pub chunk_ids: Vec<u32>,
    pub evicted: Vec<HostKey>,
}

/// `OffloadingEvent` (medium CPU).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostEvent {
    pub keys: Vec<HostKey>,
    pub removed: bool,
}

/// A key and the end-token position of its chunk in the request (`set_offload_key_position`),
/// and whose block it is (agentrt's addition, for the policy's events and rankings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyAt {
    pub key: HostKey,
    pub end_token: u32,
    pub owner: BlockOwner,
}

/// What happened to a host-tier block, as agentrt's policy hears it: stored (its copy completed),
/// touched (loaded back to the GPU), removed (evicted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TierOp {
    Stored,
    Touched,
    Removed,
}

/// The keys one request observed (`_RequestCacheAccess`).
#[derive(Default)]
struct RequestAccess {
    order: Vec<HostKey>,
    seen: KeySet,
    positions: FastMap<u32>,
    inserted: KeySet,
    reused: KeySet,
    store_miss: KeySet,
}

impl RequestAccess {
    /// `_record_request_cache_access` (157-179).
    fn record(&mut self, keys: impl Iterator<Item = HostKey>, reused: &[HostKey]) {
        for key in keys {
            if self.seen.insert(key) {
                self.order.push(key);
            }
        }
        for &key in reused {
            if !self.inserted.contains(&key) {
                self.reused.insert(key);
            }
        }
    }
}

/// Counters of what the pool did.
#[derive(Debug, Clone, Default)]
pub struct HostPoolStats {
    pub stored: u64,
    pub evicted: u64,
    /// `prepare_store` calls answered `None`.
    pub refused_offers: u64,
    /// Blocks the ranking policy declined to store (negative scores).
    pub declined: u64,
}

/// The host pool.
pub struct HostPool {
    num_chunks: usize,
    num_allocated: usize,
    free_list: Vec<u32>,
    chunks: FastMap<Chunk>,
    policy: HostPolicy,
    num_evictable: usize,
    num_write_pending: usize,
    requests: FastMap<RequestAccess>,
    events: Option<Vec<HostEvent>>,
    /// Whose block each resident key is, and what happened to host-tier blocks since the policy
    /// last heard (agentrt's; vLLM's own events are `events`).
    owners: FastMap<BlockOwner>,
    tier_events: Vec<(TierOp, HostKey, BlockOwner)>,
    pub stats: HostPoolStats,
}

impl HostPool {
    /// A pool of `num_chunks` chunks under `policy`; events recorded when `events` is set.
    pub fn new(num_chunks: usize, policy: HostPolicyKind, events: bool) -> Self {
        Self {
            num_chunks,
            num_allocated: 0,
            free_list: Vec::new(),
            chunks: FastMap::default(),
            policy: HostPolicy::new(policy, num_chunks),
            num_evictable: 0,
            num_write_pending: 0,
            requests: FastMap::default(),
            events: events.then(Vec::new),
            owners: FastMap::default(),
            tier_events: Vec::new(),
            stats: HostPoolStats::default(),
        }
    }

    pub fn num_chunks(&self) -> usize {
        self.num_chunks
    }

    /// Resident chunks (ready or write-pending).
    pub fn num_resident(&self) -> usize {
        self.chunks.len()
    }

    pub fn num_evictable(&self) -> usize {
        self.num_evictable
    }

    fn num_free(&self) -> usize {
        self.free_list.len() + self.num_chunks - self.num_allocated
    }

    fn allocate(&mut self, n: usize) -> Vec<u32> {
        let fresh = n.min(self.num_chunks - self.num_allocated);
        let mut ids: Vec<u32> = (self.num_allocated..self.num_allocated + fresh)
            .map(|i| i as u32)
            .collect();
        self.num_allocated += fresh;
        for _ in fresh..n {
            ids.push(self.free_list.pop().expect("the caller evicted enough"));
        }
        ids
    }

    fn access(&mut self, req: u64, keys: &[KeyAt]) -> &mut RequestAccess {
        let state = self.requests.entry(req).or_default();
        for k in keys {
            state.positions.insert(k.key, k.end_token);
        }
        state
    }

    /// `lookup`.
    pub fn lookup(&self, key: HostKey) -> Lookup {
        match self.chunks.get(&key) {
            None => Lookup::Miss,
            Some(c) if !c.is_ready() => Lookup::HitPending,
            Some(_) => Lookup::Hit,
        }
    }

    /// `prepare_store` for request `req`; `None` = cannot store now. `ranker` chooses victims and
    /// may decline keys under [`HostPolicyKind::Ranked`]; vLLM's policies ignore it. The steps
    /// are vLLM's, in its order: sort the offered keys, record the request's access and its store
    /// misses, (agentrt's) let the ranking policy decline keys, evict the shortfall, then allocate
    /// the new keys' chunks write-pending.
    pub fn prepare_store(&mut self, req: u64, keys: &[KeyAt], ranker: &mut dyn HostRanker) -> Option<StoreOutput> {
        let (mut to_store, ready_existing) = self.sort_offered(keys);
        self.record_store_access(req, keys, &to_store, &ready_existing);
        if matches!(self.policy, HostPolicy::Ranked(_)) && !to_store.is_empty() {
            self.drop_declined(keys, &mut to_store, ranker);
        }
        if to_store.is_empty() {
            return Some(StoreOutput::default());
        }
        let shortfall = to_store.len().saturating_sub(self.num_free());
        let evicted = if shortfall > 0 {
            let Some(victims) = self.evict_shortfall(shortfall, keys, ranker) else {
                self.stats.refused_offers += 1;
                return None;
            };
            victims
        } else {
            Vec::new()
        };
        let ids = self.insert_write_pending(req, keys, &to_store);
        Some(StoreOutput {
            keys_to_store: to_store,
            chunk_ids: ids,
            evicted,
        })
    }

    /// The offered keys to store (absent) and to reuse (resident and ready); a key whose store is
    /// in flight is neither.
    fn sort_offered(&self, keys: &[KeyAt]) -> (Vec<HostKey>, Vec<HostKey>) {
        let mut to_store = Vec::new();
        let mut ready_existing = Vec::new();
        for k in keys {
            match self.chunks.get(&k.key) {
                None => to_store.push(k.key),
                Some(c) if c.is_ready() => ready_existing.push(k.key),
                Some(_) => {}
            }
        }
        (to_store, ready_existing)
    }

    /// Record the request's access to the stored and reused keys, and show the policy each absent
    /// key once per request (`on_store_miss`).
    fn record_store_access(&mut self, req: u64, keys: &[KeyAt], to_store: &[HostKey], ready_existing: &[HostKey]) {
        let state = self.access(req, keys);
        let new_misses: Vec<HostKey> = to_store
            .iter()
            .copied()
            .filter(|k| !state.store_miss.contains(k))
            .collect();
        state.store_miss.extend(new_misses.iter().copied());
        let recorded: KeySet = to_store.iter().chain(ready_existing).copied().collect();
        state.record(
            keys.iter().map(|k| k.key).filter(|k| recorded.contains(k)),
            ready_existing,
        );
        if !new_misses.is_empty() {
            self.policy.on_store_miss(&new_misses);
        }
    }

    /// agentrt's ranking policy may decline to store some of the absent keys (negative scores).
    fn drop_declined(&mut self, keys: &[KeyAt], to_store: &mut Vec<HostKey>, ranker: &mut dyn HostRanker) {
        let missing: KeySet = to_store.iter().copied().collect();
        let offered: Vec<HostBlock> = keys
            .iter()
            .filter(|k| missing.contains(&k.key))
            .map(|k| HostBlock {
                key: k.key,
                owner: k.owner,
                last_access: u64::MAX,
            })
            .collect();
        let declined: KeySet = ranked::declined(&offered, ranker).into_iter().collect();
        if !declined.is_empty() {
            self.stats.declined += declined.len() as u64;
            to_store.retain(|k| !declined.contains(k));
        }
    }

    /// Evict exactly `shortfall` chunks through the policy, never one of the offered `keys`, and
    /// free their slots; `None` (nothing changed) when the evictable chunks cannot cover it.
    fn evict_shortfall(
        &mut self,
        shortfall: usize,
        keys: &[KeyAt],
        ranker: &mut dyn HostRanker,
    ) -> Option<Vec<HostKey>> {
        if shortfall > self.num_evictable {
            return None;
        }
        let protected: KeySet = keys.iter().map(|k| k.key).collect();
        let victims = self.evict(shortfall, &protected, ranker)?;
        self.num_evictable -= victims.len();
        for key in &victims {
            let chunk = self.chunks.remove(key).expect("the policy evicts resident keys");
            self.free_list.push(chunk.id);
            let owner = self.owners.remove(key).unwrap_or_default();
            self.tier_events.push((TierOp::Removed, *key, owner));
        }
        self.stats.evicted += victims.len() as u64;
        if let Some(events) = &mut self.events {
            events.push(HostEvent {
                keys: victims.clone(),
                removed: true,
            });
        }
        Some(victims)
    }

    /// Give each key to store a slot, write-pending (`ref_cnt` −1) until `complete_store`; note
    /// whose block each pending key is, and that the request inserted them. Returns the slots.
    fn insert_write_pending(&mut self, req: u64, keys: &[KeyAt], to_store: &[HostKey]) -> Vec<u32> {
        let ids = self.allocate(to_store.len());
        for (&key, &id) in to_store.iter().zip(&ids) {
            self.chunks.insert(key, Chunk { ref_cnt: -1, id });
            self.policy.insert(key);
        }
        for k in keys
            .iter()
            .filter(|k| self.chunks.get(&k.key).is_some_and(|c| !c.is_ready()))
        {
            self.owners.entry(k.key).or_insert(k.owner);
        }
        self.num_write_pending += to_store.len();
        let state = self.requests.get_mut(&req).expect("recorded by record_store_access");
        state.inserted.extend(to_store.iter().copied());
        ids
    }

    /// `complete_store`: the copies of `keys` finished (or failed: their chunks are dropped).
    pub fn complete_store(&mut self, keys: &[HostKey], success: bool) {
        let mut stored = Vec::new();
        for &key in keys {
            let Some(chunk) = self.chunks.get_mut(&key) else {
                continue;
            };
            if chunk.is_ready() {
                continue;
            }
            self.num_write_pending -= 1;
            if success {
                chunk.ref_cnt = 0;
                self.num_evictable += 1;
                self.policy.mark_evictable(key);
                stored.push(key);
                let owner = self.owners.get(&key).copied().unwrap_or_default();
                self.tier_events.push((TierOp::Stored, key, owner));
            } else {
                let id = chunk.id;
                self.chunks.remove(&key);
                self.policy.remove(key);
                self.owners.remove(&key);
                self.free_list.push(id);
            }
        }
        self.stats.stored += stored.len() as u64;
        if let (Some(events), false) = (&mut self.events, stored.is_empty()) {
            events.push(HostEvent {
                keys: stored,
                removed: false,
            });
        }
    }

    /// `prepare_load`: pin `keys` (all ready) for a copy up to the GPU; their slots.
    pub fn prepare_load(&mut self, req: u64, keys: &[KeyAt]) -> Vec<u32> {
        let mut ids = Vec::with_capacity(keys.len());
        for k in keys {
            let chunk = self
                .chunks
                .get_mut(&k.key)
                .expect("prepare_load of a key not in the host pool");
            assert!(chunk.is_ready(), "prepare_load of a key whose store is in flight");
            if chunk.ref_cnt == 0 {
                self.policy.mark_non_evictable(k.key);
                self.num_evictable -= 1;
            }
            chunk.ref_cnt += 1;
            ids.push(chunk.id);
            let owner = self.owners.get(&k.key).copied().unwrap_or_default();
            self.tier_events.push((TierOp::Touched, k.key, owner));
        }
        let loaded: Vec<HostKey> = keys.iter().map(|k| k.key).collect();
        self.access(req, keys).record(loaded.iter().copied(), &loaded);
        ids
    }

    /// `complete_load`: unpin `keys`.
    pub fn complete_load(&mut self, keys: &[HostKey]) {
        for key in keys {
            let chunk = self
                .chunks
                .get_mut(key)
                .expect("complete_load of a key not in the host pool");
            assert!(chunk.ref_cnt > 0, "complete_load of an unpinned key");
            chunk.ref_cnt -= 1;
            if chunk.ref_cnt == 0 {
                self.num_evictable += 1;
                self.policy.mark_evictable(*key);
            }
        }
    }

    /// `on_request_finished`: commit the request's accesses to the policy.
    pub fn on_request_finished(&mut self, req: u64) {
        let Some(mut state) = self.requests.remove(&req) else {
            return;
        };
        if state.order.iter().all(|k| state.positions.contains_key(k)) {
            state.order.sort_by_key(|k| state.positions[k]);
        }
        let insertion_only: KeySet = state.inserted.difference(&state.reused).copied().collect();
        self.policy
            .on_request_finished(&state.order, &insertion_only, &state.reused);
    }

    /// `evict` through the pool's policy: vLLM's, or its `lru` order re-ranked by `ranker` within
    /// a window of the evict-first end ([`ranked`]).
    fn evict(&mut self, n: usize, protected: &KeySet, ranker: &mut dyn HostRanker) -> Option<Vec<HostKey>> {
        let HostPolicy::Ranked(lru) = &mut self.policy else {
            return self.policy.evict(n, protected, &self.chunks);
        };
        let candidates: Vec<HostBlock> = lru
            .evict_first(ranker.host_window(n), protected)
            .into_iter()
            .map(|(rank, key)| HostBlock {
                key,
                owner: self.owners.get(&key).copied().unwrap_or_default(),
                last_access: rank,
            })
            .collect();
        let victims = ranked::choose_victims(&candidates, n, ranker)?;
        for &key in &victims {
            lru.take(key);
        }
        Some(victims)
    }

    /// What happened to host-tier blocks since the last call, for agentrt's policy.
    pub fn take_tier_events(&mut self) -> Vec<(TierOp, HostKey, BlockOwner)> {
        std::mem::take(&mut self.tier_events)
    }

    /// `take_events`.
    pub fn take_events(&mut self) -> Vec<HostEvent> {
        self.events.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Evictable keys (for a policy outside the pool, e.g. an offline optimum).
    pub fn evictable_keys(&self) -> impl Iterator<Item = HostKey> + '_ {
        self.chunks.iter().filter(|(_, c)| c.ref_cnt == 0).map(|(&k, _)| k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::offload::ranked::NoRanker;

    fn at(keys: &[HostKey]) -> Vec<KeyAt> {
        keys.iter()
            .enumerate()
            .map(|(i, &key)| KeyAt {
                key,
                end_token: (i as u32 + 1) * 16,
                owner: BlockOwner::default(),
            })
            .collect()
    }

    /// What the connector does for one request whose blocks are all computed on the GPU.
    fn request(pool: &mut HostPool, req: u64, keys: &[HostKey]) -> Option<StoreOutput> {
        let out = pool.prepare_store(req, &at(keys), &mut NoRanker)?;
        pool.complete_store(&out.keys_to_store, true);
        pool.on_request_finished(req);
        Some(out)
    }

    /// The run drive_manager.py makes against vLLM's class: A and B stored, A re-offered, B
    /// looked up, then C evicts B tail-first under both policies (the lookup did not save B).
    #[test]
    fn a_lookup_does_not_refresh_and_the_oldest_request_goes_tail_first() {
        for kind in [HostPolicyKind::Lru, HostPolicyKind::Arc] {
            let mut pool = HostPool::new(6, kind, true);
            request(&mut pool, 1, &[1, 2, 3]).unwrap();
            request(&mut pool, 2, &[11, 12, 13]).unwrap();
            let again = request(&mut pool, 3, &[1, 2, 3]).unwrap();
            assert!(again.keys_to_store.is_empty(), "resident blocks are not stored twice");
            assert_eq!(pool.lookup(11), Lookup::Hit);
            let c = request(&mut pool, 4, &[21, 22, 23]).unwrap();
            assert_eq!(c.evicted, vec![13, 12, 11], "{kind:?}");
            let events = pool.take_events();
            assert_eq!(events.len(), 4);
            assert!(events[2].removed && events[2].keys == vec![13, 12, 11]);
        }
    }

    #[test]
    fn pinned_and_pending_chunks_are_not_evicted() {
        let mut pool = HostPool::new(3, HostPolicyKind::Lru, false);
        request(&mut pool, 1, &[1, 2, 3]).unwrap();
        assert_eq!(pool.prepare_load(2, &at(&[1])), vec![0]);
        let out = pool.prepare_store(3, &at(&[7, 8]), &mut NoRanker).unwrap();
        assert_eq!(out.evicted, vec![3, 2]);
        assert_eq!(pool.lookup(7), Lookup::HitPending);
        // Key 1 is pinned, 7 and 8 are write-pending: nothing can go.
        assert_eq!(pool.prepare_store(4, &at(&[9]), &mut NoRanker), None);
        pool.complete_load(&[1]);
        assert_eq!(
            pool.prepare_store(4, &at(&[9]), &mut NoRanker).unwrap().evicted,
            vec![1]
        );
    }
}

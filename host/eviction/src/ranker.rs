//! What the eviction service asks when vLLM must evict: one policy over every cached block
//! ([`PolicyHandle`]), or each tenant's own policy over its own blocks under cache shares
//! ([`SharedCache`]).
//!
//! Under shares, a block belongs to the tenant of the agent whose request stored it (agent handles
//! are unique across tenants; the proxy salts each tenant's requests, so no block is shared). Each
//! tenant's policy hears only its tenant's block events and ranks only its tenant's candidates.
//! The evict-first order interleaves the tenants' own orders by the shares rule
//! ([`agentrt_runtime::shares::victim_tenant`]): the next victim comes from the tenant furthest
//! past its limit, else above its guarantee. A tenant whose policy fails is ranked in LRU order —
//! its own blocks only. The guarantee is enforced here, at eviction; vLLM's admission does not yet
//! hold back a request that would cut into another tenant's guarantee (the simulator does).
//!
//! **The host-memory tier** ([`EngineRanker::rank_host`]). Shares divide the GPU cache; the host
//! tier is not under them: its blocks are not counted as a tenant's GPU blocks, and a host-tier
//! ranking gives each candidate to its owning tenant's policy (the default tenant's for an agent
//! no tenant named; LRU for a tenant not started). The tenants' own evict-first orders are merged
//! by recency — the candidate whose queue head is oldest goes next, every block some tenant
//! declines to store ahead of the rest — so that with every tenant on LRU the merged order is the
//! host pool's own LRU.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, RwLock};

use agentrt_runtime::packed::{op_and_agent, WORDS_PER_EVENT};
use agentrt_runtime::shares::{victim_tenant, Share, Usage};
use agentrt_runtime::types::{BlockOp, Event, Item, Tier};
use agentrt_runtime::{keep_order, lru_order, PolicyError, PolicyHandle, Ranking};

/// A ranking of host-tier candidates, with the stores the policy declines.
#[derive(Debug)]
pub struct HostRanking {
    /// Keep-most → evict-first, as for the GPU.
    pub ranking: Ranking,
    /// Indices of the items scored below zero: blocks not worth a copy in host memory
    /// (`wit/policy.wit`: `item`). Empty when the policy failed: then everything is stored.
    pub declined: Vec<usize>,
}

/// Whether a packed block event (its words) happened in the host tier: word 0's bits 4..8 hold
/// the tier's ordinal (`tier` in `wit/policy.wit`: gpu = 0, host = 1).
pub fn is_host_tier(event: &[u64]) -> bool {
    (event[0] >> 4) & 0xf == 1
}

/// Ranks the engine's eviction candidates and hears its block events.
pub trait EngineRanker: Send + Sync {
    /// For logs.
    fn label(&self) -> String;
    /// Block events the plugin reported (packed, agents already resolved to handles).
    fn observe_blocks(&self, packed: &[u64]) -> Result<(), PolicyError>;
    /// `items` in keep-most → evict-first order.
    fn rank(&self, items: &[Item]) -> Ranking;
    /// Announce events that concern no tenant in particular (agents the plugin names by string).
    fn announce(&self, events: &[Event]) -> Result<(), PolicyError>;
    /// The agents whose requests' allocations evicted blocks, one entry per block evicted (0: no
    /// request known), for accounting; no policy hears of it.
    fn count_evictors(&self, _evictors: &[u32]) {}
    /// Block events of one replica's engine (`replica`: its id; 0 = the one engine), their
    /// hashes already made the replica's own ([`crate::ReplicaView`]). A ranker that accounts
    /// per engine — [`SharedCache`]: each replica's cache is divided by the shares on its own —
    /// keeps them apart; the others hear them as any block events.
    fn observe_blocks_on(&self, _replica: u64, packed: &[u64]) -> Result<(), PolicyError> {
        self.observe_blocks(packed)
    }
    /// One replica's candidates (see [`EngineRanker::observe_blocks_on`]).
    fn rank_on(&self, _replica: u64, items: &[Item]) -> Ranking {
        self.rank(items)
    }
    /// One replica's evictors (see [`EngineRanker::observe_blocks_on`]).
    fn count_evictors_on(&self, _replica: u64, evictors: &[u32]) {
        self.count_evictors(evictors)
    }
    /// Host-tier candidates (`item.tier == host`): which resident copies to drop first and which
    /// blocks are not worth storing. A ranker that cannot tell declines nothing.
    fn rank_host(&self, items: &[Item]) -> HostRanking {
        HostRanking {
            ranking: self.rank(items),
            declined: Vec::new(),
        }
    }
    /// One replica's host-tier candidates (see [`EngineRanker::observe_blocks_on`]).
    fn rank_host_on(&self, _replica: u64, items: &[Item]) -> HostRanking {
        self.rank_host(items)
    }
}

impl EngineRanker for PolicyHandle {
    fn label(&self) -> String {
        PolicyHandle::label(self).to_string()
    }
    fn observe_blocks(&self, packed: &[u64]) -> Result<(), PolicyError> {
        PolicyHandle::observe_blocks(self, packed)
    }
    fn rank(&self, items: &[Item]) -> Ranking {
        PolicyHandle::rank(self, items)
    }
    fn announce(&self, events: &[Event]) -> Result<(), PolicyError> {
        self.observe(events)
    }
    /// The policy's scores: its order, and the host-tier items below zero. A component of the 0.2
    /// line scores host-tier items 0 ([`PolicyHandle::score`]): LRU order, everything stored.
    fn rank_host(&self, items: &[Item]) -> HostRanking {
        match self.score(items) {
            Ok(scores) => HostRanking {
                ranking: Ranking {
                    order: keep_order(items, &scores),
                    fallback: None,
                },
                declined: (0..items.len())
                    .filter(|&i| items[i].tier == Tier::Host && scores[i] < 0.0)
                    .collect(),
            },
            // Store everything, in LRU order (PolicyHandle::rank's fallback).
            Err(e) => HostRanking {
                ranking: Ranking {
                    order: lru_order(items),
                    fallback: Some(e),
                },
                declined: Vec::new(),
            },
        }
    }
}

/// Who owns an agent, and which policy ranks a tenant's blocks: what the proxy knows.
pub trait TenantDirectory: Send + Sync {
    /// The tenant agent `handle` belongs to; `None` for an agent no tenant named.
    fn tenant_of(&self, handle: u32) -> Option<Arc<str>>;
    /// The policy that ranks `tenant`'s blocks, if the tenant has started.
    fn policy_of(&self, tenant: &str) -> Option<Arc<PolicyHandle>>;
}

/// Several tenants' policies over one engine's cache, under shares.
pub struct SharedCache {
    directory: Arc<dyn TenantDirectory>,
    /// The tenant of blocks whose agent no tenant named.
    default_tenant: Arc<str>,
    /// Replaced whole when the operator reloads the settings.
    shares: RwLock<HashMap<String, Share>>,
    /// What each tenant holds in each engine's cache and has lost, from the plugins' block
    /// events, by (replica, tenant): 0 is the one engine without replicas.
    cached: Mutex<HashMap<(u64, Arc<str>), TenantCache>>,
}

/// One tenant's part of the engine's cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TenantCache {
    /// Blocks it holds now.
    pub blocks: u64,
    /// Its blocks the engine evicted so far.
    pub evicted: u64,
    /// Blocks (any tenant's) the engine evicted to make room for its requests.
    pub caused: u64,
}

impl SharedCache {
    /// Tenants' policies found through `directory`, dividing the cache by `shares` (a tenant
    /// without an entry gets [`Share::NONE`]: no guarantee, no limit); blocks of agents no tenant
    /// named belong to `default_tenant`.
    pub fn new(directory: Arc<dyn TenantDirectory>, default_tenant: &str, shares: HashMap<String, Share>) -> Self {
        Self {
            directory,
            default_tenant: default_tenant.into(),
            shares: RwLock::new(shares),
            cached: Mutex::new(HashMap::new()),
        }
    }

    fn owner(&self, agent: u32) -> Arc<str> {
        self.directory
            .tenant_of(agent)
            .unwrap_or_else(|| self.default_tenant.clone())
    }

    /// Every tenant's part of the cache, by name, as far as the block events told (with several
    /// replicas, summed over them).
    pub fn tenants(&self) -> Vec<(Arc<str>, TenantCache, Share)> {
        let mut sums: HashMap<Arc<str>, TenantCache> = HashMap::new();
        for ((_, tenant), c) in self.lock().iter() {
            let sum = sums.entry(tenant.clone()).or_default();
            sum.blocks += c.blocks;
            sum.evicted += c.evicted;
            sum.caused += c.caused;
        }
        let mut all: Vec<_> = sums
            .into_iter()
            .map(|(t, c)| {
                let share = self.share(&t);
                (t, c, share)
            })
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(u64, Arc<str>), TenantCache>> {
        self.cached.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn share(&self, tenant: &str) -> Share {
        self.shares().get(tenant).copied().unwrap_or(Share::NONE)
    }

    fn shares(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Share>> {
        self.shares.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Replace every tenant's share (a reload); the next eviction follows the new ones.
    pub fn set_shares(&self, shares: HashMap<String, Share>) {
        *self.shares.write().unwrap_or_else(|p| p.into_inner()) = shares;
    }

    /// One tenant's candidates (indices into the whole list) in its own evict-first order.
    fn evict_first(&self, tenant: &str, items: &[Item], mine: &[usize]) -> (VecDeque<usize>, Option<PolicyError>) {
        let own: Vec<Item> = mine.iter().map(|&i| items[i]).collect();
        let (order, fallback) = match self.directory.policy_of(tenant) {
            Some(policy) => {
                let ranking = policy.rank(&own);
                (ranking.order, ranking.fallback)
            }
            // A tenant without a policy (not started): vLLM's own order over its blocks.
            None => (lru_order(&own), None),
        };
        (order.into_iter().rev().map(|k| mine[k]).collect(), fallback)
    }
}

impl EngineRanker for SharedCache {
    fn label(&self) -> String {
        format!("{} tenants under shares", self.shares().len())
    }

    fn observe_blocks(&self, words: &[u64]) -> Result<(), PolicyError> {
        self.observe_blocks_on(0, words)
    }

    fn observe_blocks_on(&self, replica: u64, words: &[u64]) -> Result<(), PolicyError> {
        let mut by_tenant: HashMap<Arc<str>, Vec<u64>> = HashMap::new();
        {
            let mut cached = self.lock();
            for event in words.chunks_exact(WORDS_PER_EVENT) {
                let Some((op, agent)) = op_and_agent(event) else {
                    continue;
                };
                if is_host_tier(event) {
                    // The host tier is not divided by the shares: its copies are no tenant's GPU
                    // blocks. Its events go to the owner's policy (a clear: to every tenant's).
                    if op == BlockOp::AllCleared {
                        let mut told: Vec<Arc<str>> = cached.keys().map(|(_, t)| t.clone()).collect();
                        told.extend(self.shares().keys().map(|t| Arc::from(t.as_str())));
                        told.sort();
                        told.dedup();
                        for tenant in told {
                            by_tenant.entry(tenant).or_default().extend_from_slice(event);
                        }
                    } else {
                        by_tenant.entry(self.owner(agent)).or_default().extend_from_slice(event);
                    }
                    continue;
                }
                if op == BlockOp::AllCleared {
                    for ((_, _), tenant) in cached.iter_mut().filter(|((r, _), _)| *r == replica) {
                        tenant.blocks = 0;
                    }
                    // Every tenant's policy hears that the cache was cleared: those holding
                    // blocks, and those with a share.
                    let mut told: Vec<Arc<str>> = cached.keys().map(|(_, t)| t.clone()).collect();
                    told.extend(self.shares().keys().map(|t| Arc::from(t.as_str())));
                    told.sort();
                    told.dedup();
                    for tenant in told {
                        by_tenant.entry(tenant).or_default().extend_from_slice(event);
                    }
                    continue;
                }
                let tenant = self.owner(agent);
                let held = cached.entry((replica, tenant.clone())).or_default();
                match op {
                    BlockOp::Stored => held.blocks += 1,
                    BlockOp::Removed => {
                        held.blocks = held.blocks.saturating_sub(1);
                        held.evicted += 1;
                    }
                    BlockOp::Touched | BlockOp::AllCleared => {}
                }
                by_tenant.entry(tenant).or_default().extend_from_slice(event);
            }
        }
        let mut first_error = None;
        for (tenant, words) in by_tenant {
            if let Some(policy) = self.directory.policy_of(&tenant) {
                if let Err(e) = policy.observe_blocks(&words) {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn rank(&self, items: &[Item]) -> Ranking {
        self.rank_on(0, items)
    }

    /// Only `replica`'s own holdings count against the shares: each replica's cache is divided
    /// on its own.
    fn rank_on(&self, replica: u64, items: &[Item]) -> Ranking {
        let mut groups: HashMap<Arc<str>, Vec<usize>> = HashMap::new();
        for (i, item) in items.iter().enumerate() {
            groups.entry(self.owner(item.agent)).or_default().push(i);
        }
        let held = self.lock().clone();
        let mut tenants = Vec::new();
        let mut queues = Vec::new();
        let mut standing = Vec::new();
        let mut fallback = None;
        for (tenant, mine) in groups {
            let (queue, failed) = self.evict_first(&tenant, items, &mine);
            if failed.is_some() && fallback.is_none() {
                fallback = failed;
            }
            let evictable = queue.len() as u64;
            // The events may lag the candidates; a tenant holds at least what it can give up.
            let cached = held
                .get(&(replica, tenant.clone()))
                .map_or(0, |c| c.blocks)
                .max(evictable);
            standing.push((self.share(&tenant), Usage { cached, evictable }));
            tenants.push(tenant);
            queues.push(queue);
        }
        let mut evict_order = Vec::with_capacity(items.len());
        while let Some(t) = victim_tenant(&standing) {
            let victim = queues[t]
                .pop_front()
                .expect("a tenant with evictable blocks has a queue");
            evict_order.push(victim);
            let usage = &mut standing[t].1;
            usage.cached -= 1;
            usage.evictable -= 1;
        }
        evict_order.reverse();
        Ranking {
            order: evict_order,
            fallback,
        }
    }

    fn count_evictors(&self, evictors: &[u32]) {
        self.count_evictors_on(0, evictors)
    }

    /// No shares: each candidate goes to its owner's policy; the owners' evict-first orders are
    /// merged by recency, declined stores first (see the module's doc).
    fn rank_host(&self, items: &[Item]) -> HostRanking {
        let mut groups: HashMap<Arc<str>, Vec<usize>> = HashMap::new();
        for (i, item) in items.iter().enumerate() {
            groups.entry(self.owner(item.agent)).or_default().push(i);
        }
        let mut declined = vec![false; items.len()];
        let mut queues: Vec<VecDeque<usize>> = Vec::new();
        let mut fallback = None;
        for (tenant, mine) in groups {
            let own: Vec<Item> = mine.iter().map(|&i| items[i]).collect();
            let ranked = match self.directory.policy_of(&tenant) {
                Some(policy) => policy.rank_host(&own),
                None => HostRanking {
                    ranking: Ranking {
                        order: lru_order(&own),
                        fallback: None,
                    },
                    declined: Vec::new(),
                },
            };
            if fallback.is_none() {
                fallback = ranked.ranking.fallback;
            }
            for k in ranked.declined {
                declined[mine[k]] = true;
            }
            queues.push(ranked.ranking.order.into_iter().rev().map(|k| mine[k]).collect());
        }
        let mut evict_first = Vec::with_capacity(items.len());
        // Few tenants: a scan of the queue heads per victim is cheaper than a heap.
        while let Some(q) = (0..queues.len()).filter(|&q| !queues[q].is_empty()).min_by_key(|&q| {
            let head = queues[q][0];
            (!declined[head], items[head].last_access)
        }) {
            evict_first.push(queues[q].pop_front().expect("a non-empty queue"));
        }
        evict_first.reverse();
        HostRanking {
            ranking: Ranking {
                order: evict_first,
                fallback,
            },
            declined: (0..items.len()).filter(|&i| declined[i]).collect(),
        }
    }

    fn count_evictors_on(&self, replica: u64, evictors: &[u32]) {
        let mut cached = self.lock();
        for &agent in evictors.iter().filter(|&&a| a != 0) {
            cached.entry((replica, self.owner(agent))).or_default().caused += 1;
        }
    }

    fn announce(&self, events: &[Event]) -> Result<(), PolicyError> {
        match self.directory.policy_of(&self.default_tenant) {
            Some(policy) => policy.observe(events),
            None => Ok(()),
        }
    }
}

//! The eviction policies a replay can run: vLLM's LRU natively, Bélády's offline optimum, and any
//! Wasm policy component run through the real host ([`agentrt_runtime::PolicyHandle`]).
//!
//! Every policy is a [`SimPolicy`]: a [`PoolObserver`] (it sees block events and may choose the
//! victim when a cached block must go) plus the request-level events the runtime layer sees.

use std::collections::{BTreeMap, BinaryHeap};
use std::sync::Arc;
use std::time::Instant;

use agentrt_runtime::types::{BlockEvent, BlockOp, Event, Item, ItemKind, SideEffect, Tier};
use agentrt_runtime::{packed, PolicyComponent, PolicyEngine, PolicyError, PolicyHandle, SlotConfig};

use crate::block_pool::{Block, BlockId, BlockPool, FastMap, PoolObserver};
use crate::offload::host_pool::TierOp;
use crate::offload::ranked::{BlockOwner, HostBlock, HostRanker};

/// A policy to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicySpec {
    /// vLLM's LRU in the simulator, no Wasm.
    NativeLru,
    /// Bélády's offline optimum (needs an LRU run first).
    Belady,
    /// A component by name (found by the [`ComponentLookup`](agentrt_runtime::ComponentLookup)) or path (ending in `.wasm`), with
    /// `init` configuration.
    Wasm {
        name: String,
        component: String,
        init: Vec<(String, String)>,
    },
}

impl PolicySpec {
    pub fn name(&self) -> &str {
        match self {
            PolicySpec::NativeLru => "lru-native",
            PolicySpec::Belady => "belady",
            PolicySpec::Wasm { name, .. } => name,
        }
    }

    fn wasm(name: &str, component: &str, init: &[(&str, &str)]) -> Self {
        PolicySpec::Wasm {
            name: name.to_string(),
            component: component.to_string(),
            init: init.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        }
    }

    /// Parse a name: `lru`, `ttl`, `cachesage`, `cachesage-evict` (no warm-ups),
    /// `cachesage-classic` (the published model), `belady`, `lru-native`, or any
    /// component name the lookup finds — a Wasm one optionally followed by its `init`
    /// configuration as `:key=value` pairs (`cachesage:w=8:k=2`), so that variants of one component
    /// can be compared in one run.
    ///
    /// A component file (a name ending in `.wasm` or holding a path separator, as the lookup
    /// tells them apart) is loaded from that path and named by its file name.
    pub fn parse(name: &str) -> Self {
        let mut parts = name.split(':');
        let stem = parts.next().unwrap_or_default();
        let extra: Vec<(&str, &str)> = parts.filter_map(|kv| kv.split_once('=')).collect();
        match stem {
            "lru-native" => PolicySpec::NativeLru,
            "belady" => PolicySpec::Belady,
            "cachesage-evict" => {
                let init: Vec<_> = [("prefetch", "false")].into_iter().chain(extra).collect();
                Self::wasm(name, "cachesage", &init)
            }
            "cachesage-classic" => {
                let init: Vec<_> = [("model", "classic")].into_iter().chain(extra).collect();
                Self::wasm(name, "cachesage", &init)
            }
            other if is_component_file(other) => {
                // A file's row is named by the file (`./out/mine.wasm:k=2` → `mine:k=2`): a
                // whole path would crowd every table it appears in.
                let stem = std::path::Path::new(other)
                    .file_stem()
                    .map_or_else(|| other.to_string(), |s| s.to_string_lossy().into_owned());
                Self::wasm(&format!("{stem}{}", &name[other.len()..]), other, &extra)
            }
            other => Self::wasm(name, other, &extra),
        }
    }
}

/// What a policy cost and how big it got.
#[derive(Debug, Clone, Default)]
pub struct PolicyStats {
    /// Largest snapshot seen (bytes): the policy's learned state.
    pub state_bytes_max: usize,
    /// Events delivered (typed + block).
    pub events: u64,
    /// Wall time inside observe / observe-blocks calls.
    pub observe_ns: u64,
    pub score_calls: u64,
    pub score_items: u64,
    pub score_ns: u64,
    pub act_calls: u64,
    pub act_ns: u64,
    /// Rankings that fell back to LRU because the policy failed (or had been given up on).
    pub fallbacks: u64,
    /// Calls into the policy that failed, of any primitive (calls not made because the replay
    /// had given up on the policy are not failures: see [`Self::calls_skipped`]).
    pub failed_calls: u64,
    /// The same, by primitive and kind of failure: `"observe trap"`, `"score deadline"`, ….
    pub failures: BTreeMap<String, u64>,
    /// Fresh instances started after a failure.
    pub restarts: u64,
    /// Calls not made because the slot's breaker had opened: the replay gave up on the policy.
    pub calls_skipped: u64,
    /// Whether the replay gave up on the policy (its breaker opened).
    pub gave_up: bool,
}

impl PolicyStats {
    /// Add another slot's figures (one tenant's of several); the state is the largest one's.
    pub fn add(&mut self, other: &PolicyStats) {
        self.state_bytes_max = self.state_bytes_max.max(other.state_bytes_max);
        self.events += other.events;
        self.observe_ns += other.observe_ns;
        self.score_calls += other.score_calls;
        self.score_items += other.score_items;
        self.score_ns += other.score_ns;
        self.act_calls += other.act_calls;
        self.act_ns += other.act_ns;
        self.fallbacks += other.fallbacks;
        self.failed_calls += other.failed_calls;
        for (what, n) in &other.failures {
            *self.failures.entry(what.clone()).or_default() += n;
        }
        self.restarts += other.restarts;
        self.calls_skipped += other.calls_skipped;
        self.gave_up |= other.gave_up;
    }
}

/// A policy under replay. As a [`HostRanker`] it may rank the host tier too (`--host-policy
/// policy`); by default it ranks nothing there.
pub trait SimPolicy: PoolObserver + HostRanker {
    fn name(&self) -> &str;
    /// A host-tier block's copy was stored, loaded back to the GPU, or evicted.
    fn host_block_event(&mut self, _op: TierOp, _key: u64, _owner: BlockOwner) {}
    /// A host event (agent registered, request arrival/finish, session end), in order.
    fn event(&mut self, _event: Event) {}
    /// A trace request was admitted: `hit_blocks` of its `hashes` hit the cache.
    fn admitted(&mut self, _pool: &BlockPool, _uid: u32, _hashes: &[u64], _hit_blocks: usize) {}
    /// A scheduler step begins.
    fn begin_step(&mut self, _now_us: u64) {}
    /// Side effects to carry out between steps.
    fn act(&mut self) -> Vec<SideEffect> {
        Vec::new()
    }
    /// Measure the policy's state now (called every few hundred steps and at the end).
    fn sample_state(&mut self) {}
    fn stats(&self) -> PolicyStats {
        PolicyStats::default()
    }
}

/// vLLM's own LRU, natively: evict the head of the free queue.
#[derive(Debug, Default)]
pub struct NativeLru;

impl PoolObserver for NativeLru {}
impl HostRanker for NativeLru {}
impl SimPolicy for NativeLru {
    fn name(&self) -> &str {
        "lru-native"
    }
}

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

/// When a Wasm policy's ranking of the free queue is refreshed. A ranking is only ever taken when
/// a cached block must be evicted; it is reused for later evictions (skipping blocks touched or
/// re-freed since) until it is due again or runs out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rerank {
    /// At most once per scheduler step.
    EveryStep,
    /// At most once per this many milliseconds of simulated time — how a serving host would
    /// refresh a ranking of the whole free queue off the critical path — and only once the free
    /// queue has churned by 1 % of the candidates ranked last time (blocks evicted or freed since):
    /// a ranking is a function of the policy's state *and* of the candidates, and a long quiet
    /// spell changes neither much.
    EveryMs(f64),
}

/// Fraction of the last ranking's candidates that must have churned before a timed refresh.
const CHURN_FRACTION: f64 = 0.01;

/// Which cached free blocks a ranking scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RankWindow {
    /// Every cached free block: the cost of a ranking grows with the cache (and a cache of
    /// millions of blocks exceeds a policy's memory cap and the host's bound on scores).
    Full,
    /// The blocks the last ranking kept (at most `retained`), and the `fresh` oldest others at
    /// the evict-first end of vLLM's free queue. A ranking costs at most `retained + fresh`
    /// items whatever the cache's size; with scores that are recency it is LRU exactly (the
    /// oldest blocks are always among the candidates), and a policy can keep up to `retained`
    /// blocks against recency.
    Window { fresh: usize, retained: usize },
}

impl RankWindow {
    /// The default window: 8,192 fresh candidates and up to 32,768 kept ones, so a ranking
    /// scores at most 40,960 items — more than the headline H100 cache's 28,323 blocks, which it
    /// ranks whole.
    pub const DEFAULT: RankWindow = RankWindow::Window {
        fresh: 8192,
        retained: 32_768,
    };
}

/// A policy component run through the real host.
pub struct WasmPolicy {
    name: String,
    handle: PolicyHandle,
    block_size: u32,
    events: Vec<Event>,
    packed: Vec<u64>,
    /// Eviction order from the last ranking: (block, epoch when ranked), evict-first first.
    victims: Vec<(BlockId, u32)>,
    cursor: usize,
    rerank: Rerank,
    ranked_at_us: u64,
    now_us: u64,
    /// Blocks evicted or freed since the last ranking, and how many candidates it had.
    churn: usize,
    ranked_candidates: usize,
    stale: bool,
    items: Vec<Item>,
    stats: PolicyStats,
    /// Side effects seen, by kind, for the report.
    pub effects_seen: [u64; 7],
    /// The blocks this policy ranks, when it serves one tenant of several; `None` = all.
    owns: Option<BlockFilter>,
    window: RankWindow,
    /// Blocks the last ranking scored and kept (window ranking), with their epochs.
    retained: Vec<(BlockId, u32)>,
    /// `marks[block] == mark`: the block is in `retained` (a generation counter, not cleared).
    marks: Vec<u32>,
    mark: u32,
}

/// Which blocks a tenant's policy may see and rank.
pub type BlockFilter = Box<dyn Fn(&Block) -> bool + Send>;

/// Victims materialised per ranking (the evict-first end of the order); running out re-ranks.
const RANK_PREFIX: usize = 4096;
/// Flush a buffer of typed events once it holds this many.
const EVENT_BATCH: usize = 1024;
/// Flush packed block events once the buffer holds this many words.
const BLOCK_BATCH_WORDS: usize = 3 * 8192;

impl WasmPolicy {
    /// Start `component` in a slot of its own, configured by `config` (see
    /// [`crate::policy_limits::ReplayLimits::slot_config`]).
    pub fn start(
        engine: &PolicyEngine,
        component: Arc<PolicyComponent>,
        config: SlotConfig,
        name: &str,
        block_size: u32,
        rerank: Rerank,
    ) -> anyhow::Result<Self> {
        let handle = PolicyHandle::start(engine, component, config)
            .map_err(|e| anyhow::anyhow!("starting policy {name}: {e}"))?;
        Ok(Self {
            name: name.to_string(),
            handle,
            block_size,
            events: Vec::new(),
            packed: Vec::new(),
            victims: Vec::new(),
            cursor: 0,
            rerank,
            ranked_at_us: 0,
            now_us: 0,
            churn: 0,
            ranked_candidates: 0,
            stale: true,
            items: Vec::new(),
            stats: PolicyStats::default(),
            effects_seen: [0; 7],
            owns: None,
            window: RankWindow::DEFAULT,
            retained: Vec::new(),
            marks: Vec::new(),
            mark: 0,
        })
    }

    /// Rank every cached free block, or a window of them (default: [`RankWindow::DEFAULT`]).
    pub fn with_window(mut self, window: RankWindow) -> Self {
        self.window = window;
        self
    }

    /// Rank only the blocks `owns` accepts (one tenant's, under cache shares).
    pub fn ranking_only(mut self, owns: BlockFilter) -> Self {
        self.owns = Some(owns);
        self
    }

    pub fn handle(&self) -> &PolicyHandle {
        &self.handle
    }

    /// Count a failed call. A call not made because the replay gave up on the policy is not one:
    /// the slot's metrics count those.
    fn failed(&mut self, primitive: &str, error: &PolicyError) {
        if error.is_circuit_open() {
            return;
        }
        self.stats.failed_calls += 1;
        *self
            .stats
            .failures
            .entry(format!("{primitive} {}", error.kind()))
            .or_default() += 1;
        tracing::warn!(policy = %self.name, error = %error, "{primitive} failed");
    }

    fn flush_events(&mut self) {
        if self.events.is_empty() {
            return;
        }
        let t = Instant::now();
        if let Err(e) = self.handle.observe(&self.events) {
            self.failed("observe", &e);
        }
        self.stats.observe_ns += t.elapsed().as_nanos() as u64;
        self.stats.events += self.events.len() as u64;
        self.events.clear();
    }

    fn flush_blocks(&mut self) {
        if self.packed.is_empty() {
            return;
        }
        let t = Instant::now();
        if let Err(e) = self.handle.observe_blocks(&self.packed) {
            self.failed("observe-blocks", &e);
        }
        self.stats.observe_ns += t.elapsed().as_nanos() as u64;
        self.stats.events += (self.packed.len() / packed::WORDS_PER_EVENT) as u64;
        self.packed.clear();
    }

    /// Deliver everything pending, typed events and block events in the order they happened
    /// (the buffers never both hold events: adding to one flushes the other).
    pub fn flush(&mut self) {
        self.flush_events();
        self.flush_blocks();
    }

    fn push_item(&mut self, pool: &BlockPool, id: BlockId) {
        let b = pool.block(id);
        self.items.push(Item {
            kind: ItemKind::KvBlock,
            key: b.hash,
            agent: b.agent,
            session: b.session,
            last_access: b.stamp,
            tokens: self.block_size,
            position: b.position,
            tier: Tier::Gpu,
        });
        self.victims.push((id, b.epoch));
    }

    /// The candidates of a ranking, into `items` and `victims` (same order).
    fn gather(&mut self, pool: &BlockPool) {
        self.items.clear();
        self.victims.clear();
        let owned = |owns: &Option<BlockFilter>, b: &Block| owns.as_ref().is_none_or(|owns| owns(b));
        match self.window {
            RankWindow::Full => {
                for id in pool.cached_free_blocks() {
                    if owned(&self.owns, pool.block(id)) {
                        self.push_item(pool, id);
                    }
                }
            }
            RankWindow::Window { fresh, .. } => {
                if self.marks.len() < pool.num_blocks() {
                    self.marks.resize(pool.num_blocks(), 0);
                }
                self.mark = self.mark.wrapping_add(1).max(1);
                let retained = std::mem::take(&mut self.retained);
                for &(id, epoch) in &retained {
                    let b = pool.block(id);
                    if b.in_free && b.hash != 0 && b.epoch == epoch {
                        self.marks[id as usize] = self.mark;
                        self.push_item(pool, id);
                    }
                }
                let mut taken = 0;
                for id in pool.cached_free_blocks() {
                    if taken == fresh {
                        break;
                    }
                    if self.marks[id as usize] == self.mark || !owned(&self.owns, pool.block(id)) {
                        continue;
                    }
                    self.push_item(pool, id);
                    taken += 1;
                }
            }
        }
    }

    fn rank(&mut self, pool: &BlockPool) {
        self.flush();
        self.cursor = 0;
        self.gather(pool);
        let t = Instant::now();
        // The host's ranking rule (`agentrt_runtime::keep_order`: score descending, then
        // last_access descending, non-finite scores last), but only its evict-first end is
        // materialised: a step evicts a few hundred blocks of tens of thousands of candidates,
        // and a full sort would cost more than the policy call. The order of what is
        // materialised is exactly the tail of `PolicyHandle::rank(..).order`, reversed.
        // The host checks the count: a wrong one is an error (`bad_output`) like any other.
        let scores = match self.handle.score(&self.items) {
            Ok(scores) => scores,
            Err(e) => {
                self.failed("score", &e);
                self.stats.fallbacks += 1;
                vec![0.0; self.items.len()]
            }
        };
        let key = |s: f32| if s.is_finite() { s } else { f32::NEG_INFINITY };
        let items = &self.items;
        let evict_first = |a: &usize, b: &usize| {
            key(scores[*a])
                .total_cmp(&key(scores[*b]))
                .then_with(|| items[*a].last_access.cmp(&items[*b].last_access))
        };
        let mut order: Vec<usize> = (0..self.items.len()).collect();
        let mut kept: Vec<usize> = Vec::new();
        if order.len() > RANK_PREFIX {
            order.select_nth_unstable_by(RANK_PREFIX, evict_first);
            kept = order.split_off(RANK_PREFIX);
        }
        order.sort_unstable_by(evict_first);
        if let RankWindow::Window { retained, .. } = self.window {
            // The best `retained` of the rest are scored again next time, whatever their age.
            if kept.len() > retained {
                let keep_first = |a: &usize, b: &usize| evict_first(b, a);
                kept.select_nth_unstable_by(retained, keep_first);
                kept.truncate(retained);
            }
            self.retained = kept.iter().map(|&i| self.victims[i]).collect();
        }
        self.stats.score_ns += t.elapsed().as_nanos() as u64;
        self.stats.score_calls += 1;
        self.stats.score_items += self.items.len() as u64;
        let ranked: Vec<(BlockId, u32)> = order.iter().map(|&i| self.victims[i]).collect();
        self.victims = ranked;
        self.stale = false;
        self.ranked_at_us = self.now_us;
        self.churn = 0;
        self.ranked_candidates = self.items.len();
    }
}

impl PoolObserver for WasmPolicy {
    fn block_event(&mut self, op: BlockOp, block: &Block) {
        self.flush_events();
        packed::encode(
            &BlockEvent {
                op,
                agent: block.agent,
                block_hash: block.hash,
                parent_hash: block.parent,
                position: block.position,
                tier: Tier::Gpu,
            },
            &mut self.packed,
        );
        if self.packed.len() >= BLOCK_BATCH_WORDS {
            self.flush_blocks();
        }
    }

    fn victim(&mut self, pool: &BlockPool) -> Option<BlockId> {
        for attempt in 0..2 {
            if self.stale || self.cursor >= self.victims.len() || attempt == 1 {
                self.rank(pool);
            }
            while let Some(&(id, epoch)) = self.victims.get(self.cursor) {
                let b = pool.block(id);
                if b.in_free && b.hash != 0 && b.epoch == epoch {
                    return Some(id);
                }
                // Touched, evicted or re-freed since the ranking: skip it.
                self.cursor += 1;
            }
        }
        None
    }

    fn consumed(&mut self, _block: BlockId) {
        self.cursor += 1;
        self.churn += 1;
    }

    fn freed(&mut self, _pool: &BlockPool, _block: BlockId) {
        self.churn += 1;
    }
}

/// The host tier ranked by the component, its blocks as `tier: host` items; a failed call leaves
/// vLLM's order (counted as a fallback, like the GPU's).
impl HostRanker for WasmPolicy {
    fn host_scores(&mut self, blocks: &[HostBlock]) -> Option<Vec<f32>> {
        self.flush();
        let items: Vec<Item> = blocks
            .iter()
            .map(|b| Item {
                kind: ItemKind::KvBlock,
                key: b.key,
                agent: b.owner.agent,
                session: b.owner.session,
                last_access: b.last_access,
                tokens: self.block_size,
                position: b.owner.position,
                tier: Tier::Host,
            })
            .collect();
        let t = Instant::now();
        let scores = self.handle.score(&items);
        self.stats.score_ns += t.elapsed().as_nanos() as u64;
        self.stats.score_calls += 1;
        self.stats.score_items += items.len() as u64;
        match scores {
            Ok(scores) => Some(scores),
            Err(e) => {
                self.failed("score", &e);
                self.stats.fallbacks += 1;
                None
            }
        }
    }
}

impl SimPolicy for WasmPolicy {
    fn name(&self) -> &str {
        &self.name
    }

    fn host_block_event(&mut self, op: TierOp, key: u64, owner: BlockOwner) {
        self.flush_events();
        let op = match op {
            TierOp::Stored => BlockOp::Stored,
            TierOp::Touched => BlockOp::Touched,
            TierOp::Removed => BlockOp::Removed,
        };
        packed::encode(
            &BlockEvent {
                op,
                agent: owner.agent,
                block_hash: key,
                parent_hash: 0,
                position: owner.position,
                tier: Tier::Host,
            },
            &mut self.packed,
        );
        if self.packed.len() >= BLOCK_BATCH_WORDS {
            self.flush_blocks();
        }
    }

    fn event(&mut self, event: Event) {
        self.flush_blocks();
        self.events.push(event);
        if self.events.len() >= EVENT_BATCH {
            self.flush_events();
        }
    }

    fn begin_step(&mut self, now_us: u64) {
        self.now_us = now_us;
        let due = match self.rerank {
            Rerank::EveryStep => true,
            Rerank::EveryMs(ms) => {
                (now_us.saturating_sub(self.ranked_at_us)) as f64 >= ms * 1000.0
                    && self.churn as f64 >= CHURN_FRACTION * self.ranked_candidates as f64
            }
        };
        if due {
            self.stale = true;
        }
    }

    fn act(&mut self) -> Vec<SideEffect> {
        self.flush();
        let t = Instant::now();
        let effects = match self.handle.act() {
            Ok(effects) => effects,
            Err(e) => {
                self.failed("act", &e);
                Vec::new()
            }
        };
        self.stats.act_ns += t.elapsed().as_nanos() as u64;
        self.stats.act_calls += 1;
        for e in &effects {
            let kind = match e {
                SideEffect::WarmPrefix(_) => 0,
                SideEffect::Pin(_) => 1,
                SideEffect::Unpin(_) => 2,
                SideEffect::Preload(_) => 3,
                SideEffect::Hedge(_) => 4,
                SideEffect::SetPriority(_) => 5,
                SideEffect::Deny(_) => 6,
            };
            self.effects_seen[kind] += 1;
        }
        effects
    }

    fn sample_state(&mut self) {
        self.flush();
        match self.handle.snapshot() {
            Ok(state) => self.stats.state_bytes_max = self.stats.state_bytes_max.max(state.len()),
            Err(e) => self.failed("snapshot", &e),
        }
    }

    fn stats(&self) -> PolicyStats {
        let metrics = self.handle.metrics();
        PolicyStats {
            restarts: metrics.restarts(),
            calls_skipped: metrics.calls_skipped(),
            gave_up: metrics.circuit_opens() > 0,
            ..self.stats.clone()
        }
    }
}

/// The cache policy with policy slots beside it (`sim run --slot NAME=COMPONENT`), as a tenant of
/// `agentrt serve` runs them: every slot hears the same request events (block events and the
/// engine's eviction candidates go to the cache policy only), and their `act` answers are merged
/// by the proxy's one rule ([`agentrt_runtime::merge_side_effects`], the cache policy first, then
/// the slots in order).
pub struct Slotted {
    kv: Box<dyn SimPolicy>,
    slots: Vec<WasmPolicy>,
}

impl Slotted {
    pub fn new(kv: Box<dyn SimPolicy>, slots: Vec<WasmPolicy>) -> Self {
        Self { kv, slots }
    }
}

impl PoolObserver for Slotted {
    fn block_event(&mut self, op: BlockOp, block: &Block) {
        self.kv.block_event(op, block);
    }
    fn freed(&mut self, pool: &BlockPool, block: BlockId) {
        self.kv.freed(pool, block);
    }
    fn victim(&mut self, pool: &BlockPool) -> Option<BlockId> {
        self.kv.victim(pool)
    }
    fn consumed(&mut self, block: BlockId) {
        self.kv.consumed(block);
    }
    fn may_take(&self, pool: &BlockPool, agent: u32, blocks: usize) -> bool {
        self.kv.may_take(pool, agent, blocks)
    }
}

/// The host tier is the cache policy's, like the GPU's.
impl HostRanker for Slotted {
    fn host_scores(&mut self, blocks: &[HostBlock]) -> Option<Vec<f32>> {
        self.kv.host_scores(blocks)
    }
    fn host_window(&self, n: usize) -> usize {
        self.kv.host_window(n)
    }
}

impl SimPolicy for Slotted {
    fn name(&self) -> &str {
        self.kv.name()
    }
    fn host_block_event(&mut self, op: TierOp, key: u64, owner: BlockOwner) {
        self.kv.host_block_event(op, key, owner);
    }
    fn event(&mut self, event: Event) {
        for slot in &mut self.slots {
            slot.event(event.clone());
        }
        self.kv.event(event);
    }
    fn admitted(&mut self, pool: &BlockPool, uid: u32, hashes: &[u64], hit_blocks: usize) {
        self.kv.admitted(pool, uid, hashes, hit_blocks);
    }
    fn begin_step(&mut self, now_us: u64) {
        self.kv.begin_step(now_us);
        for slot in &mut self.slots {
            slot.begin_step(now_us);
        }
    }
    fn act(&mut self) -> Vec<SideEffect> {
        let mut answers = vec![self.kv.act()];
        answers.extend(self.slots.iter_mut().map(|s| s.act()));
        agentrt_runtime::merge_side_effects(answers)
    }
    fn sample_state(&mut self) {
        self.kv.sample_state();
        for slot in &mut self.slots {
            slot.sample_state();
        }
    }
    /// The cache policy's figures plus the slots' calls and failures (the state is the largest).
    fn stats(&self) -> PolicyStats {
        let mut stats = self.kv.stats();
        for slot in &self.slots {
            stats.add(&slot.stats());
        }
        stats
    }
}

/// `spec` names a component file rather than a component (the rule of
/// `ComponentLookup::resolve`).
fn is_component_file(spec: &str) -> bool {
    spec.ends_with(".wasm") || spec.contains('/') || spec.contains(std::path::MAIN_SEPARATOR)
}

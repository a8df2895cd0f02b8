//! A policy component run through the real host: events batched into `observe` and
//! `observe-blocks`, rankings of a bounded window of the free queue refreshed off the critical path
//! ([`Rerank`], [`RankWindow`]), failures counted and fallen back from, never hidden.

use std::sync::Arc;
use std::time::Instant;

use agentrt_runtime::types::{BlockEvent, BlockOp, Event, Item, ItemKind, SideEffect, Tier};
use agentrt_runtime::{packed, PolicyComponent, PolicyEngine, PolicyError, PolicyHandle, SlotConfig};

use crate::block_pool::{Block, BlockId, BlockPool, PoolObserver};
use crate::offload::host_pool::TierOp;
use crate::offload::ranked::{BlockOwner, HostBlock, HostRanker};

use super::{PolicyStats, SimPolicy};

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
    pub effects_seen: EffectCounts,
    /// The blocks this policy ranks, when it serves one tenant of several; `None` = all.
    owns: Option<BlockFilter>,
    window: RankWindow,
    /// Blocks the last ranking scored and kept (window ranking), with their epochs.
    retained: Vec<(BlockId, u32)>,
    /// `marks[block] == mark`: the block is in `retained` (a generation counter, not cleared).
    marks: Vec<u32>,
    mark: u32,
}

/// The side effects a policy asked for, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EffectCounts {
    pub warm_prefix: u64,
    pub pin: u64,
    pub unpin: u64,
    pub preload: u64,
    pub hedge: u64,
    pub set_priority: u64,
    pub deny: u64,
}

impl EffectCounts {
    /// Count `effect` under its kind (a new kind in the contract fails to compile here, rather
    /// than landing in a wrong slot of an array).
    pub fn count(&mut self, effect: &SideEffect) {
        let slot = match effect {
            SideEffect::WarmPrefix(_) => &mut self.warm_prefix,
            SideEffect::Pin(_) => &mut self.pin,
            SideEffect::Unpin(_) => &mut self.unpin,
            SideEffect::Preload(_) => &mut self.preload,
            SideEffect::Hedge(_) => &mut self.hedge,
            SideEffect::SetPriority(_) => &mut self.set_priority,
            SideEffect::Deny(_) => &mut self.deny,
        };
        *slot += 1;
    }
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
            effects_seen: EffectCounts::default(),
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
            self.effects_seen.count(e);
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

#[cfg(test)]
mod tests {
    use super::*;
    use agentrt_runtime::types::{Deny, SetPriority, WarmPrefix};

    #[test]
    fn side_effects_are_counted_under_their_own_names() {
        let mut counts = EffectCounts::default();
        counts.count(&SideEffect::WarmPrefix(WarmPrefix {
            agent: 1,
            anchor_hash: 2,
            probability: 0.5,
        }));
        counts.count(&SideEffect::SetPriority(SetPriority {
            session: 1,
            priority: 2,
        }));
        counts.count(&SideEffect::Deny(Deny {
            session: 1,
            reason: "budget".into(),
        }));
        assert_eq!(
            counts,
            EffectCounts {
                warm_prefix: 1,
                set_priority: 1,
                deny: 1,
                ..EffectCounts::default()
            }
        );
    }

    #[test]
    fn the_default_window_ranks_the_headline_cache_whole() {
        let RankWindow::Window { fresh, retained } = RankWindow::DEFAULT else {
            panic!("the default is a window");
        };
        assert!(fresh + retained >= crate::setting::headline_blocks());
    }
}

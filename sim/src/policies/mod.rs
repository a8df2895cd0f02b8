//! The eviction policies a replay can run: vLLM's LRU natively ([`native`]), LRU with closed
//! sessions' blocks first ([`closed_first`], the baseline for lifecycle hints), Bélády's offline
//! optimum ([`belady`]), and any Wasm policy component run through the real host ([`wasm`],
//! [`agentrt_runtime::PolicyHandle`]), alone or with policy slots beside it ([`slotted`]); which
//! one a name means is [`spec`]'s.
//!
//! Every policy is a [`SimPolicy`]: a [`PoolObserver`] (it sees block events and may choose the
//! victim when a cached block must go) plus the request-level events the runtime layer sees.

pub mod belady;
pub mod closed_first;
pub mod native;
pub mod slotted;
pub mod spec;
pub mod wasm;

use std::collections::BTreeMap;

use agentrt_runtime::types::{Event, SideEffect};

use crate::block_pool::{BlockPool, PoolObserver};
use crate::offload::host_pool::TierOp;
use crate::offload::ranked::{BlockOwner, HostRanker};

pub use belady::{Belady, BELADY_HOST_WINDOW};
pub use closed_first::ClosedFirstLru;
pub use native::NativeLru;
pub use slotted::Slotted;
pub use spec::{policies_help, PolicySpec};
pub use wasm::{BlockFilter, EffectCounts, RankWindow, Rerank, WasmPolicy};

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

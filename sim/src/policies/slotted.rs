//! The cache policy with policy slots beside it, merged as `agentrt serve` merges them.

use agentrt_runtime::types::{BlockOp, Event, SideEffect};

use crate::block_pool::{Block, BlockId, BlockPool, PoolObserver};
use crate::offload::host_pool::TierOp;
use crate::offload::ranked::{BlockOwner, HostBlock, HostRanker};

use super::wasm::WasmPolicy;
use super::{PolicyStats, SimPolicy};

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

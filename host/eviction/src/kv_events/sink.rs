//! Where decoded KV events go: packed block events (the `observe-blocks` fast path).

use agentrt_runtime::types::{BlockEvent, BlockOp};
use agentrt_runtime::PolicyHandle;

use super::decode::KvEvent;

/// Takes packed block events. Implemented by [`PolicyHandle`]; `agentrt serve` can implement it to
/// fan events out to several policy slots.
pub trait BlockSink: Send + Sync + 'static {
    /// Take `packed` (whole events, [`agentrt_runtime::packed`]'s layout); the error is a message
    /// for the log and the `policy_errors` counter, not a reason to stop subscribing.
    fn observe_blocks(&self, packed: &[u64]) -> Result<(), String>;
}

impl BlockSink for PolicyHandle {
    fn observe_blocks(&self, packed: &[u64]) -> Result<(), String> {
        PolicyHandle::observe_blocks(self, packed).map_err(|e| e.to_string())
    }
}

/// Which event kinds to forward. With the plugin running, its agent-tagged stores reach the
/// policy through the eviction service, so `agentrt serve` may turn `stored` off here to avoid
/// telling the policy twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Forward {
    /// Forward `BlockStored`.
    pub stored: bool,
    /// Forward `BlockRemoved`.
    pub removed: bool,
    /// Forward `AllBlocksCleared`.
    pub cleared: bool,
}

impl Default for Forward {
    fn default() -> Self {
        Self {
            stored: true,
            removed: true,
            cleared: true,
        }
    }
}

/// Append `event` as packed block events (one per block hash; agent unknown = 0: vLLM's events
/// carry no agent). A stored run's blocks chain: each block's parent is the previous hash. The
/// position of a stored block is known only when the run starts the prompt (no parent): then it is
/// its index × block size; otherwise 0 (unknown), since an event does not say where its run starts.
/// Returns how many block events were appended.
pub fn pack_event(event: &KvEvent, forward: Forward, out: &mut Vec<u64>) -> usize {
    if !event.is_gpu() {
        return 0;
    }
    let before = out.len();
    let mut push = |op: BlockOp, block_hash: u64, parent_hash: u64, position: u32| {
        agentrt_runtime::packed::encode(
            &BlockEvent {
                op,
                agent: 0,
                block_hash,
                parent_hash,
                position,
                tier: agentrt_runtime::types::Tier::Gpu,
            },
            out,
        )
    };
    match event {
        KvEvent::BlockStored {
            block_hashes,
            parent_block_hash,
            block_size,
            ..
        } if forward.stored => {
            let mut parent = parent_block_hash.unwrap_or(0);
            let from_start = parent_block_hash.is_none();
            for (i, hash) in block_hashes.iter().enumerate() {
                let position = if from_start {
                    (i as u32).saturating_mul(*block_size)
                } else {
                    0
                };
                push(BlockOp::Stored, *hash, parent, position);
                parent = *hash;
            }
        }
        KvEvent::BlockRemoved { block_hashes, .. } if forward.removed => {
            for hash in block_hashes {
                push(BlockOp::Removed, *hash, 0, 0);
            }
        }
        KvEvent::AllBlocksCleared if forward.cleared => push(BlockOp::AllCleared, 0, 0, 0),
        _ => {}
    }
    (out.len() - before) / agentrt_runtime::packed::WORDS_PER_EVENT
}

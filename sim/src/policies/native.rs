//! vLLM's own LRU, natively: the baseline every table measures against.

use crate::block_pool::PoolObserver;
use crate::offload::ranked::HostRanker;

use super::SimPolicy;

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

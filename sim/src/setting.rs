//! The headline setting every experiment starts from: vLLM's block size on CUDA, the cache of
//! Llama-3.1-8B on one 80 GB H100, and how often a Wasm policy's ranking is refreshed.

use crate::latency::GpuMemory;

/// Default ranking refresh period (ms of simulated time).
pub const DEFAULT_RERANK_MS: f64 = 100.0;

/// vLLM's default block size on CUDA.
pub const BLOCK_SIZE: usize = 16;

/// The headline cache: Llama-3.1-8B on one 80 GB H100 with vLLM's defaults.
pub fn headline_blocks() -> usize {
    GpuMemory::h100_80gb_llama31_8b().num_blocks()
}

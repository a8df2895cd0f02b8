//! The latency model: how long one scheduler step takes on the modelled GPU.
//!
//! A step runs one forward pass over every scheduled token (prefill chunks and one token per
//! decoding request). Its time is a roofline: the larger of compute time (linear layers + attention
//! FLOPs at a sustained fraction of peak) and memory time (weights + the KV cache read, at a
//! sustained fraction of HBM bandwidth), plus a fixed per-step overhead (scheduling, sampling,
//! launches). TTFT, per-turn latency and throughput then follow from the simulated clock, so cached
//! prefix tokens shorten steps and queues exactly as they do on the GPU.
//!
//! Constants and their sources are in docs/simulator.md; the defaults model Llama-3.1-8B-Instruct
//! in BF16 on one H100 SXM 80 GB.

use serde::Serialize;

/// Model and hardware constants.
#[derive(Debug, Clone, Serialize)]
pub struct LatencyModel {
    /// Parameters (Llama-3.1-8B: 8.03 B).
    pub params: f64,
    pub layers: u32,
    /// Query heads × head dim (4096).
    pub hidden: u32,
    /// KV bytes per token: 2 (K, V) × layers × KV heads × head dim × 2 bytes.
    pub kv_bytes_per_token: u64,
    /// Weight bytes read per step (BF16).
    pub weight_bytes: f64,
    /// Dense BF16 peak (FLOP/s).
    pub peak_flops: f64,
    /// Sustained fraction of peak for prefill-heavy steps.
    pub mfu: f64,
    /// HBM bandwidth (bytes/s).
    pub hbm_bytes_per_s: f64,
    /// Sustained fraction of bandwidth for decode.
    pub bw_efficiency: f64,
    /// Fixed cost per step (seconds).
    pub step_overhead_s: f64,
}

impl Default for LatencyModel {
    fn default() -> Self {
        Self::llama31_8b_h100()
    }
}

/// What one step computes.
#[derive(Debug, Clone, Default)]
pub struct StepWork {
    /// Tokens computed this step (prefill chunks + 1 per decoding request).
    pub tokens: u64,
    /// Σ over computed tokens of the context each attends to (for attention FLOPs).
    pub attended: f64,
    /// KV tokens read this step (the whole context of every scheduled request).
    pub kv_tokens_read: u64,
}

impl StepWork {
    /// Account for a request computing `new` tokens after `computed` already in the cache.
    pub fn add(&mut self, computed: u32, new: u32) {
        let (c, n) = (f64::from(computed), f64::from(new));
        self.tokens += u64::from(new);
        // Token i of the chunk attends to computed + i + 1 positions.
        self.attended += n * c + n * (n + 1.0) / 2.0;
        self.kv_tokens_read += u64::from(computed + new);
    }
}

impl LatencyModel {
    /// Llama-3.1-8B-Instruct (BF16) on one H100 SXM 80 GB. See docs/simulator.md.
    pub fn llama31_8b_h100() -> Self {
        Self {
            params: 8.03e9,
            layers: 32,
            hidden: 4096,
            kv_bytes_per_token: 2 * 32 * 8 * 128 * 2,
            weight_bytes: 8.03e9 * 2.0,
            peak_flops: 989e12,
            mfu: 0.6,
            hbm_bytes_per_s: 3.35e12,
            bw_efficiency: 0.8,
            step_overhead_s: 0.001,
        }
    }

    /// An engine where prefill is nearly free against a step's fixed cost: the tiny random-weight
    /// model on two CPU cores that agentrt's real-vLLM tests run (2 layers, hidden 128; a
    /// 500-token prompt answered in 11–12 ms uncached and 6.5–10 ms from the prefix cache,
    /// docs/background.md) — about 6 µs per prefilled token on a ~6 ms step. Recomputing an
    /// evicted context costs almost nothing there, so holding sessions back to keep their cache
    /// can only lose throughput: the setting `sim knee --latency prefill-free` checks that
    /// admission stays out of the way.
    pub fn prefill_nearly_free() -> Self {
        Self {
            params: 3.0e6,
            layers: 2,
            hidden: 128,
            kv_bytes_per_token: 2 * 2 * 4 * 32 * 4,
            weight_bytes: 12.0e6,
            peak_flops: 1.0e12,
            mfu: 1.0,
            hbm_bytes_per_s: 2.0e10,
            bw_efficiency: 1.0,
            step_overhead_s: 0.006,
        }
    }

    /// Seconds the step takes.
    pub fn step_seconds(&self, work: &StepWork) -> f64 {
        if work.tokens == 0 {
            return 0.0;
        }
        let linear = 2.0 * self.params * work.tokens as f64;
        // QK^T and PV: 2 matmuls × 2 FLOP per multiply-add × hidden per layer per attended pair.
        let attention = 4.0 * f64::from(self.layers) * f64::from(self.hidden) * work.attended;
        let compute = (linear + attention) / (self.peak_flops * self.mfu);
        let bytes = self.weight_bytes + (work.kv_tokens_read * self.kv_bytes_per_token) as f64;
        let memory = bytes / (self.hbm_bytes_per_s * self.bw_efficiency);
        self.step_overhead_s + compute.max(memory)
    }
}

/// The KV-cache size of the headline setting: Llama-3.1-8B on one 80 GB H100 with vLLM's defaults.
#[derive(Debug, Clone, Serialize)]
pub struct GpuMemory {
    /// Device memory of an H100 80 GB as the driver reports it (nvidia-smi: 81559 MiB).
    pub device_bytes: f64,
    /// vLLM's `gpu_memory_utilization` default (0.32: 0.92).
    pub utilization: f64,
    pub weight_bytes: f64,
    /// Peak activations + CUDA graphs + non-torch allocations measured during vLLM's profiling run.
    pub runtime_overhead_bytes: f64,
    pub kv_bytes_per_token: u64,
    pub block_size: usize,
}

impl GpuMemory {
    pub fn h100_80gb_llama31_8b() -> Self {
        Self {
            device_bytes: 81_559.0 * (1u64 << 20) as f64,
            utilization: 0.92,
            weight_bytes: 8.03e9 * 2.0,
            runtime_overhead_bytes: 3.0 * (1u64 << 30) as f64,
            kv_bytes_per_token: 2 * 32 * 8 * 128 * 2,
            block_size: 16,
        }
    }

    pub fn kv_cache_bytes(&self) -> f64 {
        self.device_bytes * self.utilization - self.weight_bytes - self.runtime_overhead_bytes
    }

    pub fn kv_tokens(&self) -> u64 {
        (self.kv_cache_bytes() / self.kv_bytes_per_token as f64) as u64
    }

    /// vLLM's `num_gpu_blocks`.
    pub fn num_blocks(&self) -> usize {
        self.kv_tokens() as usize / self.block_size
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefill_is_compute_bound_and_decode_memory_bound() {
        let m = LatencyModel::default();
        let mut prefill = StepWork::default();
        prefill.add(0, 2048);
        let mut decode = StepWork::default();
        decode.add(1000, 1);
        let (p, d) = (m.step_seconds(&prefill), m.step_seconds(&decode));
        // A 2k-token prefill: ~60 ms; one decode step: ~7 ms (weights over HBM).
        assert!((0.04..0.09).contains(&p), "{p}");
        assert!((0.005..0.009).contains(&d), "{d}");
        // Cached tokens are not computed: half the prefill costs about half.
        let mut half = StepWork::default();
        half.add(1024, 1024);
        assert!(m.step_seconds(&half) < 0.6 * p);
    }

    #[test]
    fn where_prefill_is_nearly_free_a_whole_context_costs_less_than_a_step() {
        let m = LatencyModel::prefill_nearly_free();
        let mut prefill = StepWork::default();
        prefill.add(0, 500);
        let mut decode = StepWork::default();
        decode.add(500, 1);
        let (p, d) = (m.step_seconds(&prefill), m.step_seconds(&decode));
        // The tiny CPU model: a 500-token miss ≈ 9 ms, a step ≈ 6 ms.
        assert!((0.008..0.013).contains(&p), "{p}");
        assert!((0.005..0.008).contains(&d), "{d}");
        // On the H100 model a 2,048-token recompute is ~8 decode steps; here it is ~3.
        let mut long = StepWork::default();
        long.add(0, 2048);
        assert!(m.step_seconds(&long) < 4.0 * d);
    }

    #[test]
    fn the_headline_cache_holds_about_450k_tokens() {
        let g = GpuMemory::h100_80gb_llama31_8b();
        assert_eq!(g.kv_bytes_per_token, 131_072);
        assert!((400_000..500_000).contains(&g.kv_tokens()), "{}", g.kv_tokens());
    }
}

//! The scheduler side of vLLM's `OffloadingConnector` (`vllm/distributed/kv_transfer/kv_connector/
//! v1/offloading/scheduler.py`, vLLM 0.32) over the [`HostPool`], with the copies timed over a
//! host link. One chunk = one GPU block (`blocks_per_chunk` 1, vLLM's default).
//!
//! - Stores: every step, each scheduled request offers the full *prompt* blocks computed up to
//!   the end of the step, from its `next_stored_chunk_idx` (`_build_store_jobs`, 1570-1844); the
//!   index then moves to the horizon, so keys the pool refused are not offered again by that
//!   request, but a `None` (cannot store now) leaves it where it was: retried next step. A request
//!   that finished offers once more at the next step, then the pool hears `on_request_finished`
//!   (1887-1896). Copies start when the step ends (the worker defers them to the next step).
//! - Loads: at admission, after the GPU prefix hit, consecutive host hits from the next chunk,
//!   capped at the prompt (`_lookup_complete_chunks`, 752-952); the request is skipped this step
//!   (`None`) when it still has transfers in flight, a hit chunk's store is pending, or another
//!   request is loading one of them. A load starts with the step's forward pass
//!   (`start_load_kv`); the loaded prefix is not offered for storing again (CHUNK_LEVEL, 1250-1254).
//! - Completions are seen at the end of the first step that ends after them and reach the
//!   scheduler one step later with async scheduling (vLLM's default), else at the next step.

use super::host_policy::{HostKey, HostPolicyKind};
use super::host_pool::{HostPool, KeyAt, Lookup};
use super::ranked::{BlockOwner, HostRanker};
use crate::block_pool::FastMap;

/// PCIe Gen5 x16, one direction, as vLLM's offloading blog measured it on an H100 host (~50 GB/s
/// for DMA and for its copy kernel; docs/hierarchy.md).
pub const PCIE_GEN5_BYTES_PER_S: f64 = 50e9;

/// Settings of the host tier (`--kv-offloading-size`, `eviction_policy`).
#[derive(Debug, Clone)]
pub struct HostTierConfig {
    /// Chunks of the host pool (vLLM: `cpu_bytes_to_use` / bytes per block).
    pub blocks: usize,
    pub policy: HostPolicyKind,
    /// Host→GPU (loads) and GPU→host (stores) bandwidth, bytes/s.
    pub h2d_bytes_per_s: f64,
    pub d2h_bytes_per_s: f64,
    /// Fixed cost of one transfer (s), on top of its bytes.
    pub latency_s: f64,
    /// vLLM's async scheduling (on by default since 0.1x): a completion reaches the scheduler one
    /// step later.
    pub async_scheduling: bool,
}

impl HostTierConfig {
    pub fn new(blocks: usize, policy: HostPolicyKind) -> Self {
        Self {
            blocks,
            policy,
            h2d_bytes_per_s: PCIE_GEN5_BYTES_PER_S,
            d2h_bytes_per_s: PCIE_GEN5_BYTES_PER_S,
            latency_s: 0.0,
            async_scheduling: true,
        }
    }
}

/// What the host tier did in one replay.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostTierFigures {
    pub policy: String,
    pub blocks: usize,
    /// Prompt tokens of trace requests loaded from the host tier at their first admission.
    pub hit_tokens: u64,
    pub loads: u64,
    pub loaded_blocks: u64,
    pub loaded_bytes: u64,
    /// Warm-ups whose anchor came (partly) from the host tier.
    pub warmup_loads: u64,
    /// Their tokens loaded instead of recomputed: the prefill a warm-up saves by loading.
    pub warmup_loaded_tokens: u64,
    pub stored_blocks: u64,
    pub stored_bytes: u64,
    /// Store offers the pool answered `None` (retried next step).
    pub refused_offers: u64,
    /// Blocks the ranking policy declined to store (`--host-policy policy`).
    pub declined_blocks: u64,
    pub evictions: u64,
    /// Time requests waited for their loads (µs, admission to the step they computed in).
    pub load_wait_us: f64,
}

#[derive(Default)]
struct ConnReq {
    next_stored_chunk: usize,
    transfers: u32,
}

enum Job {
    Store(Vec<HostKey>),
    Load(Vec<HostKey>),
}

struct Transfer {
    req: u64,
    done_ns: u64,
    job: Job,
}

/// The connector.
pub struct Connector {
    cfg: HostTierConfig,
    pub pool: HostPool,
    block_size: usize,
    block_bytes: u64,
    reqs: FastMap<ConnReq>,
    /// Transfers not yet seen complete, and those seen (with the step they were seen at).
    in_flight: Vec<Transfer>,
    seen: Vec<(u64, Transfer)>,
    /// When each direction's link is next free (0 loads, 1 stores).
    link_free_ns: [u64; 2],
    being_loaded: FastMap<u32>,
    steps: u64,
    pub figures: HostTierFigures,
}

impl Connector {
    pub fn new(cfg: HostTierConfig, block_size: usize, kv_bytes_per_token: u64) -> Self {
        Self {
            pool: HostPool::new(cfg.blocks, cfg.policy, false),
            figures: HostTierFigures {
                policy: cfg.policy.name().to_string(),
                blocks: cfg.blocks,
                ..HostTierFigures::default()
            },
            cfg,
            block_size,
            block_bytes: kv_bytes_per_token * block_size as u64,
            reqs: FastMap::default(),
            in_flight: Vec::new(),
            seen: Vec::new(),
            link_free_ns: [0, 0],
            being_loaded: FastMap::default(),
            steps: 0,
        }
    }

    /// Bytes of one block (one chunk).
    pub fn block_bytes(&self) -> u64 {
        self.block_bytes
    }

    /// Transfers in flight or not yet handed to the scheduler.
    pub fn busy(&self) -> bool {
        !self.in_flight.is_empty() || !self.seen.is_empty()
    }

    /// Completions seen but not yet handed to the scheduler.
    pub fn has_seen(&self) -> bool {
        !self.seen.is_empty()
    }

    /// When the next unseen transfer completes.
    pub fn next_done_ns(&self) -> Option<u64> {
        self.in_flight.iter().map(|t| t.done_ns).min()
    }

    /// Keys `from..to` of a prompt, owned by `agent` in `session` (0, 0 for a load: the pool
    /// already knows whose the keys are).
    fn keys(hashes: &[u64], from: usize, to: usize, bs: usize, (agent, session): (u32, u64)) -> Vec<KeyAt> {
        (from..to)
            .map(|i| KeyAt {
                key: hashes[i],
                end_token: ((i + 1) * bs) as u32,
                owner: BlockOwner {
                    agent,
                    session,
                    position: (i * bs) as u32,
                },
            })
            .collect()
    }

    fn transfer(&mut self, req: u64, job: Job, ready_ns: u64) {
        let (dir, bw, n) = match &job {
            Job::Load(k) => (0, self.cfg.h2d_bytes_per_s, k.len()),
            Job::Store(k) => (1, self.cfg.d2h_bytes_per_s, k.len()),
        };
        let bytes = n as u64 * self.block_bytes;
        let start = ready_ns.max(self.link_free_ns[dir]);
        let done = start + ((self.cfg.latency_s + bytes as f64 / bw) * 1e9).round() as u64;
        self.link_free_ns[dir] = done;
        self.reqs.entry(req).or_default().transfers += 1;
        self.in_flight.push(Transfer {
            req,
            done_ns: done,
            job,
        });
    }

    /// `get_num_new_matched_tokens` for a request admitted with `gpu_blocks` blocks hit on the
    /// GPU: tokens to load from the host tier (0: none), or `None` to skip the request this step.
    pub fn lookup(&self, req: u64, hashes: &[u64], gpu_blocks: usize, num_tokens: u32) -> Option<u32> {
        if self.reqs.get(&req).is_some_and(|s| s.transfers > 0) {
            return None;
        }
        let bs = self.block_size;
        let end = (num_tokens as usize).div_ceil(bs).min(hashes.len());
        let (mut hits, mut defer) = (0, false);
        for &key in hashes.get(gpu_blocks..end).unwrap_or(&[]) {
            match self.pool.lookup(key) {
                Lookup::Hit => hits += 1,
                Lookup::HitPending => {
                    hits += 1;
                    defer = true;
                }
                Lookup::Miss => break,
            }
        }
        let max_hit = (num_tokens as usize).min(bs * (gpu_blocks + hits));
        let tokens = max_hit.saturating_sub(gpu_blocks * bs);
        if hits == 0 || tokens < bs {
            return Some(0);
        }
        if defer {
            return None;
        }
        let loaded = &hashes[gpu_blocks..(gpu_blocks * bs + tokens).div_ceil(bs)];
        if loaded.iter().any(|k| self.being_loaded.contains_key(k)) {
            return None;
        }
        Some(tokens as u32)
    }

    /// `update_state_after_alloc` + `start_load_kv`: load `tokens` after the GPU hit, starting at
    /// `now_ns` (the step's forward pass).
    pub fn start_load(&mut self, req: u64, hashes: &[u64], gpu_blocks: usize, tokens: u32, warmup: bool, now_ns: u64) {
        let bs = self.block_size;
        let end = (gpu_blocks * bs + tokens as usize).div_ceil(bs);
        let keys = Self::keys(hashes, gpu_blocks, end, bs, (0, 0));
        self.pool.prepare_load(req, &keys);
        for k in &keys {
            *self.being_loaded.entry(k.key).or_default() += 1;
        }
        let state = self.reqs.entry(req).or_default();
        state.next_stored_chunk = end;
        self.figures.loads += 1;
        self.figures.loaded_blocks += keys.len() as u64;
        self.figures.loaded_bytes += keys.len() as u64 * self.block_bytes;
        if warmup {
            self.figures.warmup_loads += 1;
            self.figures.warmup_loaded_tokens += u64::from(tokens);
        }
        self.transfer(req, Job::Load(keys.iter().map(|k| k.key).collect()), now_ns);
    }

    /// One request's store offer in `build_connector_meta`: its prompt blocks computed by the end of
    /// this step (`horizon_tokens`, capped at `prompt_tokens`); copies start at `start_ns`. The
    /// request's `owner` (agent, session) goes with its keys for `ranker`.
    #[allow(clippy::too_many_arguments)]
    pub fn offer(
        &mut self,
        req: u64,
        hashes: &[u64],
        owner: (u32, u64),
        horizon_tokens: u32,
        prompt_tokens: u32,
        start_ns: u64,
        ranker: &mut dyn HostRanker,
    ) {
        let bs = self.block_size;
        let chunks = (horizon_tokens.min(prompt_tokens) as usize / bs).min(hashes.len());
        let next = self.reqs.get(&req).map_or(0, |s| s.next_stored_chunk);
        if chunks <= next {
            return;
        }
        let keys = Self::keys(hashes, next, chunks, bs, owner);
        let Some(out) = self.pool.prepare_store(req, &keys, ranker) else {
            self.figures.refused_offers += 1;
            return; // "cannot store chunks": offered again next step
        };
        self.reqs.entry(req).or_default().next_stored_chunk = chunks;
        self.figures.evictions += out.evicted.len() as u64;
        self.figures.declined_blocks = self.pool.stats.declined;
        if out.keys_to_store.is_empty() {
            return;
        }
        self.figures.stored_blocks += out.keys_to_store.len() as u64;
        self.figures.stored_bytes += out.keys_to_store.len() as u64 * self.block_bytes;
        self.transfer(req, Job::Store(out.keys_to_store), start_ns);
    }

    /// The request's last offer was made: commit its accesses to the host pool's policy.
    pub fn finished(&mut self, req: u64) {
        self.pool.on_request_finished(req);
        if self.reqs.get(&req).is_some_and(|s| s.transfers == 0) {
            self.reqs.remove(&req);
        }
    }

    /// A step ended at `now_ns`: the transfers done by then are seen.
    pub fn end_step(&mut self, now_ns: u64) {
        self.steps += 1;
        let steps = self.steps;
        let (done, running): (Vec<_>, Vec<_>) = std::mem::take(&mut self.in_flight)
            .into_iter()
            .partition(|t| t.done_ns <= now_ns);
        self.in_flight = running;
        self.seen.extend(done.into_iter().map(|t| (steps, t)));
    }

    /// The engine was idle until `now_ns`: every copy done by then has been seen and handed over.
    pub fn idle_until(&mut self, now_ns: u64) -> Vec<u64> {
        self.end_step(now_ns);
        self.steps += u64::from(self.cfg.async_scheduling);
        self.begin_step()
    }

    /// Before a step is scheduled: hand the completions the scheduler sees now to the pool;
    /// returns the requests whose load completed (their blocks may be cached and computed on).
    pub fn begin_step(&mut self) -> Vec<u64> {
        let lag = u64::from(self.cfg.async_scheduling);
        let steps = self.steps;
        let (now, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.seen)
            .into_iter()
            .partition(|(seen, _)| seen + lag <= steps);
        self.seen = later;
        let mut loaded = Vec::new();
        for (_, t) in now {
            let state = self.reqs.get_mut(&t.req).expect("a transfer's request is tracked");
            state.transfers -= 1;
            match t.job {
                Job::Store(keys) => self.pool.complete_store(&keys, true),
                Job::Load(keys) => {
                    self.pool.complete_load(&keys);
                    for k in &keys {
                        let n = self.being_loaded.get_mut(k).expect("counted at start_load");
                        *n -= 1;
                        if *n == 0 {
                            self.being_loaded.remove(k);
                        }
                    }
                    loaded.push(t.req);
                }
            }
        }
        loaded
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::offload::ranked::NoRanker;

    fn conn(blocks: usize, async_scheduling: bool) -> Connector {
        let mut cfg = HostTierConfig::new(blocks, HostPolicyKind::Lru);
        cfg.async_scheduling = async_scheduling;
        Connector::new(cfg, 16, 131_072)
    }

    #[test]
    fn a_computed_prompt_is_stored_and_then_loadable_after_the_copy() {
        let mut c = conn(8, false);
        let hashes = [1, 2, 3, 4];
        // 64 prompt tokens computed in one step that ends at 10 ms.
        c.offer(7, &hashes, (0, 0), 64, 64, 10_000_000, &mut NoRanker);
        assert_eq!(c.figures.stored_blocks, 4);
        assert_eq!(
            c.lookup(8, &hashes, 0, 65),
            None,
            "the stores are in flight: HIT_PENDING"
        );
        // 4 × 2 MiB at 50 GB/s = 168 µs: done during the next step.
        c.end_step(20_000_000);
        c.begin_step();
        c.finished(7);
        // The whole prompt hits; the cap is the request's length, so a 65-token prompt loads 64.
        assert_eq!(c.lookup(8, &hashes, 0, 65), Some(64));
        assert_eq!(c.lookup(8, &hashes, 2, 65), Some(32), "after a 2-block GPU hit");
        c.start_load(8, &hashes, 0, 64, false, 20_000_000);
        assert_eq!(c.lookup(9, &hashes, 0, 65), None, "being loaded by another request");
        c.end_step(30_000_000);
        assert_eq!(c.begin_step(), vec![8]);
        assert_eq!(c.figures.loaded_bytes, 4 * 2 * 1024 * 1024);
    }

    #[test]
    fn async_scheduling_sees_a_completion_one_step_later() {
        let mut c = conn(8, true);
        c.offer(1, &[1, 2], (0, 0), 32, 32, 0, &mut NoRanker);
        c.end_step(1_000_000);
        assert!(c.begin_step().is_empty());
        assert_eq!(c.pool.lookup(1), Lookup::HitPending);
        c.end_step(2_000_000);
        c.begin_step();
        assert_eq!(c.pool.lookup(1), Lookup::Hit);
    }

    #[test]
    fn refused_keys_are_not_offered_again_but_a_full_pool_is_retried() {
        let mut c = conn(2, false);
        c.offer(1, &[1, 2], (0, 0), 32, 32, 0, &mut NoRanker); // fills the pool, write-pending
        c.offer(2, &[5, 6], (0, 0), 32, 32, 0, &mut NoRanker);
        assert_eq!(c.figures.refused_offers, 1, "nothing evictable: None");
        c.end_step(1_000_000_000);
        c.begin_step();
        c.finished(1);
        c.offer(2, &[5, 6], (0, 0), 48, 48, 0, &mut NoRanker); // retried: now 1 and 2 can go
        assert_eq!(c.figures.stored_blocks, 4);
        // Decode tokens are not stored (prompt only).
        c.offer(2, &[5, 6, 7], (0, 0), 100, 32, 0, &mut NoRanker);
        assert_eq!(c.figures.stored_blocks, 4);
    }
}

//! The scheduler's side of the host tier ([`crate::offload`]): what vLLM's scheduler does with
//! the `OffloadingConnector` (`vllm/v1/core/sched/scheduler.py`, vLLM 0.32). A request admitted
//! with a host hit gets GPU blocks up to the end of the load but schedules 0 tokens and waits
//! (`WAITING_FOR_REMOTE_KVS`) without holding up the requests behind it (960-1341); once its load
//! is seen complete its blocks are cached on the GPU and it is scheduled ahead of the waiting
//! queue (`kv_holding_waiting`, `_update_waiting_for_remote_kv` 3123-3173), recomputing the last
//! token when the whole prompt was loaded. Each step's computed prompt blocks are offered for
//! storing (`build_connector_meta`).

use super::{Origin, Sim};

impl Sim<'_> {
    /// Whether the host tier still has something for the engine to step for.
    pub(super) fn host_busy(&self) -> bool {
        !self.loading.is_empty()
            || !self.loaded_ready.is_empty()
            || !self.host_finished.is_empty()
            || self.host.as_ref().is_some_and(|c| c.busy())
    }

    /// Before scheduling: completions the scheduler sees now; loaded requests get their blocks
    /// cached and join the queue of requests holding blocks.
    pub(super) fn host_begin_step(&mut self) {
        let Some(conn) = &mut self.host else { return };
        for r in conn.begin_step() {
            let r = r as usize;
            self.loading.retain(|&l| l != r);
            let req = &mut self.reqs[r];
            let loaded = req.kv.num_computed_tokens + req.host_tokens;
            self.kv.cache_loaded(&mut req.kv, loaded, &mut *self.policy);
            // A whole prompt loaded: its last token is recomputed to sample the next one.
            req.kv.num_computed_tokens = if loaded == req.kv.num_tokens {
                loaded - 1
            } else {
                loaded
            };
            self.loaded_ready.push_back(r);
        }
    }

    /// The host-tier part of admitting waiting request `r` with `gpu_blocks` hit on the GPU: the
    /// tokens to load (0 without a host tier), or `None` to skip it this step.
    pub(super) fn host_lookup(&self, r: usize, gpu_blocks: usize) -> Option<u32> {
        let Some(conn) = &self.host else { return Some(0) };
        let kv = &self.reqs[r].kv;
        conn.lookup(r as u64, &kv.hashes, gpu_blocks, kv.num_tokens)
    }

    /// Admit `r` with a load of `tokens` after `gpu_blocks` GPU-hit blocks: its blocks are
    /// allocated now (GPU evictions happen now), the copy starts with this step's forward pass.
    /// `false` when the blocks are not there.
    pub(super) fn host_admit_load(&mut self, r: usize, hit: &[crate::block_pool::BlockId], tokens: u32) -> bool {
        let bs = self.trace.block_size;
        if !self
            .kv
            .allocate_for_load(&mut self.reqs[r].kv, tokens, hit, &mut *self.policy)
        {
            return false;
        }
        let gpu_tokens = (hit.len() * bs) as u32;
        self.admitted(r, hit.len(), gpu_tokens, tokens);
        let now = self.now_ns;
        let req = &mut self.reqs[r];
        req.kv.num_computed_tokens = gpu_tokens;
        req.host_tokens = tokens;
        req.load_started_ns = now;
        let warmup = matches!(req.origin, Origin::Warmup(_));
        let conn = self.host.as_mut().expect("a load needs the host tier");
        conn.start_load(r as u64, &req.kv.hashes, hit.len(), tokens, warmup, now);
        self.loading.push(r);
        true
    }

    /// Requests whose load completed, ahead of the waiting queue (vLLM drains the requests
    /// holding KV blocks first). Returns whether the waiting queue may be considered after them.
    pub(super) fn host_schedule_loaded(&mut self, budget: &mut u32, scheduled: &mut Vec<(usize, u32)>) -> bool {
        while *budget > 0 && self.running.len() < self.cfg.max_num_seqs {
            let Some(&r) = self.loaded_ready.front() else {
                return true;
            };
            let kv = &self.reqs[r].kv;
            let n = (kv.num_tokens - kv.num_computed_tokens).min(*budget);
            if !self
                .kv
                .allocate_slots(&mut self.reqs[r].kv, n, &[], true, &mut *self.policy)
            {
                return false;
            }
            self.loaded_ready.pop_front();
            self.running.push(r);
            scheduled.push((r, n));
            *budget -= n;
            let waited = self.now_ns - self.reqs[r].load_started_ns;
            if let Some(conn) = &mut self.host {
                conn.figures.load_wait_us += waited as f64 / 1000.0;
            }
        }
        self.loaded_ready.is_empty()
    }

    /// `build_connector_meta`'s stores: every scheduled request offers the prompt blocks it has
    /// computed by the end of this step, then each request that finished last step offers once
    /// more and the pool hears it finished. Copies start at `start_ns` (the next step).
    /// The replay's policy ranks the host pool's victims and may decline stores (`--host-policy
    /// policy`), and hears what happened in the host tier.
    pub(super) fn host_offer_stores(&mut self, scheduled: &[(usize, u32)], start_ns: u64) {
        let Some(conn) = &mut self.host else { return };
        let ranker: &mut dyn crate::offload::ranked::HostRanker = &mut *self.policy;
        for &(r, n) in scheduled {
            let req = &self.reqs[r];
            let horizon = req.kv.num_computed_tokens + n;
            let owner = (req.kv.agent, req.kv.session);
            conn.offer(
                r as u64,
                &req.kv.hashes,
                owner,
                horizon,
                req.prompt_tokens,
                start_ns,
                ranker,
            );
        }
        for r in std::mem::take(&mut self.host_finished) {
            let req = &self.reqs[r];
            let owner = (req.kv.agent, req.kv.session);
            conn.offer(
                r as u64,
                &req.kv.hashes,
                owner,
                req.prompt_tokens,
                req.prompt_tokens,
                start_ns,
                ranker,
            );
            conn.finished(r as u64);
        }
        self.host_tell_policy();
    }

    /// The host tier's block events since the policy last heard, as `tier: host` block events.
    pub(super) fn host_tell_policy(&mut self) {
        let Some(conn) = &mut self.host else { return };
        for (op, key, owner) in conn.pool.take_tier_events() {
            self.policy.host_block_event(op, key, owner);
        }
    }

    /// A step in which nothing could be scheduled while copies run: the engine steps empty until
    /// the next completion (or one step overhead when a completion is already seen).
    pub(super) fn host_idle_step(&mut self) {
        self.host_offer_stores(&[], self.now_ns);
        let overhead = (self.cfg.latency.step_overhead_s * 1e9) as u64;
        let conn = self.host.as_mut().expect("only with a host tier");
        let next = match conn.next_done_ns() {
            Some(done) if !conn.has_seen() => done.max(self.now_ns + overhead),
            _ => self.now_ns + overhead,
        };
        self.now_ns = next;
        conn.end_step(self.now_ns);
        self.result.steps += 1;
    }

    /// The engine sat idle until now: copies done meanwhile are complete, finished requests
    /// committed.
    pub(super) fn host_idle_until_now(&mut self) {
        let now = self.now_ns;
        self.host_offer_stores(&[], now);
        if let Some(conn) = &mut self.host {
            let loaded = conn.idle_until(now);
            debug_assert!(loaded.is_empty(), "no load runs while the engine is idle");
        }
    }

    /// Queue depth as a policy sees it: waiting requests, those loading included.
    pub(super) fn queue_depth(&self) -> usize {
        self.waiting.len() + self.loading.len() + self.loaded_ready.len()
    }

    /// The host tier's figures at the end of the replay.
    pub(super) fn host_figures(&self) -> Option<crate::offload::connector::HostTierFigures> {
        self.host.as_ref().map(|c| c.figures.clone())
    }
}

#[cfg(test)]
mod tests {
    use crate::offload::host_policy::HostPolicyKind;
    use crate::offload::HostTierConfig;
    use crate::policies::NativeLru;
    use crate::prepare::PreparedTrace;
    use crate::scheduler::{RunResult, Sim, SimConfig};
    use crate::trace::Trace;

    /// Session `a` sends a 160-token context, then — 100 ms after that answer — the same context
    /// and a new turn; in between `b`'s 256-token prompt evicts 8 of `a`'s 10 blocks from a
    /// 20-block GPU cache (tail first, so `a`'s first 2 blocks stay on the GPU).
    fn replay(host: Option<HostTierConfig>) -> RunResult {
        let text = concat!(
            r#"{"session": "a", "agent": "a", "after_ms": 0, "prompt": [{"seg": "a/ctx", "tokens": 160}], "output_tokens": 4}"#,
            "\n",
            r#"{"session": "b", "agent": "b", "after_ms": 1, "prompt": [{"seg": "b/q", "tokens": 256}], "output_tokens": 4}"#,
            "\n",
            r#"{"session": "a", "agent": "a", "after_ms": 100, "prompt": [{"seg": "a/ctx", "tokens": 160}, {"seg": "a/next", "tokens": 16}], "output_tokens": 4}"#,
            "\n"
        );
        let trace = PreparedTrace::new(&Trace::parse(text).unwrap(), 16, false);
        let mut cfg = SimConfig::new(20);
        cfg.host_tier = host;
        Sim::new(cfg, &trace, &mut NativeLru).run().unwrap()
    }

    #[test]
    fn a_prefix_the_gpu_evicted_is_loaded_from_the_host_tier_after_the_gpu_hit() {
        let without = replay(None);
        assert_eq!(without.hit_tokens, 32, "2 blocks of a's context survive on the GPU");
        assert!(without.host.is_none());

        let with = replay(Some(HostTierConfig::new(100, HostPolicyKind::Lru)));
        assert_eq!(with.hit_tokens, 32, "GPU hits are counted as before");
        let host = with.host.expect("a host tier");
        assert_eq!(
            host.hit_tokens, 128,
            "the 8 evicted blocks continue the hit in host memory"
        );
        assert_eq!((host.loads, host.loaded_blocks), (1, 8));
        assert_eq!(host.loaded_bytes, 8 * 2 * 1024 * 1024);
        // Every full prompt block was copied once: a's 10, b's 16, a's new one.
        assert_eq!(host.stored_blocks, 27);
        assert!(host.load_wait_us > 0.0);
        // The load waits at least two steps (async scheduling): the copy is not free.
        let (ttft_with, ttft_without) = (with.ttft_us[2], without.ttft_us[2]);
        assert!(ttft_with.is_finite() && ttft_without.is_finite());
        assert!(
            host.load_wait_us >= 2.0 * 1000.0 - 1.0,
            "two 1 ms empty steps at least: {}",
            host.load_wait_us
        );
    }

    #[test]
    fn an_offer_larger_than_the_host_pool_is_refused_every_step_and_changes_no_gpu_figure() {
        let without = replay(None);
        let with = replay(Some(HostTierConfig::new(4, HostPolicyKind::Arc)));
        let host = with.host.unwrap();
        assert_eq!(with.hit_tokens, without.hit_tokens);
        // vLLM's prepare_store answers None when the shortfall exceeds the evictable chunks: a
        // 10-block prompt never fits a 4-chunk pool, and is offered again each step it runs.
        assert_eq!((host.stored_blocks, host.hit_tokens), (0, 0));
        assert!(host.refused_offers > 3, "{}", host.refused_offers);
    }
}

//! One engine among several ([`crate::replicas`]): driven from outside, a request at a time.

use super::*;

/// What a router sees of one engine's load (Dynamo's view: prompt tokens still to prefill, and
/// the blocks its requests will hold).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct EngineLoadView {
    pub prefill_tokens: u64,
    pub decode_blocks: u64,
    pub in_flight: u32,
}

/// One engine among several ([`crate::replicas`]): sessions are driven from outside, and each
/// request arrives at the engine a router chose.
impl<'a> Sim<'a> {
    /// An engine with no sessions of its own.
    pub(crate) fn replica(cfg: SimConfig, trace: &'a PreparedTrace, policy: &'a mut dyn SimPolicy) -> Self {
        let mut sim = Self::new(cfg, trace, policy);
        sim.pending.clear();
        sim.register_agents();
        sim
    }

    pub(crate) fn now_ns(&self) -> u64 {
        self.now_ns
    }

    pub(crate) fn busy(&self) -> bool {
        !self.waiting.is_empty() || !self.running.is_empty() || self.host_busy()
    }

    /// Request number `index` of session `s`, due at `at_ns`, arrives here (an idle engine's
    /// clock moves to it).
    pub(crate) fn inject(&mut self, s: u32, index: u32, at_ns: u64) {
        self.next_in_session[s as usize] = index;
        if !self.busy() {
            self.now_ns = self.now_ns.max(at_ns);
        }
        self.pending.push(Reverse((at_ns, s)));
        self.end_idle_sessions();
        self.issue_due();
    }

    /// One step of this engine.
    pub(crate) fn advance_one(&mut self) -> anyhow::Result<()> {
        self.advance()
    }

    /// Sessions whose next request became due here: (due at, session, the request's index).
    pub(crate) fn take_due(&mut self) -> Vec<(u64, u32, u32)> {
        let due: Vec<(u64, u32)> = self.pending.drain().map(|Reverse(d)| d).collect();
        due.into_iter()
            .map(|(t, s)| (t, s, self.next_in_session[s as usize]))
            .collect()
    }

    /// Agents whose warm-up this engine issued since the last call.
    pub(crate) fn take_warmed(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.warmed)
    }

    /// Blocks of `hashes`' prefix this engine holds.
    pub(crate) fn cached_prefix_blocks(&self, hashes: &[u64]) -> usize {
        self.kv.pool.longest_hit(hashes, hashes.len()).len()
    }

    pub(crate) fn load(&self) -> EngineLoadView {
        let bs = self.trace.block_size as u64;
        let mut load = EngineLoadView::default();
        for &r in self
            .waiting
            .iter()
            .chain(&self.running)
            .chain(&self.loading)
            .chain(&self.loaded_ready)
        {
            let req = &self.reqs[r];
            load.prefill_tokens += u64::from(req.prompt_tokens.saturating_sub(req.kv.num_computed_tokens));
            load.decode_blocks += u64::from(req.prompt_tokens + req.output_target).div_ceil(bs);
            load.in_flight += 1;
        }
        load
    }

    /// Close the replay (the end of [`Sim::run`]).
    pub(crate) fn finish_replica(self, started: Instant) -> anyhow::Result<RunResult> {
        self.finish_run(started)
    }
}

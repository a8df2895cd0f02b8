//! One scheduler step, vLLM V1's: running requests first, preemption when blocks run out,
//! then admissions from the waiting queue; the step's cost from the latency model.

use super::*;

impl Sim<'_> {
    /// The running request to preempt when blocks run out: the last one (FCFS), or the one with
    /// the largest (priority, arrival) (vLLM's priority scheduling).
    pub(super) fn preemption_victim(&self) -> usize {
        if !self.cfg.engine_priorities {
            return self.running.len() - 1;
        }
        let key = |&(_, &r): &(usize, &usize)| (self.reqs[r].priority, self.reqs[r].arrival_ns);
        let (i, _) = self
            .running
            .iter()
            .enumerate()
            .max_by(|a, b| key(a).cmp(&key(b)).then(a.0.cmp(&b.0)))
            .expect("the request itself is running");
        i
    }

    pub(super) fn step(&mut self) -> anyhow::Result<()> {
        self.continuum_expire();
        self.policy.begin_step(us(self.now_ns));
        self.host_begin_step();
        let mut budget = self.cfg.max_batched_tokens;
        let mut scheduled: Vec<(usize, u32)> = Vec::new();
        let preempted = self.schedule_running(&mut budget, &mut scheduled);
        // Waiting requests only if nothing was preempted (vLLM's rule); loaded ones first.
        if !preempted && self.host_schedule_loaded(&mut budget, &mut scheduled) {
            self.schedule_waiting(&mut budget, &mut scheduled);
        }
        if scheduled.is_empty() {
            return self.step_without_work();
        }
        self.run_batch(&scheduled);
        Ok(())
    }

    /// Running requests, in order: each gets its next chunk, preempting (from the end, or by
    /// priority) when blocks run out. Returns whether anything was preempted.
    fn schedule_running(&mut self, budget: &mut u32, scheduled: &mut Vec<(usize, u32)>) -> bool {
        let mut preempted = false;
        let mut i = 0;
        while i < self.running.len() && *budget > 0 {
            let r = self.running[i];
            let kv = &self.reqs[r].kv;
            let n = (kv.num_tokens - kv.num_computed_tokens).min(*budget);
            if n == 0 {
                i += 1;
                continue;
            }
            let mut ok = false;
            loop {
                if self
                    .kv
                    .allocate_slots(&mut self.reqs[r].kv, n, &[], false, &mut *self.policy)
                {
                    ok = true;
                    break;
                }
                self.op(serde_json::json!({"op": "fail", "id": r, "n": n}));
                let at = self.preemption_victim();
                let victim = self.running.remove(at);
                // A victim already scheduled this step gives its tokens back (priority
                // scheduling only: under FCFS the victim is the last, not yet scheduled).
                if let Some(k) = scheduled.iter().position(|&(s, _)| s == victim) {
                    *budget += scheduled.remove(k).1;
                }
                if at < i {
                    i -= 1;
                }
                self.preempt(victim);
                preempted = true;
                if victim == r {
                    break;
                }
            }
            if !ok {
                break;
            }
            self.op(serde_json::json!({"op": "sched", "id": r, "n": n}));
            scheduled.push((r, n));
            *budget -= n;
            i += 1;
        }
        preempted
    }

    /// Waiting requests, in order, each looking up its cached prefix first. One that cache shares
    /// hold back, or whose host-tier load is not ready, waits without holding up the requests
    /// behind it (vLLM's skipped waiting requests).
    fn schedule_waiting(&mut self, budget: &mut u32, scheduled: &mut Vec<(usize, u32)>) {
        let bs = self.trace.block_size;
        let mut skipped = Vec::new();
        while *budget > 0 && self.running.len() < self.cfg.max_num_seqs {
            let Some(&r) = self.waiting.front() else { break };
            let hit = self.kv.computed_blocks(&self.reqs[r].kv);
            let hit_tokens = (hit.len() * bs) as u32;
            // The host tier continues the GPU hit, or holds the request back this step.
            let Some(host_tokens) = self.host_lookup(r, hit.len()) else {
                skipped.push(self.waiting.pop_front().expect("it is the front"));
                continue;
            };
            let kv = &self.reqs[r].kv;
            let n = (kv.num_tokens - hit_tokens).min(*budget);
            let wanted = self.kv.admission_blocks(kv, &hit);
            if !self.policy.may_take(&self.kv.pool, self.reqs[r].agent, wanted) {
                skipped.push(self.waiting.pop_front().expect("it is the front"));
                continue;
            }
            if host_tokens > 0 {
                // Loading: 0 tokens this step, and the requests behind it are considered.
                if !self.host_admit_load(r, &hit, host_tokens) {
                    break;
                }
                self.waiting.pop_front();
                continue;
            }
            if !self
                .kv
                .allocate_slots(&mut self.reqs[r].kv, n, &hit, true, &mut *self.policy)
            {
                self.op(serde_json::json!({"op": "fail_admit", "id": r, "n": n, "hit": hit_tokens}));
                break;
            }
            self.op(serde_json::json!({"op": "admit", "id": r, "n": n, "hit": hit_tokens}));
            self.waiting.pop_front();
            self.running.push(r);
            self.admitted(r, hit.len(), hit_tokens, 0);
            if let Some(s) = self.reqs[r].session {
                self.continuum_unpin(s);
            }
            self.reqs[r].kv.num_computed_tokens = hit_tokens;
            scheduled.push((r, n));
            *budget -= n;
        }
        for r in skipped.into_iter().rev() {
            self.requeue(r);
        }
    }

    /// A step that scheduled nothing: the host tier's loads move on, everything running was
    /// preempted (go again), or a request can never fit (an error naming it).
    fn step_without_work(&mut self) -> anyhow::Result<()> {
        if self.host_busy() {
            self.host_idle_step();
            return Ok(());
        }
        if self.running.is_empty() && self.continuum_wait_for_pin() {
            return Ok(());
        }
        if self.running.is_empty() {
            let r = &self.reqs[*self.waiting.front().expect("step runs with work")];
            anyhow::bail!(
                "a request of {} tokens (+{} output) cannot fit in a cache of {} blocks of {} tokens",
                r.prompt_tokens,
                r.output_target,
                self.cfg.num_blocks,
                self.trace.block_size
            );
        }
        self.result.steps += 1;
        Ok(())
    }

    /// Run the scheduled batch: its duration from the latency model, the clock advanced, then
    /// tokens sampled and finished requests retired ([`Self::after_step`]).
    fn run_batch(&mut self, scheduled: &[(usize, u32)]) {
        let mut work = StepWork::default();
        for &(r, n) in scheduled {
            work.add(self.reqs[r].kv.num_computed_tokens, n);
        }
        let dt = self.cfg.latency.step_seconds(&work);
        let step_ns = (dt * 1e9).round() as u64;
        self.host_offer_stores(scheduled, self.now_ns + step_ns);
        self.account_working_set(step_ns);
        self.now_ns += step_ns;
        self.result.busy_us += dt * 1e6;
        self.result.steps += 1;
        self.op(serde_json::json!({"op": "step"}));
        self.after_step(scheduled);
        if let Some(conn) = &mut self.host {
            conn.end_step(self.now_ns);
        }
    }

    /// First admission of `r`: `hit_tokens` from the GPU cache, `host_tokens` loaded from the host
    /// tier.
    pub(super) fn admitted(&mut self, r: usize, hit_blocks: usize, hit_tokens: u32, host_tokens: u32) {
        let req = &mut self.reqs[r];
        if req.admitted_once {
            return;
        }
        req.admitted_once = true;
        req.scheduled_ns = Some(self.now_ns);
        req.hit_tokens = hit_tokens;
        match req.origin {
            Origin::Trace(uid) => {
                self.result.prompt_tokens += u64::from(req.prompt_tokens);
                self.result.hit_tokens += u64::from(hit_tokens);
                if let Some(conn) = &mut self.host {
                    conn.figures.hit_tokens += u64::from(host_tokens);
                }
                let tenant = &mut self.result.tenants[self.trace.requests[uid as usize].tenant as usize];
                tenant.prompt_tokens += u64::from(req.prompt_tokens);
                tenant.hit_tokens += u64::from(hit_tokens);
                self.result.admission_order.push(uid);
                let hashes = &self.trace.requests[uid as usize].prompt.hashes;
                self.policy.admitted(&self.kv.pool, uid, hashes, hit_blocks);
            }
            Origin::Warmup(_) => {
                self.result.warmup_tokens += u64::from(req.prompt_tokens - hit_tokens - host_tokens);
            }
        }
    }

    pub(super) fn preempt(&mut self, r: usize) {
        self.result.preemptions += 1;
        self.op(serde_json::json!({"op": "preempt", "id": r}));
        let req = &mut self.reqs[r];
        self.kv.free(&mut req.kv, &mut *self.policy);
        req.kv.num_computed_tokens = 0;
        self.requeue(r);
    }

    pub(super) fn after_step(&mut self, scheduled: &[(usize, u32)]) {
        let bs = self.trace.block_size;
        let mut finished = Vec::new();
        for &(r, n) in scheduled {
            let req = &mut self.reqs[r];
            req.kv.num_computed_tokens += n;
            if req.kv.num_computed_tokens < req.kv.num_tokens {
                continue; // a prefill chunk: no token yet
            }
            req.generated += 1;
            req.first_token_ns.get_or_insert(self.now_ns);
            if req.generated >= req.output_target {
                finished.push(r);
            } else {
                let quoted = match req.origin {
                    Origin::Trace(uid) => self.trace.requests[uid as usize].output_ids.as_deref(),
                    Origin::Warmup(_) => None,
                };
                let token = quoted
                    .and_then(|ids| ids.get(req.generated as usize - 1).copied())
                    .unwrap_or_else(|| output_token(r as u64 ^ 0xa5a5_0000_0000_0000, req.generated));
                req.kv.append_token(token, bs);
                self.op(serde_json::json!({"op": "tok", "id": r, "t": token}));
            }
        }
        if !finished.is_empty() {
            self.running.retain(|r| !finished.contains(r));
            for r in finished {
                self.finish(r);
            }
        }
    }
}

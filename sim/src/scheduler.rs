//! The replay loop: vLLM V1's scheduler (`vllm/v1/core/sched/scheduler.py`, FCFS) driving the
//! block pool, with sessions issuing requests over simulated time and a policy watching.
//!
//! Each step: running requests first, in order (prefill chunks and one decode token each, within a
//! token budget); if a running request cannot get blocks, the last running request is preempted
//! (its blocks freed, back to the head of the waiting queue); then, if nothing was preempted,
//! waiting requests are admitted in order while budget and the running cap allow, each looking up
//! its cached prefix first. The step's duration comes from the [`LatencyModel`]; the clock then
//! advances, tokens are sampled, finished requests free their blocks, and sessions schedule their
//! next request `after_ms` later. Between steps the policy's `act` runs, and its warm-ups become
//! real requests that cost prefill like any other.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io::Write;
use std::time::Instant;

use agentrt_runtime::types::{AgentRegistered, EngineLoad, Event, RequestArrival, RequestFinish, SideEffect};

use crate::audit::EvictionAudit;
use crate::kv::{KvManager, SeqKv};
use crate::latency::{LatencyModel, StepWork};
use crate::policies::{PolicyStats, SimPolicy};
use crate::prepare::{prompt_tokens, PreparedTrace};
use crate::tokens::output_token;
use crate::trace::{Segment, Trace};

/// Engine settings of a replay.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// vLLM's `num_gpu_blocks` (the null block included).
    pub num_blocks: usize,
    /// vLLM's `max_num_seqs` (H100 default for the API server: 1024).
    pub max_num_seqs: usize,
    /// vLLM's `max_num_batched_tokens` (H100 default for the API server: 8192).
    pub max_batched_tokens: u32,
    pub latency: LatencyModel,
    /// Measure the policy's state every this many steps.
    pub state_sample_steps: u64,
    /// Cache shares by tenant name (`sim run --share`). With shares, every tenant runs its own
    /// instance of the policy over its own blocks and [`crate::arbiter::TenantArbiter`] picks
    /// which tenant gives up a block; tenants not named get no guarantee and no limit. `None`:
    /// one policy instance ranks every block, whoever stored it.
    pub shares: Option<Vec<(String, agentrt_runtime::Share)>>,
}

impl SimConfig {
    pub fn new(num_blocks: usize) -> Self {
        Self {
            num_blocks,
            max_num_seqs: 1024,
            max_batched_tokens: 8192,
            latency: LatencyModel::default(),
            state_sample_steps: 512,
            shares: None,
        }
    }
}

/// What one replay measured.
#[derive(Debug, Clone, Default)]
pub struct RunResult {
    pub policy: String,
    /// Prompt tokens of trace requests, and how many of them hit the cache at first admission.
    pub prompt_tokens: u64,
    pub hit_tokens: u64,
    pub output_tokens: u64,
    /// Per trace request (uid order): time to first token and whole-turn latency (µs).
    pub ttft_us: Vec<f64>,
    pub turn_us: Vec<f64>,
    /// Time from the first arrival to the last finish (µs).
    pub makespan_us: f64,
    pub steps: u64,
    pub preemptions: u64,
    pub evictions: u64,
    pub warmups: u64,
    /// Prompt tokens warm-ups computed (their uncached part): the prefill they cost.
    pub warmup_tokens: u64,
    /// Warm-ups asked for but not issued (one in flight already, or the anchor resident).
    pub warmups_skipped: u64,
    /// Trace requests longer than the whole cache (prompt + output): vLLM refuses them (its
    /// max_model_len must fit the cache); the session goes on without them.
    pub rejected: u64,
    /// Side effects other than warm-ups (counted, not carried out).
    pub effects_ignored: u64,
    /// Trace request uids in the order they were first admitted (Bélády's reference future).
    pub admission_order: Vec<u32>,
    /// Prompt and hit tokens per tenant, in the trace's tenant order (one entry, `default`, for a
    /// trace without tenants).
    pub tenants: Vec<TenantFigures>,
    pub policy_stats: PolicyStats,
    /// Every eviction and whether it was regretted, when the replay was audited.
    pub audit: Option<EvictionAudit>,
    /// Wall time of the replay (seconds).
    pub wall_s: f64,
}

/// One tenant's share of a replay's figures.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TenantFigures {
    pub name: String,
    pub prompt_tokens: u64,
    pub hit_tokens: u64,
    /// Trace requests finished, and the sum of their turn latencies (µs).
    pub requests: u64,
    pub turn_us_sum: f64,
}

impl TenantFigures {
    pub fn hit_rate(&self) -> f64 {
        if self.prompt_tokens == 0 {
            0.0
        } else {
            self.hit_tokens as f64 / self.prompt_tokens as f64
        }
    }
}

impl RunResult {
    /// The figures of the tenant named `name`.
    pub fn tenant(&self, name: &str) -> Option<&TenantFigures> {
        self.tenants.iter().find(|t| t.name == name)
    }

    pub fn hit_rate(&self) -> f64 {
        if self.prompt_tokens == 0 {
            0.0
        } else {
            self.hit_tokens as f64 / self.prompt_tokens as f64
        }
    }
}

/// Where a request came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    Trace(u32),
    Warmup(u32),
}

struct Req {
    origin: Origin,
    kv: SeqKv,
    prompt_tokens: u32,
    output_target: u32,
    generated: u32,
    arrival_ns: u64,
    first_token_ns: Option<u64>,
    admitted_once: bool,
    hit_tokens: u32,
    agent: u32,
    anchor_hash: u64,
    /// Session index (trace requests) — warm-ups have none.
    session: Option<u32>,
}

/// Block-pool operations in a form a Python script can replay through vLLM's own
/// `KVCacheManager` (see sim/fidelity/).
pub struct OpLog<'a> {
    pub trace: &'a Trace,
    pub out: Box<dyn Write + 'a>,
}

/// One replay of a prepared trace under one policy.
pub struct Sim<'a> {
    cfg: SimConfig,
    trace: &'a PreparedTrace,
    kv: KvManager,
    policy: &'a mut dyn SimPolicy,
    now_ns: u64,
    reqs: Vec<Req>,
    waiting: VecDeque<usize>,
    running: Vec<usize>,
    /// (issue time, session) of each session's next request.
    pending: BinaryHeap<Reverse<(u64, u32)>>,
    next_in_session: Vec<u32>,
    warmup_in_flight: Vec<bool>,
    /// (waiting, running) at the last `engine-load` event.
    reported_load: Option<(u32, u32)>,
    result: RunResult,
    first_arrival_ns: Option<u64>,
    ops: Option<OpLog<'a>>,
    /// Agents whose warm-up this engine issued since [`Sim::take_warmed`] (several replicas).
    warmed: Vec<u32>,
}

fn us(ns: u64) -> u64 {
    ns / 1000
}

impl<'a> Sim<'a> {
    pub fn new(cfg: SimConfig, trace: &'a PreparedTrace, policy: &'a mut dyn SimPolicy) -> Self {
        let kv = KvManager::new(cfg.num_blocks, trace.block_size);
        let mut pending = BinaryHeap::new();
        for (s, session) in trace.sessions.iter().enumerate() {
            let first = &trace.requests[session.requests[0] as usize];
            pending.push(Reverse(((first.after_us * 1000.0) as u64, s as u32)));
        }
        let result = RunResult {
            policy: policy.name().to_string(),
            ttft_us: vec![f64::NAN; trace.requests.len()],
            turn_us: vec![f64::NAN; trace.requests.len()],
            tenants: trace
                .tenants
                .iter()
                .map(|name| TenantFigures {
                    name: name.clone(),
                    ..TenantFigures::default()
                })
                .collect(),
            ..RunResult::default()
        };
        Self {
            cfg,
            trace,
            kv,
            policy,
            now_ns: 0,
            reqs: Vec::with_capacity(trace.requests.len()),
            waiting: VecDeque::new(),
            running: Vec::new(),
            pending,
            next_in_session: vec![0; trace.sessions.len()],
            warmup_in_flight: vec![false; trace.agents.len() + 1],
            reported_load: None,
            result,
            first_arrival_ns: None,
            ops: None,
            warmed: Vec::new(),
        }
    }

    /// Record block-pool operations for the fidelity check.
    pub fn with_op_log(mut self, ops: OpLog<'a>) -> Self {
        self.ops = Some(ops);
        self
    }

    fn op(&mut self, line: serde_json::Value) {
        if let Some(ops) = &mut self.ops {
            let _ = writeln!(ops.out, "{line}");
        }
    }

    /// Run to the end of the trace.
    pub fn run(mut self) -> anyhow::Result<RunResult> {
        let started = Instant::now();
        self.register_agents();
        loop {
            self.issue_due();
            if self.waiting.is_empty() && self.running.is_empty() {
                match self.pending.peek() {
                    Some(Reverse((t, _))) => {
                        self.now_ns = self.now_ns.max(*t);
                        continue;
                    }
                    None => break,
                }
            }
            self.advance()?;
        }
        self.finish_run(started)
    }

    fn register_agents(&mut self) {
        for a in &self.trace.agents {
            self.policy.event(Event::AgentRegistered(AgentRegistered {
                agent: a.handle,
                name: a.name.clone(),
                anchor_hash: a.anchor_hash,
                anchor_tokens: a.anchor_tokens,
            }));
        }
    }

    /// One scheduler step, then the policy's side effects.
    fn advance(&mut self) -> anyhow::Result<()> {
        self.step()?;
        if self.result.steps.is_multiple_of(self.cfg.state_sample_steps) {
            self.policy.sample_state();
        }
        self.carry_out_side_effects();
        Ok(())
    }

    fn finish_run(mut self, started: Instant) -> anyhow::Result<RunResult> {
        self.policy.sample_state();
        self.result.makespan_us = (self.now_ns - self.first_arrival_ns.unwrap_or(0)) as f64 / 1000.0;
        self.result.evictions = self.kv.pool.stats.evictions;
        self.result.policy_stats = self.policy.stats();
        self.result.wall_s = started.elapsed().as_secs_f64();
        if let Some(ops) = &mut self.ops {
            ops.out.flush()?;
        }
        Ok(self.result)
    }

    /// Sessions whose next request is due join the waiting queue.
    fn issue_due(&mut self) {
        while let Some(&Reverse((t, s))) = self.pending.peek() {
            if t > self.now_ns {
                break;
            }
            self.pending.pop();
            let session = &self.trace.sessions[s as usize];
            let uid = session.requests[self.next_in_session[s as usize] as usize];
            self.next_in_session[s as usize] += 1;
            let r = &self.trace.requests[uid as usize];
            let need = (r.prompt.tokens + r.output_tokens) as usize;
            if need.div_ceil(self.trace.block_size) > self.cfg.num_blocks - 1 {
                self.result.rejected += 1;
                self.next_request(s, self.now_ns.max(t));
                continue;
            }
            let kv = SeqKv::new(
                r.prompt.tokens,
                r.prompt.hashes.clone(),
                r.prompt.tail.clone(),
                r.agent,
                session.id,
            );
            self.arrive(Req {
                origin: Origin::Trace(uid),
                kv,
                prompt_tokens: r.prompt.tokens,
                output_target: r.output_tokens,
                generated: 0,
                arrival_ns: self.now_ns.max(t),
                first_token_ns: None,
                admitted_once: false,
                hit_tokens: 0,
                agent: r.agent,
                anchor_hash: r.anchor_hash,
                session: Some(s),
            });
        }
    }

    fn arrive(&mut self, req: Req) {
        let id = self.reqs.len();
        self.first_arrival_ns.get_or_insert(req.arrival_ns);
        let warmup = matches!(req.origin, Origin::Warmup(_));
        self.policy.event(Event::RequestArrival(RequestArrival {
            request_id: id as u64,
            agent: req.agent,
            session: req.kv.session,
            anchor_hash: req.anchor_hash,
            prompt_tokens: req.prompt_tokens,
            continues: match req.origin {
                Origin::Trace(uid) => self.trace.requests[uid as usize].continues,
                Origin::Warmup(_) => None,
            },
            warmup,
            at_us: us(req.arrival_ns),
        }));
        if self.ops.is_some() {
            let tokens = match req.origin {
                Origin::Trace(uid) => {
                    let trace = self.ops.as_ref().expect("checked").trace;
                    prompt_tokens(&trace.requests[uid as usize].prompt)
                }
                Origin::Warmup(agent) => {
                    let a = self.trace.agent(agent).expect("warm-ups name known agents");
                    let mut segs = a.anchor.clone();
                    segs.push(Segment::new("warmup/user", crate::prepare::WARMUP_USER_TOKENS));
                    prompt_tokens(&segs)
                }
            };
            self.op(serde_json::json!({"op": "add", "id": id, "prompt": tokens}));
        }
        self.reqs.push(req);
        self.waiting.push_back(id);
    }

    fn step(&mut self) -> anyhow::Result<()> {
        self.policy.begin_step(us(self.now_ns));
        let bs = self.trace.block_size;
        let mut budget = self.cfg.max_batched_tokens;
        let mut scheduled: Vec<(usize, u32)> = Vec::new();
        let mut work = StepWork::default();
        let mut preempted = false;

        // Running requests, in order.
        let mut i = 0;
        while i < self.running.len() && budget > 0 {
            let r = self.running[i];
            let kv = &self.reqs[r].kv;
            let n = (kv.num_tokens - kv.num_computed_tokens).min(budget);
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
                let victim = self.running.pop().expect("the request itself is running");
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
            work.add(self.reqs[r].kv.num_computed_tokens, n);
            scheduled.push((r, n));
            budget -= n;
            i += 1;
        }

        // Waiting requests, in order, if nothing was preempted. One that cache shares hold back
        // waits without holding up the requests behind it (vLLM's skipped waiting requests).
        if !preempted {
            let mut skipped = Vec::new();
            while budget > 0 && self.running.len() < self.cfg.max_num_seqs {
                let Some(&r) = self.waiting.front() else { break };
                let hit = self.kv.computed_blocks(&self.reqs[r].kv);
                let hit_tokens = (hit.len() * bs) as u32;
                let kv = &self.reqs[r].kv;
                let n = (kv.num_tokens - hit_tokens).min(budget);
                let wanted = self.kv.admission_blocks(kv, &hit);
                if !self.policy.may_take(&self.kv.pool, self.reqs[r].agent, wanted) {
                    skipped.push(self.waiting.pop_front().expect("it is the front"));
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
                self.admitted(r, hit.len(), hit_tokens);
                self.reqs[r].kv.num_computed_tokens = hit_tokens;
                work.add(hit_tokens, n);
                scheduled.push((r, n));
                budget -= n;
            }
            for r in skipped.into_iter().rev() {
                self.waiting.push_front(r);
            }
        }

        if scheduled.is_empty() {
            if self.running.is_empty() {
                let r = &self.reqs[*self.waiting.front().expect("step runs with work")];
                anyhow::bail!(
                    "a request of {} tokens (+{} output) cannot fit in a cache of {} blocks of {} tokens",
                    r.prompt_tokens,
                    r.output_target,
                    self.cfg.num_blocks,
                    bs
                );
            }
            // Everything running was preempted this step; go again.
            self.result.steps += 1;
            return Ok(());
        }
        let dt = self.cfg.latency.step_seconds(&work);
        self.now_ns += (dt * 1e9).round() as u64;
        self.result.steps += 1;
        self.op(serde_json::json!({"op": "step"}));
        self.after_step(&scheduled);
        Ok(())
    }

    fn admitted(&mut self, r: usize, hit_blocks: usize, hit_tokens: u32) {
        let req = &mut self.reqs[r];
        if req.admitted_once {
            return;
        }
        req.admitted_once = true;
        req.hit_tokens = hit_tokens;
        match req.origin {
            Origin::Trace(uid) => {
                self.result.prompt_tokens += u64::from(req.prompt_tokens);
                self.result.hit_tokens += u64::from(hit_tokens);
                let tenant = &mut self.result.tenants[self.trace.requests[uid as usize].tenant as usize];
                tenant.prompt_tokens += u64::from(req.prompt_tokens);
                tenant.hit_tokens += u64::from(hit_tokens);
                self.result.admission_order.push(uid);
                let hashes = &self.trace.requests[uid as usize].prompt.hashes;
                self.policy.admitted(&self.kv.pool, uid, hashes, hit_blocks);
            }
            Origin::Warmup(_) => {
                self.result.warmup_tokens += u64::from(req.prompt_tokens - hit_tokens);
            }
        }
    }

    fn preempt(&mut self, r: usize) {
        self.result.preemptions += 1;
        self.op(serde_json::json!({"op": "preempt", "id": r}));
        let req = &mut self.reqs[r];
        self.kv.free(&mut req.kv, &mut *self.policy);
        req.kv.num_computed_tokens = 0;
        self.waiting.push_front(r);
    }

    fn after_step(&mut self, scheduled: &[(usize, u32)]) {
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

    fn finish(&mut self, r: usize) {
        self.op(serde_json::json!({"op": "free", "id": r}));
        let now = self.now_ns;
        let req = &mut self.reqs[r];
        self.kv.free(&mut req.kv, &mut *self.policy);
        let warmup = matches!(req.origin, Origin::Warmup(_));
        self.policy.event(Event::RequestFinish(RequestFinish {
            request_id: r as u64,
            agent: req.agent,
            session: req.kv.session,
            prompt_tokens: req.prompt_tokens,
            cached_tokens: req.hit_tokens,
            output_tokens: req.generated,
            warmup,
            ok: true,
            at_us: us(now),
        }));
        match req.origin {
            Origin::Warmup(agent) => self.warmup_in_flight[agent as usize] = false,
            Origin::Trace(uid) => {
                let arrival = req.arrival_ns;
                let first = req.first_token_ns.unwrap_or(now);
                self.result.ttft_us[uid as usize] = (first - arrival) as f64 / 1000.0;
                self.result.turn_us[uid as usize] = (now - arrival) as f64 / 1000.0;
                let tenant = &mut self.result.tenants[self.trace.requests[uid as usize].tenant as usize];
                tenant.requests += 1;
                tenant.turn_us_sum += (now - arrival) as f64 / 1000.0;
                self.result.output_tokens += u64::from(req.generated);
                let s = req.session.expect("trace requests belong to sessions");
                self.next_request(s, now);
            }
        }
    }

    /// Session `s` finished a request at `now`: its next one is due `after_ms` later.
    fn next_request(&mut self, s: u32, now: u64) {
        let session = &self.trace.sessions[s as usize];
        let next = self.next_in_session[s as usize] as usize;
        match session.requests.get(next) {
            Some(&uid) => {
                let after = (self.trace.requests[uid as usize].after_us * 1000.0) as u64;
                self.pending.push(Reverse((now + after, s)));
            }
            None => self.policy.event(Event::SessionEnd(session.id)),
        }
    }

    fn carry_out_side_effects(&mut self) {
        self.report_load();
        for effect in self.policy.act() {
            match effect {
                SideEffect::WarmPrefix(w) => self.warm(w.agent, w.anchor_hash),
                _ => self.result.effects_ignored += 1,
            }
        }
    }

    /// Tell the policy the engine's load (`engine-load`) when it changed since the last report, so
    /// that it can hold side effects back while requests wait (a warm-up's prefill would delay
    /// them).
    fn report_load(&mut self) {
        let load = (self.waiting.len() as u32, self.running.len() as u32);
        if self.reported_load == Some(load) {
            return;
        }
        self.reported_load = Some(load);
        self.policy.event(Event::EngineLoad(EngineLoad {
            queue_depth: load.0,
            running: load.1,
            free_blocks: self.kv.pool.num_free() as u32,
            total_blocks: self.kv.pool.num_blocks() as u32,
            at_us: us(self.now_ns),
        }));
    }

    /// Issue a warm-up for an agent's anchor unless one is in flight or the anchor is resident.
    fn warm(&mut self, agent: u32, anchor_hash: u64) {
        let found = self
            .trace
            .agent(agent)
            .filter(|a| anchor_hash == 0 || a.anchor_hash == anchor_hash)
            .or_else(|| {
                self.trace
                    .agents
                    .iter()
                    .find(|a| a.anchor_hash == anchor_hash && anchor_hash != 0)
            });
        let Some(a) = found else {
            self.result.warmups_skipped += 1;
            return;
        };
        let handle = a.handle;
        let resident = self.kv.pool.longest_hit(&a.anchor_blocks, a.anchor_blocks.len()).len() == a.anchor_blocks.len();
        if self.warmup_in_flight[handle as usize] || resident || a.anchor_blocks.is_empty() {
            self.result.warmups_skipped += 1;
            return;
        }
        self.warmup_in_flight[handle as usize] = true;
        self.result.warmups += 1;
        self.warmed.push(handle);
        let session = crate::tokens::hash_str(&format!("warmup/{}", a.name));
        let kv = SeqKv::new(
            a.warmup.tokens,
            a.warmup.hashes.clone(),
            a.warmup.tail.clone(),
            handle,
            session,
        );
        self.arrive(Req {
            origin: Origin::Warmup(handle),
            kv,
            prompt_tokens: a.warmup.tokens,
            output_target: 1,
            generated: 0,
            arrival_ns: self.now_ns,
            first_token_ns: None,
            admitted_once: false,
            hit_tokens: 0,
            agent: handle,
            anchor_hash: a.anchor_hash,
            session: None,
        });
    }
}

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
        !self.waiting.is_empty() || !self.running.is_empty()
    }

    /// Request number `index` of session `s`, due at `at_ns`, arrives here (an idle engine's
    /// clock moves to it).
    pub(crate) fn inject(&mut self, s: u32, index: u32, at_ns: u64) {
        self.next_in_session[s as usize] = index;
        if !self.busy() {
            self.now_ns = self.now_ns.max(at_ns);
        }
        self.pending.push(Reverse((at_ns, s)));
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
        for &r in self.waiting.iter().chain(&self.running) {
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

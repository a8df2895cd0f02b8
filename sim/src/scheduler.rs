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
//!
//! With [`SimConfig::engine_priorities`] the scheduler is vLLM's priority scheduling
//! (`--scheduling-policy priority`, `PriorityRequestQueue`): the waiting queue is ordered by
//! (`priority`, arrival, request id), lower first, a preempted request goes back in that order
//! rather than to the head, and the running request preempted when blocks run out is the one with
//! the largest (`priority`, arrival) — possibly one already scheduled this step, whose tokens are
//! then given back to the budget. A request's priority is fixed when it arrives: its session's
//! last `set-priority` from the policy's slots, sent as `agentrt serve --engine-priorities` sends
//! it (a demotion `p < 0` goes as `-p`; nothing else is sent, so everything else goes at 0).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::io::Write;
use std::time::Instant;

use agentrt_runtime::types::{
    AgentRegistered, EndReason, EngineLoad, Event, RequestArrival, RequestFinish, SessionEnd, SideEffect, ToolCall,
};

use crate::audit::EvictionAudit;
use crate::kv_cache_manager::{KvCacheManager, SeqKv};
use crate::latency::{LatencyModel, StepWork};
use crate::policies::{PolicyStats, SimPolicy};
use crate::prepare::{prompt_tokens, PreparedTrace};
use crate::tokens::output_token;
use crate::trace::{Segment, Trace};

mod host_tier;

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
    /// Policy slots beside the cache policy (`sim run --slot NAME=COMPONENT`), in slot order: they
    /// hear every request event and answer through side effects only (merged as `serve` merges
    /// them); the cache policy stays the one that ranks blocks.
    pub slots: Vec<(String, crate::policies::PolicySpec)>,
    /// vLLM's priority scheduling, with the slots' `set-priority` demotions as request priorities
    /// (`sim run --engine-priorities`, as `serve --engine-priorities` in front of a vLLM started
    /// with `--scheduling-policy priority`). Off: FCFS, and `set-priority` is counted, not used.
    pub engine_priorities: bool,
    /// When the policy hears that a session ended (`session-end`).
    pub session_ends: SessionEnds,
    /// Which of the trace's lifecycle hints the policy hears, for which sessions (`--hints`).
    pub hints: crate::hints::HintsTold,
    /// Every `after_ms` of the trace times this (`sim run --time-scale`): > 1 stretches arrivals
    /// and waits, lowering the load; < 1 compresses them.
    pub time_scale: f64,
    /// Sessions' start times (their first request's `after_ms`) times this as well
    /// (`--arrival-scale`, `--target-utilisation`): more or fewer sessions at once, each with the
    /// trace's own waits between its calls.
    pub arrival_scale: f64,
    /// vLLM's host-memory tier (`sim run --host-blocks`): `None` = no offloading connector.
    pub host_tier: Option<crate::offload::connector::HostTierConfig>,
}

/// When a replay tells the policy that a session ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SessionEnds {
    /// What `agentrt serve` can know: a session with no request arriving or finishing for this
    /// long (`--session-idle-ms`, the same default) is reported ended; its next request, if any,
    /// starts it again. The default.
    Idle { ms: f64 },
    /// Knowledge of the future, no serving host has it: right after the session's last request.
    Oracle,
}

/// `agentrt serve --session-idle-ms`'s default.
pub const DEFAULT_SESSION_IDLE_MS: f64 = 60_000.0;

impl SessionEnds {
    pub fn name(&self) -> String {
        match self {
            SessionEnds::Idle { ms } => format!("idle {:.0} s (as serve infers them)", ms / 1000.0),
            SessionEnds::Oracle => "oracle (the trace's last request)".to_string(),
        }
    }
}

impl Default for SessionEnds {
    fn default() -> Self {
        SessionEnds::Idle {
            ms: DEFAULT_SESSION_IDLE_MS,
        }
    }
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
            slots: Vec::new(),
            engine_priorities: false,
            session_ends: SessionEnds::default(),
            hints: crate::hints::HintsTold::default(),
            time_scale: 1.0,
            arrival_scale: 1.0,
            host_tier: None,
        }
    }

    /// A trace's `after_us` between two calls of a session as replay time (ns), under
    /// [`Self::time_scale`].
    pub fn after_ns(&self, after_us: f64) -> u64 {
        (after_us * self.time_scale * 1000.0) as u64
    }

    /// A session's start (its first request's `after_us`) as replay time (ns), under both scales.
    pub fn start_ns(&self, after_us: f64) -> u64 {
        (after_us * self.time_scale * self.arrival_scale * 1000.0) as u64
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
    /// Per trace request (uid order): when it arrived and when it finished, from the first
    /// arrival (µs; NaN if it never ran).
    pub arrival_us: Vec<f64>,
    pub finish_us: Vec<f64>,
    /// Time from the first arrival to the last finish (µs).
    pub makespan_us: f64,
    /// Time the engine spent running steps (µs): utilisation = busy / makespan.
    pub busy_us: f64,
    /// `session-end` events the policy was told.
    pub sessions_ended: u64,
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
    /// Side effects other than warm-ups and, with engine priorities, `set-priority` (counted,
    /// not carried out).
    pub effects_ignored: u64,
    /// `set-priority` side effects carried out (engine priorities on).
    pub priorities_set: u64,
    /// Trace requests that arrived with a priority other than 0.
    pub demoted_requests: u64,
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
    /// What the host tier did, when there was one.
    pub host: Option<crate::offload::connector::HostTierFigures>,
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
    /// vLLM's request priority (lower is served first), fixed at arrival.
    priority: i32,
    /// Tokens loaded from the host tier at admission, and when that load was issued.
    host_tokens: u32,
    load_started_ns: u64,
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
    kv: KvCacheManager,
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
    /// Each session's priority as the proxy would send it (session id → vLLM priority), from the
    /// slots' `set-priority`; absent = 0.
    session_priority: HashMap<u64, i32>,
    /// Idle session ends: each session's last arrival or finish (ns; `None` = not live), and the
    /// deadlines (last activity + idle time, session), some stale.
    last_activity: Vec<Option<u64>>,
    idle_deadlines: BinaryHeap<Reverse<(u64, u32)>>,
    /// The host tier's connector, when there is one; requests whose load is in flight, those
    /// whose load completed (scheduled before the waiting queue), and those that finished since
    /// the last step (their last store offer and `on_request_finished` are due).
    host: Option<crate::offload::Connector>,
    loading: Vec<usize>,
    loaded_ready: VecDeque<usize>,
    host_finished: Vec<usize>,
}

/// `session-end` of `session` for `reason`, at simulated time `at_ns`.
fn session_end(session: u64, reason: EndReason, at_ns: u64) -> Event {
    Event::SessionEnd(SessionEnd {
        session,
        reason,
        at_us: us(at_ns),
    })
}

fn us(ns: u64) -> u64 {
    ns / 1000
}

impl<'a> Sim<'a> {
    pub fn new(cfg: SimConfig, trace: &'a PreparedTrace, policy: &'a mut dyn SimPolicy) -> Self {
        let kv = KvCacheManager::new(cfg.num_blocks, trace.block_size);
        let host = cfg
            .host_tier
            .clone()
            .map(|h| crate::offload::Connector::new(h, trace.block_size, cfg.latency.kv_bytes_per_token));
        let mut pending = BinaryHeap::new();
        for (s, session) in trace.sessions.iter().enumerate() {
            let first = &trace.requests[session.requests[0] as usize];
            pending.push(Reverse((cfg.start_ns(first.after_us), s as u32)));
        }
        let result = RunResult {
            policy: policy.name().to_string(),
            ttft_us: vec![f64::NAN; trace.requests.len()],
            turn_us: vec![f64::NAN; trace.requests.len()],
            arrival_us: vec![f64::NAN; trace.requests.len()],
            finish_us: vec![f64::NAN; trace.requests.len()],
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
            session_priority: HashMap::new(),
            last_activity: vec![None; trace.sessions.len()],
            idle_deadlines: BinaryHeap::new(),
            host,
            loading: Vec::new(),
            loaded_ready: VecDeque::new(),
            host_finished: Vec::new(),
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
            self.end_idle_sessions();
            self.issue_due();
            if self.waiting.is_empty()
                && self.running.is_empty()
                && self.loading.is_empty()
                && self.loaded_ready.is_empty()
            {
                // Nothing runs: time moves to the next arrival, or to a session going idle
                // before it (the policy hears of it then).
                let arrival = self.pending.peek().map(|Reverse((t, _))| *t);
                let idle = self.next_idle_deadline();
                match (arrival, idle) {
                    (Some(t), Some(d)) => self.now_ns = self.now_ns.max(t.min(d)),
                    (Some(t), None) => self.now_ns = self.now_ns.max(t),
                    (None, _) => break,
                }
                self.host_idle_until_now();
                continue;
            }
            self.advance()?;
        }
        self.finish_run(started)
    }

    /// A request of session `s` arrived or finished now: it is live, and ends (idle rule) if
    /// nothing more of it arrives or finishes within the idle time.
    fn session_active(&mut self, s: u32) {
        if let SessionEnds::Idle { ms } = self.cfg.session_ends {
            self.last_activity[s as usize] = Some(self.now_ns);
            let deadline = self.now_ns + (ms * 1e6) as u64;
            self.idle_deadlines.push(Reverse((deadline, s)));
        }
    }

    fn idle_ns(&self) -> u64 {
        match self.cfg.session_ends {
            SessionEnds::Idle { ms } => (ms * 1e6) as u64,
            SessionEnds::Oracle => u64::MAX,
        }
    }

    /// The earliest deadline that still holds (stale ones dropped).
    fn next_idle_deadline(&mut self) -> Option<u64> {
        let idle = self.idle_ns();
        while let Some(&Reverse((d, s))) = self.idle_deadlines.peek() {
            if self.last_activity[s as usize].is_some_and(|t| t.saturating_add(idle) == d) {
                return Some(d);
            }
            self.idle_deadlines.pop();
        }
        None
    }

    /// Tell the policy of every session silent for the idle time by now, as `serve` does.
    fn end_idle_sessions(&mut self) {
        while let Some(d) = self.next_idle_deadline() {
            if d > self.now_ns {
                break;
            }
            let Some(Reverse((_, s))) = self.idle_deadlines.pop() else {
                break;
            };
            self.last_activity[s as usize] = None;
            self.result.sessions_ended += 1;
            let session = self.trace.sessions[s as usize].id;
            self.policy.event(session_end(session, EndReason::Idle, self.now_ns));
        }
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
        self.end_idle_sessions();
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
        self.result.host = self.host_figures();
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
                priority: 0,
                host_tokens: 0,
                load_started_ns: 0,
            });
        }
    }

    fn arrive(&mut self, mut req: Req) {
        let id = self.reqs.len();
        if self.cfg.engine_priorities {
            req.priority = self.session_priority.get(&req.kv.session).copied().unwrap_or(0);
            if req.priority != 0 && matches!(req.origin, Origin::Trace(_)) {
                self.result.demoted_requests += 1;
            }
        }
        self.first_arrival_ns.get_or_insert(req.arrival_ns);
        if let Some(s) = req.session {
            self.session_active(s);
        }
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
        self.enqueue(id);
    }

    /// Request `r` joins the waiting queue: at the back (FCFS), or in vLLM's priority order —
    /// (priority, arrival, id), lower first — with engine priorities.
    fn enqueue(&mut self, r: usize) {
        if !self.cfg.engine_priorities {
            self.waiting.push_back(r);
            return;
        }
        let key = |req: &Req, id: usize| (req.priority, req.arrival_ns, id);
        let mine = key(&self.reqs[r], r);
        let at = self.waiting.partition_point(|&w| key(&self.reqs[w], w) < mine);
        self.waiting.insert(at, r);
    }

    /// A preempted or skipped request goes back: to the head (FCFS), or in priority order.
    fn requeue(&mut self, r: usize) {
        if self.cfg.engine_priorities {
            self.enqueue(r);
        } else {
            self.waiting.push_front(r);
        }
    }

    /// The running request to preempt when blocks run out: the last one (FCFS), or the one with
    /// the largest (priority, arrival) (vLLM's priority scheduling).
    fn preemption_victim(&self) -> usize {
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

    fn step(&mut self) -> anyhow::Result<()> {
        self.policy.begin_step(us(self.now_ns));
        self.host_begin_step();
        let bs = self.trace.block_size;
        let mut budget = self.cfg.max_batched_tokens;
        let mut scheduled: Vec<(usize, u32)> = Vec::new();
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
                let at = self.preemption_victim();
                let victim = self.running.remove(at);
                // A victim already scheduled this step gives its tokens back (priority
                // scheduling only: under FCFS the victim is the last, not yet scheduled).
                if let Some(k) = scheduled.iter().position(|&(s, _)| s == victim) {
                    budget += scheduled.remove(k).1;
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
            budget -= n;
            i += 1;
        }

        // Waiting requests, in order, if nothing was preempted. One that cache shares hold back
        // waits without holding up the requests behind it (vLLM's skipped waiting requests).
        if !preempted && self.host_schedule_loaded(&mut budget, &mut scheduled) {
            let mut skipped = Vec::new();
            while budget > 0 && self.running.len() < self.cfg.max_num_seqs {
                let Some(&r) = self.waiting.front() else { break };
                let hit = self.kv.computed_blocks(&self.reqs[r].kv);
                let hit_tokens = (hit.len() * bs) as u32;
                // The host tier continues the GPU hit, or holds the request back this step.
                let Some(host_tokens) = self.host_lookup(r, hit.len()) else {
                    skipped.push(self.waiting.pop_front().expect("it is the front"));
                    continue;
                };
                let kv = &self.reqs[r].kv;
                let n = (kv.num_tokens - hit_tokens).min(budget);
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
                self.reqs[r].kv.num_computed_tokens = hit_tokens;
                scheduled.push((r, n));
                budget -= n;
            }
            for r in skipped.into_iter().rev() {
                self.requeue(r);
            }
        }

        if scheduled.is_empty() {
            if self.host_busy() {
                self.host_idle_step();
                return Ok(());
            }
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
        let mut work = StepWork::default();
        for &(r, n) in &scheduled {
            work.add(self.reqs[r].kv.num_computed_tokens, n);
        }
        let dt = self.cfg.latency.step_seconds(&work);
        let step_ns = (dt * 1e9).round() as u64;
        self.host_offer_stores(&scheduled, self.now_ns + step_ns);
        self.now_ns += step_ns;
        self.result.busy_us += dt * 1e6;
        self.result.steps += 1;
        self.op(serde_json::json!({"op": "step"}));
        self.after_step(&scheduled);
        if let Some(conn) = &mut self.host {
            conn.end_step(self.now_ns);
        }
        Ok(())
    }

    /// First admission of `r`: `hit_tokens` from the GPU cache, `host_tokens` loaded from the host
    /// tier.
    fn admitted(&mut self, r: usize, hit_blocks: usize, hit_tokens: u32, host_tokens: u32) {
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

    fn preempt(&mut self, r: usize) {
        self.result.preemptions += 1;
        self.op(serde_json::json!({"op": "preempt", "id": r}));
        let req = &mut self.reqs[r];
        self.kv.free(&mut req.kv, &mut *self.policy);
        req.kv.num_computed_tokens = 0;
        self.requeue(r);
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
        if self.host.is_some() {
            self.host_finished.push(r);
        }
        let warmup = matches!(req.origin, Origin::Warmup(_));
        if let Origin::Trace(uid) = req.origin {
            if self.trace.requests[uid as usize].tool_call {
                // The answer asks for a tool: the proxy sees it as the answer completes.
                self.policy.event(Event::ToolCall(ToolCall {
                    session: req.kv.session,
                    agent: req.agent,
                    tool: 0,
                    args_hash: 0,
                    at_us: us(now),
                }));
            }
        }
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
                let origin = self.first_arrival_ns.unwrap_or(0);
                self.result.arrival_us[uid as usize] = arrival.saturating_sub(origin) as f64 / 1000.0;
                self.result.finish_us[uid as usize] = now.saturating_sub(origin) as f64 / 1000.0;
                let tenant = &mut self.result.tenants[self.trace.requests[uid as usize].tenant as usize];
                tenant.requests += 1;
                tenant.turn_us_sum += (now - arrival) as f64 / 1000.0;
                self.result.output_tokens += u64::from(req.generated);
                let s = req.session.expect("trace requests belong to sessions");
                let agent = req.agent;
                self.session_active(s);
                self.tell_hints(s, uid, agent, now);
                self.next_request(s, now);
            }
        }
    }

    /// The trace's hints of request `uid` (session `s`, answered at `now`), as the framework would
    /// send them; a closed session is not also ended by the idle rule (a later request of it, if
    /// the hint was wrong, starts it again).
    fn tell_hints(&mut self, s: u32, uid: u32, agent: u32, now: u64) {
        let session = &self.trace.sessions[s as usize];
        let oracle_last = self.cfg.session_ends == SessionEnds::Oracle
            && self.next_in_session[s as usize] as usize >= session.requests.len();
        let hints = &self.trace.requests[uid as usize].hints;
        for event in self.cfg.hints.events(hints, session.id, agent, us(now), oracle_last) {
            if matches!(event, Event::SessionEnd(_)) {
                self.result.sessions_ended += 1;
                self.last_activity[s as usize] = None;
            }
            self.policy.event(event);
        }
    }

    /// Session `s` finished a request at `now`: its next one is due `after_ms` later.
    fn next_request(&mut self, s: u32, now: u64) {
        let session = &self.trace.sessions[s as usize];
        let next = self.next_in_session[s as usize] as usize;
        match session.requests.get(next) {
            Some(&uid) => {
                let after = self.cfg.after_ns(self.trace.requests[uid as usize].after_us);
                self.pending.push(Reverse((now + after, s)));
            }
            None if self.cfg.session_ends == SessionEnds::Oracle => {
                self.result.sessions_ended += 1;
                // The oracle knows the session is over for certain, as a framework does.
                self.policy.event(session_end(session.id, EndReason::Closed, now));
            }
            None => {}
        }
    }

    fn carry_out_side_effects(&mut self) {
        self.report_load();
        for effect in self.policy.act() {
            match effect {
                SideEffect::WarmPrefix(w) => self.warm(w.agent, w.anchor_hash),
                SideEffect::SetPriority(p) if self.cfg.engine_priorities => {
                    // What `serve --engine-priorities` sends: only demotions.
                    self.result.priorities_set += 1;
                    if p.priority < 0 {
                        self.session_priority.insert(p.session, p.priority.saturating_neg());
                    } else {
                        self.session_priority.remove(&p.session);
                    }
                }
                _ => self.result.effects_ignored += 1,
            }
        }
    }

    /// Tell the policy the engine's load (`engine-load`) when it changed since the last report, so
    /// that it can hold side effects back while requests wait (a warm-up's prefill would delay
    /// them).
    fn report_load(&mut self) {
        let load = (self.queue_depth() as u32, self.running.len() as u32);
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
            priority: 0,
            host_tokens: 0,
            load_started_ns: 0,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block_pool::PoolObserver;
    use agentrt_runtime::types::SetPriority;

    /// A policy that demotes one session from its first `act` on (the part of fair-share this
    /// test is about: what the scheduler does with a demotion).
    struct Demote {
        session: u64,
        told: bool,
    }
    impl PoolObserver for Demote {}
    impl crate::offload::ranked::HostRanker for Demote {}
    impl SimPolicy for Demote {
        fn name(&self) -> &str {
            "demote"
        }
        fn act(&mut self) -> Vec<SideEffect> {
            if std::mem::replace(&mut self.told, true) {
                return Vec::new();
            }
            vec![SideEffect::SetPriority(SetPriority {
                session: self.session,
                priority: -10,
            })]
        }
    }

    /// One running seat: `busy` holds it from 0 ms, then `heavy` (demoted) arrives at 1 ms and
    /// `light` at 2 ms; both wait for the seat.
    fn trace() -> PreparedTrace {
        let line = |session: &str, after: u32, output: u32| {
            format!(
                r#"{{"session": "{session}", "agent": "{session}", "after_ms": {after}, "prompt": [{{"seg": "{session}/q", "tokens": 64}}], "output_tokens": {output}}}"#
            )
        };
        let text = format!(
            "{}\n{}\n{}\n",
            line("busy", 0, 200),
            line("heavy", 1, 4),
            line("light", 2, 4)
        );
        PreparedTrace::new(&Trace::parse(&text).unwrap(), 16, false)
    }

    fn admission_order(engine_priorities: bool) -> (Vec<String>, RunResult) {
        let trace = trace();
        let mut cfg = SimConfig::new(100);
        cfg.max_num_seqs = 1;
        cfg.engine_priorities = engine_priorities;
        let mut policy = Demote {
            session: crate::tokens::hash_str("heavy"),
            told: false,
        };
        let result = Sim::new(cfg, &trace, &mut policy).run().unwrap();
        let names = result
            .admission_order
            .iter()
            .map(|&uid| {
                trace.sessions[trace.requests[uid as usize].session as usize]
                    .name
                    .clone()
            })
            .collect();
        (names, result)
    }

    /// Blocks run out while a demoted request admitted first and a normal one admitted later
    /// both decode: vLLM's priority scheduling preempts the demoted one (largest priority), not
    /// the last one running as FCFS does.
    #[test]
    fn out_of_blocks_the_demoted_request_is_preempted_not_the_last_one() {
        let line = |session: &str, after: u32, prompt: u32, output: u32| {
            format!(
                r#"{{"session": "{session}", "agent": "{session}", "after_ms": {after}, "prompt": [{{"seg": "{session}/q", "tokens": {prompt}}}], "output_tokens": {output}}}"#
            )
        };
        let text = format!(
            "{}\n{}\n{}\n",
            line("first", 0, 16, 1),
            line("a", 1, 320, 400),
            line("b", 50, 320, 400)
        );
        let trace = PreparedTrace::new(&Trace::parse(&text).unwrap(), 16, false);
        let finish = |engine_priorities: bool| {
            let mut cfg = SimConfig::new(60);
            cfg.engine_priorities = engine_priorities;
            let mut policy = Demote {
                session: crate::tokens::hash_str("a"),
                told: false,
            };
            let r = Sim::new(cfg, &trace, &mut policy).run().unwrap();
            assert!(r.preemptions > 0, "the cache is too small for both");
            (r.finish_us[1], r.finish_us[2])
        };
        let (a, b) = finish(true);
        assert!(a > b, "a, demoted, was preempted and finished after b: {a} vs {b}");
        let (a, b) = finish(false);
        assert!(a < b, "FCFS preempts b, the last one running: {a} vs {b}");
    }

    #[test]
    fn a_demoted_sessions_waiting_request_is_scheduled_after_a_normal_one() {
        let (order, result) = admission_order(true);
        assert_eq!(order, ["busy", "light", "heavy"], "priority scheduling: light first");
        assert_eq!((result.priorities_set, result.demoted_requests), (1, 1));
        // The same trace without engine priorities is FCFS: the demotion is counted, not used.
        let (order, result) = admission_order(false);
        assert_eq!(order, ["busy", "heavy", "light"]);
        assert_eq!((result.priorities_set, result.effects_ignored), (0, 1));
    }
}

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

use crate::kv_cache_manager::{KvCacheManager, SeqKv};
use crate::latency::StepWork;
use crate::policies::SimPolicy;
use crate::prepare::{prompt_tokens, PreparedTrace};
use crate::tokens::output_token;
use crate::trace::Segment;

mod config;
mod continuum;
mod effects;
mod host_tier;
mod proxy;
mod replica;
mod request;
mod results;
mod sessions;
mod step;

pub use config::{SessionEnds, SimConfig, DEFAULT_SESSION_IDLE_MS};
pub use continuum::ContinuumConfig;
pub(crate) use replica::EngineLoadView;
pub use request::OpLog;
use request::{Origin, Req};
pub use results::{RunResult, TenantFigures};

/// One replay of a prepared trace under one policy (and, with [`Sim::with_admission`], behind a
/// proxy's admission stage).
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
    /// The proxy's admission stage (`None`: every request goes to the engine at once, as to a
    /// stock vLLM), the requests it holds (by session), and the session index of each session id.
    admission: Option<Box<dyn crate::admission::AdmissionStage + 'a>>,
    held: HashMap<u32, Req>,
    session_index: HashMap<u64, u32>,
    /// Closed-loop programs (`SimConfig::programs`): the next session to start.
    next_program: usize,
    /// Per session: whether it is live (issued its first request, not yet its last answer) and
    /// its context (the prompt in flight, or the last prompt + answer); the live ones' sum.
    live: Vec<bool>,
    context_tokens: Vec<u32>,
    live_tokens: u64,
    /// Continuum's pins and tool durations, when the engine is Continuum's.
    continuum: Option<continuum::ContinuumState>,
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
        let started = cfg.programs.unwrap_or(usize::MAX).min(trace.sessions.len());
        for (s, session) in trace.sessions.iter().enumerate().take(started) {
            let first = &trace.requests[session.requests[0] as usize];
            // Closed-loop programs start at once, each slot's next when one ends.
            let at = if cfg.programs.is_some() {
                0
            } else {
                cfg.start_ns(first.after_us)
            };
            pending.push(Reverse((at, s as u32)));
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
        let continuum = cfg.continuum.as_ref().map(|_| continuum::ContinuumState::default());
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
            admission: None,
            held: HashMap::new(),
            session_index: trace
                .sessions
                .iter()
                .enumerate()
                .map(|(s, x)| (x.id, s as u32))
                .collect(),
            next_program: started,
            live: vec![false; trace.sessions.len()],
            context_tokens: vec![0; trace.sessions.len()],
            live_tokens: 0,
            continuum,
        }
    }

    /// Put the proxy's admission stage in front of the engine.
    pub fn with_admission(mut self, stage: Box<dyn crate::admission::AdmissionStage + 'a>) -> Self {
        self.admission = Some(stage);
        self
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
            self.release_held();
            if self.waiting.is_empty()
                && self.running.is_empty()
                && self.loading.is_empty()
                && self.loaded_ready.is_empty()
            {
                // Nothing runs: time moves to the next arrival, or to a session going idle, the
                // proxy's next check or a pin's end before it (each is heard then).
                let arrival = self.pending.peek().map(|Reverse((t, _))| *t);
                let wake = [
                    self.next_idle_deadline(),
                    self.next_stage_check(),
                    self.continuum_next_expiry(),
                ]
                .into_iter()
                .flatten()
                .min();
                let next = match (arrival, wake) {
                    (Some(t), Some(d)) => t.min(d),
                    (Some(t), None) => t,
                    (None, Some(d)) if !self.held.is_empty() || self.continuum_next_expiry().is_some() => d,
                    (None, _) if self.release_stuck() => continue,
                    (None, _) => break,
                };
                let next = next.max(self.now_ns);
                self.account_working_set(next - self.now_ns);
                self.now_ns = next;
                self.continuum_expire();
                self.host_idle_until_now();
                continue;
            }
            self.advance()?;
        }
        self.finish_run(started)
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
        self.result.admission = self.admission.as_ref().map(|s| s.figures());
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
            let at = self.now_ns.max(t);
            self.offer(
                s,
                Req {
                    origin: Origin::Trace(uid),
                    kv,
                    prompt_tokens: r.prompt.tokens,
                    output_target: r.output_tokens,
                    generated: 0,
                    arrival_ns: at,
                    offered_ns: at,
                    scheduled_ns: None,
                    first_token_ns: None,
                    admitted_once: false,
                    hit_tokens: 0,
                    agent: r.agent,
                    anchor_hash: r.anchor_hash,
                    session: Some(s),
                    priority: 0,
                    host_tokens: 0,
                    load_started_ns: 0,
                },
            );
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
        self.tell(Event::RequestArrival(RequestArrival {
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
        if self.cfg.continuum.is_some() {
            let mine = self.program_key(r);
            let at = self.waiting.partition_point(|&w| self.program_key(w) < mine);
            self.waiting.insert(at, r);
            return;
        }
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
        if self.cfg.engine_priorities || self.cfg.continuum.is_some() {
            self.enqueue(r);
        } else {
            self.waiting.push_front(r);
        }
    }
}

#[cfg(test)]
mod tests;

//! # CacheSage, scaled: next-use time over a sparse agent graph
//!
//! One engine shared by hundreds of agent applications evicts anchors between uses; what decides
//! the hit rate there is *which* anchors stay, and the offline optimum (Bélády) keeps the ones
//! used again soonest. This model estimates that directly: every candidate block gets the rate at
//! which it is expected to be used again (uses per second), from what the runtime layer knows.
//!
//! - **An anchor block** of agent `a`:
//!   `Σ_live sessions Σ_paths p / t` — each live session's chance to reach `a` within K steps over
//!   the agents' learned successors, divided by when (the learned gaps — tool waits, user think
//!   time — and service times along the path) — plus the rate at which new sessions start using
//!   `a` ([`agents::AgentStats::new_session_rate`]), which slows as an application goes quiet.
//! - **Content several sessions shared** (reported with session 0): at most its agent's anchor
//!   rate, and no more than its own recency says (`1 / age`): only some sessions want it.
//! - **A session's own content**: the same sum over that session's paths back to the block's
//!   agent, times the chance the next call carries the block forward (continuity); a request of
//!   that agent already in flight makes it imminent; an ended session's content is dead (0).
//! - **A block of an agent it does not know**: `1 / age` — the estimate behind LRU — with the
//!   engine's stamp turned into time ([`clock`]).
//!
//! The agent graph is sparse ([`agents`]: four heavy-hitter successors per agent, smoothed by a
//! prior so that an application seen once already predicts its pipeline), so it tracks 10,000
//! agents in ~1 MB. Before any agent has been called twice every score is recency: exactly LRU.
//!
//! Prefetch (`act`): the live session's most likely next agent whose anchor is not resident and
//! whose call is at least a moment away gets a warm-up — unless the engine has requests waiting,
//! the warm-up budget is spent, or the blocks it would push out ([`frontier`]) are wanted sooner.

pub mod agents;
pub mod clock;
pub mod forecast;
pub mod frontier;
pub mod gaps;
pub mod params;
pub mod sessions;
mod snapshot;
pub mod warmups;

use std::collections::HashMap;

use agentrt_sdk::{BlockEvent, BlockOp, Config, Event, Forecast, ForecastKind, Item};
use agentrt_sdk::{RequestArrival, RequestFinish, SideEffect, WarmPrefix};

use crate::anchor::BlockSize;
use agents::{AgentStats, AgentTable};
use clock::StampClock;
use forecast::{handover_ms, walk_session, Predicted, MIN_LEAD_MS};
use frontier::Frontier;
use gaps::GapHistogram;
pub use params::Params;
use sessions::{EndedSessions, LiveSession, Sessions};
use warmups::WarmupLedger;

/// Anchor rates are recomputed at most this often (µs of host time) unless a request arrived.
const RATES_REFRESH_US: u64 = 50_000;
/// Sessions reported per `predict` call, most recently active first; forecasts per session.
const PREDICT_MAX_SESSIONS: usize = 64;
const PREDICT_PER_SESSION: usize = 3;
/// A warm-up is asked for only if the predicted call is at least this far away (ms): sooner, the
/// call itself would arrive before the warm-up's prefill is done.
const WARMUP_MIN_LEAD_MS: f32 = 100.0;
/// Most warm-up tokens that can be saved up (the largest anchors are ~14 k tokens).
const WARMUP_BUCKET_MAX: f32 = 16_384.0;

/// Whose clock an item's `last-access` is on: the engine's (GPU-tier items, which the model maps
/// to times) or the host pool's recency stamps (host-tier items, comparable only to each other).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stamps {
    Gpu,
    Host,
}

#[derive(Debug, Clone)]
pub struct Scaled {
    params: Params,
    agents: AgentTable,
    sessions: Sessions,
    clock: StampClock,
    /// Latest host time seen in an event (µs).
    now_us: u64,
    /// The engine's block size, learned from block positions.
    block_size: BlockSize,
    /// Requests waiting in the engine at the last `engine-load` sample.
    queue_depth: u32,
    /// Expected uses per second of each agent's anchor from live sessions (derived).
    anchor_rates: HashMap<u32, f32>,
    rates_at_us: u64,
    rates_stale: bool,
    /// Prompt tokens warm-ups may still prefill: `warmup-budget` of every user request's prompt.
    warmup_tokens: f32,
    /// What the next evictions are worth, from the latest ranking.
    frontier: Frontier,
    /// How the warm-ups paid off, which scales how far the next ones trust the model.
    warmups: WarmupLedger,
    /// Every agent's gaps pooled (after an answer, after a tool call): what an agent with few
    /// gaps of its own is timed by.
    gaps: [GapHistogram; 2],
    /// Sessions reported ended, and how many of the ends reported were followed by another call
    /// of the session (with `serve`, an end is silence: some come back).
    ended: EndedSessions,
    ends_reported: u32,
    ends_returned: u32,
}

impl Default for Scaled {
    fn default() -> Self {
        Self::with_params(Params::default())
    }
}

impl Scaled {
    pub fn with_params(params: Params) -> Self {
        let max_ended = params.max_sessions;
        Self {
            agents: AgentTable::new(params.max_agents),
            sessions: Sessions::new(params.max_sessions),
            params,
            clock: StampClock::default(),
            now_us: 0,
            block_size: BlockSize::default(),
            queue_depth: 0,
            anchor_rates: HashMap::new(),
            rates_at_us: 0,
            rates_stale: true,
            warmup_tokens: 0.0,
            frontier: Frontier::default(),
            warmups: WarmupLedger::default(),
            gaps: Default::default(),
            ended: EndedSessions::new(max_ended),
            ends_reported: 0,
            ends_returned: 0,
        }
    }

    pub fn params(&self) -> &Params {
        &self.params
    }

    pub fn agents(&self) -> usize {
        self.agents.len()
    }

    pub fn live_sessions(&self) -> usize {
        self.sessions.len()
    }

    /// Learned anything beyond recency: some agent was called twice.
    pub fn has_structure(&self) -> bool {
        self.agents.iter().any(|a| a.calls >= 2)
    }

    /// The snapshot budget for `agents` tracked agents: 20 KB up to 32 agents, ~100 bytes per
    /// agent beyond.
    pub fn state_budget(agents: usize) -> usize {
        snapshot::budget(agents)
    }

    pub fn observe(&mut self, event: &Event) {
        match event {
            Event::AgentRegistered(a) => {
                let (agent, dropped) = self.agents.entry(a.agent);
                agent.anchor_hash = a.anchor_hash;
                agent.anchor_tokens = a.anchor_tokens;
                if let Some(d) = dropped {
                    self.forget_agent(d);
                }
            }
            // Warm-ups are the policy's own doing: learning them would teach it its own guesses.
            Event::RequestArrival(r) if !r.warmup => self.learn_arrival(r),
            Event::RequestFinish(r) if !r.warmup => self.learn_finish(r),
            Event::SessionEnd(end) => {
                if let Some(s) = self.sessions.remove(end.session) {
                    if let Some(a) = self.agents.get_mut(s.agent) {
                        a.learn_end();
                    }
                    self.ends_reported = self.ends_reported.saturating_add(1);
                    self.ended.insert(s, self.now_us);
                    self.rates_stale = true;
                }
            }
            Event::ToolCall(call) => {
                if let Some(s) = self.sessions.get_mut(call.session) {
                    s.tool_wait = true;
                }
            }
            Event::EngineLoad(load) => {
                self.queue_depth = load.queue_depth;
                self.now_us = self.now_us.max(load.at_us);
            }
            _ => {}
        }
    }

    fn learn_arrival(&mut self, r: &RequestArrival) {
        self.now_us = self.now_us.max(r.at_us);
        // The bucket holds at most one large anchor's worth: unused budget does not pile up.
        self.warmup_tokens =
            (self.warmup_tokens + self.params.warmup_budget * r.prompt_tokens as f32).min(WARMUP_BUCKET_MAX);
        // Before the call's own blocks are touched: did a warm-up keep the anchor for it?
        let anchor_cached = self.agents.get(r.agent).is_some_and(|a| a.residency.resident());
        self.warmups.called(r.agent, anchor_cached);
        let (agent, dropped) = self.agents.entry(r.agent);
        agent.last_seen_us = r.at_us;
        agent.calls = agent.calls.saturating_add(1);
        if agent.anchor_hash == 0 {
            agent.anchor_hash = r.anchor_hash;
        }
        match r.continues {
            // `continues` is empty exactly for an agent's first call in a session.
            None => agent.learn_first_call(r.at_us),
            Some(c) => agent.learn_continuation(c.shared_tokens, c.previous_tokens),
        }
        if let Some(d) = dropped {
            self.forget_agent(d);
        }
        // A session reported ended that calls again was only silent: its end is taken back.
        let returned = self.ended.take(r.session);
        if let Some(back) = returned {
            self.ends_returned = self.ends_returned.saturating_add(1);
            if let Some(a) = self.agents.get_mut(back.agent) {
                a.ends = a.ends.saturating_sub(1);
            }
        }
        let before = self.sessions.arrive(r.session, r.agent, r.at_us);
        if let Some(s) = self.sessions.get_mut(r.session) {
            s.prompt_tokens = r.prompt_tokens;
        }
        if let Some(prev) = before.or(returned) {
            let gap_ms = if prev.in_flight == 0 {
                r.at_us.saturating_sub(prev.finished_us) as f32 / 1000.0
            } else {
                0.0
            };
            if prev.in_flight == 0 {
                self.gaps[usize::from(prev.tool_wait)].record(gap_ms);
            }
            if let Some(a) = self.agents.get_mut(prev.agent) {
                a.learn_successor(r.agent, gap_ms);
                if prev.in_flight == 0 {
                    a.gaps[usize::from(prev.tool_wait)].record(gap_ms);
                }
            }
        }
        self.rates_stale = true;
    }

    /// P(a session reported ended calls again): the ends taken back over the ends reported, with
    /// one end of prior weight (0 until a session has come back).
    fn p_back(&self) -> f32 {
        if !self.params.ended_sessions {
            return 0.0;
        }
        self.ends_returned as f32 / (self.ends_reported as f32 + 1.0)
    }

    /// The pooled gap histograms, or `None` when the model times sessions by mean gaps.
    fn pooled_gaps(&self) -> Option<&[GapHistogram; 2]> {
        self.params.gap_histograms.then_some(&self.gaps)
    }

    fn learn_finish(&mut self, r: &RequestFinish) {
        self.now_us = self.now_us.max(r.at_us);
        let Some(s) = self.sessions.get(r.session).copied() else {
            // Reported ended while its call ran (silence is measured from the last arrival or
            // finish): the call is over now.
            self.ended.finish(r.session, r.at_us);
            return;
        };
        if s.agent == r.agent {
            let ms = r.at_us.saturating_sub(s.arrived_us) as f32 / 1000.0;
            if let Some(a) = self.agents.get_mut(r.agent) {
                a.learn_service(ms);
            }
        }
        self.sessions.finish(r.session, r.at_us);
        self.rates_stale = true;
    }

    pub fn observe_block(&mut self, block: &BlockEvent) {
        if block.op == BlockOp::AllCleared {
            for a in self.agents.iter_mut() {
                a.residency.clear();
            }
            return;
        }
        self.block_size.learn(block.position);
        let block_tokens = self.block_size.tokens();
        if let Some(agent) = self.agents.get_mut(block.agent) {
            if agent.is_anchor_position(block.position, block_tokens) {
                agent.residency.record(block.op);
            }
        }
    }

    /// Expected uses per second of every agent's anchor from the live sessions' paths.
    fn refresh_rates(&mut self) {
        let due = self.rates_stale || self.now_us.saturating_sub(self.rates_at_us) >= RATES_REFRESH_US;
        if !due {
            return;
        }
        self.anchor_rates.clear();
        let pooled = self.params.gap_histograms.then_some(&self.gaps);
        let p_back = self.p_back();
        let (agents, rates, now) = (&self.agents, &mut self.anchor_rates, self.now_us);
        // Live sessions, and ended ones as likely to come back as ended ones have: an anchor is
        // the prefix of every session's content, so it is worth at least what any of them is.
        let ended = self.ended.iter().filter(|_| p_back > 0.0).map(|s| (s, p_back));
        for (s, weight) in self.sessions.iter().map(|s| (s, 1.0)).chain(ended) {
            if s.in_flight > 0 && weight == 1.0 {
                // Its call is here (perhaps queued): its anchor is as imminent as its history —
                // the history is no use without the prefix.
                *rates.entry(s.agent).or_default() += 1000.0 / MIN_LEAD_MS;
            }
            walk_session(
                agents,
                pooled,
                self.params.prior,
                self.params.k,
                s,
                now,
                &mut |p: Predicted| {
                    *rates.entry(p.agent).or_default() += weight * 1000.0 * p.p / p.ms;
                },
            );
        }
        self.rates_at_us = now;
        self.rates_stale = false;
    }

    fn forget_agent(&mut self, agent: u32) {
        self.sessions.forget_agent(agent);
        self.ended.forget_agent(agent);
        self.warmups.forget_agent(agent);
    }

    fn anchor_rate(&self, agent: &AgentStats) -> f32 {
        self.anchor_rates.get(&agent.handle).copied().unwrap_or(0.0) + agent.new_session_rate(self.now_us)
    }

    /// Expected uses per second of each agent by one session (`weight` × its paths, summed per
    /// agent).
    fn session_rates(&self, s: &LiveSession, weight: f32) -> Vec<(u32, f32)> {
        let mut out: Vec<(u32, f32)> = Vec::new();
        walk_session(
            &self.agents,
            self.pooled_gaps(),
            self.params.prior,
            self.params.k,
            s,
            self.now_us,
            &mut |p: Predicted| {
                let p = Predicted { p: p.p * weight, ..p };
                let rate = 1000.0 * p.p / p.ms;
                match out.iter_mut().find(|(a, _)| *a == p.agent) {
                    Some((_, r)) => *r += rate,
                    None => out.push((p.agent, rate)),
                }
            },
        );
        out
    }

    pub fn score(&mut self, items: &[Item]) -> Vec<f32> {
        if !self.has_structure() {
            return agentrt_sdk::recency_scores(items);
        }
        if let Some(newest) = items.iter().map(|i| i.last_access).max() {
            self.clock.record(newest, self.now_us);
        }
        let scores = self.expected_use(items, Stamps::Gpu);
        self.frontier.record(&scores, self.now_us);
        scores
    }

    /// Host-tier candidates (contract 0.3), by the same expected use: the anchors of agents due
    /// and live sessions' content above the rest. Their `last-access` is the host pool's own
    /// recency stamp, not the engine's clock, so nothing here reads it as a time or learns from
    /// it: what only recency would rank scores 0, and the host's ties go in its LRU order. Nor
    /// do host-tier scores move the warm-up frontier, which is the GPU cache's.
    pub fn score_host(&mut self, items: &[Item]) -> Vec<f32> {
        if !self.has_structure() {
            return vec![0.0; items.len()];
        }
        self.expected_use(items, Stamps::Host)
    }

    fn expected_use(&mut self, items: &[Item], stamps: Stamps) -> Vec<f32> {
        let recency = |m: &Self, item: &Item| match stamps {
            Stamps::Gpu => m.recency_rate(item),
            Stamps::Host => 0.0,
        };
        self.refresh_rates();
        let p_back = self.p_back();
        let mut by_session: HashMap<u64, Vec<(u32, f32)>> = HashMap::new();
        let scores: Vec<f32> = items
            .iter()
            .map(|item| {
                let Some(agent) = self.agents.get(item.agent) else {
                    return recency(self, item);
                };
                if agent.is_anchor_position(item.position, item.tokens) {
                    return self.anchor_rate(agent);
                }
                if item.session == 0 {
                    // Content several sessions shared (a subject's few-shot block, a question
                    // many ask) is reused only when its agent runs — at most the anchor's rate —
                    // and only by the sessions that want that content, which nothing here
                    // counts: its own recency estimates that share.
                    return match stamps {
                        Stamps::Gpu => self.anchor_rate(agent).min(self.recency_rate(item)),
                        // Without a time for it, what the anchor's rate bounds is all there is.
                        Stamps::Host => self.anchor_rate(agent),
                    };
                }
                let (s, weight) = match (self.sessions.get(item.session), self.ended.get(item.session)) {
                    (Some(s), _) => (s, 1.0),
                    // Reported ended: dead, unless ends have been taken back before — then as
                    // likely to come back as ended sessions have been.
                    (None, Some(s)) if p_back > 0.0 => (s, p_back),
                    // An ended (or untracked) session's own content is dead.
                    _ => return 0.0,
                };
                let keeps = agent.keeps(item.position, item.tokens, s.prompt_tokens);
                if weight == 1.0 && s.in_flight > 0 && s.agent == item.agent {
                    // Its request is here (perhaps queued, its prefix hit not yet taken).
                    return keeps * 1000.0 / MIN_LEAD_MS;
                }
                let stale = stamps == Stamps::Gpu
                    && s.in_flight == 0
                    && s.agent == item.agent
                    && self
                        .clock
                        .stamp_at(s.arrived_us)
                        .is_some_and(|at| item.last_access < at);
                if stale {
                    // The block's agent made the session's latest call, and the block was freed
                    // before that call arrived: not part of it (an earlier answer, the unfinished
                    // end of an earlier prompt, a history the call dropped), so not what the
                    // agent's next call carries forward — what it is worth is what its recency
                    // says. (Another agent's blocks wait for that agent's turn.)
                    return recency(self, item);
                }
                let rates = by_session
                    .entry(item.session)
                    .or_insert_with(|| self.session_rates(s, weight));
                rates
                    .iter()
                    .find(|(a, _)| *a == item.agent)
                    .map_or(0.0, |(_, r)| r * keeps)
            })
            .collect();
        scores
    }

    /// `1 / age`, in uses per second, for a block nothing else is known about.
    fn recency_rate(&self, item: &Item) -> f32 {
        match self.clock.time_of(item.last_access) {
            Some(t) => 1_000_000.0 / (self.now_us.saturating_sub(t).max(1_000) as f32),
            None => 0.0,
        }
    }

    pub fn predict(&mut self, horizon: u32) -> Vec<Forecast> {
        self.refresh_rates();
        let mut out = Vec::new();
        let mut recent: Vec<_> = self.sessions.iter().copied().collect();
        recent.sort_by_key(|s| std::cmp::Reverse((s.active_us(), s.id)));
        for s in recent.iter().take(PREDICT_MAX_SESSIONS) {
            let Some(agent) = self.agents.get(s.agent) else {
                continue;
            };
            let mut next: Vec<(u32, f32, f32)> = agent.next(self.params.prior).collect();
            next.sort_by(|a, b| b.1.total_cmp(&a.1));
            for (handle, probability, _) in next.into_iter().take(PREDICT_PER_SESSION) {
                out.push(Forecast {
                    kind: ForecastKind::NextAgent,
                    session: s.id,
                    agent: handle,
                    subject: self.agents.get(handle).map_or(0, |a| a.anchor_hash),
                    probability,
                    steps: 1,
                });
            }
            let end = agent.p_end(self.params.prior);
            if end > 0.0 {
                out.push(Forecast {
                    kind: ForecastKind::SessionEnd,
                    session: s.id,
                    agent: 0,
                    subject: 0,
                    probability: end,
                    steps: 1,
                });
            }
        }
        // Workload-wide: each agent's share of the expected calls (top agents only).
        let mut rates: Vec<(u32, u64, f32)> = self
            .agents
            .iter()
            .map(|a| (a.handle, a.anchor_hash, self.anchor_rate(a)))
            .filter(|&(_, _, r)| r > 0.0)
            .collect();
        let total: f32 = rates.iter().map(|r| r.2).sum();
        rates.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)));
        for (handle, anchor_hash, rate) in rates.into_iter().take(PREDICT_MAX_SESSIONS) {
            out.push(Forecast {
                kind: ForecastKind::NextAgent,
                session: 0,
                agent: handle,
                subject: anchor_hash,
                probability: rate / total,
                steps: horizon.clamp(1, self.params.k),
            });
        }
        out
    }

    pub fn act(&mut self) -> Vec<SideEffect> {
        if !self.params.prefetch || self.queue_depth > self.params.warmup_max_queue || !self.has_structure() {
            return Vec::new();
        }
        self.refresh_rates();
        let now = self.now_us;
        let cooldown_us = u64::from(self.params.warmup_cooldown_ms) * 1000;
        // What the model's earlier warm-ups were worth scales its probability and expected use.
        let trust = self.warmups.calibration();
        // The likeliest next call of any live session, soonest first among equals, whose anchor
        // is gone and is not being warmed already.
        let mut best: Option<Predicted> = None;
        for s in self.sessions.iter() {
            let Some(agent) = self.agents.get(s.agent) else {
                continue;
            };
            let start = handover_ms(&self.agents, s, now);
            for (next, p, gap_ms) in agent.next(self.params.prior) {
                let ms = (start + gap_ms).max(MIN_LEAD_MS);
                if p < self.params.prefetch_threshold || ms < WARMUP_MIN_LEAD_MS {
                    continue;
                }
                let Some(target) = self.agents.get(next) else { continue };
                let cooling = target.warmed_at_us != 0 && now.saturating_sub(target.warmed_at_us) < cooldown_us;
                let affordable = target.anchor_tokens as f32 <= self.warmup_tokens;
                // Worth what it pushes out: the anchor must be wanted sooner than the blocks
                // its warm-up would evict — as many as it misses (the rest are prefix hits).
                let whole = target.anchor_tokens.div_ceil(self.block_size.tokens().max(16));
                let blocks = match target.residency.max {
                    0 => whole,
                    max => max.saturating_sub(target.residency.blocks),
                } as usize;
                let (rate, cost) = (self.anchor_rate(target), self.frontier.cost(blocks, now));
                if target.residency.resident() || cooling || target.anchor_hash == 0 || !affordable || rate <= cost {
                    continue;
                }
                if trust * p < self.params.prefetch_threshold || trust * rate <= cost {
                    self.warmups.withheld(next);
                    continue;
                }
                let better = best.is_none_or(|b| p > b.p || (p == b.p && (ms, next) < (b.ms, b.agent)));
                if better {
                    best = Some(Predicted {
                        agent: next,
                        p,
                        ms,
                        steps: 1,
                    });
                }
            }
        }
        let Some(best) = best else { return Vec::new() };
        let target = self.agents.get_mut(best.agent).expect("chosen among tracked agents");
        target.warmed_at_us = now.max(1);
        self.warmup_tokens -= target.anchor_tokens as f32;
        self.warmups.issued(target.handle, best.p);
        vec![SideEffect::WarmPrefix(WarmPrefix {
            agent: target.handle,
            anchor_hash: target.anchor_hash,
            probability: trust * best.p,
        })]
    }

    pub fn snapshot(&self) -> Vec<u8> {
        snapshot::write(self)
    }

    pub fn restore(&mut self, state: &[u8]) -> Result<(), String> {
        *self = snapshot::read(state, self.params.clone())?;
        Ok(())
    }

    pub fn init(config: &Config) -> Result<Self, String> {
        Ok(Self::with_params(Params::from_config(config)?))
    }
}

#[cfg(test)]
mod tests;

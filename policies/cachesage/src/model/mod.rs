//! The model: for every candidate block, the rate at which it is expected to be used again (uses
//! per second), from what the runtime layer knows of agents and sessions. Bélády keeps the blocks
//! used again soonest; this estimates exactly that online.
//!
//! - **An anchor block** of agent `a` (its system prompt and tools, shared by all its sessions):
//!   `Σ_live sessions Σ_paths p / t` — each live session's chance to reach `a` within K calls over
//!   the agents' learned successors ([`agents`]), over when ([`forecast`]: the learned waits
//!   ([`gaps`]) and service times along the path) — plus the rate at which new sessions start
//!   using `a`, which slows as an application goes quiet.
//! - **Content several sessions shared** (session 0): reused only when its agent runs — at most
//!   its anchor's rate — and only by the sessions that want that content, which nothing here
//!   counts: its own recency (`1 / age`) estimates that share.
//! - **A session's own content**: the same sum over that session's paths back to the block's
//!   agent, times the chance the next call carries the block forward (continuity); a request of
//!   that agent in flight makes it imminent; a reported end makes it worth what ended sessions'
//!   returns say ([`sessions`]).
//! - **A block of an agent it does not know**: `1 / age`, the estimate behind LRU, on the
//!   policy's [`Clock`].
//!
//! Before any agent has been called twice every score is recency: the ranking is exactly LRU's.
//! The graph is sparse (four successors per agent, ~100 bytes), so it tracks 10,000 agents in
//! ~1 MB of snapshot ([`snapshot`]).

pub mod agents;
pub mod forecast;
pub mod gaps;
pub mod sessions;
pub mod snapshot;

use std::collections::HashMap;

use agentrt_sdk::ForecastKind::{NextAgent, SessionEnd};
use agentrt_sdk::{BlockEvent, BlockOp, Event, Forecast, ForecastKind, Item, RequestArrival, RequestFinish};

use crate::bounded::Bounded;
use crate::clock::Clock;
use crate::settings::Settings;
use agents::{AgentStats, Agents};
use forecast::MIN_LEAD_MS;
use gaps::GapHistogram;
use sessions::{LiveSession, Sessions};

/// Anchor rates are recomputed at most this often (µs of host time) unless a session moved.
const RATES_REFRESH_US: u64 = 50_000;
/// Sessions reported per `predict` call, most recently active first; forecasts per session.
const PREDICT_MAX_SESSIONS: usize = 64;
const PREDICT_PER_SESSION: usize = 3;

#[derive(Debug, Clone)]
pub struct Model {
    /// `k`, `prior` and the tables' sizes.
    settings: Settings,
    agents: Agents,
    sessions: Sessions,
    /// Sessions reported ended, the latest ends kept, and how many of the ends reported were
    /// followed by another call of the session (with `serve`, an end is silence: some come back).
    ended: Bounded<LiveSession>,
    ends_reported: u32,
    ends_returned: u32,
    /// Every agent's waits pooled (after an answer, after a tool call): what an agent with few
    /// waits of its own is timed by.
    gaps: [GapHistogram; 2],
    /// The engine's block size in tokens: the smallest non-zero block position seen (one block
    /// in); 0 until seen. Not in snapshots: relearned from the next events.
    block_tokens: u32,
    /// Expected uses per second of each agent's anchor from live sessions (derived).
    anchor_rates: HashMap<u32, f32>,
    rates_at_us: u64,
    rates_stale: bool,
}

impl Model {
    pub fn new(settings: &Settings) -> Self {
        Self {
            settings: settings.clone(),
            agents: Agents::new(),
            sessions: Sessions::new(),
            ended: Bounded::new(settings.max_sessions),
            ends_reported: 0,
            ends_returned: 0,
            gaps: Default::default(),
            block_tokens: 0,
            anchor_rates: HashMap::new(),
            rates_at_us: 0,
            rates_stale: true,
        }
    }

    pub fn agent(&self, handle: u32) -> Option<&AgentStats> {
        self.agents.get(&handle)
    }

    pub fn block_tokens(&self) -> u32 {
        self.block_tokens
    }

    /// Whether `item` is part of its agent's anchor (as far as the host said the anchor's size).
    pub fn is_anchor(&self, item: &Item) -> bool {
        self.agents
            .get(&item.agent)
            .is_some_and(|a| a.is_anchor_position(item.position, item.tokens))
    }

    /// Learned anything beyond recency: some agent was called twice.
    pub fn has_structure(&self) -> bool {
        self.agents.values().any(|a| a.calls >= 2)
    }

    /// Learn from `event` (warm-ups are the policy's own doing: learning them would teach it its
    /// own guesses). Returns the agent dropped from a full table, if one was.
    pub fn observe(&mut self, event: &Event) -> Option<u32> {
        match event {
            Event::AgentRegistered(a) => {
                let (agent, dropped) = agents::entry(&mut self.agents, self.settings.max_agents, a.agent);
                agent.anchor_hash = a.anchor_hash;
                agent.anchor_tokens = a.anchor_tokens;
                return self.forget(dropped);
            }
            Event::RequestArrival(r) if !r.warmup => return self.learn_arrival(r),
            Event::RequestFinish(r) if !r.warmup => self.learn_finish(r),
            Event::SessionEnd(end) => {
                if let Some(s) = self.sessions.remove(&end.session) {
                    if let Some(a) = self.agents.get_mut(&s.agent) {
                        a.learn_end();
                    }
                    self.ends_reported = self.ends_reported.saturating_add(1);
                    self.ended.insert(s.id, s);
                    self.rates_stale = true;
                }
            }
            Event::ToolCall(call) => {
                if let Some(s) = self.sessions.get_mut(&call.session) {
                    s.tool_wait = true;
                }
            }
            _ => {}
        }
        None
    }

    fn forget(&mut self, dropped: Option<u32>) -> Option<u32> {
        let agent = dropped?;
        // The sessions whose latest call was the dropped agent's go with it, live or ended.
        self.sessions.retain(|_, s| s.agent != agent);
        self.ended.retain(|s| s.agent != agent);
        Some(agent)
    }

    fn learn_arrival(&mut self, r: &RequestArrival) -> Option<u32> {
        let (agent, dropped) = agents::entry(&mut self.agents, self.settings.max_agents, r.agent);
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
        let dropped = self.forget(dropped);
        // A session reported ended that calls again was only silent: its end is taken back.
        let returned = self.ended.remove(r.session);
        if let Some(back) = returned {
            self.ends_returned = self.ends_returned.saturating_add(1);
            if let Some(a) = self.agents.get_mut(&back.agent) {
                a.ends = a.ends.saturating_sub(1);
            }
        }
        let before = sessions::arrive(&mut self.sessions, self.settings.max_sessions, r);
        if let Some(prev) = before.or(returned) {
            // A wait is timed from the previous call's finish; a call in flight hands over at once.
            let waited = (prev.in_flight == 0).then(|| r.at_us.saturating_sub(prev.finished_us) as f32 / 1000.0);
            let state = usize::from(prev.tool_wait);
            if let Some(gap_ms) = waited {
                self.gaps[state].record(gap_ms);
            }
            if let Some(a) = self.agents.get_mut(&prev.agent) {
                a.learn_successor(r.agent, waited.unwrap_or(0.0));
                if let Some(gap_ms) = waited {
                    a.gaps[state].record(gap_ms);
                }
            }
        }
        self.rates_stale = true;
        dropped
    }

    fn learn_finish(&mut self, r: &RequestFinish) {
        let Some(s) = self.sessions.get_mut(&r.session) else {
            // Reported ended while its call ran (silence is measured from the last arrival or
            // finish): the call is over now.
            if let Some(s) = self.ended.get_mut(r.session) {
                s.finish(r.at_us);
            }
            return;
        };
        if s.agent == r.agent {
            let ms = r.at_us.saturating_sub(s.arrived_us) as f32 / 1000.0;
            if let Some(a) = self.agents.get_mut(&r.agent) {
                a.learn_service(ms);
            }
        }
        s.finish(r.at_us);
        self.rates_stale = true;
    }

    /// GPU-tier block events: which anchors are resident, and the engine's block size.
    pub fn observe_block(&mut self, block: &BlockEvent) {
        if block.op == BlockOp::AllCleared {
            self.agents.values_mut().for_each(|a| a.residency.clear());
            return;
        }
        let position = block.position;
        if position > 0 && (self.block_tokens == 0 || position < self.block_tokens) {
            self.block_tokens = position;
        }
        if let Some(agent) = self.agents.get_mut(&block.agent) {
            if agent.is_anchor_position(position, self.block_tokens) {
                agent.residency.record(block.op);
            }
        }
    }

    /// P(a session reported ended calls again): the ends taken back over the ends reported, with
    /// one end of prior weight (0 until a session has come back).
    fn p_back(&self) -> f32 {
        self.ends_returned as f32 / (self.ends_reported as f32 + 1.0)
    }

    /// Expected uses per second of every agent's anchor from the sessions' paths: an anchor is
    /// the prefix of every session's content, so it is worth at least what any of them is.
    pub fn refresh_rates(&mut self, now: u64) {
        if !self.rates_stale && now.saturating_sub(self.rates_at_us) < RATES_REFRESH_US {
            return;
        }
        let mut rates: HashMap<u32, f32> = HashMap::new();
        // Live sessions with weight 1, and ended ones weighted by how likely ended sessions have
        // been to come back.
        let p_back = self.p_back();
        let ended = self.ended.values().filter(|_| p_back > 0.0).map(|s| (s, p_back));
        for (s, weight) in self.sessions.values().map(|s| (s, 1.0)).chain(ended) {
            if s.in_flight > 0 && weight == 1.0 {
                // Its call is here (perhaps queued): its anchor is as imminent as its history —
                // the history is no use without the prefix.
                *rates.entry(s.agent).or_default() += 1000.0 / MIN_LEAD_MS;
            }
            self.walk_session(s, now, &mut |agent, p, ms| {
                *rates.entry(agent).or_default() += weight * 1000.0 * p / ms;
            });
        }
        self.anchor_rates = rates;
        self.rates_at_us = now;
        self.rates_stale = false;
    }

    /// Expected uses per second of `agent`'s anchor: from live sessions and from new ones.
    pub fn anchor_rate(&self, agent: &AgentStats, now: u64) -> f32 {
        self.anchor_rates.get(&agent.handle).copied().unwrap_or(0.0) + agent.new_session_rate(now)
    }

    /// Expected uses per second of each agent by one session (`weight` × its paths, per agent).
    fn session_rates(&self, s: &LiveSession, weight: f32, now: u64) -> Vec<(u32, f32)> {
        let mut out: Vec<(u32, f32)> = Vec::new();
        self.walk_session(s, now, &mut |agent, p, ms| {
            let rate = weight * 1000.0 * p / ms;
            match out.iter_mut().find(|(a, _)| *a == agent) {
                Some((_, r)) => *r += rate,
                None => out.push((agent, rate)),
            }
        });
        out
    }

    /// The GPU tier's candidates: each one's expected uses per second.
    pub fn score(&mut self, items: &[Item], clock: &mut Clock) -> Vec<f32> {
        if !self.has_structure() {
            return agentrt_sdk::recency_scores(items);
        }
        if let Some(newest) = items.iter().map(|i| i.last_access).max() {
            clock.record_stamp(newest);
        }
        self.refresh_rates(clock.now_us());
        self.expected_use(items, clock.now_us(), Some(clock))
    }

    /// Host-tier candidates (contract 0.3), by the same expected use. Their `last-access` is the
    /// host pool's own recency stamp, not the engine's clock, so nothing reads it as a time:
    /// what only recency would rank scores 0, and the host's ties go in its LRU order.
    pub fn score_host(&mut self, items: &[Item], now: u64) -> Vec<f32> {
        if !self.has_structure() {
            return vec![0.0; items.len()];
        }
        self.refresh_rates(now);
        self.expected_use(items, now, None)
    }

    /// `clock`: the GPU tier's stamps placed in time; `None` for the host tier's.
    fn expected_use(&self, items: &[Item], now: u64, clock: Option<&Clock>) -> Vec<f32> {
        let recency = |item: &Item| clock.map_or(0.0, |c| c.recency_rate(item.last_access));
        let p_back = self.p_back();
        let mut by_session: HashMap<u64, Vec<(u32, f32)>> = HashMap::new();
        items
            .iter()
            .map(|item| {
                let Some(agent) = self.agents.get(&item.agent) else {
                    return recency(item);
                };
                let anchor = self.anchor_rate(agent, now);
                if agent.is_anchor_position(item.position, item.tokens) {
                    return anchor;
                }
                if item.session == 0 {
                    return clock.map_or(anchor, |c| anchor.min(c.recency_rate(item.last_access)));
                }
                let (s, weight) = match (self.sessions.get(&item.session), self.ended.get(item.session)) {
                    (Some(s), _) => (s, 1.0),
                    // Reported ended: as likely to come back as ended sessions have been.
                    (None, Some(s)) if p_back > 0.0 => (s, p_back),
                    _ => return 0.0,
                };
                let keeps = agent.keeps(item.position, item.tokens, s.prompt_tokens);
                if weight == 1.0 && s.in_flight > 0 && s.agent == item.agent {
                    // Its request is here (perhaps queued, its prefix hit not yet taken).
                    return keeps * 1000.0 / MIN_LEAD_MS;
                }
                let before_latest_call = s.in_flight == 0
                    && s.agent == item.agent
                    && clock
                        .and_then(|c| c.stamp_at(s.arrived_us))
                        .is_some_and(|at| item.last_access < at);
                if before_latest_call {
                    // Freed before the session's latest call of this agent arrived, so not part
                    // of it (an earlier answer, the unfinished end of an earlier prompt, a history
                    // the call dropped): worth what its recency says.
                    return recency(item);
                }
                let rates = by_session
                    .entry(item.session)
                    .or_insert_with(|| self.session_rates(s, weight, now));
                rates
                    .iter()
                    .find(|(a, _)| *a == item.agent)
                    .map_or(0.0, |(_, r)| r * keeps)
            })
            .collect()
    }

    /// Every live session's possible next calls, from where each one is now: `(agent, p, ms)`.
    pub fn next_calls(&self, now: u64) -> Vec<(u32, f32, f32)> {
        let mut out = Vec::new();
        for s in self.sessions.values() {
            let visit = &mut |agent, p, ms| out.push((agent, p, ms));
            self.walk(s.agent, 1.0, self.handover_ms(s, now), None, 1, visit);
        }
        out
    }

    pub fn predict(&mut self, horizon: u32, now: u64) -> Vec<Forecast> {
        self.refresh_rates(now);
        let mut out = Vec::new();
        let mut recent: Vec<_> = self.sessions.values().copied().collect();
        recent.sort_by_key(|s| std::cmp::Reverse((s.active_us(), s.id)));
        for s in recent.iter().take(PREDICT_MAX_SESSIONS) {
            let Some(agent) = self.agents.get(&s.agent) else {
                continue;
            };
            let mut next: Vec<(u32, f32, f32)> = agent.next(self.settings.prior).collect();
            next.sort_by(|a, b| b.1.total_cmp(&a.1));
            for (handle, probability, _) in next.into_iter().take(PREDICT_PER_SESSION) {
                let subject = self.agents.get(&handle).map_or(0, |a| a.anchor_hash);
                out.push(forecast(NextAgent, s.id, handle, subject, probability, 1));
            }
            let end = agent.p_end(self.settings.prior);
            if end > 0.0 {
                out.push(forecast(SessionEnd, s.id, 0, 0, end, 1));
            }
        }
        // Workload-wide: each agent's share of the expected calls (top agents only).
        let mut rates: Vec<(u32, u64, f32)> = self
            .agents
            .values()
            .map(|a| (a.handle, a.anchor_hash, self.anchor_rate(a, now)))
            .filter(|&(_, _, r)| r > 0.0)
            .collect();
        let total: f32 = rates.iter().map(|r| r.2).sum();
        rates.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)));
        let steps = horizon.clamp(1, self.settings.k);
        for (handle, anchor_hash, rate) in rates.into_iter().take(PREDICT_MAX_SESSIONS) {
            out.push(forecast(NextAgent, 0, handle, anchor_hash, rate / total, steps));
        }
        out
    }
}

fn forecast(kind: ForecastKind, session: u64, agent: u32, subject: u64, probability: f32, steps: u32) -> Forecast {
    Forecast {
        kind,
        session,
        agent,
        subject,
        probability,
        steps,
    }
}

#[cfg(test)]
mod tests;

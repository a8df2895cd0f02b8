//! # CacheSage, the classic model (as published)
//!
//! A reactive prefix cache evicts multi-agent "anchors" (an agent's system prompt + tool
//! definitions) just before the next session needs them. CacheSage learns which agent follows
//! which and keeps — or brings back — the anchors of agents that are about to run:
//!
//! 1. **Transition learner** (`observe`): request arrivals give a sliding-window Markov matrix
//!    over session states — the agent that ran and how many calls into its session ([`nodes`]) —
//!    with START and END states ([`transitions`]). Warm-ups are not learned.
//! 2. **Survival scorer** (`score`): for each candidate block, the chance that it is used again
//!    within K agent steps — for an anchor block, or a block several sessions shared (the host
//!    reports it with session 0), that its agent runs anywhere; for one session's content, that
//!    the same session calls the same agent again ([`survival`]) with a prompt that carries the
//!    block forward ([`continuity`]) — combined with recency as `w · p_survive + exp(-decay · age)`.
//! 3. **Cross-session prefetch** (`predict` + `act`): the agent most likely to run next whose anchor
//!    is not resident gets a warm-up, rate-limited per agent.
//!
//! With no significant structure learned (cold start, near-uniform transitions) every score is
//! recency alone, so the ranking is exactly LRU's. State is bounded by `max-agents`, `window` and
//! `max-sessions`, and a snapshot never exceeds 20 KB (2–16 KB on the evaluation's workloads; see
//! [`CacheSage::state_bytes`]).

pub mod agents;
pub mod continuity;
pub mod nodes;
pub mod params;
pub mod sessions;
mod snapshot;
pub mod survival;
pub mod transitions;

use agentrt_sdk::{info, BlockEvent, BlockOp, Config, Event, Forecast, ForecastKind, Item, Policy, PolicyInfo};
use agentrt_sdk::{RequestArrival, SideEffect, WarmPrefix};

use crate::anchor::BlockSize;
use agents::{AgentTable, Slot};
use continuity::Continuity;
pub use params::Params;
use sessions::Sessions;
use survival::{any_of, SurvivalModel};
use transitions::Transitions;

/// Sessions reported per `predict` call, most recent first.
const PREDICT_MAX_SESSIONS: usize = 64;
/// Next-agent forecasts per session.
const PREDICT_PER_SESSION: usize = 3;

/// The policy's whole state.
#[derive(Debug, Clone)]
pub struct CacheSage {
    params: Params,
    agents: AgentTable,
    transitions: Transitions,
    sessions: Sessions,
    /// Per node: does a call there carry its agent's previous prompt forward?
    continuity: Continuity,
    /// Request arrivals learned so far: the clock of `last_seen` and session stamps.
    step: u32,
    /// `act` calls so far: the clock of warm-up cooldowns.
    acts: u32,
    /// The engine's block size, learned from block positions.
    block_size: BlockSize,
    /// Derived from `transitions`; rebuilt lazily when stale.
    model: SurvivalModel,
    model_stale: bool,
    /// p_survive per agent slot given where live sessions are; rebuilt lazily when stale.
    survival: Vec<f32>,
    survival_stale: bool,
}

impl Default for CacheSage {
    fn default() -> Self {
        Self::with_params(Params::default())
    }
}

impl CacheSage {
    pub fn with_params(params: Params) -> Self {
        Self {
            agents: AgentTable::new(params.max_agents),
            transitions: Transitions::new(params.max_agents, params.window),
            sessions: Sessions::new(params.max_sessions),
            continuity: Continuity::new(nodes::count(params.max_agents)),
            survival: vec![0.0; params.max_agents],
            params,
            step: 0,
            acts: 0,
            block_size: BlockSize::default(),
            model: SurvivalModel::default(),
            model_stale: true,
            survival_stale: true,
        }
    }

    pub fn params(&self) -> &Params {
        &self.params
    }

    /// P(agent runs within K steps) for a host agent handle, given the live sessions.
    pub fn survival_of(&mut self, handle: u32) -> f32 {
        self.refresh();
        self.agents.find(handle).map_or(0.0, |slot| self.survival[slot])
    }

    /// True once transitions show significant structure (else the ranking is LRU's).
    pub fn has_structure(&mut self) -> bool {
        self.refresh();
        self.model.has_structure
    }

    /// Size of the learned state: the snapshot's length.
    pub fn state_bytes(&self) -> usize {
        self.snapshot().len()
    }

    fn mark_stale(&mut self) {
        self.model_stale = true;
        self.survival_stale = true;
    }

    /// Rebuild what is stale: the graph after the matrix changed, survival after sessions moved.
    fn refresh(&mut self) {
        if self.model_stale {
            self.model = SurvivalModel::build(&self.transitions, &self.params);
            self.model_stale = false;
            self.survival_stale = true;
        }
        if self.survival_stale {
            let sources = self.source_counts();
            for slot in 0..self.survival.len() {
                self.survival[slot] = any_of(sources.iter().map(|&(src, c)| (self.model.reach(src, slot), c)));
            }
            self.survival_stale = false;
        }
    }

    /// Where live sessions are: (source state, sessions there). New sessions keep arriving, so
    /// `START` counts as one more source.
    fn source_counts(&self) -> Vec<(usize, u32)> {
        let mut counts = vec![0u32; self.transitions.states()];
        for s in self.sessions.iter() {
            if let Some(node) = s.node() {
                counts[node] += 1;
            }
        }
        counts[self.transitions.start()] += 1;
        counts.into_iter().enumerate().filter(|&(_, c)| c > 0).collect()
    }

    fn learn_arrival(&mut self, arrival: &RequestArrival) {
        let (handle, session, anchor_hash) = (arrival.agent, arrival.session, arrival.anchor_hash);
        self.step = self.step.wrapping_add(1);
        let interned = self.agents.intern(handle, anchor_hash, 0, self.step);
        if interned.evicted {
            self.forget_slot(interned.slot);
        }
        let slot = interned.slot;
        if let Some(agent) = self.agents.get_mut(slot) {
            agent.last_seen = self.step;
        }
        let (src, depth) = match self.sessions.get(session) {
            Some(s) => (s.node(), u32::from(s.calls)),
            None => (Some(self.transitions.start()), 0),
        };
        let node = nodes::node(slot, depth);
        if let Some(c) = arrival.continues {
            self.continuity.learn(node, c.shared_tokens, c.previous_tokens);
        }
        if let Some(src) = src {
            self.transitions.record(src, node);
        }
        let model = &self.model;
        self.sessions
            .set(session, node, self.step, |n| n.map_or(1.0, |n| model.next_end(n)));
        self.mark_stale();
    }

    fn learn_session_end(&mut self, session: u64) {
        if let Some(s) = self.sessions.remove(session) {
            if let Some(src) = s.node() {
                self.transitions.record(src, self.transitions.end());
            }
            self.mark_stale();
        }
    }

    fn forget_slot(&mut self, slot: Slot) {
        self.transitions.forget(slot);
        self.continuity.forget(nodes::nodes_of(slot));
        self.sessions.forget_agent(slot);
        self.mark_stale();
    }

    /// The chance a block is used again within K steps.
    fn block_value(&self, item: &Item) -> f32 {
        let Some(slot) = self.agents.find(item.agent) else {
            return 0.0;
        };
        let agent = self.agents.get(slot).expect("found slots hold agents");
        if agent.is_anchor_position(item.position, item.tokens) || item.session == 0 {
            // Anchors — and content that several sessions shared, such as a few-shot block or a
            // question many sessions ask — are reused by any session that reaches the agent.
            return self.survival[slot];
        }
        // One session's content is reused only if that session calls this agent again with a
        // prompt that carries it forward — or is calling it now: a request that arrived may still
        // be queued, its hit not yet taken. An ended (or untracked) session's content is dead.
        let Some(session) = self.sessions.get(item.session) else {
            return 0.0;
        };
        let Some(current) = session.node() else {
            return 0.0;
        };
        let carried = |node| self.continuity.keeps(node, item.position, item.tokens);
        if session.in_flight > 0 && nodes::slot_of(current) == slot {
            return carried(current);
        }
        nodes::nodes_of(slot)
            .map(|node| self.model.reach_node(current, node) * carried(node))
            .fold(0.0, f32::max)
    }

    fn next_step_probabilities(&self) -> Vec<f32> {
        let sources = self.source_counts();
        (0..self.survival.len())
            .map(|slot| any_of(sources.iter().map(|&(src, c)| (self.model.next(src, slot), c))))
            .collect()
    }
}

impl Policy for CacheSage {
    fn info() -> PolicyInfo {
        info(
            "cachesage",
            "agent-aware KV eviction: survival of an agent's anchor within K steps + recency; warms the next agent's anchor",
        )
    }

    fn init(&mut self, config: &Config) -> Result<(), String> {
        *self = CacheSage::with_params(Params::from_config(config)?);
        Ok(())
    }

    fn observe(&mut self, event: &Event) {
        match event {
            Event::AgentRegistered(a) => {
                let interned = self.agents.intern(a.agent, a.anchor_hash, a.anchor_tokens, self.step);
                if interned.evicted {
                    self.forget_slot(interned.slot);
                }
            }
            // Warm-ups are the policy's own doing: learning them would teach it its own guesses.
            Event::RequestArrival(r) if !r.warmup => self.learn_arrival(r),
            Event::RequestFinish(r) if !r.warmup => self.sessions.finished(r.session),
            Event::SessionEnd(end) => self.learn_session_end(end.session),
            _ => {}
        }
    }

    fn observe_block(&mut self, block: &BlockEvent) {
        if block.op == BlockOp::AllCleared {
            for slot in 0..self.agents.capacity() {
                if let Some(agent) = self.agents.get_mut(slot) {
                    agent.residency.clear();
                }
            }
            return;
        }
        self.block_size.learn(block.position);
        let block_tokens = self.block_size.tokens();
        if let Some(agent) = self.agents.find(block.agent).and_then(|slot| self.agents.get_mut(slot)) {
            if agent.is_anchor_position(block.position, block_tokens) {
                agent.residency.record(block.op);
            }
        }
    }

    fn score(&mut self, items: &[Item]) -> Vec<f32> {
        self.refresh();
        if !self.model.has_structure {
            return agentrt_sdk::recency_scores(items);
        }
        let newest = items.iter().map(|i| i.last_access).max().unwrap_or(0);
        let oldest = items.iter().map(|i| i.last_access).min().unwrap_or(0);
        let span = (newest - oldest).max(1) as f32;
        items
            .iter()
            .map(|item| {
                let age = (newest - item.last_access) as f32 / span;
                self.params.w * self.block_value(item) + (-self.params.decay * age).exp()
            })
            .collect()
    }

    fn predict(&mut self, horizon: u32) -> Vec<Forecast> {
        self.refresh();
        let mut out = Vec::new();
        let mut recent: Vec<_> = self.sessions.iter().copied().collect();
        recent.sort_by_key(|s| std::cmp::Reverse(s.stamp));
        for session in recent.iter().take(PREDICT_MAX_SESSIONS) {
            let Some(current) = session.node() else { continue };
            let mut next: Vec<(Slot, f32)> = self
                .agents
                .iter()
                .map(|(slot, _)| (slot, self.model.next(current, slot)))
                .filter(|&(_, p)| p > 0.0)
                .collect();
            next.sort_by(|a, b| b.1.total_cmp(&a.1));
            for (slot, probability) in next.into_iter().take(PREDICT_PER_SESSION) {
                let agent = self.agents.get(slot).expect("iterated slots hold agents");
                out.push(Forecast {
                    kind: ForecastKind::NextAgent,
                    session: session.id,
                    agent: agent.handle,
                    subject: agent.anchor_hash,
                    probability,
                    steps: 1,
                });
            }
            let end = self.model.next_end(current);
            if end > 0.0 {
                out.push(Forecast {
                    kind: ForecastKind::SessionEnd,
                    session: session.id,
                    agent: 0,
                    subject: 0,
                    probability: end,
                    steps: 1,
                });
            }
        }
        // Workload-wide: each agent's chance to run within the horizon (capped at K).
        let steps = horizon.clamp(1, self.params.k);
        for (slot, agent) in self.agents.iter() {
            if self.survival[slot] > 0.0 {
                out.push(Forecast {
                    kind: ForecastKind::NextAgent,
                    session: 0,
                    agent: agent.handle,
                    subject: agent.anchor_hash,
                    probability: self.survival[slot],
                    steps,
                });
            }
        }
        out
    }

    fn act(&mut self) -> Vec<SideEffect> {
        self.acts = self.acts.wrapping_add(1);
        self.refresh();
        if !self.params.prefetch || !self.model.has_structure {
            return Vec::new();
        }
        let next = self.next_step_probabilities();
        let mut candidates: Vec<(Slot, f32)> = next
            .into_iter()
            .enumerate()
            .filter(|&(_, p)| p >= self.params.prefetch_threshold)
            .collect();
        candidates.sort_by(|a, b| b.1.total_cmp(&a.1));
        for (slot, probability) in candidates {
            let acts = self.acts;
            let cooldown = self.params.warmup_cooldown;
            let Some(agent) = self.agents.get_mut(slot) else {
                continue;
            };
            let cooling = agent.warmed_at != 0 && acts.wrapping_sub(agent.warmed_at) < cooldown;
            if agent.residency.resident() || cooling || agent.anchor_hash == 0 {
                continue;
            }
            agent.warmed_at = acts;
            // One warm-up per step: prefill is not free, and the next step re-evaluates.
            return vec![SideEffect::WarmPrefix(WarmPrefix {
                agent: agent.handle,
                anchor_hash: agent.anchor_hash,
                probability,
            })];
        }
        Vec::new()
    }

    fn snapshot(&self) -> Vec<u8> {
        snapshot::write(self)
    }

    fn restore(&mut self, state: &[u8]) -> Result<(), String> {
        if state.is_empty() {
            // Another policy's (stateless) snapshot, e.g. on a swap from LRU: start fresh.
            *self = CacheSage::with_params(self.params.clone());
            return Ok(());
        }
        let restored = snapshot::read(state, self.params.clone())?;
        *self = restored;
        Ok(())
    }
}

#[cfg(test)]
mod tests;

//! Everything about warm-ups (`act`): which anchor to warm, whether it is worth it, what earlier
//! ones were worth, and which block accesses are the policy's own doing.
//!
//! **Which.** Among the live sessions' likely next calls (at least [`MIN_LEAD_MS`] away), the
//! likeliest whose agent's anchor is not resident gets one warm-up, within the limits the
//! `prefetch-threshold` and `warmup-*` settings set: odds, queue, cooldown and budget.
//!
//! **Worth it.** A warm-up of `n` blocks pushes out the `n` lowest-ranked candidates of the
//! latest ranking (the *frontier*), so it pays only if the anchor it brings is expected to be used
//! sooner than they are. Under load every cached block is about to be used and a warm-up would
//! trade one miss for another; with room to spare the frontier holds dead content.
//!
//! **What earlier ones were worth.** The model's `p` says whether the agent comes, not whether
//! the anchor survives until it does: on Claude Code conversations warm-ups predicted at
//! p ≈ 0.94 found their anchor still cached at the agent's next call for a quarter to two fifths
//! of them. So each warm-up is resolved at its agent's next call — *used* if the whole anchor is
//! cached then, *lost* if not or if the agent had to be warmed again first — and the model's `p`
//! and expected use are scaled by `(used + 4) / (Σ p + 4)`, capped at 1 (the accuracy feedback
//! prefetchers in processors throttle by). A throttled model learns nothing from warm-ups it does
//! not issue, so each call of an agent it would have warmed but for the calibration forgets
//! 1/64 of the evidence, and the prior comes back. And each agent's own bets back off: its cooldown
//! doubles at every warm-up of it lost in a row (up to 2¹⁰ times), and a used one resets it — so
//! that an agent the calibration keeps letting through (one agent making every call, whose calls
//! forget the evidence as fast as its warm-ups lose it) is not warmed again and again in vain.
//!
//! **Whose access.** Block events name the agent, not the request: while a warm-up of an agent
//! is in flight, that agent's accesses within the warm-up's extent (its prompt's size when its
//! arrival says it, else the anchor and one block) are the warm-up's, and judge nothing.

use std::collections::HashMap;

use agentrt_sdk::{BlockEvent, Event, SideEffect, WarmPrefix};

use crate::model::Model;
use crate::settings::Settings;

/// A warm-up is asked for only if the predicted call is at least this far away (ms): sooner, the
/// call itself would arrive before the warm-up's prefill is done.
pub const MIN_LEAD_MS: f32 = 100.0;
/// Most warm-up tokens that can be saved up (the largest anchors are ~14 k tokens).
const BUCKET_MAX: f32 = 16_384.0;
/// Pseudo-warm-ups that paid off as predicted: the ledger starts by trusting the model.
const PRIOR: f32 = 4.0;
/// Share of the evidence forgotten at each missed opportunity.
const FORGET: f32 = 1.0 / 64.0;
/// An agent's cooldown doubles at most this many times.
const MAX_BACKOFF: u32 = 10;
/// Lowest scores kept from the latest ranking: more blocks than the largest anchors have.
const FRONTIER: usize = 2048;
/// A frontier older than this (µs) says nothing: the engine has not needed to evict since.
const FRONTIER_STALE_US: u64 = 5_000_000;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Outstanding {
    /// A warm-up was issued with this predicted probability.
    Issued(f32),
    /// The calibration kept the model from warming this agent.
    Withheld,
}

/// An agent's warm-ups in flight, and the longest one's prompt tokens.
#[derive(Debug, Clone, Copy, Default)]
struct InFlight {
    count: u16,
    extent: u32,
}

#[derive(Debug, Clone, Default)]
pub struct Warmups {
    /// `prefetch`, `prefetch-threshold` and the `warmup-*` settings.
    settings: Settings,
    /// Prompt tokens warm-ups may still prefill.
    tokens: f32,
    /// Requests waiting in the engine at the last `engine-load`.
    queue_depth: u32,
    warmed_at_us: HashMap<u32, u64>,
    /// Warm-ups of each agent lost in a row: its cooldown doubles at each (up to 2¹⁰ times).
    lost_in_a_row: HashMap<u32, u32>,
    in_flight: HashMap<u32, InFlight>,
    outstanding: HashMap<u32, Outstanding>,
    /// Σ p over resolved warm-ups, and those whose anchor was cached at the agent's next call.
    predicted: f32,
    used: f32,
    /// The lowest scores of the latest ranking, ascending, and when it was taken.
    frontier: Vec<f32>,
    frontier_at_us: u64,
}

impl Warmups {
    pub fn new(settings: &Settings) -> Self {
        Self {
            settings: settings.clone(),
            ..Self::default()
        }
    }

    /// Before the model learns `event`: budget, in-flight warm-ups, and the ledger — a user call
    /// resolves its agent's outstanding warm-up by whether the anchor is cached as it arrives.
    pub fn observe(&mut self, event: &Event, model: &Model) {
        match event {
            Event::RequestArrival(r) if r.warmup => {
                let extent = match (r.prompt_tokens, model.agent(r.agent)) {
                    (0, Some(a)) if a.anchor_tokens > 0 => a.anchor_tokens.saturating_add(model.block_tokens().max(1)),
                    (0, _) => u32::MAX,
                    (tokens, _) => tokens,
                };
                let w = self.in_flight.entry(r.agent).or_default();
                w.count += 1;
                w.extent = w.extent.max(extent);
            }
            Event::RequestArrival(r) => {
                // The bucket holds at most one large anchor's worth: unused budget does not pile up.
                self.tokens = (self.tokens + self.settings.warmup_budget * r.prompt_tokens as f32).min(BUCKET_MAX);
                let cached = model.agent(r.agent).is_some_and(|a| a.residency.resident());
                self.called(r.agent, cached);
            }
            Event::RequestFinish(r) if r.warmup => {
                if let Some(w) = self.in_flight.get_mut(&r.agent) {
                    w.count -= 1;
                    if w.count == 0 {
                        self.in_flight.remove(&r.agent);
                    }
                }
            }
            Event::EngineLoad(l) => self.queue_depth = l.queue_depth,
            _ => {}
        }
    }

    /// Whether `block` is an access of a warm-up in flight (its agent's, within its extent).
    pub fn is_own(&self, block: &BlockEvent) -> bool {
        self.in_flight
            .get(&block.agent)
            .is_some_and(|w| block.position < w.extent)
    }

    /// The model dropped `agent`: its outstanding bet is never resolved.
    pub fn forget_agent(&mut self, agent: u32) {
        self.outstanding.remove(&agent);
        self.warmed_at_us.remove(&agent);
        self.lost_in_a_row.remove(&agent);
    }

    /// How far the model's warm-up bets are to be trusted: 1 while they pay as predicted, less as
    /// they lose; never above 1 (the guard judges rankings, not warm-ups, so nothing else would
    /// catch a bolder model's losses).
    pub fn calibration(&self) -> f32 {
        ((self.used + PRIOR) / (self.predicted + PRIOR)).min(1.0)
    }

    fn called(&mut self, agent: u32, anchor_cached: bool) {
        match self.outstanding.remove(&agent) {
            Some(Outstanding::Issued(p)) => {
                self.predicted += p;
                self.used += f32::from(u8::from(anchor_cached));
                self.resolved(agent, anchor_cached);
            }
            Some(Outstanding::Withheld) => {
                self.predicted *= 1.0 - FORGET;
                self.used *= 1.0 - FORGET;
            }
            None => {}
        }
    }

    fn issued(&mut self, agent: u32, p: f32) {
        // One still outstanding is lost: the agent is warmed again because its anchor is gone.
        if let Some(Outstanding::Issued(before)) = self.outstanding.insert(agent, Outstanding::Issued(p)) {
            self.predicted += before;
            self.resolved(agent, false);
        }
    }

    /// An agent's warm-up was used or lost: a loss doubles the agent's cooldown, a use resets it.
    fn resolved(&mut self, agent: u32, used: bool) {
        let lost = self.lost_in_a_row.remove(&agent).unwrap_or(0);
        if !used {
            self.lost_in_a_row.insert(agent, (lost + 1).min(MAX_BACKOFF));
        }
    }

    /// The latest GPU ranking's model scores (expected uses per second).
    pub fn record_frontier(&mut self, scores: &[f32], now_us: u64) {
        let mut lowest: Vec<f32> = scores.iter().map(|s| if s.is_finite() { *s } else { 0.0 }).collect();
        if lowest.len() > FRONTIER {
            lowest.select_nth_unstable_by(FRONTIER, f32::total_cmp);
            lowest.truncate(FRONTIER);
        }
        lowest.sort_unstable_by(f32::total_cmp);
        self.frontier = lowest;
        self.frontier_at_us = now_us;
    }

    /// Expected uses per second of the most valuable of the next `blocks` evictions.
    fn frontier_cost(&self, blocks: usize, now_us: u64) -> f32 {
        if blocks == 0 || self.frontier.is_empty() || now_us.saturating_sub(self.frontier_at_us) > FRONTIER_STALE_US {
            return 0.0;
        }
        self.frontier[blocks.min(self.frontier.len()) - 1]
    }

    /// The warm-up to issue now, if any.
    pub fn choose(&mut self, model: &mut Model, now: u64) -> Option<SideEffect> {
        let s = &self.settings;
        if !s.prefetch || self.queue_depth > s.warmup_max_queue || !model.has_structure() {
            return None;
        }
        model.refresh_rates(now);
        let trust = self.calibration();
        let mut best: Option<(u32, f32, f32)> = None;
        for (agent, p, ms) in model.next_calls(now) {
            if p < s.prefetch_threshold || ms < MIN_LEAD_MS {
                continue;
            }
            let Some(target) = model.agent(agent) else { continue };
            let lost = self.lost_in_a_row.get(&agent).copied().unwrap_or(0);
            let cooldown = (u64::from(s.warmup_cooldown_ms) * 1000) << lost;
            let cooling = self
                .warmed_at_us
                .get(&agent)
                .is_some_and(|&at| now.saturating_sub(at) < cooldown);
            let affordable = target.anchor_tokens as f32 <= self.tokens;
            // As many blocks as it misses are pushed out (the rest are prefix hits).
            let blocks = match target.residency.max {
                0 => target.anchor_tokens.div_ceil(model.block_tokens().max(16)),
                max => max.saturating_sub(target.residency.blocks),
            } as usize;
            let (rate, cost) = (model.anchor_rate(target, now), self.frontier_cost(blocks, now));
            if target.residency.resident() || cooling || target.anchor_hash == 0 || !affordable || rate <= cost {
                continue;
            }
            if trust * p < s.prefetch_threshold || trust * rate <= cost {
                self.outstanding.entry(agent).or_insert(Outstanding::Withheld);
                continue;
            }
            if best.is_none_or(|(b, best_p, best_ms)| p > best_p || (p == best_p && (ms, agent) < (best_ms, b))) {
                best = Some((agent, p, ms));
            }
        }
        let (agent, p, _) = best?;
        let target = model.agent(agent).expect("chosen among tracked agents");
        self.warmed_at_us.insert(agent, now.max(1));
        self.tokens -= target.anchor_tokens as f32;
        self.issued(agent, p);
        Some(SideEffect::WarmPrefix(WarmPrefix {
            agent,
            anchor_hash: target.anchor_hash,
            probability: trust * p,
        }))
    }
}

#[cfg(test)]
mod tests;

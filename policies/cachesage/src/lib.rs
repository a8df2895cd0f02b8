//! # CacheSage — agent-aware KV-cache policy
//!
//! A reactive prefix cache evicts what an agent needs next (its system prompt and tools, a live
//! session's history) just before it is asked for. CacheSage ranks the engine's eviction
//! candidates hints first: the [`classes`] of what the framework said of sessions' lives come
//! first by construction, and within them the [`model`] orders the rest by each block's expected
//! use, but only while the [`guard`]'s evidence says it beats the robust order. `act` warms the
//! anchor of the agent a live session most likely calls next ([`warmups`]), only while the learned
//! order ranks. Everything reads one [`clock`]. Before the model has learned anything, and without
//! hints, the ranking is exactly LRU's. docs/cachesage.md draws the data flow; each box is a
//! module here.
//!
//! **Two tiers** (contract 0.3): host-tier candidates get the model's expected use while the
//! learned order ranks, vLLM's own order (every score 0) otherwise. No store is declined.

pub mod bounded;
pub mod classes;
pub mod clock;
pub mod guard;
pub mod model;
pub mod returns;
pub mod settings;
pub mod shadow;
pub mod warmups;

use agentrt_sdk::{BlockEvent, Config, Event, Forecast, Item, Policy, PolicyInfo, SideEffect, Tier};

use classes::{Classes, Order};
use clock::Clock;
use guard::Guard;
use model::Model;
use settings::Settings;
use warmups::Warmups;

/// The policy: settings, the one clock, and the modules of the data flow.
#[derive(Debug, Clone)]
pub struct CacheSage {
    pub settings: Settings,
    pub clock: Clock,
    pub model: Model,
    pub classes: Classes,
    pub guard: Guard,
    pub warmups: Warmups,
}

impl Default for CacheSage {
    fn default() -> Self {
        Self::with_settings(Settings::default())
    }
}

impl CacheSage {
    pub fn with_settings(settings: Settings) -> Self {
        Self {
            clock: Clock::default(),
            model: Model::new(&settings),
            classes: Classes::default(),
            guard: Guard::new(settings.guard),
            warmups: Warmups::new(&settings),
            settings,
        }
    }

    /// The GPU tier's candidates, in both orders; the guard picks which the engine follows.
    fn score_gpu(&mut self, items: &[Item]) -> Vec<f32> {
        let expected_use = self.model.score(items, &mut self.clock);
        self.warmups.record_frontier(&expected_use, self.clock.now_us());
        let (model, now) = (&self.model, self.clock.now_us());
        let anchor = |item: &Item| model.is_anchor(item);
        let recency = agentrt_sdk::recency_scores(items);
        let robust = self.classes.order(items, Order::Robust, &recency, anchor, now);
        let learned = self.classes.order(items, Order::Learned, &expected_use, anchor, now);
        self.guard.choose(items, robust, learned)
    }
}

impl Policy for CacheSage {
    fn info() -> PolicyInfo {
        agentrt_sdk::info(
            "cachesage",
            "agent-aware KV eviction, hints first: closed sessions' blocks first, unlikely waits next, then \
             the rest by expected use (agent graph, live sessions, anchors) where the evidence says it beats \
             LRU; warms the next agent's anchor",
        )
    }

    fn init(&mut self, config: &Config) -> Result<(), String> {
        *self = CacheSage::with_settings(Settings::from_config(config)?);
        Ok(())
    }

    fn observe(&mut self, event: &Event) {
        self.clock.observe(event);
        if let Event::EngineLoad(l) = event {
            self.guard.set_total_blocks(l.total_blocks);
        }
        self.warmups.observe(event, &self.model);
        // Without hints the classes stay empty: a closing is an end like any other.
        let hints = self.settings.hints;
        // Once closings are heard, silence is a wait for the model too.
        let silence = hints && matches!(event, Event::SessionEnd(e) if self.classes.silence_is_a_wait(e));
        if hints && self.classes.observe(event) {
            self.guard.closings_heard();
        }
        if !silence {
            if let Some(dropped) = self.model.observe(event) {
                self.warmups.forget_agent(dropped);
            }
        }
    }

    fn observe_block(&mut self, block: &BlockEvent) {
        // The model and the guard follow the GPU tier; what the host tier holds is the engine's
        // to look up when a prefix continues there.
        if block.tier == Tier::Host {
            return;
        }
        let now = self.clock.now_us();
        self.guard.observe_block(block, !self.warmups.is_own(block), now);
        if block.op == agentrt_sdk::BlockOp::Removed {
            self.classes.removed(now);
        }
        self.model.observe_block(block);
    }

    fn score(&mut self, items: &[Item]) -> Vec<f32> {
        // The host asks about one tier at a time; a mixed batch is ranked tier by tier.
        if items.iter().all(|i| i.tier == Tier::Gpu) {
            return self.score_gpu(items);
        }
        if items.iter().all(|i| i.tier == Tier::Host) {
            return match self.guard.follows() {
                Order::Learned => self.model.score_host(items, self.clock.now_us()),
                Order::Robust => vec![0.0; items.len()],
            };
        }
        let (gpu, host): (Vec<Item>, Vec<Item>) = items.iter().cloned().partition(|i| i.tier == Tier::Gpu);
        let (mut gpu, mut host) = (self.score(&gpu).into_iter(), self.score(&host).into_iter());
        items
            .iter()
            .map(|i| match i.tier {
                Tier::Gpu => gpu.next(),
                Tier::Host => host.next(),
            })
            .map(|s| s.unwrap_or(0.0))
            .collect()
    }

    fn predict(&mut self, horizon: u32) -> Vec<Forecast> {
        self.model.predict(horizon, self.clock.now_us())
    }

    fn act(&mut self) -> Vec<SideEffect> {
        // Warm-ups are the learned order's bets: none while the robust order ranks.
        if self.guard.follows() == Order::Robust {
            return Vec::new();
        }
        let now = self.clock.now_us();
        self.warmups.choose(&mut self.model, now).into_iter().collect()
    }

    fn snapshot(&self) -> Vec<u8> {
        model::snapshot::write(&self.model, self.clock.now_us())
    }

    fn restore(&mut self, state: &[u8]) -> Result<(), String> {
        let mut fresh = CacheSage::with_settings(self.settings.clone());
        // An empty state is another policy's (stateless) snapshot, e.g. on a swap from LRU: start fresh.
        if !state.is_empty() {
            let (model, now_us) = model::snapshot::read(state, &self.settings)?;
            fresh.model = model;
            fresh.clock.advance(now_us);
        }
        *self = fresh;
        Ok(())
    }
}

agentrt_sdk::export_policy!(CacheSage);

#[cfg(test)]
mod test_events;
#[cfg(test)]
mod tests;

//! The code between the generated `Guest` trait and a [`Policy`]: decoding packed blocks, routing
//! typed block events, wrapping configuration. The Wasm export and the native test harness both go
//! through it, so a policy tested natively is tested through the same paths it runs in.

use crate::{packed, BlockEvent, Config, Event, Forecast, Item, Policy, SideEffect};

/// Holds the policy value and forwards each primitive to it.
pub struct Dispatcher<P: Policy> {
    policy: P,
}

impl<P: Policy> Default for Dispatcher<P> {
    fn default() -> Self {
        Self { policy: P::default() }
    }
}

impl<P: Policy> Dispatcher<P> {
    pub fn policy(&self) -> &P {
        &self.policy
    }

    pub fn policy_mut(&mut self) -> &mut P {
        &mut self.policy
    }

    pub fn init(&mut self, config: Vec<(String, String)>) -> Result<(), String> {
        // `init` configures a fresh instance: start from defaults even if called twice.
        self.policy = P::default();
        self.policy.init(&Config::new(config))
    }

    pub fn observe(&mut self, events: &[Event]) {
        for event in events {
            match event {
                Event::Block(block) => self.policy.observe_block(block),
                other => self.policy.observe(other),
            }
        }
    }

    /// Events packed as `observe-packed` sends them: routed as [`Self::observe`] routes them.
    pub fn observe_packed(&mut self, words: &[u64]) {
        for event in packed::events::decode(words) {
            match &event {
                Event::Block(block) => self.policy.observe_block(block),
                other => self.policy.observe(other),
            }
        }
    }

    pub fn observe_blocks(&mut self, words: &[u64]) {
        for block in packed::decode(words) {
            self.policy.observe_block(&block);
        }
    }

    pub fn observe_block(&mut self, block: &BlockEvent) {
        self.policy.observe_block(block);
    }

    pub fn score(&mut self, items: &[Item]) -> Vec<f32> {
        let scores = self.policy.score(items);
        assert_eq!(
            scores.len(),
            items.len(),
            "{}: score() returned {} scores for {} items",
            P::info().name,
            scores.len(),
            items.len()
        );
        scores
    }

    pub fn score_packed(&mut self, words: &[u64]) -> Vec<f32> {
        self.score(&packed::decode_items(words))
    }

    pub fn predict(&mut self, horizon: u32) -> Vec<Forecast> {
        self.policy.predict(horizon)
    }

    pub fn act(&mut self) -> Vec<SideEffect> {
        self.policy.act()
    }

    pub fn snapshot(&self) -> Vec<u8> {
        self.policy.snapshot()
    }

    pub fn restore(&mut self, state: &[u8]) -> Result<(), String> {
        self.policy.restore(state)
    }
}

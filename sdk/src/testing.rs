//! Run a policy natively, through the same dispatch code its component uses, so its logic can be
//! unit-tested with `cargo test` and no Wasm toolchain. Host imports ([`crate::host`]) fall back to
//! native equivalents.

use crate::dispatch::Dispatcher;
use crate::{packed, BlockEvent, Event, Forecast, Item, Policy, SideEffect};

/// A policy instance driven like the host drives a component.
pub struct Harness<P: Policy> {
    dispatcher: Dispatcher<P>,
}

impl<P: Policy> core::fmt::Debug for Harness<P> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Harness")
            .field("policy", &P::info().name)
            .finish_non_exhaustive()
    }
}

impl<P: Policy> Harness<P> {
    /// A fresh instance configured with `config`, exactly as the host's `init` would.
    pub fn new<'a>(config: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Self, String> {
        let mut dispatcher = Dispatcher::default();
        dispatcher.init(
            config
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )?;
        Ok(Self { dispatcher })
    }

    /// Send events as the host sends a batch to a 0.4 component: `agent-registered` through
    /// `observe`, every run of other events between them through `observe-packed`.
    pub fn observe(&mut self, events: &[Event]) {
        let mut words = Vec::new();
        for event in events {
            if !packed::events::encode(event, &mut words) {
                self.observe_packed(&mut words);
                self.dispatcher.observe(core::slice::from_ref(event));
            }
        }
        self.observe_packed(&mut words);
    }

    fn observe_packed(&mut self, words: &mut Vec<u64>) {
        if !words.is_empty() {
            self.dispatcher.observe_packed(words);
            words.clear();
        }
    }

    /// Send block events through the packed path, as the host does for high-rate producers.
    pub fn observe_blocks(&mut self, blocks: &[BlockEvent]) {
        let mut words = Vec::with_capacity(blocks.len() * packed::WORDS_PER_EVENT);
        for b in blocks {
            packed::encode(b, &mut words);
        }
        self.dispatcher.observe_blocks(&words);
    }

    /// Score through the packed path, as the host does.
    pub fn score(&mut self, items: &[Item]) -> Vec<f32> {
        let mut words = Vec::with_capacity(items.len() * packed::ITEM_WORDS);
        for item in items {
            packed::encode_item(item, &mut words);
        }
        self.dispatcher.score_packed(&words)
    }

    pub fn predict(&mut self, horizon: u32) -> Vec<Forecast> {
        self.dispatcher.predict(horizon)
    }

    pub fn act(&mut self) -> Vec<SideEffect> {
        self.dispatcher.act()
    }

    pub fn snapshot(&self) -> Vec<u8> {
        self.dispatcher.snapshot()
    }

    pub fn restore(&mut self, state: &[u8]) -> Result<(), String> {
        self.dispatcher.restore(state)
    }

    /// The policy value itself, for assertions on internal state.
    pub fn policy(&self) -> &P {
        self.dispatcher.policy()
    }
}

/// Rank items the way the host does (see [`crate::ranking::keep_order`]).
pub fn rank(items: &[Item], scores: &[f32]) -> Vec<usize> {
    crate::ranking::keep_order(scores, |i| items[i].last_access)
}

/// A GPU-tier KV block of one agent (1), in no session, 16 tokens at position 0: the item most
/// eviction tests rank, told apart by its key and last access.
pub fn gpu_block(key: u64, last_access: u64) -> Item {
    Item {
        kind: crate::ItemKind::KvBlock,
        key,
        agent: 1,
        session: 0,
        last_access,
        tokens: 16,
        position: 0,
        tier: crate::Tier::Gpu,
    }
}

/// A GPU-tier block event of agent 1 at the root of the prefix tree (no parent, position 0).
pub fn gpu_block_event(op: crate::BlockOp, block_hash: u64) -> BlockEvent {
    BlockEvent {
        op,
        agent: 1,
        block_hash,
        parent_hash: 0,
        position: 0,
        tier: crate::Tier::Gpu,
    }
}

/// A session ended as the host infers most ends: idle for its window (reason `idle`, at time 0).
pub fn session_end(session: u64) -> Event {
    session_end_for(session, crate::EndReason::Idle)
}

/// A session ended for `reason`, at time 0.
pub fn session_end_for(session: u64, reason: crate::EndReason) -> Event {
    Event::SessionEnd(crate::SessionEnd {
        session,
        reason,
        at_us: 0,
    })
}

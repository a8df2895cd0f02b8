//! The trait a policy implements: the four primitives and the lifecycle, in plain Rust types.

use crate::BlockEvent;
use crate::{Config, Event, Forecast, Item, PolicyInfo, SideEffect};

/// An agentrt policy.
///
/// One value lives per component instance; the host calls it from one thread at a time, so
/// methods take `&mut self` and need no locking. Every method but [`Policy::info`] and
/// [`Policy::score`] has a default that does nothing, so a policy implements only what it uses.
pub trait Policy: Default + 'static {
    /// Name, version and a one-line description. Must not depend on state.
    fn info() -> PolicyInfo;

    /// Configure a fresh instance. The default accepts an empty configuration only, so a typo in
    /// a key is never silently ignored.
    fn init(&mut self, config: &Config) -> Result<(), String> {
        config.expect_only(&[])
    }

    /// One event that is not a block event, in arrival order.
    fn observe(&mut self, _event: &Event) {}

    /// One KV-block event, whether it arrived typed (`observe`) or packed (`observe-blocks`).
    fn observe_block(&mut self, _block: &BlockEvent) {}

    /// One priority per item, in the same order; higher = keep. The host breaks ties by
    /// `last-access`, most recent first.
    fn score(&mut self, items: &[Item]) -> Vec<f32>;

    /// Expected activity within the next `horizon` steps.
    fn predict(&mut self, _horizon: u32) -> Vec<Forecast> {
        Vec::new()
    }

    /// Side effects for the host to carry out now.
    fn act(&mut self) -> Vec<SideEffect> {
        Vec::new()
    }

    /// Learned state, for a hot swap or a restart. See [`crate::state`] for a compact encoding.
    fn snapshot(&self) -> Vec<u8> {
        Vec::new()
    }

    /// Continue from a snapshot. The default accepts only the empty snapshot of a stateless policy.
    fn restore(&mut self, state: &[u8]) -> Result<(), String> {
        if state.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "this policy keeps no state but was given {} bytes",
                state.len()
            ))
        }
    }
}

/// Shorthand for a [`PolicyInfo`] with this crate's version.
pub fn info(name: &str, description: &str) -> PolicyInfo {
    PolicyInfo {
        name: name.to_string(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        description: description.to_string(),
    }
}

/// Recency as a score: the least recently used item of the batch gets 0, newer items the engine
/// clock ticks since it. Taken relative to the batch's oldest item so that the f32 result stays
/// exact (integers up to 2^24) however long the engine has been running, and never negative: a
/// negative score on a host-tier block means "not worth storing" (contract 0.3), which recency
/// alone never says.
pub fn recency_scores(items: &[Item]) -> Vec<f32> {
    let oldest = items.iter().map(|i| i.last_access).min().unwrap_or(0);
    items.iter().map(|i| (i.last_access - oldest) as f32).collect()
}

//! __NAME__ — an agentrt policy (skeleton from `agentrt policy new`). README.md (in a project made
//! outside an agentrt checkout) lists the events and how to build, test and table it.

use agentrt_sdk::{info, recency_scores, Config, Event, Item, Policy, PolicyInfo};

#[derive(Debug, Default)]
pub struct Policy__TYPE__ {
    // YOUR STATE HERE: what the policy learns from events.
}

impl Policy for Policy__TYPE__ {
    fn info() -> PolicyInfo {
        info("__NAME__", "WHAT IT KEEPS AND WHY")
    }

    fn init(&mut self, config: &Config) -> Result<(), String> {
        // YOUR CONFIG KEYS HERE (typos fail loudly): config.parse_or("key", default)?
        config.expect_only(&[])
    }

    fn observe(&mut self, _event: &Event) {
        // YOUR LOGIC HERE: learn from events (block events go to `observe_block`), e.g. a session
        // the framework closed: `Event::SessionEnd(e)` with `e.reason == EndReason::Closed`.
    }

    fn score(&mut self, items: &[Item]) -> Vec<f32> {
        // YOUR LOGIC HERE: one score per item, higher = keep. Recency = LRU, the baseline.
        recency_scores(items)
    }

    // Also available: observe_block, predict, act (side effects such as warm-ups), and
    // snapshot/restore (state across hot swaps; agentrt_sdk::state has the encoding).
}

agentrt_sdk::export_policy!(Policy__TYPE__);

#[cfg(test)]
mod tests {
    use super::*;
    use agentrt_sdk::testing::{gpu_block, rank, Harness};

    /// Natively, through the SDK's harness: `agentrt policy build --test` runs it (`cargo xtask
    /// test` in an agentrt checkout).
    #[test]
    fn newest_first_until_you_change_it() {
        let mut policy = Harness::<Policy__TYPE__>::new([]).unwrap();
        let items = [gpu_block(1, 5), gpu_block(2, 9)];
        assert_eq!(rank(&items, &policy.score(&items)), vec![1, 0]);
    }
}

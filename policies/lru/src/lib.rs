//! # LRU — the baseline policy
//!
//! Keeps what was used most recently: an item's score is its recency. This is vLLM's default
//! prefix-cache order, the baseline every other policy is measured against, and — computed by the
//! host's ranking rule on equal scores — the fallback the host uses when a policy fails.

use agentrt_sdk::{info, recency_scores, Item, Policy, PolicyInfo};

/// Least-recently-used: no state, no side effects.
#[derive(Debug, Default)]
pub struct Lru;

impl Policy for Lru {
    fn info() -> PolicyInfo {
        info(
            "lru",
            "score = recency (vLLM's default prefix-cache order); stateless, no side effects",
        )
    }

    fn score(&mut self, items: &[Item]) -> Vec<f32> {
        recency_scores(items)
    }
}

agentrt_sdk::export_policy!(Lru);

#[cfg(test)]
mod tests {
    use super::*;
    use agentrt_sdk::testing::{gpu_block as block, rank, Harness};

    #[test]
    fn ranks_most_recent_first() {
        let mut lru = Harness::<Lru>::new([]).unwrap();
        let items = [block(1, 5), block(2, 50), block(3, 7), block(4, 1 << 40)];
        let scores = lru.score(&items);
        assert_eq!(rank(&items, &scores), vec![3, 1, 2, 0]);
    }

    #[test]
    fn rejects_configuration_and_foreign_state() {
        assert!(Harness::<Lru>::new([("w", "4")])
            .unwrap_err()
            .contains("unknown config key"));
        let mut lru = Harness::<Lru>::new([]).unwrap();
        assert!(lru.snapshot().is_empty());
        assert!(lru.restore(&[]).is_ok());
        assert!(lru.restore(&[1, 2, 3]).is_err());
    }
}

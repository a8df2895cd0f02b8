//! The held-first rule on the engine's evictions (`--session-admission working-set`): a held
//! session's next call waits in the proxy, so its blocks are the ones no call will touch soon —
//! they are offered for eviction before any other; a session whose held call was just let go
//! keeps its blocks until that call is answered; everything else stays in the cache policy's
//! order. Wrapping the ranker this way means no cache policy has to know about admission
//! (CacheSage ranks beside it); the host tier's rankings are the policy's own.

use std::sync::Arc;

use agentrt_admission::EvictionClass;
use agentrt_eviction::{EngineRanker, HostRanking};
use agentrt_runtime::types::{Event, Item};
use agentrt_runtime::{PolicyError, Ranking};

use super::working_set::SessionAdmission;

/// A ranker whose GPU rankings put held sessions' blocks first to go.
pub struct HeldFirst {
    inner: Arc<dyn EngineRanker>,
    working_set: Arc<SessionAdmission>,
}

impl HeldFirst {
    /// `inner`'s rankings, reordered by `working_set`'s classes.
    pub fn new(inner: Arc<dyn EngineRanker>, working_set: Arc<SessionAdmission>) -> Self {
        Self { inner, working_set }
    }

    fn reorder(&self, items: &[Item], ranking: Ranking) -> Ranking {
        let classes = self.working_set.eviction_classes(items.iter().map(|i| i.session));
        Ranking {
            order: held_first(ranking.order, |i| classes[i]),
            fallback: ranking.fallback,
        }
    }
}

/// `order` (keep-most → evict-first) with the `Keep` items moved to the front and the `First`
/// items to the end, each class in the order it had.
fn held_first(order: Vec<usize>, class_of: impl Fn(usize) -> EvictionClass) -> Vec<usize> {
    let (mut keep, mut policy, mut first) = (Vec::new(), Vec::new(), Vec::new());
    for i in order {
        match class_of(i) {
            EvictionClass::Keep => keep.push(i),
            EvictionClass::Policy => policy.push(i),
            EvictionClass::First => first.push(i),
        }
    }
    keep.extend(policy);
    keep.extend(first);
    keep
}

impl EngineRanker for HeldFirst {
    fn label(&self) -> String {
        format!("{}, held sessions first", self.inner.label())
    }
    fn observe_blocks(&self, packed: &[u64]) -> Result<(), PolicyError> {
        self.inner.observe_blocks(packed)
    }
    fn rank(&self, items: &[Item]) -> Ranking {
        self.reorder(items, self.inner.rank(items))
    }
    fn announce(&self, events: &[Event]) -> Result<(), PolicyError> {
        self.inner.announce(events)
    }
    fn count_evictors(&self, evictors: &[u32]) {
        self.inner.count_evictors(evictors)
    }
    fn observe_blocks_on(&self, replica: u64, packed: &[u64]) -> Result<(), PolicyError> {
        self.inner.observe_blocks_on(replica, packed)
    }
    fn rank_on(&self, replica: u64, items: &[Item]) -> Ranking {
        self.reorder(items, self.inner.rank_on(replica, items))
    }
    fn count_evictors_on(&self, replica: u64, evictors: &[u32]) {
        self.inner.count_evictors_on(replica, evictors)
    }
    fn rank_host(&self, items: &[Item]) -> HostRanking {
        self.inner.rank_host(items)
    }
    fn rank_host_on(&self, replica: u64, items: &[Item]) -> HostRanking {
        self.inner.rank_host_on(replica, items)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_sessions_go_first_a_resumed_ones_last_the_rest_in_the_policys_order() {
        // Items 0..6: 1 and 4 of a held session, 2 of a session just let go.
        let class = |i: usize| match i {
            1 | 4 => EvictionClass::First,
            2 => EvictionClass::Keep,
            _ => EvictionClass::Policy,
        };
        let policy_order = vec![5, 4, 3, 2, 1, 0];
        assert_eq!(held_first(policy_order, class), vec![2, 5, 3, 0, 4, 1]);
    }
}

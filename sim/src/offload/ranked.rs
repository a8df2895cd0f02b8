//! The host tier ranked by the replay's own policy (`sim run --host-policy policy`): what an
//! operator gets when agentrt's vLLM plugin supplies the offloading spec, so that the policy that
//! ranks the GPU's evictions ranks the host pool's too.
//!
//! The pool keeps vLLM's `lru` bookkeeping (ranks committed when a request finishes, reversed
//! prefix order) and offers the policy a *window* of its evict-first end — the same bounded cost
//! per eviction as the GPU path's window rankings — then evicts the lowest scores, ties by LRU
//! rank. A policy may also decline to store a block (a negative score: nothing will come back
//! for it). A policy that does not rank the host tier (native LRU, a 0.2 component whose scores
//! for host-tier items are all 0) leaves vLLM's `lru` order exactly.

/// Whose block a host-tier key is: what the GPU block it was copied from carried. agentrt's
/// addition to vLLM's keys, so that a policy can score host-tier blocks as it scores GPU ones.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlockOwner {
    pub agent: u32,
    /// The session of the request that offered the block for storing.
    pub session: u64,
    /// Token offset of the block's first token in its prompt.
    pub position: u32,
}

/// A host-tier block as a policy scores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostBlock {
    pub key: u64,
    pub owner: BlockOwner,
    /// The host pool's LRU rank: larger = used more recently.
    pub last_access: u64,
}

/// What ranks the host tier beside vLLM's built-in policies.
pub trait HostRanker {
    /// Scores for host-tier blocks, higher = keep, negative = not worth storing; `None` when this
    /// ranker does not rank the host tier (vLLM's order stands).
    fn host_scores(&mut self, _blocks: &[HostBlock]) -> Option<Vec<f32>> {
        None
    }

    /// How many of the evict-first end's keys a ranking for `n` victims considers.
    fn host_window(&self, n: usize) -> usize {
        window(n)
    }
}

/// Ranks nothing: vLLM's order everywhere (fidelity tests, replays without a policy).
pub struct NoRanker;
impl HostRanker for NoRanker {}

/// Evictable keys a ranking considers for `n` victims: the evict-first end of vLLM's order, a
/// few times what is needed so that the policy has a choice, but never the whole pool.
pub fn window(n: usize) -> usize {
    (4 * n).max(256)
}

/// Of `candidates` (ascending LRU rank), the `n` to evict: the lowest scores first,
/// ties (and a ranker that ranks nothing) in rank order. `None` when fewer than `n` are offered.
pub fn choose_victims(candidates: &[HostBlock], n: usize, ranker: &mut dyn HostRanker) -> Option<Vec<u64>> {
    if candidates.len() < n {
        return None;
    }
    let Some(scores) = ranker.host_scores(candidates).filter(|s| s.len() == candidates.len()) else {
        return Some(candidates[..n].iter().map(|b| b.key).collect());
    };
    let key = |s: f32| if s.is_finite() { s } else { f32::NEG_INFINITY };
    let mut order: Vec<usize> = (0..candidates.len()).collect();
    order.sort_by(|&a, &b| {
        key(scores[a])
            .total_cmp(&key(scores[b]))
            .then(candidates[a].last_access.cmp(&candidates[b].last_access))
    });
    Some(order[..n].iter().map(|&i| candidates[i].key).collect())
}

/// Of `offered` blocks about to be stored, the ones the ranker declines (negative scores).
pub fn declined(offered: &[HostBlock], ranker: &mut dyn HostRanker) -> Vec<u64> {
    if offered.is_empty() {
        return Vec::new();
    }
    match ranker.host_scores(offered) {
        Some(scores) if scores.len() == offered.len() => offered
            .iter()
            .zip(scores)
            .filter(|(_, s)| *s < 0.0)
            .map(|(b, _)| b.key)
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(Vec<f32>);
    impl HostRanker for Fixed {
        fn host_scores(&mut self, blocks: &[HostBlock]) -> Option<Vec<f32>> {
            Some(self.0[..blocks.len()].to_vec())
        }
    }

    fn blocks(n: u64) -> Vec<HostBlock> {
        (0..n)
            .map(|i| HostBlock {
                key: 100 + i,
                owner: BlockOwner::default(),
                last_access: i,
            })
            .collect()
    }

    #[test]
    fn without_a_ranking_the_oldest_go_first() {
        assert_eq!(choose_victims(&blocks(4), 2, &mut NoRanker), Some(vec![100, 101]));
        assert_eq!(choose_victims(&blocks(1), 2, &mut NoRanker), None);
    }

    #[test]
    fn the_lowest_scores_go_first_ties_by_age() {
        let mut ranker = Fixed(vec![5.0, 1.0, 1.0, f32::NAN]);
        assert_eq!(choose_victims(&blocks(4), 3, &mut ranker), Some(vec![103, 101, 102]));
    }

    #[test]
    fn negative_scores_decline_the_store() {
        let mut ranker = Fixed(vec![0.0, -1.0, 3.0]);
        assert_eq!(declined(&blocks(3), &mut ranker), vec![101]);
        assert!(declined(&blocks(3), &mut NoRanker).is_empty());
    }
}

//! The survival scorer's model: which agents are likely to run within the next K steps.
//!
//! Exact K-step probabilities need matrix powers; instead, the edges above `threshold` (and above
//! uniform) of rows that are significantly non-uniform form a sparse graph, and a hop-limited search from
//! each source keeps the best path probability reaching each agent within K hops ("hop-count BFS"
//! weighted by the edges it crosses). The graph is rebuilt only when the matrix changed since the
//! last use, never per scored item.

use crate::params::Params;
use crate::transitions::{State, Transitions};

/// The learned graph: for every source, the agents reachable within K hops and how likely.
#[derive(Debug, Clone, Default)]
pub struct SurvivalModel {
    /// `reach[src * states + dst]`: best path probability from src to dst within K hops.
    reach: Vec<f32>,
    /// `next[src * states + dst]`: the one-step probability, significant edges only.
    next: Vec<f32>,
    states: usize,
    /// False when no edge is significant: the policy then ranks exactly like LRU.
    pub has_structure: bool,
}

impl SurvivalModel {
    pub fn build(t: &Transitions, p: &Params) -> Self {
        let states = t.states();
        let end = t.end();
        let distinct = t.distinct_destinations().max(2);
        let uniform = 1.0 / distinct as f32;
        // Adjacency lists of significant edges (END is a sink: never expanded).
        let mut adjacency: Vec<Vec<(State, f32)>> = vec![Vec::new(); states];
        let mut next = vec![0.0; states * states];
        let mut has_structure = false;
        for (src, edges) in adjacency.iter_mut().enumerate() {
            if u32::from(t.total(src)) < p.min_samples || !t.row_is_significant(src, distinct, p.z) {
                continue;
            }
            for dst in 0..states {
                let prob = t.probability(src, dst);
                if prob >= p.threshold && prob > uniform {
                    edges.push((dst, prob));
                    next[src * states + dst] = prob;
                    has_structure = true;
                }
            }
        }
        let mut reach = vec![0.0f32; states * states];
        let mut frontier: Vec<(State, f32)> = Vec::new();
        let mut expanded: Vec<(State, f32)> = Vec::new();
        for src in 0..states {
            frontier.clear();
            frontier.push((src, 1.0));
            for _hop in 0..p.k {
                expanded.clear();
                for &(node, prob) in &frontier {
                    if node == end && node != src {
                        continue;
                    }
                    for &(dst, edge) in &adjacency[node] {
                        let via = prob * edge;
                        let best = &mut reach[src * states + dst];
                        if via > *best {
                            *best = via;
                            expanded.push((dst, via));
                        }
                    }
                }
                std::mem::swap(&mut frontier, &mut expanded);
                if frontier.is_empty() {
                    break;
                }
            }
        }
        Self {
            reach,
            next,
            states,
            has_structure,
        }
    }

    /// P(dst runs within K steps | a session is at src), approximated.
    pub fn reach(&self, src: State, dst: State) -> f32 {
        self.reach.get(src * self.states + dst).copied().unwrap_or(0.0)
    }

    /// P(dst runs next | src), significant edges only.
    pub fn next(&self, src: State, dst: State) -> f32 {
        self.next.get(src * self.states + dst).copied().unwrap_or(0.0)
    }
}

/// Combine independent sources: 1 − Π (1 − p_i)^c_i, where `c_i` sessions sit at source i.
pub fn any_of(sources: impl Iterator<Item = (f32, u32)>) -> f32 {
    let miss: f32 = sources
        .map(|(p, count)| (1.0 - p.clamp(0.0, 1.0)).powi(count as i32))
        .product();
    1.0 - miss
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain() -> Transitions {
        // 0 → 1 → 2 → 0 …, deterministic.
        let mut t = Transitions::new(4, 32);
        for _ in 0..10 {
            t.record(0, 1);
            t.record(1, 2);
            t.record(2, 0);
        }
        t
    }

    #[test]
    fn a_chain_is_learned_with_hop_limited_reach() {
        let p = Params {
            k: 2,
            ..Params::default()
        };
        let m = SurvivalModel::build(&chain(), &p);
        assert!(m.has_structure);
        assert_eq!(m.next(0, 1), 1.0);
        assert_eq!(m.reach(0, 1), 1.0);
        assert_eq!(m.reach(0, 2), 1.0, "two hops");
        assert_eq!(m.reach(0, 0), 0.0, "three hops is beyond K = 2");
        let m3 = SurvivalModel::build(
            &chain(),
            &Params {
                k: 3,
                ..Params::default()
            },
        );
        assert_eq!(m3.reach(0, 0), 1.0);
    }

    #[test]
    fn too_few_samples_or_uniform_rows_are_not_structure() {
        let mut t = Transitions::new(4, 32);
        t.record(0, 1);
        t.record(0, 1);
        assert!(
            !SurvivalModel::build(&t, &Params::default()).has_structure,
            "2 < min-samples"
        );
        // Every row sees each destination equally often: uniform, no structure.
        let mut u = Transitions::new(4, 32);
        for round in 0..8 {
            for src in 0..4 {
                for k in 0..4 {
                    u.record(src, (src + k + round) % 4);
                }
            }
        }
        assert!(!SurvivalModel::build(&u, &Params::default()).has_structure);
    }

    #[test]
    fn sources_combine_as_independent_chances() {
        assert_eq!(any_of([(0.5, 2)].into_iter()), 0.75);
        assert_eq!(any_of([(0.0, 5), (1.0, 1)].into_iter()), 1.0);
        assert_eq!(any_of(std::iter::empty()), 0.0);
    }
}

//! The survival scorer's model: which agents are likely to run within the next K steps.
//!
//! Exact K-step probabilities need matrix powers; instead, the edges above `threshold` (and above
//! uniform) of rows that are significantly non-uniform form a sparse graph over session states
//! ([`crate::classic::nodes`]), and a hop-limited search from each source keeps the best path probability
//! reaching each node within K hops ("hop-count BFS" weighted by the edges it crosses). What the
//! scorer asks is per *agent* — "does this agent run again?" — so each source keeps the best
//! over the agent's nodes. The graph is rebuilt only when the matrix changed since the last use,
//! never per scored item.

use crate::classic::agents::Slot;
use crate::classic::nodes;
use crate::classic::params::Params;
use crate::classic::transitions::{is_significant, State, Transitions};

/// The learned graph: for every source state, the agents reachable within K hops and how likely.
#[derive(Debug, Clone, Default)]
pub struct SurvivalModel {
    /// `reach[src * agents + slot]`: best path probability from src to any node of the agent
    /// within K hops.
    reach: Vec<f32>,
    /// `reach_node[src * states + node]`: the same to one node (a session's own history needs
    /// to know *which* call of the agent comes next, to ask whether that call carries it).
    reach_node: Vec<f32>,
    states: usize,
    /// `next[src * agents + slot]`: the one-step probability of the agent (any depth),
    /// significant edges only.
    next: Vec<f32>,
    /// `next_end[src]`: the one-step probability that the session ends, significant edges only.
    next_end: Vec<f32>,
    agents: usize,
    /// False when no edge is significant: the policy then ranks exactly like LRU.
    pub has_structure: bool,
}

impl SurvivalModel {
    pub fn build(t: &Transitions, p: &Params) -> Self {
        let states = t.states();
        let end = t.end();
        let agents = (states - 1) / nodes::DEPTHS;
        let distinct = t.distinct_destinations().max(2);
        let uniform = 1.0 / distinct as f32;
        let mut model = Self {
            reach: vec![0.0; states * agents],
            reach_node: vec![0.0; states * states],
            states,
            next: vec![0.0; states * agents],
            next_end: vec![0.0; states],
            agents,
            has_structure: false,
        };
        // Adjacency lists of significant edges (END is a sink: never expanded).
        let mut adjacency: Vec<Vec<(State, f32)>> = vec![Vec::new(); states];
        for (src, edges) in adjacency.iter_mut().enumerate() {
            let Some(counts) = usable_row(t, src, p, distinct) else {
                continue;
            };
            let total: u32 = counts.iter().map(|&(_, c)| u32::from(c)).sum();
            for (dst, count) in counts {
                let prob = f32::from(count) / total as f32;
                if prob >= p.threshold && prob > uniform {
                    edges.push((dst, prob));
                    model.has_structure = true;
                    if dst == end {
                        model.next_end[src] = prob;
                    } else {
                        let cell = &mut model.next[src * agents + nodes::slot_of(dst)];
                        *cell += prob;
                    }
                }
            }
        }
        let mut best = vec![0.0f32; states];
        let mut frontier: Vec<(State, f32)> = Vec::new();
        let mut expanded: Vec<(State, f32)> = Vec::new();
        for src in 0..states {
            if adjacency[src].is_empty() {
                continue;
            }
            best.iter_mut().for_each(|b| *b = 0.0);
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
                        if via > best[dst] {
                            best[dst] = via;
                            expanded.push((dst, via));
                        }
                    }
                }
                std::mem::swap(&mut frontier, &mut expanded);
                if frontier.is_empty() {
                    break;
                }
            }
            model.reach_node[src * states..(src + 1) * states].copy_from_slice(&best);
            for (node, &prob) in best.iter().enumerate().filter(|&(n, &b)| n != end && b > 0.0) {
                let cell = &mut model.reach[src * agents + nodes::slot_of(node)];
                *cell = cell.max(prob);
            }
        }
        model
    }

    /// P(the agent in `slot` runs within K steps | a session is at src), approximated.
    pub fn reach(&self, src: State, slot: Slot) -> f32 {
        self.reach.get(src * self.agents + slot).copied().unwrap_or(0.0)
    }

    /// P(a session at `src` reaches `node` within K steps), approximated.
    pub fn reach_node(&self, src: State, node: State) -> f32 {
        self.reach_node.get(src * self.states + node).copied().unwrap_or(0.0)
    }

    /// P(the agent in `slot` runs next | src), significant edges only.
    pub fn next(&self, src: State, slot: Slot) -> f32 {
        self.next.get(src * self.agents + slot).copied().unwrap_or(0.0)
    }

    /// P(the session ends next | src), significant edges only.
    pub fn next_end(&self, src: State) -> f32 {
        self.next_end.get(src).copied().unwrap_or(0.0)
    }
}

/// The counts a node's edges come from: its own row once that has `min-samples` transitions and is
/// significant; until then, the row of its agent at every depth merged (each destination moved to
/// the depth after this node's) — back-off, as in n-gram models. Depth splits an agent's
/// transitions over up to `DEPTHS` rows, so a short run or a deep, rare node would otherwise learn
/// nothing where the agent-level chain already knows the next agent.
fn usable_row(t: &Transitions, src: State, p: &Params, distinct: usize) -> Option<Vec<(State, u16)>> {
    let usable = |counts: &[(State, u16)]| {
        let total: u32 = counts.iter().map(|&(_, c)| u32::from(c)).sum();
        total >= p.min_samples && is_significant(counts, distinct, p.z)
    };
    let own = t.row_counts(src);
    if usable(&own) {
        return Some(own);
    }
    if src == t.start() {
        return None;
    }
    let next_depth = (src % nodes::DEPTHS + 1) as u32;
    let mut merged: Vec<(State, u16)> = Vec::new();
    for node in nodes::nodes_of(nodes::slot_of(src)) {
        for (dst, count) in t.row_counts(node) {
            let dst = if dst == t.end() {
                dst
            } else {
                nodes::node(nodes::slot_of(dst), next_depth)
            };
            match merged.iter_mut().find(|(d, _)| *d == dst) {
                Some((_, c)) => *c = c.saturating_add(count),
                None => merged.push((dst, count)),
            }
        }
    }
    usable(&merged).then_some(merged)
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
    use crate::classic::nodes::node;

    fn chain() -> Transitions {
        // Agents 0 → 1 → 2 → 0 …, deterministic (every call at depth 0: only agents matter).
        let mut t = Transitions::new(4, 32);
        for _ in 0..10 {
            t.record(node(0, 0), node(1, 0));
            t.record(node(1, 0), node(2, 0));
            t.record(node(2, 0), node(0, 0));
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
        let a0 = node(0, 0);
        assert_eq!(m.next(a0, 1), 1.0);
        assert_eq!(m.reach(a0, 1), 1.0);
        assert_eq!(m.reach(a0, 2), 1.0, "two hops");
        assert_eq!(m.reach(a0, 0), 0.0, "three hops is beyond K = 2");
        let m3 = SurvivalModel::build(
            &chain(),
            &Params {
                k: 3,
                ..Params::default()
            },
        );
        assert_eq!(m3.reach(a0, 0), 1.0);
    }

    #[test]
    fn depth_tells_a_session_that_continues_from_one_that_ends() {
        // assistant (call 0) → judge (1) → assistant (2) → judge (3) → END, many sessions.
        let (assistant, judge) = (0, 1);
        let mut t = Transitions::new(2, 32);
        for _ in 0..20 {
            t.record(t.start(), node(assistant, 0));
            t.record(node(assistant, 0), node(judge, 1));
            t.record(node(judge, 1), node(assistant, 2));
            t.record(node(assistant, 2), node(judge, 3));
            t.record(node(judge, 3), t.end());
        }
        let m = SurvivalModel::build(&t, &Params::default());
        assert_eq!(m.next(node(judge, 1), assistant), 1.0, "after the first judgment");
        assert_eq!(m.next_end(node(judge, 1)), 0.0);
        assert_eq!(m.next_end(node(judge, 3)), 1.0, "after the second");
        assert_eq!(m.reach(node(judge, 3), assistant), 0.0);
    }

    #[test]
    fn a_node_with_too_few_calls_backs_off_to_its_agent_at_every_depth() {
        // Planner (0) → coder (1), seen many times at depth 0 but twice at depth 4.
        let mut t = Transitions::new(2, 32);
        for _ in 0..20 {
            t.record(node(0, 0), node(1, 1));
        }
        t.record(node(0, 4), node(1, 5));
        t.record(node(0, 4), node(1, 5));
        let m = SurvivalModel::build(&t, &Params::default());
        assert_eq!(m.next(node(0, 4), 1), 1.0, "the planner's own chain, moved to depth 5");
        assert_eq!(m.reach_node(node(0, 4), node(1, 5)), 1.0);
        assert_eq!(m.reach_node(node(0, 4), node(1, 1)), 0.0, "not back to depth 1");
    }

    #[test]
    fn too_few_samples_or_uniform_rows_are_not_structure() {
        let mut t = Transitions::new(4, 32);
        t.record(0, 6);
        t.record(0, 6);
        assert!(
            !SurvivalModel::build(&t, &Params::default()).has_structure,
            "2 < min-samples"
        );
        // Every row sees each destination equally often: uniform, no structure.
        let mut u = Transitions::new(4, 32);
        for round in 0..8 {
            for src in 0..4 {
                for k in 0..4 {
                    u.record(node(src, 0), node((src + k + round) % 4, 0));
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

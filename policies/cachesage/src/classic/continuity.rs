//! Does a call at a node carry its agent's history forward? Learned per node from the host's
//! `request-arrival.continues` (how the prompt relates to the same agent's previous prompt in the
//! session).
//!
//! "The agent runs again in this session" is not enough to keep its history: an MT-Bench judge's
//! second call uses another template and shares nothing with the first; a HumanEval tester re-run
//! restates the task and the new code, so only its system prompt and the problem carry over. Per
//! node we keep how often a call *extends* the previous prompt (shared ≥ its whole length), and
//! how far a call that does not still shares (a running mean, in tokens): a history block at
//! position p is worth keeping for that node with probability
//! `extends + (1 − extends) · [p + block ≤ shared]`.

use crate::classic::nodes::Node;

/// Observations before a node's figures are used; until then a call counts as extending (the
/// policy's behaviour before this was learned).
const MIN_CALLS: u16 = 4;
/// Counts are halved at this many calls, so the estimate follows a workload that changes.
const HALVE_AT: u16 = 64;

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct NodeContinuity {
    /// Calls that followed an earlier call of the same agent in the session, and how many of
    /// them extended it.
    pub calls: u16,
    pub extended: u16,
    /// Running mean of the shared tokens of the calls that did not extend.
    pub partial_shared: u32,
}

impl NodeContinuity {
    pub fn learn(&mut self, shared: u32, previous: u32) {
        if self.calls >= HALVE_AT {
            self.calls /= 2;
            self.extended /= 2;
        }
        let non_extending_before = self.calls - self.extended;
        self.calls += 1;
        if shared >= previous {
            self.extended += 1;
        } else if non_extending_before == 0 {
            self.partial_shared = shared;
        } else {
            // Mean over the recent non-extending calls (a 1/8 running mean).
            let mean = i64::from(self.partial_shared);
            self.partial_shared = (mean + (i64::from(shared) - mean) / 8) as u32;
        }
    }

    /// P(a history block of `tokens` tokens at `position` is reused by a call at this node).
    pub fn keeps(&self, position: u32, tokens: u32) -> f32 {
        if self.calls < MIN_CALLS {
            return 1.0;
        }
        let extends = f32::from(self.extended) / f32::from(self.calls);
        let within = position.saturating_add(tokens) <= self.partial_shared;
        extends + (1.0 - extends) * f32::from(u8::from(within))
    }
}

/// Per-node continuity, indexed by [`Node`].
#[derive(Debug, Clone, PartialEq)]
pub struct Continuity(Vec<NodeContinuity>);

impl Continuity {
    pub fn new(nodes: usize) -> Self {
        Self(vec![NodeContinuity::default(); nodes])
    }

    pub fn learn(&mut self, node: Node, shared: u32, previous: u32) {
        if let Some(c) = self.0.get_mut(node) {
            c.learn(shared, previous);
        }
    }

    pub fn keeps(&self, node: Node, position: u32, tokens: u32) -> f32 {
        self.0.get(node).map_or(1.0, |c| c.keeps(position, tokens))
    }

    /// Forget the nodes in `range` (their agent was aged out).
    pub fn forget(&mut self, range: std::ops::Range<Node>) {
        for c in &mut self.0[range] {
            *c = NodeContinuity::default();
        }
    }

    /// Nodes with observations, for snapshots.
    pub fn learned(&self) -> impl Iterator<Item = (Node, &NodeContinuity)> {
        self.0.iter().enumerate().filter(|(_, c)| c.calls > 0)
    }

    pub fn restore(&mut self, node: Node, c: NodeContinuity) {
        if let Some(slot) = self.0.get_mut(node) {
            *slot = c;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_until_a_few_calls_then_extension_and_partial_reuse_are_told_apart() {
        let mut chat = NodeContinuity::default();
        chat.learn(600, 270);
        assert_eq!(chat.keeps(4000, 16), 1.0, "too few calls to judge: keep");
        for _ in 0..5 {
            chat.learn(600, 270);
        }
        assert_eq!(chat.keeps(4000, 16), 1.0, "chat memory: every history block is reused");

        let mut restart = NodeContinuity::default();
        for _ in 0..8 {
            restart.learn(900, 1100); // system prompt + task carried over, the rest is new
        }
        assert_eq!(restart.keeps(800, 16), 1.0, "within the shared part");
        assert_eq!(restart.keeps(960, 16), 0.0, "beyond it: dead");

        let mut other_template = NodeContinuity::default();
        for _ in 0..8 {
            other_template.learn(0, 800);
        }
        assert_eq!(other_template.keeps(0, 16), 0.0);

        let mut half = NodeContinuity::default();
        for i in 0..8 {
            half.learn(if i % 2 == 0 { 500 } else { 0 }, 400);
        }
        assert_eq!(half.keeps(1000, 16), 0.5, "extends half the time");
    }

    #[test]
    fn counts_are_halved_so_the_estimate_follows_change() {
        let mut c = NodeContinuity::default();
        for _ in 0..200 {
            c.learn(0, 100);
        }
        assert!(c.calls <= HALVE_AT);
        for _ in 0..64 {
            c.learn(200, 100);
        }
        assert!(c.keeps(1000, 16) > 0.6, "mostly extending now: {}", c.keeps(1000, 16));
    }
}

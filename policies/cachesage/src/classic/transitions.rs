//! The transition learner: a first-order Markov matrix over session states ([`crate::classic::nodes`]) on a
//! sliding window.
//!
//! Rows are sources — every node, plus `START` (a session's first request); columns are
//! destinations — every node, plus `END` (the session ended). Each row keeps the last `window`
//! destinations it saw in a ring, so the matrix forgets at the rate the workload changes and an
//! update is O(1). Counts are derived from the ring when the (lazily rebuilt) survival graph needs
//! them: a dense count matrix would be nodes² cells, almost all zero.

use crate::classic::nodes::{self, Node};

/// A source or destination index: a node, or `START`/`END` (both = [`Transitions::terminal`]).
pub type State = Node;

#[derive(Debug, Clone, PartialEq)]
pub struct Transitions {
    nodes: usize,
    window: usize,
    /// Per row: the ring of recent destinations, oldest at `head` once full.
    rings: Vec<Vec<u8>>,
    heads: Vec<u8>,
}

impl Transitions {
    /// A matrix for `agents` agent slots. Their nodes and the terminal must fit in a byte.
    pub fn new(agents: usize, window: usize) -> Self {
        let nodes = nodes::count(agents);
        assert!(
            nodes < usize::from(u8::MAX),
            "{agents} agents do not fit one-byte states"
        );
        Self {
            nodes,
            window,
            rings: vec![Vec::new(); nodes + 1],
            heads: vec![0; nodes + 1],
        }
    }

    /// The `START` row and the `END` column.
    pub fn start(&self) -> State {
        self.nodes
    }
    pub fn end(&self) -> State {
        self.nodes
    }
    /// Rows (and columns): every node plus the terminal.
    pub fn states(&self) -> usize {
        self.nodes + 1
    }

    /// Count one transition src → dst, forgetting the row's oldest one if its window is full.
    pub fn record(&mut self, src: State, dst: State) {
        let ring = &mut self.rings[src];
        if ring.len() == self.window {
            let head = self.heads[src] as usize;
            ring[head] = dst as u8;
            self.heads[src] = ((head + 1) % self.window) as u8;
        } else {
            ring.push(dst as u8);
        }
    }

    /// Transitions remembered out of `src`.
    pub fn total(&self, src: State) -> u16 {
        self.rings[src].len() as u16
    }

    /// n(dst | src) for every destination `src` has seen, ascending by destination.
    pub fn row_counts(&self, src: State) -> Vec<(State, u16)> {
        let mut seen: Vec<u8> = self.rings[src].clone();
        seen.sort_unstable();
        let mut counts: Vec<(State, u16)> = Vec::new();
        for dst in seen {
            match counts.last_mut() {
                Some((last, n)) if *last == dst as State => *n += 1,
                _ => counts.push((dst as State, 1)),
            }
        }
        counts
    }

    pub fn count(&self, src: State, dst: State) -> u16 {
        self.rings[src].iter().filter(|&&d| d as State == dst).count() as u16
    }

    /// P(dst | src), 0 for an empty row.
    pub fn probability(&self, src: State, dst: State) -> f32 {
        match self.total(src) {
            0 => 0.0,
            n => f32::from(self.count(src, dst)) / f32::from(n),
        }
    }

    /// Distinct destinations a row could choose among: the agents that appear as a destination
    /// anywhere in the matrix, plus `END` if it does. The "uniform" baseline is 1/this. Agents,
    /// not nodes: a row's destinations all sit at the one depth after its own, so a row is "as
    /// random as can be" when it spreads over the agents.
    pub fn distinct_destinations(&self) -> usize {
        let mut seen = vec![false; self.states()];
        for &dst in self.rings.iter().flatten() {
            let dst = dst as usize;
            let key = if dst == self.end() { dst } else { nodes::slot_of(dst) };
            seen[key] = true;
        }
        seen.into_iter().filter(|&s| s).count()
    }

    /// Forget everything about the agent in `slot` (it was aged out and the slot reused): the
    /// rows of its nodes, and their appearances as destinations in other rows.
    pub fn forget(&mut self, slot: crate::classic::agents::Slot) {
        let gone = nodes::nodes_of(slot);
        for node in gone.clone() {
            self.set_row(node, &[]);
        }
        for src in 0..self.states() {
            // Only rows that saw one of the nodes as a destination need rewriting.
            if self.rings[src].iter().any(|&d| gone.contains(&(d as usize))) {
                let keep: Vec<u8> = self
                    .ordered_ring(src)
                    .into_iter()
                    .filter(|&d| !gone.contains(&(d as usize)))
                    .collect();
                self.set_row(src, &keep);
            }
        }
    }

    /// Is row `src` distinguishable from uniform noise? Pearson's chi-square test of the row's
    /// counts against uniform over the `distinct` destinations seen, at the significance whose
    /// normal quantile is `z` (3.5 ≈ p = 0.0002). A per-edge test would, across a whole matrix of
    /// random transitions, find some "significant" cell by chance; one test per row does not.
    /// (Pearson rather than the G-test: with windows of tens of samples, expected counts are
    /// small, where the G-test is known to reject too often.)
    pub fn row_is_significant(&self, src: State, distinct: usize, z: f32) -> bool {
        is_significant(&self.row_counts(src), distinct, z)
    }

    /// A row's ring, oldest first.
    pub fn ordered_ring(&self, src: State) -> Vec<u8> {
        let ring = &self.rings[src];
        let head = if ring.len() == self.window {
            self.heads[src] as usize
        } else {
            0
        };
        ring[head..].iter().chain(&ring[..head]).copied().collect()
    }

    /// Replace a row with `destinations` (oldest first; only the newest `window` are kept;
    /// destinations outside the matrix are dropped).
    pub fn set_row(&mut self, src: State, destinations: &[u8]) {
        self.rings[src].clear();
        self.heads[src] = 0;
        let start = destinations.len().saturating_sub(self.window);
        for &dst in &destinations[start..] {
            if (dst as usize) < self.states() {
                self.record(src, dst as usize);
            }
        }
    }
}

/// Pearson's chi-square test of a row's `counts` against uniform over `distinct` destinations (see
/// [`Transitions::row_is_significant`]).
pub fn is_significant(counts: &[(State, u16)], distinct: usize, z: f32) -> bool {
    let n: f32 = counts.iter().map(|&(_, c)| f32::from(c)).sum();
    if n == 0.0 || distinct < 2 {
        return false;
    }
    let expected = n / distinct as f32;
    let seen: f32 = counts
        .iter()
        .map(|&(_, observed)| (f32::from(observed) - expected).powi(2) / expected)
        .sum();
    // Destinations this row never saw each contribute (0 - E)² / E = E.
    let unseen = distinct.saturating_sub(counts.len());
    let chi2 = seen + unseen as f32 * expected;
    chi2 > chi_square_critical((distinct - 1) as f32, z)
}

/// The chi-square critical value for `df` degrees of freedom at the upper-tail probability whose
/// standard normal quantile is `z` (Wilson–Hilferty approximation: within 1 % for df ≥ 2).
fn chi_square_critical(df: f32, z: f32) -> f32 {
    let a = 2.0 / (9.0 * df);
    df * (1.0 - a + z * a.sqrt()).powi(3)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_slides_and_counts_follow() {
        use crate::classic::nodes::node;
        let (src, b, c) = (node(0, 0), node(1, 1), node(2, 1));
        let mut t = Transitions::new(3, 4);
        for _ in 0..4 {
            t.record(src, b);
        }
        assert_eq!(t.probability(src, b), 1.0);
        for _ in 0..3 {
            t.record(src, c);
        }
        // Window of 4: one b and three c remain.
        assert_eq!((t.count(src, b), t.count(src, c), t.total(src)), (1, 3, 4));
        assert_eq!(t.ordered_ring(src), vec![b as u8, c as u8, c as u8, c as u8]);
        assert_eq!(t.row_counts(src), vec![(b, 1), (c, 3)]);
        assert_eq!(t.distinct_destinations(), 2);
        t.record(b, t.end());
        t.record(c, node(1, 2));
        assert_eq!(t.distinct_destinations(), 3, "agents 1 and 2, and END; not nodes");
    }

    #[test]
    fn chi_square_critical_values_match_tables() {
        // Tables: df 3 → 16.27, df 6 → 22.46 at p = 0.001 (z = 3.09).
        assert!((chi_square_critical(3.0, 3.09) - 16.27).abs() < 0.3);
        assert!((chi_square_critical(6.0, 3.09) - 22.46).abs() < 0.3);
    }

    #[test]
    fn a_skewed_row_is_significant_and_a_flat_one_is_not() {
        let mut t = Transitions::new(3, 32);
        for i in 0..32 {
            t.record(0, if i % 2 == 0 { 1 } else { 2 });
            t.record(1, i % 4);
        }
        assert!(t.row_is_significant(0, 4, 3.5), "1/2, 1/2 over four destinations");
        assert!(!t.row_is_significant(1, 4, 3.5), "flat over four destinations");
    }

    #[test]
    fn forgetting_an_agent_removes_its_rows_and_columns() {
        use crate::classic::nodes::node;
        let mut t = Transitions::new(3, 8);
        let (a0, b0, b3, c0) = (node(0, 0), node(1, 0), node(1, 3), node(2, 0));
        t.record(a0, b0);
        t.record(a0, b3);
        t.record(a0, c0);
        t.record(b0, a0);
        t.record(t.start(), b0);
        t.forget(1);
        assert_eq!(t.total(b0), 0);
        assert_eq!(
            (t.count(a0, b0), t.count(a0, b3), t.count(a0, c0), t.total(a0)),
            (0, 0, 1, 1)
        );
        assert_eq!(t.total(t.start()), 0);
    }
}

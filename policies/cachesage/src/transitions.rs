//! The transition learner: a first-order Markov matrix of agent transitions over a sliding window.
//!
//! Rows are sources — every agent slot, plus `START` (a session's first request); columns are
//! destinations — every agent slot, plus `END` (the session ended). Each row keeps the last
//! `window` destinations it saw in a ring, and the counts n(a' | a) of what is in the ring, so the
//! matrix forgets at the rate the workload changes and an update is O(1).

use crate::agents::Slot;

/// A source or destination index: an agent slot, or `START`/`END` (both = `max_agents`).
pub type State = usize;

#[derive(Debug, Clone, PartialEq)]
pub struct Transitions {
    agents: usize,
    window: usize,
    /// Per row: the ring of recent destinations, oldest at `head` once full.
    rings: Vec<Vec<u8>>,
    heads: Vec<u8>,
    /// `counts[src * (agents + 1) + dst]`.
    counts: Vec<u16>,
    totals: Vec<u16>,
}

impl Transitions {
    pub fn new(agents: usize, window: usize) -> Self {
        let states = agents + 1;
        Self {
            agents,
            window,
            rings: vec![Vec::with_capacity(window); states],
            heads: vec![0; states],
            counts: vec![0; states * states],
            totals: vec![0; states],
        }
    }

    /// The `START` row and the `END` column.
    pub fn start(&self) -> State {
        self.agents
    }
    pub fn end(&self) -> State {
        self.agents
    }
    pub fn states(&self) -> usize {
        self.agents + 1
    }

    fn cell(&self, src: State, dst: State) -> usize {
        src * (self.agents + 1) + dst
    }

    /// Count one transition src → dst, forgetting the row's oldest one if its window is full.
    pub fn record(&mut self, src: State, dst: State) {
        let ring_len = self.rings[src].len();
        if ring_len == self.window {
            let head = self.heads[src] as usize;
            let old = self.rings[src][head] as usize;
            let cell = self.cell(src, old);
            self.counts[cell] -= 1;
            self.rings[src][head] = dst as u8;
            self.heads[src] = ((head + 1) % self.window) as u8;
        } else {
            self.rings[src].push(dst as u8);
            self.totals[src] += 1;
        }
        let cell = self.cell(src, dst);
        self.counts[cell] += 1;
    }

    pub fn count(&self, src: State, dst: State) -> u16 {
        self.counts[self.cell(src, dst)]
    }

    pub fn total(&self, src: State) -> u16 {
        self.totals[src]
    }

    /// P(dst | src), 0 for an empty row.
    pub fn probability(&self, src: State, dst: State) -> f32 {
        match self.totals[src] {
            0 => 0.0,
            n => f32::from(self.count(src, dst)) / f32::from(n),
        }
    }

    /// Destinations that appear anywhere in the matrix: the "uniform" baseline is 1/this.
    pub fn distinct_destinations(&self) -> usize {
        (0..self.states())
            .filter(|&dst| (0..self.states()).any(|src| self.count(src, dst) > 0))
            .count()
    }

    /// Forget everything about `slot` (its agent was aged out and the slot reused): its row, and
    /// its appearances as a destination in other rows.
    pub fn forget(&mut self, slot: Slot) {
        self.set_row(slot, &[]);
        for src in 0..self.states() {
            // Only rows that saw the slot as a destination need rewriting.
            if self.count(src, slot) > 0 {
                let keep: Vec<u8> = self
                    .ordered_ring(src)
                    .into_iter()
                    .filter(|&d| d as usize != slot)
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
        let n = f32::from(self.total(src));
        if n == 0.0 || distinct < 2 {
            return false;
        }
        let expected = n / distinct as f32;
        let seen: f32 = (0..self.states())
            .map(|dst| f32::from(self.count(src, dst)))
            .filter(|&observed| observed > 0.0)
            .map(|observed| (observed - expected).powi(2) / expected)
            .sum();
        // Destinations this row never saw each contribute (0 - E)² / E = E.
        let unseen = distinct.saturating_sub((0..self.states()).filter(|&d| self.count(src, d) > 0).count());
        let chi2 = seen + unseen as f32 * expected;
        chi2 > chi_square_critical((distinct - 1) as f32, z)
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

    /// Replace a row with `destinations` (oldest first; only the newest `window` are kept).
    pub fn set_row(&mut self, src: State, destinations: &[u8]) {
        for dst in 0..self.states() {
            let cell = self.cell(src, dst);
            self.counts[cell] = 0;
        }
        self.rings[src].clear();
        self.heads[src] = 0;
        self.totals[src] = 0;
        let start = destinations.len().saturating_sub(self.window);
        for &dst in &destinations[start..] {
            if (dst as usize) < self.states() {
                self.record(src, dst as usize);
            }
        }
    }
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
        let mut t = Transitions::new(3, 4);
        for dst in [1, 1, 1, 1] {
            t.record(0, dst);
        }
        assert_eq!(t.probability(0, 1), 1.0);
        for dst in [2, 2, 2] {
            t.record(0, dst);
        }
        // Window of 4: one 1 and three 2s remain.
        assert_eq!((t.count(0, 1), t.count(0, 2), t.total(0)), (1, 3, 4));
        assert_eq!(t.ordered_ring(0), vec![1, 2, 2, 2]);
        assert_eq!(t.distinct_destinations(), 2);
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
    fn forgetting_an_agent_removes_its_row_and_column() {
        let mut t = Transitions::new(3, 8);
        t.record(0, 1);
        t.record(0, 2);
        t.record(1, 0);
        t.record(t.start(), 1);
        t.forget(1);
        assert_eq!(t.total(1), 0);
        assert_eq!((t.count(0, 1), t.count(0, 2), t.total(0)), (0, 1, 1));
        assert_eq!(t.total(t.start()), 0);
    }
}

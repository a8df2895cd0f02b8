//! What the model knows about each agent, in a sparse table keyed by the host's handle:
//! its anchor (which block positions are anchor, and whether it is resident in the engine's cache,
//! so that `act` does not warm what is already cached), how often sessions start using it, how
//! long its calls take, which agents follow it (a few heavy hitters, not a row of a dense matrix)
//! and whether its later calls in a session carry their history forward. About 100 bytes an agent,
//! whatever the number of agents.

use std::collections::HashMap;

use agentrt_sdk::BlockOp;

use super::gaps::GapHistogram;
use crate::bounded::make_room;

/// Successors kept per agent. Pipelines and loops of real agent teams branch little (a worker
/// returns to its orchestrator, a coder loops on itself or hands to a tester): four heavy hitters
/// cover them, and the rest of a row is noise.
pub const SUCCESSORS: usize = 4;

/// Counts of a row are halved once they sum to this, so that a row follows what the agent does
/// now (like a sliding window) and a count never saturates.
const ROW_HALVING: u32 = 64;

/// Observations of repeat calls needed before continuity is trusted.
const CONTINUITY_MIN: u16 = 4;

/// A repeat call that carries this share of its previous prompt counts as extending it.
const NEAR_EXTENDS: f32 = 0.95;

/// One learned edge `agent → next`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Successor {
    /// The next agent's handle; 0 = empty entry.
    pub agent: u32,
    pub count: u16,
    /// Mean time from the predecessor's call finishing to this agent's call arriving (ms): a tool
    /// running, a user thinking, the framework's overhead.
    pub gap_ms: f32,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentStats {
    pub handle: u32,
    pub anchor_hash: u64,
    pub anchor_tokens: u32,
    /// Host clock of the agent's latest call.
    pub last_seen_us: u64,
    /// Calls learned (not warm-ups).
    pub calls: u32,
    /// Sessions that started using this agent: the latest one's time and the mean gap between
    /// them (0 until two were seen) — the rate at which sessions not yet live will need it.
    pub last_first_us: u64,
    pub first_gap_ms: f32,
    /// Mean time a call of this agent takes, arrival to finish (ms).
    pub service_ms: f32,
    pub successors: [Successor; SUCCESSORS],
    /// Sessions that ended after this agent's call.
    pub ends: u16,
    /// Repeat calls in a session seen, how many extended the previous prompt, and the mean share
    /// of the previous prompt the others still carried (0–1: a share, not a count of tokens,
    /// since a session's context grows call by call).
    pub repeats: u16,
    pub extends: u16,
    pub shared_mean: f32,
    // Not in snapshots: relearned from calls and block events.
    /// Gaps between a call's finish and the session's next call of any agent, after an answer
    /// (`[0]`) and after a tool call (`[1]`).
    pub gaps: [GapHistogram; 2],
    pub residency: Residency,
}

/// An agent's anchor blocks stored and not removed since, and the most ever seen at once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Residency {
    pub blocks: u32,
    pub max: u32,
}

impl Residency {
    pub fn record(&mut self, op: BlockOp) {
        match op {
            BlockOp::Stored => {
                self.blocks += 1;
                self.max = self.max.max(self.blocks);
            }
            BlockOp::Removed => self.blocks = self.blocks.saturating_sub(1),
            BlockOp::Touched | BlockOp::AllCleared => {}
        }
    }

    /// The engine dropped every cached block.
    pub fn clear(&mut self) {
        self.blocks = 0;
    }

    /// As many anchor blocks cached as ever were: the whole anchor, as far as anyone can tell.
    pub fn resident(&self) -> bool {
        self.max > 0 && self.blocks >= self.max
    }
}

/// `mean` moved `alpha` of the way to `x`; the first sample (a mean of 0) is taken as it is.
fn ewma(mean: &mut f32, x: f32, alpha: f32) {
    *mean = if *mean == 0.0 { x } else { *mean + alpha * (x - *mean) };
}

impl AgentStats {
    /// Learn `self → next` after a gap of `gap_ms`. A new successor takes the lightest entry
    /// (the first empty one, if any) when that entry was seen at most once, and otherwise ages
    /// every entry by one (Misra–Gries), so a one-off successor cannot push out a real one.
    pub fn learn_successor(&mut self, next: u32, gap_ms: f32) {
        if let Some(s) = self.successors.iter_mut().find(|s| s.agent == next && s.count > 0) {
            s.count += 1;
            let alpha = 1.0 / f32::from(s.count.min(16));
            s.gap_ms += alpha * (gap_ms - s.gap_ms);
        } else if let Some(lightest) = self
            .successors
            .iter_mut()
            .min_by_key(|s| s.count)
            .filter(|s| s.count <= 1)
        {
            *lightest = Successor {
                agent: next,
                count: 1,
                gap_ms,
            };
        } else {
            self.successors.iter_mut().for_each(|s| s.count -= 1);
        }
        self.age_row();
    }

    pub fn learn_end(&mut self) {
        self.ends = self.ends.saturating_add(1);
        self.age_row();
    }

    fn row_total(&self) -> u32 {
        self.successors.iter().map(|s| u32::from(s.count)).sum::<u32>() + u32::from(self.ends)
    }

    fn age_row(&mut self) {
        if self.row_total() >= ROW_HALVING {
            for s in &mut self.successors {
                s.count /= 2;
                if s.count == 0 {
                    *s = Successor::default();
                }
            }
            self.ends /= 2;
        }
    }

    /// `(next agent, probability, mean gap ms)` of every learned successor. Probabilities are
    /// smoothed by `prior` pseudo-observations of "something else".
    pub fn next(&self, prior: f32) -> impl Iterator<Item = (u32, f32, f32)> + '_ {
        let total = self.row_total() as f32 + prior;
        self.successors
            .iter()
            .filter(move |s| s.count > 0 && total > 0.0)
            .map(move |s| (s.agent, f32::from(s.count) / total, s.gap_ms))
    }

    /// P(the session ends after this agent's call).
    pub fn p_end(&self, prior: f32) -> f32 {
        let total = self.row_total() as f32 + prior;
        if total > 0.0 {
            f32::from(self.ends) / total
        } else {
            0.0
        }
    }

    pub fn learn_service(&mut self, ms: f32) {
        ewma(&mut self.service_ms, ms, 0.125);
    }

    /// A session called this agent for the first time at `at_us`.
    pub fn learn_first_call(&mut self, at_us: u64) {
        if self.last_first_us != 0 && at_us > self.last_first_us {
            let gap = (at_us - self.last_first_us) as f32 / 1000.0;
            ewma(&mut self.first_gap_ms, gap, 0.25);
        }
        self.last_first_us = at_us;
    }

    /// Rate (per second) at which sessions not live yet will need this agent: one per mean gap,
    /// slowing down as the agent stays unused longer than that (an app that went quiet).
    pub fn new_session_rate(&self, now_us: u64) -> f32 {
        if self.last_first_us == 0 {
            return 0.0;
        }
        let idle_ms = now_us.saturating_sub(self.last_first_us) as f32 / 1000.0;
        1000.0 / self.first_gap_ms.max(idle_ms).max(1.0)
    }

    pub fn learn_continuation(&mut self, shared_tokens: u32, previous_tokens: u32) {
        self.repeats = self.repeats.saturating_add(1);
        // Carrying all but the last few percent is carrying the history forward (the previous
        // prompt's unfinished last block, a trimmed tool result): counted with the calls that
        // extend it, so that one compaction in ten does not mark every context's end as dead.
        if shared_tokens as f32 >= NEAR_EXTENDS * previous_tokens as f32 {
            self.extends = self.extends.saturating_add(1);
        } else {
            let n = f32::from((self.repeats - self.extends).max(1));
            let share = shared_tokens as f32 / previous_tokens.max(1) as f32;
            self.shared_mean += (share - self.shared_mean) / n;
        }
        if self.repeats == u16::MAX {
            self.repeats /= 2;
            self.extends /= 2;
        }
    }

    /// The chance that this agent's next call in a session carries forward the block at
    /// `position` of its previous prompt, of `prompt_tokens` tokens.
    pub fn keeps(&self, position: u32, tokens: u32, prompt_tokens: u32) -> f32 {
        if self.repeats < CONTINUITY_MIN {
            return 1.0;
        }
        let extends = f32::from(self.extends) / f32::from(self.repeats);
        let shared = (position + tokens) as f32 <= self.shared_mean * prompt_tokens as f32;
        extends + (1.0 - extends) * if shared { 1.0 } else { 0.0 }
    }

    /// A block is part of the anchor only if it *ends* inside it: the block that straddles the
    /// anchor's end also holds the start of one session's own content, which no other session
    /// reuses.
    pub fn is_anchor_position(&self, position: u32, block_tokens: u32) -> bool {
        position.saturating_add(block_tokens.max(1)) <= self.anchor_tokens
    }
}

/// Every tracked agent, by handle.
pub type Agents = HashMap<u32, AgentStats>;

/// `handle`'s entry, created if new; a new agent in a table of `capacity` replaces the one seen
/// least recently, whose handle is returned.
pub fn entry(agents: &mut Agents, capacity: usize, handle: u32) -> (&mut AgentStats, Option<u32>) {
    let dropped = make_room(agents, capacity, handle, |a| (a.last_seen_us, a.handle));
    let agent = agents.entry(handle).or_insert_with(|| AgentStats {
        handle,
        ..Default::default()
    });
    (agent, dropped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_keeps_its_heavy_hitters_and_smooths_with_the_prior() {
        let mut a = AgentStats::default();
        for _ in 0..6 {
            a.learn_successor(2, 1000.0);
        }
        a.learn_successor(3, 50.0);
        // One-offs churn through the lightest entry; the heavy hitter stays.
        for next in 10..20 {
            a.learn_successor(next, 10.0);
        }
        let next: Vec<_> = a.next(1.0).collect();
        assert!(
            next.iter()
                .any(|&(n, p, gap)| n == 2 && p > 0.3 && (gap - 1000.0).abs() < 1.0),
            "{next:?}"
        );
        // One observation with prior 1 is a half, not a certainty.
        let mut b = AgentStats::default();
        b.learn_successor(6, 100.0);
        let (_, p, _) = b.next(1.0).next().unwrap();
        assert!((p - 0.5).abs() < 1e-6);
    }

    #[test]
    fn rows_age_so_that_a_changed_pipeline_takes_over() {
        let mut a = AgentStats::default();
        for _ in 0..100 {
            a.learn_successor(2, 10.0);
        }
        for _ in 0..100 {
            a.learn_successor(3, 10.0);
        }
        let best = a.next(1.0).max_by(|x, y| x.1.total_cmp(&y.1)).unwrap();
        assert_eq!(best.0, 3);
        assert!(a.row_total() < ROW_HALVING);
    }

    #[test]
    fn new_session_rate_slows_as_an_agent_goes_quiet() {
        let mut a = AgentStats::default();
        assert_eq!(a.new_session_rate(5_000_000), 0.0);
        a.learn_first_call(1_000_000);
        a.learn_first_call(3_000_000);
        let busy = a.new_session_rate(3_500_000);
        assert!((busy - 0.5).abs() < 1e-3, "{busy}");
        let quiet = a.new_session_rate(23_000_000);
        assert!((quiet - 0.05).abs() < 1e-3, "{quiet}");
    }

    #[test]
    fn continuity_says_which_blocks_a_repeat_call_keeps() {
        let mut a = AgentStats::default();
        assert_eq!(a.keeps(5000, 16, 6000), 1.0, "untrusted until seen");
        for _ in 0..4 {
            a.learn_continuation(300, 1000);
        }
        assert_eq!(a.keeps(0, 16, 1000), 1.0);
        assert_eq!(a.keeps(512, 16, 1000), 0.0);
        // A share, not a count: in a context grown to 10,000 tokens, 30 % of it is kept.
        assert_eq!(a.keeps(2_800, 16, 10_000), 1.0);
        assert_eq!(a.keeps(3_200, 16, 10_000), 0.0);
    }

    #[test]
    fn a_full_table_drops_the_agent_seen_least_recently() {
        let mut t = Agents::new();
        entry(&mut t, 2, 1).0.last_seen_us = 10;
        entry(&mut t, 2, 2).0.last_seen_us = 5;
        let (_, dropped) = entry(&mut t, 2, 3);
        assert_eq!(dropped, Some(2));
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn residency_follows_stores_and_removals_and_an_anchor_block_ends_inside_the_anchor() {
        let mut r = Residency::default();
        assert!(!r.resident());
        r.record(BlockOp::Stored);
        r.record(BlockOp::Stored);
        assert!(r.resident());
        r.record(BlockOp::Removed);
        assert!(!r.resident());
        r.record(BlockOp::Stored);
        r.clear();
        assert_eq!(r, Residency { blocks: 0, max: 2 });
        let a = AgentStats {
            anchor_tokens: 64,
            ..Default::default()
        };
        assert!(a.is_anchor_position(48, 16) && !a.is_anchor_position(56, 16));
    }
}

//! What the framework says of sessions' lives (contract 0.4: `session-end` with reason `closed`,
//! `session-wait`), turned into classes of the eviction order. Both orders the policy can follow
//! start the same way, by construction:
//!
//! 1. **Closed sessions' blocks**, least recently used first — the `closed-first` rule exactly:
//!    every block the engine reports with a closed session, its agent's anchor blocks included
//!    (content another session reused, a shared anchor above all, is reported with session 0 and
//!    is no closed session's). The robust order must be the rule it stands for: keeping a closed
//!    session's anchor blocks put it 0.85 pp below closed-first on a replay where every
//!    conversation has its own tools. A closed session that calls again is open again (a wrong
//!    hint).
//!
//! Then the two orders differ ([`order`]): the **robust** one is LRU over the rest — closed-first
//! exactly, or LRU exactly before any closing is heard; the **learned** one puts next
//!
//! 2. **waiting sessions' own blocks that are unlikely to be back in time** — less than even
//!    odds of a call before the cache turns over, from the return curves of their wait kind or
//!    tool ([`crate::returns`]), least likely first —
//!
//! 3. and orders **the rest** by the model's expected use.
//!
//! The guard decides which order the engine follows. Silence once closings are heard is a wait
//! for the user, not an end ([`Classes::silence_is_a_wait`]): the session that is over will be
//! closed. Every table is bounded.

use std::collections::HashMap;

use agentrt_sdk::{EndReason, Event, Item, SessionEnd, WaitKind};

use crate::bounded::Bounded;
use crate::returns::{ReturnCurves, Turnover};

/// Most closed sessions remembered (their blocks leave within a few turnovers).
pub const MAX_CLOSED: usize = 65_536;
/// Most waiting sessions tracked.
pub const MAX_WAITING: usize = 65_536;
/// A waiting session less likely than this to return before the cache turns over is not worth
/// keeping ahead of live content.
const KEEP_IF_LIKELIER: f32 = 0.5;

/// The closed class's score: below every other class (an unlikely wait scores at least −2, the
/// rest at least 0).
const CLOSED: f32 = -3.0;
/// Scores below this are the closed class.
pub const CLOSED_BELOW: f32 = -2.5;

/// Which order a ranking follows past the closed class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Order {
    /// LRU: closed-first once closings are heard.
    Robust,
    /// Unlikely waits, then the model's expected use.
    #[default]
    Learned,
}

/// A wait in progress: its kind (0 tool, 1 user), tool, the framework's expected duration, and
/// when it began.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Waiting {
    kind: usize,
    tool: u64,
    expected_us: u64,
    since_us: u64,
}

/// What the policy was told of sessions' lives, and what it learned from it.
#[derive(Debug, Clone)]
pub struct Classes {
    /// Closed sessions.
    closed: Bounded<()>,
    waiting: Bounded<Waiting>,
    curves: ReturnCurves,
    turnover: Turnover,
    /// Sessions closed.
    pub closes_heard: u64,
}

impl Default for Classes {
    fn default() -> Self {
        Self {
            closed: Bounded::new(MAX_CLOSED),
            waiting: Bounded::new(MAX_WAITING),
            curves: ReturnCurves::default(),
            turnover: Turnover::default(),
            closes_heard: 0,
        }
    }
}

impl Classes {
    /// Hear `event`; returns whether it was the first closing heard.
    pub fn observe(&mut self, event: &Event) -> bool {
        let heard = self.closings_heard();
        match event {
            Event::RequestArrival(r) if !r.warmup => self.arrived(r.session, r.at_us),
            Event::EngineLoad(l) => self.turnover.total_blocks = l.total_blocks,
            Event::SessionWait(w) => self.wait(w.session, w.kind, w.tool, w.expected_us, w.at_us),
            Event::SessionEnd(e) if self.silence_is_a_wait(e) && !self.waiting.contains(e.session) => {
                self.wait(e.session, WaitKind::User, 0, 0, e.at_us);
            }
            // An idle end is silence, not an end: the wait goes on (it may still return).
            Event::SessionEnd(e) if e.reason != EndReason::Idle => {
                if let Some(w) = self.waiting.remove(e.session) {
                    self.curves.record(w.kind, w.tool, None);
                }
                if e.reason == EndReason::Closed {
                    self.closes_heard += 1;
                    self.closed.insert(e.session, ());
                }
            }
            _ => {}
        }
        !heard && self.closings_heard()
    }

    /// A block left the GPU cache at `now_us`: the turnover's clock.
    pub fn removed(&mut self, now_us: u64) {
        self.turnover.removed(now_us);
    }

    fn arrived(&mut self, session: u64, at_us: u64) {
        // A closed session that calls again was closed by a wrong hint: it is open again.
        self.closed.remove(session);
        if let Some(w) = self.waiting.remove(session) {
            let ms = at_us.saturating_sub(w.since_us) as f32 / 1000.0;
            self.curves.record(w.kind, w.tool, Some(ms));
        }
    }

    fn wait(&mut self, session: u64, kind: WaitKind, tool: u64, expected_us: u64, at_us: u64) {
        let waiting = Waiting {
            kind: kind as usize,
            tool: if kind == WaitKind::Tool { tool } else { 0 },
            expected_us,
            since_us: at_us,
        };
        self.waiting.insert(session, waiting);
    }

    /// Whether any closing has been heard: until then the robust order is LRU exactly.
    pub fn closings_heard(&self) -> bool {
        self.closes_heard > 0
    }

    /// Whether `end` is silence to be valued as a wait rather than an end: once the framework
    /// signals closings, an end inferred from idle time is not one — the session that is over
    /// will be closed, and the one that paused (a conversation's next turn minutes later) comes
    /// back.
    pub fn silence_is_a_wait(&self, end: &SessionEnd) -> bool {
        end.reason == EndReason::Idle && self.closings_heard()
    }

    /// P(`session` returns before the cache turns over), when a curve (or the framework's
    /// expected duration, before any curve can tell) says; `None` for a session not waiting.
    pub fn p_return(&self, session: u64, now_us: u64) -> Option<f32> {
        let w = self.waiting.get(session)?;
        let horizon_us = self.turnover.estimate_us(now_us)?;
        let waited_us = now_us.saturating_sub(w.since_us);
        match self.curves.curve(w.kind, w.tool) {
            Some(curve) => Some(curve.p_return(waited_us as f32 / 1000.0, horizon_us as f32 / 1000.0)),
            None if w.expected_us > 0 => Some(f32::from(u8::from(w.expected_us <= waited_us + horizon_us))),
            None => None,
        }
    }

    /// The scores of `order` for `items`: the closed class lowest, then — learned — the unlikely
    /// waits (−2 + ½ p), then `rest`'s scores (≥ 0; robust: recency). `anchor` tells an item that
    /// is part of its agent's anchor. The host breaks ties by recency, so equal scores are LRU
    /// within a class.
    pub fn order(
        &self,
        items: &[Item],
        order: Order,
        rest: &[f32],
        anchor: impl Fn(&Item) -> bool,
        now_us: u64,
    ) -> Vec<f32> {
        let mut p_of: HashMap<u64, Option<f32>> = HashMap::new();
        items
            .iter()
            .zip(rest)
            .map(|(item, &rest)| {
                if item.session != 0 && self.closed.contains(item.session) {
                    return CLOSED;
                }
                // A session's own content (not shared, not its agent's anchor) may wait.
                if order == Order::Learned && item.session != 0 && !anchor(item) {
                    let p = *p_of
                        .entry(item.session)
                        .or_insert_with(|| self.p_return(item.session, now_us));
                    if let Some(p) = p.filter(|&p| p < KEEP_IF_LIKELIER) {
                        return -2.0 + 0.5 * p;
                    }
                }
                if rest.is_finite() {
                    rest.max(0.0)
                } else {
                    0.0
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;

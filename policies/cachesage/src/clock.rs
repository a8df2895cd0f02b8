//! The policy's one clock: the host's time, as the latest event said it, and the engine's
//! `last-access` stamps (a counter of free-queue insertions, not time) placed on it.
//!
//! Every event that carries a time moves `now` on (never back: events of one call come in order,
//! but a batch may mix sources). Each GPU ranking pairs the newest stamp among its candidates with
//! `now`; an older stamp is placed by interpolating between those pairs, so that a block nothing
//! else is known about can be valued by how long ago it was used — the estimate behind LRU — in
//! the same units as every other estimate.

use std::collections::VecDeque;

use agentrt_sdk::Event;

/// Pairs kept. Rankings come every ~100 ms; 256 cover the last half minute or more, and a block
/// older than that is old enough that its exact age no longer changes its rank among the unknowns.
const PAIRS: usize = 256;

#[derive(Debug, Clone, Default)]
pub struct Clock {
    now_us: u64,
    /// (stamp, host µs), both increasing.
    pairs: VecDeque<(u64, u64)>,
}

impl Clock {
    /// The host's time (µs) as the latest event said it.
    pub fn now_us(&self) -> u64 {
        self.now_us
    }

    /// An event said the time was `at_us`.
    pub fn advance(&mut self, at_us: u64) {
        self.now_us = self.now_us.max(at_us);
    }

    /// `event`'s time, if it carries one, moves `now` on.
    pub fn observe(&mut self, event: &Event) {
        let at_us = match event {
            Event::RequestArrival(r) => r.at_us,
            Event::RequestFinish(r) => r.at_us,
            Event::ToolCall(t) => t.at_us,
            Event::EngineLoad(l) => l.at_us,
            Event::SessionEnd(e) => e.at_us,
            Event::SessionWait(w) => w.at_us,
            Event::Handoff(h) => h.at_us,
            _ => return,
        };
        self.advance(at_us);
    }

    /// A ranking's newest `last-access` stamp was current now.
    pub fn record_stamp(&mut self, stamp: u64) {
        if self.pairs.back().is_some_and(|&(s, _)| stamp <= s) {
            return;
        }
        if self.pairs.len() == PAIRS {
            self.pairs.pop_front();
        }
        self.pairs.push_back((stamp, self.now_us));
    }

    /// The stamp the engine had reached at host time `t_us`: interpolated between rankings;
    /// `None` before the first ranking or before the oldest pair kept.
    pub fn stamp_at(&self, t_us: u64) -> Option<u64> {
        let &(_, first_t) = self.pairs.front()?;
        (t_us >= first_t).then(|| along(&self.pairs, t_us, |(s, t)| (t, s)))?
    }

    /// Host time (µs) at which `stamp` was taken: interpolated, or the oldest time known.
    pub fn time_of(&self, stamp: u64) -> Option<u64> {
        along(&self.pairs, stamp, |p| p)
    }

    /// `1 / age` in uses per second for a block last used at `stamp` (at least a millisecond
    /// old); 0 before any ranking placed stamps.
    pub fn recency_rate(&self, stamp: u64) -> f32 {
        self.time_of(stamp)
            .map_or(0.0, |t| 1_000_000.0 / (self.now_us.saturating_sub(t).max(1_000) as f32))
    }
}

/// `y` at `x` on the line through `points` as `key` reads them ((x, y), both increasing), held
/// flat past either end; `None` without points.
fn along(points: &VecDeque<(u64, u64)>, x: u64, key: impl Fn((u64, u64)) -> (u64, u64)) -> Option<u64> {
    let (x0, y0) = key(*points.front()?);
    if x <= x0 {
        return Some(y0);
    }
    let i = points.partition_point(|&p| key(p).0 < x);
    let Some(&p1) = points.get(i) else {
        return points.back().map(|&p| key(p).1);
    };
    let ((x0, y0), (x1, y1)) = (key(points[i - 1]), key(p1));
    let f = (x - x0) as f64 / (x1 - x0).max(1) as f64;
    Some(y0 + ((y1 - y0) as f64 * f) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_between_rankings_are_interpolated_and_time_never_runs_back() {
        let mut c = Clock::default();
        assert_eq!(c.time_of(5), None);
        c.advance(1_000);
        c.record_stamp(100);
        c.advance(3_000);
        c.record_stamp(200);
        c.advance(2_000);
        assert_eq!(c.now_us(), 3_000, "an older event does not move the clock back");
        c.advance(4_000);
        c.record_stamp(150); // out of order: ignored
        assert_eq!(c.time_of(150), Some(2_000));
        assert_eq!(c.time_of(10), Some(1_000));
        assert_eq!(c.time_of(500), Some(3_000));
        assert_eq!(c.stamp_at(2_000), Some(150));
        assert_eq!(c.stamp_at(500), None, "before anything recorded");
        assert_eq!(c.stamp_at(9_000), Some(200));
        assert!((c.recency_rate(200) - 1000.0).abs() < 1e-3, "1 ms old: 1000/s");
    }
}

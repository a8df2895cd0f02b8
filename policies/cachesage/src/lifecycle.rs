//! What an agent framework says of sessions' lives (contract 0.4: `session-end` with reason
//! `closed`, `session-wait`), turned into the order of evictions — for either model, before the
//! guard judges it against its robust expert (closed-first once closings are heard):
//!
//! - **Closed sessions' blocks go first**, before any block LRU would pick: a session the
//!   framework closed sends nothing more. Only a session's own blocks: content another session
//!   reused is reported with session 0, and anchor positions (the agent's system prompt and tools,
//!   which the agent's other sessions start with) are never a closed session's.
//! - **A waiting session's blocks** are valued by the probability that it returns before the
//!   cache turns over — from return-time curves learned online (wait → next arrival of the
//!   session) per wait kind and per tool. Where that probability is below one half, its blocks
//!   go next (least likely first): a tool wait of seconds keeps its context, a user wait of an
//!   hour does not. Above one half, or with too few returns seen to tell, the model's score
//!   stands.
//!
//! - **Where the framework signals closings**, a session it has not closed (nor `serve` found
//!   silent) is live for certain, not merely recent: its own blocks, and its agents' anchors and
//!   shared content, rank above every block no live session owns (the model's order within each
//!   band). Until a first closing is heard, nothing changes: silence is all there is to go by.
//!
//! A wrong hint (a closed session that calls again, a wait that ends sooner than its curve said)
//! makes the model lose blocks LRU would have hit; the guard counts exactly those and follows LRU
//! if they outweigh the wins. Every table here is bounded.

use std::collections::{HashMap, VecDeque};

use agentrt_sdk::{BlockEvent, BlockOp, EndReason, Event, Item, SessionEnd, SessionWait, WaitKind};

/// Most closed sessions remembered (their blocks leave within a few turnovers).
pub const MAX_CLOSED: usize = 65_536;
/// Most waiting sessions tracked.
pub const MAX_WAITING: usize = 65_536;
/// Most tools with a return curve of their own (the least used is dropped).
pub const MAX_TOOL_CURVES: usize = 64;
/// Most live sessions tracked (beyond, new ones are not lifted).
pub const MAX_LIVE: usize = 65_536;
/// Most agents whose anchor length is remembered.
pub const MAX_AGENTS: usize = 16_384;
/// Returns a curve must have seen before it says anything.
pub const MIN_RETURNS: f32 = 8.0;
/// A waiting session less likely than this to return before the cache turns over is not worth
/// keeping ahead of live content.
const KEEP_IF_LIKELIER: f32 = 0.5;
/// Log-2 buckets of return times in ms (1 ms … ~17 days).
const BUCKETS: usize = 31;
/// A curve's counts are halved once they sum past this: recent waits weigh more, and counts
/// stay bounded.
const CURVE_HALVING: f32 = 4096.0;
/// Scores of the two evict-first bands (any model's scores are ≥ 0): closed, then unlikely to
/// return (−1 + ½ p, least likely first). Ties go by recency, as the host breaks them.
const CLOSED_SCORE: f32 = -2.0;
const UNLIKELY_BASE: f32 = -1.0;

/// How long waits of one class lasted until the session's next call, and how many never ended
/// in a call (the session was closed first).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReturnCurve {
    returned: [f32; BUCKETS],
    never: f32,
}

fn bucket_of(ms: f32) -> usize {
    (ms.max(1.0).log2() as usize).min(BUCKETS - 1)
}

/// A bucket's returns are taken to happen at its geometric centre.
fn centre_ms(bucket: usize) -> f32 {
    2f32.powf(bucket as f32 + 0.5)
}

impl ReturnCurve {
    pub fn record_return(&mut self, ms: f32) {
        self.returned[bucket_of(ms)] += 1.0;
        self.halve_if_full();
    }

    pub fn record_never(&mut self) {
        self.never += 1.0;
        self.halve_if_full();
    }

    fn total(&self) -> f32 {
        self.returned.iter().sum::<f32>() + self.never
    }

    fn halve_if_full(&mut self) {
        if self.total() > CURVE_HALVING {
            self.returned.iter_mut().for_each(|c| *c *= 0.5);
            self.never *= 0.5;
        }
    }

    /// Waits seen to their end (a call or a close).
    pub fn seen(&self) -> f32 {
        self.total()
    }

    /// P(the session calls within `horizon_ms` more | it has waited `waited_ms` already).
    pub fn p_return(&self, waited_ms: f32, horizon_ms: f32) -> f32 {
        let mut still_waiting = self.never;
        let mut back_in_time = 0.0;
        for (b, &count) in self.returned.iter().enumerate() {
            let at = centre_ms(b);
            if at > waited_ms {
                still_waiting += count;
                if at <= waited_ms + horizon_ms {
                    back_in_time += count;
                }
            }
        }
        if still_waiting <= 0.0 {
            return 0.0;
        }
        back_in_time / still_waiting
    }
}

/// A wait in progress: its class and when it began.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Waiting {
    kind: WaitKind,
    tool: u64,
    expected_us: u64,
    since_us: u64,
}

/// How fast the cache turns over: the time the engine takes to evict as many blocks as it
/// holds, measured from block removals.
#[derive(Debug, Clone, Default, PartialEq)]
struct Turnover {
    total_blocks: u32,
    removed: u32,
    mark_us: u64,
    measured_us: Option<u64>,
}

impl Turnover {
    fn removed(&mut self, now_us: u64) {
        if self.measured_us.is_none() && self.removed == 0 {
            // The first eviction: the cache is full from here on.
            self.mark_us = now_us;
        }
        self.removed += 1;
        if self.total_blocks > 0 && self.removed >= self.total_blocks {
            let took = now_us.saturating_sub(self.mark_us);
            self.measured_us = Some(match self.measured_us {
                Some(before) => (before + took) / 2,
                None => took,
            });
            self.mark_us = now_us;
            self.removed = 0;
        }
    }

    /// The latest estimate (µs): a full turnover measured, else the current one extrapolated
    /// once a sixteenth of the cache has gone; `None` before.
    fn estimate_us(&self, now_us: u64) -> Option<u64> {
        if let Some(t) = self.measured_us {
            return Some(t);
        }
        let enough = (self.total_blocks / 16).max(1);
        (self.total_blocks > 0 && self.removed >= enough).then(|| {
            let took = now_us.saturating_sub(self.mark_us) as f64;
            (took * f64::from(self.total_blocks) / f64::from(self.removed)) as u64
        })
    }
}

/// What the policy was told of sessions' lives, and what it learned from it.
#[derive(Debug, Clone, Default)]
pub struct Lifecycle {
    closed: HashMap<u64, ()>,
    closed_order: VecDeque<u64>,
    waiting: HashMap<u64, Waiting>,
    waiting_order: VecDeque<u64>,
    /// Return curves per wait kind (tool, user), and per tool.
    by_kind: [ReturnCurve; 2],
    by_tool: Vec<(u64, ReturnCurve)>,
    anchors: HashMap<u32, u32>,
    /// Sessions called and not ended, with the agent of their latest call; live sessions per
    /// agent.
    live: HashMap<u64, u32>,
    live_agents: HashMap<u32, u32>,
    turnover: Turnover,
    now_us: u64,
    /// Sessions closed, and how many of them called again (a wrong hint).
    pub closes_heard: u64,
    pub closed_returned: u64,
}

fn kind_index(kind: WaitKind) -> usize {
    match kind {
        WaitKind::Tool => 0,
        WaitKind::User => 1,
    }
}

impl Lifecycle {
    pub fn observe(&mut self, event: &Event) {
        match event {
            Event::AgentRegistered(a) if self.anchors.len() < MAX_AGENTS || self.anchors.contains_key(&a.agent) => {
                self.anchors.insert(a.agent, a.anchor_tokens);
            }
            Event::RequestArrival(r) if !r.warmup => {
                self.now_us = self.now_us.max(r.at_us);
                self.arrived(r.session, r.at_us);
                self.set_live(r.session, Some(r.agent));
            }
            Event::RequestFinish(r) => self.now_us = self.now_us.max(r.at_us),
            Event::EngineLoad(l) => {
                self.now_us = self.now_us.max(l.at_us);
                self.turnover.total_blocks = l.total_blocks;
            }
            Event::SessionWait(w) => self.wait(w),
            Event::SessionEnd(e) if self.silence_is_a_wait(e) => {
                self.now_us = self.now_us.max(e.at_us);
                self.silent(e.session, e.at_us);
            }
            Event::SessionEnd(e) => {
                self.now_us = self.now_us.max(e.at_us);
                self.set_live(e.session, None);
                // An idle end is silence, not an end: the wait goes on (it may still return).
                if e.reason != EndReason::Idle {
                    if let Some(w) = self.waiting.remove(&e.session) {
                        self.curve_mut(w.kind, w.tool).record_never();
                        self.by_kind[kind_index(w.kind)].record_never();
                    }
                }
                if e.reason == EndReason::Closed {
                    self.close(e.session);
                }
            }
            _ => {}
        }
    }

    pub fn observe_block(&mut self, block: &BlockEvent) {
        if block.op == BlockOp::Removed {
            self.turnover.removed(self.now_us);
        }
    }

    fn arrived(&mut self, session: u64, at_us: u64) {
        if self.closed.remove(&session).is_some() {
            self.closed_returned += 1;
        }
        if let Some(w) = self.waiting.remove(&session) {
            let ms = at_us.saturating_sub(w.since_us) as f32 / 1000.0;
            if w.tool != 0 {
                self.curve_mut(w.kind, w.tool).record_return(ms);
            }
            self.by_kind[kind_index(w.kind)].record_return(ms);
        }
    }

    /// Session `session` is live with `agent` making its latest call, or (`None`) ended.
    fn set_live(&mut self, session: u64, agent: Option<u32>) {
        if session == 0 {
            return;
        }
        let before = match agent {
            Some(a) if self.live.len() < MAX_LIVE || self.live.contains_key(&session) => self.live.insert(session, a),
            Some(_) => return,
            None => self.live.remove(&session),
        };
        if before == agent {
            return;
        }
        if let Some(old) = before {
            if let Some(n) = self.live_agents.get_mut(&old) {
                *n -= 1;
                if *n == 0 {
                    self.live_agents.remove(&old);
                }
            }
        }
        if let Some(a) = agent {
            *self.live_agents.entry(a).or_default() += 1;
        }
    }

    /// A block some live session owns or starts with: its own, or its agent's anchor or shared
    /// content.
    fn is_live(&self, item: &Item) -> bool {
        if item.session != 0 && !self.is_anchor(item) {
            return self.live.contains_key(&item.session);
        }
        self.live_agents.contains_key(&item.agent)
    }

    fn close(&mut self, session: u64) {
        self.closes_heard += 1;
        if self.closed.insert(session, ()).is_none() {
            self.closed_order.push_back(session);
        }
        while self.closed.len() > MAX_CLOSED {
            let Some(old) = self.closed_order.pop_front() else {
                break;
            };
            self.closed.remove(&old);
        }
        if self.closed_order.len() > 2 * MAX_CLOSED {
            let closed = &self.closed;
            self.closed_order.retain(|s| closed.contains_key(s));
        }
    }

    /// Whether `end` is silence to be valued as a wait rather than an end: once the framework
    /// signals closings, an end inferred from idle time is not one — the session that is over
    /// will be closed, and the one that paused (a conversation's next turn minutes later) comes
    /// back. Replayed, the idle rule ending such sessions cost session-retain a third of its gain.
    pub fn silence_is_a_wait(&self, end: &SessionEnd) -> bool {
        end.reason == EndReason::Idle && self.closes_heard > 0
    }

    /// `session` went silent: it stays live and waits — for its user, the wait silence is most
    /// like — valued by the user-wait return curve, which its return (or close) teaches.
    fn silent(&mut self, session: u64, at_us: u64) {
        if self.waiting.contains_key(&session) {
            return;
        }
        self.wait(&SessionWait {
            session,
            agent: self.live.get(&session).copied().unwrap_or(0),
            kind: WaitKind::User,
            tool: 0,
            expected_us: 0,
            hinted: false,
            at_us,
        });
    }

    fn wait(&mut self, w: &SessionWait) {
        self.now_us = self.now_us.max(w.at_us);
        let waiting = Waiting {
            kind: w.kind,
            tool: if w.kind == WaitKind::Tool { w.tool } else { 0 },
            expected_us: w.expected_us,
            since_us: w.at_us,
        };
        if self.waiting.insert(w.session, waiting).is_none() {
            self.waiting_order.push_back(w.session);
        }
        while self.waiting.len() > MAX_WAITING {
            let Some(old) = self.waiting_order.pop_front() else {
                break;
            };
            self.waiting.remove(&old);
        }
        if self.waiting_order.len() > 2 * MAX_WAITING {
            let waiting = &self.waiting;
            self.waiting_order.retain(|s| waiting.contains_key(s));
        }
    }

    /// The curve a wait of `kind` for `tool` is learned into: the tool's own (created, the least
    /// used dropped, when there is none), or the kind's for a user wait or an unnamed tool.
    fn curve_mut(&mut self, kind: WaitKind, tool: u64) -> &mut ReturnCurve {
        if kind != WaitKind::Tool || tool == 0 {
            return &mut self.by_kind[kind_index(kind)];
        }
        let i = match self.by_tool.iter().position(|(t, _)| *t == tool) {
            Some(i) => i,
            None => {
                if self.by_tool.len() >= MAX_TOOL_CURVES {
                    let least = (0..self.by_tool.len())
                        .min_by(|&a, &b| self.by_tool[a].1.seen().total_cmp(&self.by_tool[b].1.seen()))
                        .expect("a full table is not empty");
                    self.by_tool.swap_remove(least);
                }
                self.by_tool.push((tool, ReturnCurve::default()));
                self.by_tool.len() - 1
            }
        };
        &mut self.by_tool[i].1
    }

    /// The curve that times a wait: its tool's once it has seen enough returns, else its kind's
    /// once that has; `None` when neither can tell yet.
    pub fn curve(&self, kind: WaitKind, tool: u64) -> Option<&ReturnCurve> {
        let own = (kind == WaitKind::Tool && tool != 0)
            .then(|| self.by_tool.iter().find(|(t, _)| *t == tool).map(|(_, c)| c))
            .flatten()
            .filter(|c| c.seen() >= MIN_RETURNS);
        own.or_else(|| Some(&self.by_kind[kind_index(kind)]).filter(|c| c.seen() >= MIN_RETURNS))
    }

    /// P(session returns before the cache turns over), when a curve (or the framework's expected
    /// duration, before any curve can tell) says; `None` for a session not waiting.
    pub fn p_return(&self, session: u64) -> Option<f32> {
        let w = self.waiting.get(&session)?;
        let horizon_us = self.turnover.estimate_us(self.now_us)?;
        let waited_us = self.now_us.saturating_sub(w.since_us);
        match self.curve(w.kind, w.tool) {
            Some(curve) => Some(curve.p_return(waited_us as f32 / 1000.0, horizon_us as f32 / 1000.0)),
            None if w.expected_us > 0 => Some(if w.expected_us <= waited_us + horizon_us {
                1.0
            } else {
                0.0
            }),
            None => None,
        }
    }

    /// The agent's anchor size in tokens, when the host said it.
    pub fn anchor_tokens(&self, agent: u32) -> Option<u32> {
        self.anchors.get(&agent).copied().filter(|&tokens| tokens > 0)
    }

    pub fn is_closed(&self, session: u64) -> bool {
        self.closed.contains_key(&session)
    }

    fn is_anchor(&self, item: &Item) -> bool {
        self.anchors
            .get(&item.agent)
            .is_some_and(|&anchor| crate::anchor::is_anchor_position(anchor, item.position, item.tokens))
    }

    /// The model's `scores` with the hinted sessions' blocks moved to the evict-first bands and,
    /// once closings are signalled, live sessions' blocks above the rest.
    pub fn adjust(&self, items: &[Item], mut scores: Vec<f32>) -> Vec<f32> {
        if self.closed.is_empty() && self.waiting.is_empty() && self.closes_heard == 0 {
            return scores;
        }
        let bands = self.closes_heard > 0;
        let mut p_of: HashMap<u64, Option<f32>> = HashMap::new();
        for (item, score) in items.iter().zip(scores.iter_mut()) {
            let own = item.session != 0 && !self.is_anchor(item);
            if own && self.is_closed(item.session) {
                *score = CLOSED_SCORE;
                continue;
            }
            if own {
                let p = *p_of.entry(item.session).or_insert_with(|| self.p_return(item.session));
                if let Some(p) = p.filter(|&p| p < KEEP_IF_LIKELIER) {
                    *score = UNLIKELY_BASE + 0.5 * p;
                    continue;
                }
            }
            if bands {
                // Both bands keep the model's order: [0, 1) for the rest, [1, 2) for the live.
                let within = if score.is_finite() {
                    score.max(0.0) / (1.0 + score.max(0.0))
                } else {
                    0.0
                };
                *score = within + if self.is_live(item) { 1.0 } else { 0.0 };
            }
        }
        scores
    }

    /// Sizes of the tables, for the bounded-state test and logs: closed, waiting, tool curves,
    /// agents, live sessions.
    pub fn sizes(&self) -> (usize, usize, usize, usize, usize) {
        (
            self.closed.len(),
            self.waiting.len(),
            self.by_tool.len(),
            self.anchors.len(),
            self.live.len(),
        )
    }
}

#[cfg(test)]
mod tests;

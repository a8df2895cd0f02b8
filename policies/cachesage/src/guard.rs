//! The guard: which of the two orders ranks the engine's blocks, from evidence the traffic gives.
//! Learning-augmented caching keeps a robust expert beside the learned one and follows whichever
//! the past favours (LeCaR, HotStorage '18; CACHEUS, FAST '21); here the experts are the two
//! orders of [`crate::classes`], both starting with the closed class. The learned order ranks to
//! begin with — until a closing is heard, when hints come first: from then on the robust order
//! ranks until the learned one has shown it wins.
//!
//! **While the learned order ranks**, a [`Shadow`] of the robust one runs on the same block
//! accesses; the engine's hits minus the shadow's, over the sampled accesses since the learned
//! order took over, is the regret, and past the margin and the noise the robust order ranks. A
//! shadow counts hits, which no comparison of single evictions does; the margin is its noise (a
//! plain LRU of blocks, it is blind to prefixes and to vLLM's tail-first freeing).
//!
//! **While the robust order ranks**, the engine is its own shadow, and the evidence for the learned
//! order is its disagreements: where the engine evicts `x` and the learned order would have evicted
//! `y` instead (the guard replays it on the same candidates, one victim per eviction, and a block
//! its victim once until it is asked for again), Bélády's rule says the block asked for again first
//! should have been kept. Block hashes name content, so a request for either is seen whether or
//! not it is still cached, and the first of the two asked for settles the pair for the order that
//! kept it. The learned order ranks again once it leads by more than the noise — counted by
//! prompts, not pairs: a prompt that comes back for a long evicted history settles thousands of
//! pairs at once, all one way, and is one observation, not thousands (a clustered standard error;
//! counted by pairs, such bursts kept handing the engine to a learned order that lost it again at
//! once). Where the model knows nothing the orders agree and no pair is made.
//! Pairs and evidence last about [`TURNOVERS`] turnovers, and the evidence starts afresh at every
//! switch.

use std::collections::HashSet;

use agentrt_sdk::{BlockEvent, BlockOp, Item};

use crate::bounded::{Bounded, Spread};
use crate::classes::{Order, CLOSED_BELOW};
use crate::shadow::Shadow;

pub type Set = HashSet<u64, Spread>;

/// Victims per ranking the guard replays for the other order: more than a replay takes from one
/// ranking (4,096).
const ORDER_PREFIX: usize = 8192;
/// Pairs wait this many turnovers of the cache to be settled, and wins decay over as many.
pub const TURNOVERS: u64 = 16;
/// Pending pairs kept (two entries each), within these bounds.
const MAX_PENDING: usize = 262_144;
const MIN_PENDING: usize = 65_536;
/// A lead counts only beyond this many standard deviations of a fair coin.
const Z: f64 = 3.0;
/// The share of recent block accesses the learned order may lose to the shadow before the robust
/// order ranks: the noise of a shadow that samples and simplifies the engine's free queue.
const MARGIN: f64 = 0.002;
/// Pairs the learned order must win back the engine with at least, doubled at every hand-back
/// that did not last a horizon (at most 2¹⁰ times): a breaker's backoff, so that an order the
/// shadow keeps handing back does not keep paying for it.
const MIN_PAIRS: f64 = 10.0;
const MAX_BACKOFF: u32 = 10;

/// One block of a pair waiting to be settled: the pair's other block, the order that kept this
/// one (the other evicted it, or would have), and the guard's eviction count when it was made.
type Pending = (u64, Order, u64);

/// The latest ranking, while its evictions come in.
#[derive(Debug, Clone, Default)]
struct Ranking {
    /// Candidates in the closed class: evicted by either order first.
    closed: Set,
    /// Candidates the active order may evict from this ranking (its evict-first prefix).
    active_first: Set,
    /// The rest of the other order's evict-first prefix, still to be replayed.
    other_order: std::vec::IntoIter<u64>,
    /// Evicted by the active order or touched since: the other order passes over them.
    gone: Set,
}

/// The decayed evidence of the regime in progress.
#[derive(Debug, Clone, Copy, Default)]
struct Evidence {
    /// Robust regime: pairs settled for each order.
    learned: f64,
    robust: f64,
    /// Learned regime: sampled accesses, those the engine hit and the shadow missed, and the
    /// other way round.
    sampled: f64,
    engine_only: f64,
    shadow_only: f64,
    /// Robust regime: the learned order's net pairs (won − lost) settled by the prompt in
    /// progress, and the sum of the earlier prompts' squares — the noise by prompts.
    prompt_net: f64,
    sum_squares: f64,
}

impl Evidence {
    /// A prompt's first block: the one before it is done.
    fn prompt_starts(&mut self) {
        self.sum_squares += self.prompt_net * self.prompt_net;
        self.prompt_net = 0.0;
    }

    /// Three standard deviations of the net count, counted by prompts.
    fn noise(&self) -> f64 {
        Z * (self.sum_squares + self.prompt_net * self.prompt_net).sqrt()
    }
}

#[derive(Debug, Clone, Default)]
pub struct Guard {
    enabled: bool,
    follows: Order,
    total_blocks: u64,
    /// Evictions seen: a pair's age.
    evictions: u64,
    evidence: Evidence,
    /// Hand-backs to the robust order in a row, and the eviction count when the learned order
    /// last took over.
    handbacks: u32,
    learned_since: u64,
    ranking: Option<Ranking>,
    pending: Bounded<Pending, Spread>,
    /// Blocks the replayed learned order has evicted, until a request asks for them again: in
    /// the learned order's cache they are gone, so one block is its victim once — not the
    /// partner of every robust victim while it stays lowest in ranking after ranking, which would
    /// credit it with a win each time one of them is asked for.
    replayed: Bounded<(), Spread>,
    shadow: Shadow,
}

impl Guard {
    /// `enabled = false`: the learned order always.
    pub fn new(enabled: bool) -> Self {
        Self {
            enabled,
            pending: Bounded::new(MIN_PENDING),
            replayed: Bounded::new(MIN_PENDING),
            ..Self::default()
        }
    }

    /// The order the next ranking follows.
    pub fn follows(&self) -> Order {
        self.follows
    }

    /// The engine's size in blocks (`engine-load`): the evidence's horizon.
    pub fn set_total_blocks(&mut self, blocks: u32) {
        if self.total_blocks != u64::from(blocks) {
            self.total_blocks = u64::from(blocks);
            let max = (2 * TURNOVERS as usize * blocks as usize).clamp(MIN_PENDING, MAX_PENDING);
            self.pending = Bounded::new(max);
            self.replayed = Bounded::new(max);
            self.shadow.resize(blocks as usize);
        }
    }

    /// The framework's first closing: hints come first, and the learned order must show it wins
    /// within the classes they make.
    pub fn closings_heard(&mut self) {
        if self.enabled {
            self.switch(Order::Robust, 0);
            self.handbacks = 0;
        }
    }

    fn horizon(&self) -> u64 {
        (TURNOVERS * self.total_blocks).max(MIN_PENDING as u64)
    }

    /// One pair settled for `winner` (the robust order ranks): the learned order takes over once
    /// it leads by more than the noise.
    fn settle(&mut self, winner: Order, now_us: u64) {
        let e = &mut self.evidence;
        match winner {
            Order::Learned => (e.learned, e.prompt_net) = (e.learned + 1.0, e.prompt_net + 1.0),
            Order::Robust => (e.robust, e.prompt_net) = (e.robust + 1.0, e.prompt_net - 1.0),
        }
        let (lead, settled) = (e.learned - e.robust, e.learned + e.robust);
        let enough = MIN_PAIRS * f64::from(1u32 << self.handbacks.min(MAX_BACKOFF));
        if self.follows == Order::Robust && settled >= enough && lead > e.noise().max(1.0) {
            self.switch(Order::Learned, now_us);
        }
    }

    /// A sampled access the engine (`engine_hit`) and the shadow answered (the learned order
    /// ranks): the robust order takes over once the shadow leads by the margin and the noise.
    fn shadowed(&mut self, engine_hit: bool, shadow_hit: bool, now_us: u64) {
        let e = &mut self.evidence;
        e.sampled += 1.0;
        match (engine_hit, shadow_hit) {
            (true, false) => e.engine_only += 1.0,
            (false, true) => e.shadow_only += 1.0,
            _ => return,
        }
        let noise = Z * (e.engine_only + e.shadow_only).sqrt();
        if e.shadow_only - e.engine_only > (MARGIN * e.sampled).max(noise).max(1.0) {
            self.switch(Order::Robust, now_us);
        }
    }

    fn switch(&mut self, to: Order, now_us: u64) {
        let before = std::mem::replace(&mut self.follows, to);
        // Each order is judged afresh; pairs and the ranking in flight were the other regime's.
        let e = std::mem::take(&mut self.evidence);
        self.ranking = None;
        self.pending.clear();
        self.replayed.clear();
        if before == to {
            return;
        }
        match to {
            Order::Learned => self.learned_since = self.evictions,
            // A hand-back soon after taking over counts against the next return.
            Order::Robust if self.evictions - self.learned_since < self.horizon() => self.handbacks += 1,
            Order::Robust => self.handbacks = 0,
        }
        let (name, lead, of) = match to {
            Order::Learned => ("learned", e.learned - e.robust, e.learned + e.robust),
            Order::Robust => ("robust", e.engine_only - e.shadow_only, e.sampled),
        };
        let why = match to {
            Order::Learned => format!("learned − robust {lead:.0} of {of:.0} pairs settled"),
            Order::Robust => format!("engine − shadow {lead:.0} of {of:.0} sampled accesses"),
        };
        agentrt_sdk::host::log(
            agentrt_sdk::LogLevel::Info,
            &format!("guard: follows the {name} order at {now_us} µs ({why})"),
        );
    }

    /// A GPU block event at `now_us`. `traffic`: the access is the traffic's, not one of the
    /// policy's own warm-ups — those judge nothing (neither order would have made them).
    pub fn observe_block(&mut self, block: &BlockEvent, traffic: bool, now_us: u64) {
        if !self.enabled {
            return;
        }
        let h = block.block_hash;
        match block.op {
            BlockOp::Stored | BlockOp::Touched => {
                let hit = block.op == BlockOp::Touched;
                // Asked for again: back in the learned order's cache too.
                self.replayed.remove(h);
                if let (true, Some(r)) = (hit, &mut self.ranking) {
                    // It left the free queue: the other order can no longer evict it.
                    r.gone.insert(h);
                }
                if !traffic {
                    return;
                }
                if block.parent_hash == 0 {
                    self.evidence.prompt_starts();
                }
                if let (Some(shadow_hit), Order::Learned) = (self.shadow.access(h), self.follows) {
                    self.shadowed(hit, shadow_hit, now_us);
                }
                if let Some((partner, kept_by, at)) = self.pending.remove(h) {
                    self.pending.remove(partner);
                    if self.evictions - at <= self.horizon() {
                        self.settle(kept_by, now_us);
                    }
                }
            }
            BlockOp::Removed => {
                self.evictions += 1;
                let keep = 1.0 - 1.0 / self.horizon() as f64;
                let e = &mut self.evidence;
                for x in [
                    &mut e.learned,
                    &mut e.robust,
                    &mut e.sampled,
                    &mut e.engine_only,
                    &mut e.shadow_only,
                    &mut e.sum_squares,
                ] {
                    *x *= keep;
                }
                self.evicted(h);
            }
            BlockOp::AllCleared => {
                self.ranking = None;
                self.shadow.clear();
            }
        }
    }

    /// The active order evicted `h`: the other order's next victim instead, and the pair if they
    /// differ.
    fn evicted(&mut self, h: u64) {
        let Some(r) = &mut self.ranking else { return };
        if r.closed.contains(&h) {
            self.shadow.evict(h);
        }
        if self.follows == Order::Learned || !r.active_first.contains(&h) {
            // Pairs are the robust regime's evidence; and a block not from this ranking's
            // evict-first end (another tenant's, a clear, …) says nothing.
            return;
        }
        r.gone.insert(h);
        if self.replayed.remove(h).is_some() {
            // The learned order evicted it already: on `h` the two caches agree again.
            return;
        }
        // The other order's next victim still here (in both caches), or `h` itself where the two
        // agree.
        let replayed = &self.replayed;
        let Some(y) = r
            .other_order
            .find(|&y| y == h || !(r.gone.contains(&y) || replayed.contains(y)))
        else {
            return;
        };
        if y != h {
            // `h` is gone by the robust order's choice, `y` stays by it.
            self.replayed.insert(y, ());
            let at = self.evictions;
            for (block, partner, kept_by) in [(h, y, Order::Learned), (y, h, Order::Robust)] {
                self.pending.insert(block, (partner, kept_by, at));
            }
        }
    }

    /// The scores the engine follows for `items`, of the two orders' (`robust`, `learned`); the
    /// ranking is remembered for the evictions to come, with its closed class (read off the robust
    /// scores: [`CLOSED_BELOW`]).
    pub fn choose(&mut self, items: &[Item], robust: Vec<f32>, learned: Vec<f32>) -> Vec<f32> {
        if !self.enabled || items.is_empty() {
            return learned;
        }
        let evict_first = |scores: &[f32]| -> Vec<u64> {
            let key = |s: f32| if s.is_finite() { s } else { f32::NEG_INFINITY };
            let cmp = |a: &usize, b: &usize| {
                key(scores[*a])
                    .total_cmp(&key(scores[*b]))
                    .then(items[*a].last_access.cmp(&items[*b].last_access))
            };
            let mut order: Vec<usize> = (0..items.len()).collect();
            if order.len() > ORDER_PREFIX {
                order.select_nth_unstable_by(ORDER_PREFIX, cmp);
                order.truncate(ORDER_PREFIX);
            }
            order.sort_unstable_by(cmp);
            order.into_iter().map(|i| items[i].key).collect()
        };
        let closed = items
            .iter()
            .zip(&robust)
            .filter(|(_, &s)| s < CLOSED_BELOW)
            .map(|(i, _)| i.key);
        let mut ranking = Ranking {
            closed: closed.collect(),
            ..Ranking::default()
        };
        if self.follows == Order::Learned {
            // Pairs are the robust regime's evidence: while the learned order ranks, `evicted`
            // reads the closed class alone.
            self.ranking = Some(ranking);
            return learned;
        }
        ranking.active_first = evict_first(&robust).into_iter().collect();
        ranking.other_order = evict_first(&learned).into_iter();
        self.ranking = Some(ranking);
        robust
    }
}

#[cfg(test)]
mod tests;

//! The guard: CacheSage never does much worse than LRU, by design rather than by luck of the
//! workload. Learning-augmented caching (LeCaR, HotStorage '18; CACHEUS, FAST '21; Lykouris &
//! Vassilvitskii, ICML '18) keeps a robust expert beside the learned one and follows whichever the
//! recent past favours; here the experts are the model and LRU — closed-first (LRU with the
//! closed sessions' blocks first, the earliest closed first) once the framework's closings are
//! heard — and the evidence is counted in blocks hit. "LRU" below means that robust expert.
//!
//! At every ranking both experts order the same candidates (the model by its scores, LRU by
//! `last-access`); the engine evicts in the order of the expert followed (the *active* one). As
//! evictions arrive (`removed` block events), the guard replays the other expert's choices on the
//! same candidates, one victim per eviction, and keeps the disagreements as ghost entries (as
//! ARC's ghost lists do):
//! - a block the active expert evicted and the other would have kept: when it is stored again
//!   (a miss), the other expert would have hit it;
//! - a block the other would have evicted and the active one kept: when it is touched (a hit), the
//!   other expert would have missed it.
//!
//! Each settles one block of *advantage* (the model's hits minus LRU's), decayed so that it
//! describes about the last few cache turnovers. The guard follows LRU — exact LRU scores — once
//! the model's advantage falls below `−margin × (recent block accesses)` — and beyond three standard
//! deviations of a fair coin over the disagreements settled (a sign test) — and the model again once
//! it is as far above: in LRU mode the model is still scored, so it comes back when
//! it would have won.
//! Both experts agree wherever the model knows nothing, so a model that learned nothing costs
//! nothing; a model that is wrong loses at most the margin plus what it lost before the evidence
//! came in (a block's reuse distance: it cannot be faster than the misses it is judged by).

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use agentrt_sdk::{BlockEvent, BlockOp, EndReason, Event, Item};

use crate::anchor::BlockSize;
use crate::shadow::{closed_first_scores, ShadowLru, Shadowed};

/// Block hashes are already spread (the low 64 bits of vLLM's sha256, the simulator's mixes):
/// one multiply-xorshift instead of SipHash, since every block event looks a hash up.
#[derive(Default, Clone, Copy)]
struct SpreadHasher(u64);

impl Hasher for SpreadHasher {
    fn finish(&self) -> u64 {
        let h = self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h ^ (h >> 29)
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

type Spread = BuildHasherDefault<SpreadHasher>;
type Map<V> = HashMap<u64, V, Spread>;
type Set = HashSet<u64, Spread>;

/// Which expert's ranking the engine follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expert {
    Model,
    Lru,
}

/// Victims per ranking the guard replays for the other expert: more than a replay takes from one
/// ranking (4,096).
const ORDER_PREFIX: usize = 8192;
/// Most ghost entries kept per list (each ~40 bytes).
const MAX_GHOSTS: usize = 262_144;
/// Fewest ghost entries per list: a small cache still remembers a few rankings' disagreements.
const MIN_GHOSTS: usize = 65_536;
/// Evidence and ghosts cover this many turnovers of the cache (evictions / cache blocks). A
/// disagreement settles only when its block is asked for again, and the model's wins are the
/// long reuses (a user's next turn) as much as the short ones: a horizon shorter than those would
/// count the model's losses and forget its wins.
const TURNOVERS: f64 = 16.0;
/// An advantage counts only beyond this many standard deviations of a fair coin over the settled
/// disagreements (a sign test): two experts that are as good as each other flip a coin.
const Z: f64 = 3.0;

/// The guard's settings (`init` keys `guard` and `guard-margin`; `closings` follows `hints`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GuardParams {
    pub enabled: bool,
    /// Fraction of recent block accesses the model may lose to LRU before LRU takes over.
    pub margin: f64,
    /// Whether the robust expert (and its shadow) hears the framework's closings: closed-first
    /// once one is heard, plain LRU otherwise.
    pub closings: bool,
}

impl Default for GuardParams {
    fn default() -> Self {
        Self {
            enabled: true,
            margin: 0.002,
            closings: true,
        }
    }
}

/// An agent's warm-ups in flight.
#[derive(Debug, Clone, Copy, Default)]
struct Warming {
    in_flight: u16,
    /// The longest one's prompt tokens: its blocks start below this position.
    extent: u32,
}

/// A disagreement recorded: which expert was active then.
#[derive(Debug, Clone, Copy)]
struct Ghost {
    model_active: bool,
    stamp: u64,
}

/// A bounded set of ghost entries, oldest dropped first.
#[derive(Debug, Clone, Default)]
struct Ghosts {
    map: Map<Ghost>,
    order: VecDeque<(u64, u64)>,
}

impl Ghosts {
    fn insert(&mut self, hash: u64, model_active: bool, stamp: u64, max: usize) {
        self.map.insert(hash, Ghost { model_active, stamp });
        self.order.push_back((hash, stamp));
        while self.map.len() > max {
            let Some((h, s)) = self.order.pop_front() else { break };
            if self.map.get(&h).is_some_and(|g| g.stamp == s) {
                self.map.remove(&h);
            }
        }
        // Stale pairs (re-inserted or taken) pile up only as far as the live entries.
        if self.order.len() > 2 * max.max(self.map.len()) {
            let map = &self.map;
            self.order.retain(|(h, s)| map.get(h).is_some_and(|g| g.stamp == *s));
        }
    }

    fn take(&mut self, hash: u64) -> Option<Ghost> {
        self.map.remove(&hash)
    }

    fn clear(&mut self) {
        self.map.clear();
        self.order.clear();
    }
}

/// The disagreements of the latest ranking, while its evictions come in.
#[derive(Debug, Clone, Default)]
struct Ranking {
    model_active: bool,
    /// The other expert's evict-first order (hashes), and how far it has been replayed.
    other_order: Vec<u64>,
    other_set: Set,
    cursor: usize,
    /// Candidates the active expert may evict from this ranking (its evict-first prefix).
    active_first: Set,
    /// Evicted by the active expert, not (yet) chosen by the other.
    active_only: Set,
    /// Chosen by the other, not (yet) evicted by the active expert.
    other_only: Set,
    /// Evicted by both, or touched since: the other expert passes over them.
    settled: Set,
}

/// What the guard has seen, for tests and logs.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GuardStats {
    pub switches_to_lru: u32,
    pub switches_to_model: u32,
    /// Blocks the model hit that LRU would have missed, and the other way round (undecayed).
    pub model_wins: u64,
    pub lru_wins: u64,
}

/// The guard: which expert to follow, from the disagreements' outcomes.
#[derive(Debug, Clone)]
pub struct Guard {
    params: GuardParams,
    mode: Expert,
    total_blocks: usize,
    /// Decayed model hits and LRU hits over settled disagreements, and decayed block accesses.
    model_won: f64,
    lru_won: f64,
    accesses: f64,
    /// What LRU would have hit, on the same accesses (hash-sampled), and the decayed counts of
    /// sampled accesses the engine hit and the shadow missed, the other way round, and all.
    shadow: ShadowLru,
    engine_only: f64,
    shadow_only: f64,
    sampled: f64,
    /// Agents with a warm-up in flight, and how far into a prompt their warm-ups reach. A
    /// warm-up's block accesses are the model's own doing, not the traffic's, and LRU would not
    /// have made them; block events do not say which request made them, so an access of such an
    /// agent within the warm-up's extent (its anchor) is left out. Only within it: the agent's
    /// traffic goes on meanwhile, and its session content past the anchor is the traffic's.
    /// Leaving all of the agent's accesses out hid from the guard the misses of agents that
    /// return after a pause — when warm-ups are issued — and on Claude Code conversations (cc100
    /// at 10 %) let a model 0.4 pp below LRU look 0.3 pp above it.
    warming: HashMap<u32, Warming>,
    /// The engine's block size: a warm-up's extent reaches one block past its agent's anchor.
    block_size: BlockSize,
    ranking: Option<Ranking>,
    would_have_kept: Ghosts,
    kept_against: Ghosts,
    stamp: u64,
    now_us: u64,
    stats: GuardStats,
}

impl Guard {
    pub fn new(params: GuardParams) -> Self {
        Self {
            params,
            mode: Expert::Model,
            total_blocks: 0,
            model_won: 0.0,
            lru_won: 0.0,
            accesses: 0.0,
            shadow: ShadowLru::default(),
            engine_only: 0.0,
            shadow_only: 0.0,
            sampled: 0.0,
            warming: HashMap::new(),
            block_size: BlockSize::default(),
            ranking: None,
            would_have_kept: Ghosts::default(),
            kept_against: Ghosts::default(),
            stamp: 0,
            now_us: 0,
            stats: GuardStats::default(),
        }
    }

    pub fn params(&self) -> GuardParams {
        self.params
    }

    /// The expert the next ranking follows.
    pub fn mode(&self) -> Expert {
        self.mode
    }

    pub fn stats(&self) -> GuardStats {
        self.stats
    }

    /// The model's decayed advantage over LRU, in blocks hit.
    pub fn advantage(&self) -> f64 {
        self.model_won - self.lru_won
    }

    fn max_ghosts(&self) -> usize {
        ((TURNOVERS as usize) * self.total_blocks).clamp(MIN_GHOSTS, MAX_GHOSTS)
    }

    /// `anchor_tokens` is the agent's anchor size where the host said it (what a warm-up that
    /// does not say its own size reaches).
    pub fn observe(&mut self, event: &Event, anchor_tokens: impl Fn(u32) -> Option<u32>) {
        match event {
            Event::EngineLoad(l) => {
                self.total_blocks = l.total_blocks as usize;
                self.now_us = self.now_us.max(l.at_us);
                self.shadow.resize(self.total_blocks);
            }
            Event::RequestArrival(r) => {
                self.now_us = self.now_us.max(r.at_us);
                if r.warmup {
                    let extent = self.warmup_extent(r.prompt_tokens, anchor_tokens(r.agent));
                    let w = self.warming.entry(r.agent).or_default();
                    w.in_flight += 1;
                    w.extent = w.extent.max(extent);
                } else {
                    self.shadow.arrived(r.agent, r.session);
                }
            }
            Event::RequestFinish(r) => {
                self.now_us = self.now_us.max(r.at_us);
                if r.warmup {
                    if let Some(w) = self.warming.get_mut(&r.agent) {
                        w.in_flight -= 1;
                        if w.in_flight == 0 {
                            self.warming.remove(&r.agent);
                        }
                    }
                } else {
                    self.shadow.finished(r.agent, r.session, self.now_us);
                }
            }
            Event::SessionEnd(end) if end.reason == EndReason::Closed && self.params.closings => {
                self.now_us = self.now_us.max(end.at_us);
                self.shadow.close(end.session);
            }
            _ => {}
        }
    }

    /// How far into a prompt a warm-up reaches: its prompt's size when its arrival says it; else
    /// its agent's anchor and one block more (the warm-up's own one-word user message shares the
    /// anchor's last block or starts the next); else, unknown, everything.
    fn warmup_extent(&self, prompt_tokens: u32, anchor_tokens: Option<u32>) -> u32 {
        if prompt_tokens > 0 {
            return prompt_tokens;
        }
        match anchor_tokens {
            Some(anchor) => anchor.saturating_add(self.block_size.tokens().max(1)),
            None => u32::MAX,
        }
    }

    /// One settled disagreement: +1 the model hit where LRU would not have, −1 the reverse.
    fn settle(&mut self, model_won: bool) {
        if model_won {
            self.model_won += 1.0;
            self.stats.model_wins += 1;
        } else {
            self.lru_won += 1.0;
            self.stats.lru_wins += 1;
        }
        self.decide();
    }

    /// The engine's hits minus the shadow LRU's (in sampled accesses) since the model last took
    /// over, and the noise of that count. The shadow is LRU run from the start, so this compares
    /// following the model with never having followed it.
    fn shadow_regret(&self) -> (f64, f64) {
        let regret = self.engine_only - self.shadow_only;
        (regret, Z * (self.engine_only + self.shadow_only).sqrt())
    }

    fn decide(&mut self) {
        // Model → LRU: the shadow says the engine, following the model, hits fewer blocks than
        // LRU would have, by more than the margin and more than the noise. LRU → model: the
        // disagreements the model would have settled (it is still scored) go its way as far.
        // Hysteresis both ways: one session's blocks settling at once does not flip the ranking.
        let next = match self.mode {
            Expert::Model => {
                let (regret, noise) = self.shadow_regret();
                let limit = (self.params.margin * self.sampled).max(noise).max(1.0);
                if regret < -limit {
                    Expert::Lru
                } else {
                    Expert::Model
                }
            }
            Expert::Lru => {
                let advantage = self.model_won - self.lru_won;
                let noise = Z * (self.model_won + self.lru_won).sqrt();
                let limit = (self.params.margin * self.accesses).max(noise).max(1.0);
                if advantage > limit {
                    Expert::Model
                } else {
                    Expert::Lru
                }
            }
        };
        if next != self.mode {
            match next {
                Expert::Lru => self.stats.switches_to_lru += 1,
                Expert::Model => self.stats.switches_to_model += 1,
            }
            let (regret, _) = self.shadow_regret();
            // The robust expert is closed-first once a closing was heard, plain LRU before.
            let robust = if self.shadow.closings_heard() {
                "closed-first"
            } else {
                "lru"
            };
            agentrt_sdk::host::log(
                agentrt_sdk::LogLevel::Info,
                &format!(
                    "guard: {} at {} µs (model − {robust} per the shadow {:.0} of {:.0} sampled accesses; disagreements settled: model {}, {robust} {})",
                    match next {
                        Expert::Lru => format!("model → {robust}"),
                        Expert::Model => format!("{robust} → model"),
                    },
                    self.now_us,
                    regret,
                    self.sampled,
                    self.stats.model_wins,
                    self.stats.lru_wins
                ),
            );
            // Each expert is judged afresh from the switch on.
            match next {
                Expert::Lru => (self.model_won, self.lru_won) = (0.0, 0.0),
                Expert::Model => (self.engine_only, self.shadow_only, self.sampled) = (0.0, 0.0, 0.0),
            }
            self.mode = next;
        }
    }

    /// A sampled access the shadow and the engine answered: a disagreement between them counts.
    fn shadowed(&mut self, engine_hit: bool, outcome: Shadowed) {
        self.sampled += 1.0;
        match (engine_hit, outcome) {
            (true, Shadowed::Miss) => self.engine_only += 1.0,
            (false, Shadowed::Hit) => self.shadow_only += 1.0,
            _ => return,
        }
        self.decide();
    }

    fn access(&mut self) {
        self.accesses += 1.0;
    }

    fn decay(&mut self) {
        let horizon = (TURNOVERS * self.total_blocks as f64).max(MIN_GHOSTS as f64);
        let keep = 1.0 - 1.0 / horizon;
        self.model_won *= keep;
        self.lru_won *= keep;
        self.accesses *= keep;
        self.engine_only *= keep;
        self.shadow_only *= keep;
        self.sampled *= keep;
    }

    pub fn observe_block(&mut self, block: &BlockEvent) {
        if !self.params.enabled {
            return;
        }
        let h = block.block_hash;
        self.block_size.learn(block.position);
        match block.op {
            BlockOp::Stored => {
                self.access();
                if let Some(outcome) = self.shadow_access(block) {
                    self.shadowed(false, outcome);
                }
                // A miss: did the other expert (or, in the past, the other) keep it?
                if let Some(r) = &mut self.ranking {
                    if r.active_only.remove(&h) {
                        let model_active = r.model_active;
                        self.settle(!model_active);
                        return;
                    }
                }
                if let Some(g) = self.would_have_kept.take(h) {
                    self.settle(!g.model_active);
                }
            }
            BlockOp::Touched => {
                self.access();
                if let Some(outcome) = self.shadow_access(block) {
                    self.shadowed(true, outcome);
                }
                if let Some(r) = &mut self.ranking {
                    if r.other_set.contains(&h) {
                        // It left the free queue: the other expert can no longer evict it.
                        r.settled.insert(h);
                    }
                    if r.other_only.remove(&h) {
                        let model_active = r.model_active;
                        self.settle(model_active);
                        return;
                    }
                }
                if let Some(g) = self.kept_against.take(h) {
                    self.settle(g.model_active);
                }
            }
            BlockOp::Removed => {
                self.decay();
                self.evicted(h);
            }
            BlockOp::AllCleared => {
                self.shadow.clear();
                self.ranking = None;
                self.would_have_kept.clear();
                self.kept_against.clear();
            }
        }
    }

    /// The traffic's access of `block` in the shadow (a warm-up's is not the traffic's).
    fn shadow_access(&mut self, block: &BlockEvent) -> Option<Shadowed> {
        if self
            .warming
            .get(&block.agent)
            .is_some_and(|w| block.position < w.extent)
        {
            return None;
        }
        self.shadow
            .access(block.block_hash, block.parent_hash, block.position, block.agent)
    }

    /// The active expert evicted `h`: replay one eviction of the other expert.
    fn evicted(&mut self, h: u64) {
        let Some(r) = &mut self.ranking else { return };
        if !r.active_first.contains(&h) {
            return; // not from this ranking's evict-first end (another tenant's, a clear, …)
        }
        if !r.other_only.remove(&h) {
            r.active_only.insert(h);
        } else {
            r.settled.insert(h);
        }
        while let Some(&x) = r.other_order.get(r.cursor) {
            r.cursor += 1;
            if r.settled.contains(&x) {
                continue;
            }
            if r.active_only.remove(&x) {
                r.settled.insert(x);
            } else {
                r.other_only.insert(x);
            }
            break;
        }
    }

    /// Close the latest ranking: its open disagreements become ghost entries.
    fn close_ranking(&mut self) {
        let Some(r) = self.ranking.take() else { return };
        let max = self.max_ghosts();
        for h in r.active_only {
            self.stamp += 1;
            self.would_have_kept.insert(h, r.model_active, self.stamp, max);
        }
        for h in r.other_only {
            self.stamp += 1;
            self.kept_against.insert(h, r.model_active, self.stamp, max);
        }
    }

    /// The robust expert's scores: LRU's, or closed-first's once a closing is heard — when the
    /// candidates also tell the shadow whose each block is.
    fn robust_scores(&mut self, items: &[Item]) -> Vec<f32> {
        if !self.shadow.closings_heard() {
            return agentrt_sdk::recency_scores(items);
        }
        for item in items {
            self.shadow.label(item.key, item.session);
        }
        let shadow = &self.shadow;
        closed_first_scores(items, |s| shadow.closed_seq(s))
    }

    /// The scores to return for `items`: the model's, or the robust expert's, as the guard decides;
    /// and the ranking is remembered for the disagreements to come.
    pub fn choose(&mut self, items: &[Item], model: Vec<f32>) -> Vec<f32> {
        if !self.params.enabled || items.is_empty() {
            return model;
        }
        self.close_ranking();
        let recency = self.robust_scores(items);
        let model_active = self.mode == Expert::Model;
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
        let (active, other) = if model_active {
            (evict_first(&model), evict_first(&recency))
        } else {
            (evict_first(&recency), evict_first(&model))
        };
        self.ranking = Some(Ranking {
            model_active,
            other_set: other.iter().copied().collect(),
            other_order: other,
            cursor: 0,
            active_first: active.into_iter().collect(),
            ..Ranking::default()
        });
        if model_active {
            model
        } else {
            recency
        }
    }
}

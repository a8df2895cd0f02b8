//! A shadow of the guard's robust expert over the engine's block stream: what vLLM's LRU — or,
//! once the framework's closings are heard, closed-first — would have hit, measured online on the
//! same accesses, so the guard can compare the blocks the engine hit, following the model, with
//! the blocks the expert it would switch to would have hit (the regret the guard acts on).
//!
//! Every access — a block stored (a miss) or touched (a hit) — is an access of the shadow too; the
//! shadow holds as many blocks as the engine and counts a hit when an accessed block is still in
//! it. Its order is vLLM's free queue: a block is in use from the access until a request of the
//! accessing agent finishes (the host says which agent finished, not which blocks it held), and
//! then goes to the queue's tail with that request's others, deepest first — so what the shadow
//! keeps of a prompt is a prefix, as in vLLM; the least recently freed goes first. Caches larger
//! than 65,536 blocks are sampled by hash at 65,536 / blocks (SHARDS, Waldspurger et al., FAST
//! '15: an LRU over a hash-sampled subset of the stream, with the cache scaled by the same rate,
//! has about the full cache's hit ratio), so its memory and its cost per event stay bounded.
//!
//! **Closed-first.** Once a session is closed (`session-end` with reason `closed`), its own free
//! blocks go before any other, the earliest closed session's first, each session's in the order
//! they were freed; a session that calls again is open again and its blocks are back in LRU order
//! (the simulator's `closed-first` baseline, the same rule). A block's session follows the host's
//! convention for `item.session`: the session whose request stored it, 0 once another session's
//! request touched it. Block events name the agent, not the session: [`crate::attribution`] tells
//! it from the requests in flight and the blocks' prefix chains, and every ranking's candidates,
//! which name their session, correct it. Until a closing is heard nothing is closed and the order
//! is LRU's exactly.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};

use crate::attribution::Attribution;

/// Most blocks the shadow tracks.
pub const MAX_ENTRIES: usize = 65_536;
/// Most closed sessions remembered (their blocks leave within a few turnovers).
pub const MAX_CLOSED: usize = 65_536;

/// The outcome of one access in the shadow, when the block is sampled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shadowed {
    Hit,
    Miss,
}

/// When a block was freed (host time) and how deep it is (deepest first): the free queue's order.
type Key = (u64, u32);

/// Where a sampled block is: in use by a request of `agent` (and at `position`), or free since
/// `key`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    InUse { agent: u32, position: u32 },
    Free { key: Key },
}

/// A sampled block: where it is, and whose it is (0: shared, or not known).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    place: Place,
    session: u64,
}

/// The sessions the framework closed and not reopened, with the order of their closing.
#[derive(Debug, Clone, Default)]
struct Closings {
    seq: HashMap<u64, u64>,
    order: VecDeque<u64>,
    heard: u64,
}

impl Closings {
    fn close(&mut self, session: u64) {
        self.heard += 1;
        self.seq.insert(session, self.heard);
        self.order.push_back(session);
        while self.seq.len() > MAX_CLOSED {
            let Some(old) = self.order.pop_front() else { break };
            self.seq.remove(&old);
        }
        if self.order.len() > 2 * MAX_CLOSED {
            let seq = &self.seq;
            self.order.retain(|s| seq.contains_key(s));
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct ShadowLru {
    blocks: HashMap<u64, Entry>,
    /// Free blocks by key, least recently freed on top; entries whose block moved are stale.
    free: BinaryHeap<Reverse<(Key, u64)>>,
    /// Blocks in use, by the agent whose request uses them.
    in_use: HashMap<u32, Vec<u64>>,
    capacity: usize,
    /// A block is sampled iff `spread(hash) & 0xffff < threshold`.
    threshold: u32,
    closings: Closings,
    /// Free blocks of sessions not closed, by session (they go first once it closes), and how
    /// many entries that is; entries whose block moved are stale.
    free_of_open: HashMap<u64, Vec<(u64, Key)>>,
    queued: usize,
    /// Closed sessions' free blocks, in the order they became first to go: (block, key, session).
    evict_first: VecDeque<(u64, Key, u64)>,
    /// Whose each access is.
    attribution: Attribution,
}

fn spread(h: u64) -> u64 {
    let h = h.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^ (h >> 31)
}

impl ShadowLru {
    /// Size the shadow for an engine of `blocks` blocks (a no-op while the size is unchanged).
    /// The closings and the requests in flight are the traffic's, not the cache's: they stay.
    pub fn resize(&mut self, blocks: usize) {
        let rate = (MAX_ENTRIES as f64 / blocks.max(1) as f64).min(1.0);
        let threshold = (rate * 65_536.0).round().max(1.0) as u32;
        let capacity = ((blocks as f64 * rate).round() as usize).max(1);
        if (threshold, capacity) != (self.threshold, self.capacity) {
            *self = ShadowLru {
                capacity,
                threshold,
                closings: std::mem::take(&mut self.closings),
                attribution: std::mem::take(&mut self.attribution),
                ..ShadowLru::default()
            };
        }
    }

    fn sampled(&self, hash: u64) -> bool {
        self.capacity > 0 && ((spread(hash) & 0xffff) as u32) < self.threshold
    }

    /// A request of `agent` accesses `hash` (after `parent`, at depth `position`); `None` when it
    /// is not sampled.
    pub fn access(&mut self, hash: u64, parent: u64, position: u32, agent: u32) -> Option<Shadowed> {
        // Every access, sampled or not, moves its chain on.
        let session = self.attribution.session_of(agent, hash, parent, position);
        if !self.sampled(hash) {
            return None;
        }
        let place = Place::InUse { agent, position };
        let outcome = match self.blocks.get_mut(&hash) {
            Some(e) => {
                e.place = place;
                // Another session's request reuses it: shared content from now on.
                if session.is_some_and(|s| s != e.session) {
                    e.session = 0;
                }
                Shadowed::Hit
            }
            None => {
                let session = session.unwrap_or(0);
                self.blocks.insert(hash, Entry { place, session });
                Shadowed::Miss
            }
        };
        self.in_use.entry(agent).or_default().push(hash);
        // Full: the closed sessions' blocks go first, then the least recently freed (blocks in
        // use cannot, as in vLLM).
        while self.blocks.len() > self.capacity {
            let Some(victim) = self.pop_closed().or_else(|| self.pop_free()) else {
                break;
            };
            self.blocks.remove(&victim);
        }
        self.compact();
        Some(outcome)
    }

    /// The least recently freed block still free, taken off the queue.
    fn pop_free(&mut self) -> Option<u64> {
        while let Some(Reverse((key, h))) = self.free.pop() {
            if self.blocks.get(&h).is_some_and(|e| e.place == Place::Free { key }) {
                return Some(h);
            }
        }
        None
    }

    /// The first closed session's block still free and still that session's, taken off the queue.
    fn pop_closed(&mut self) -> Option<u64> {
        while let Some((h, key, session)) = self.evict_first.pop_front() {
            if self.is_free_of(h, key, session) && self.closings.seq.contains_key(&session) {
                return Some(h);
            }
        }
        None
    }

    fn is_free_of(&self, h: u64, key: Key, session: u64) -> bool {
        self.blocks.get(&h)
            == Some(&Entry {
                place: Place::Free { key },
                session,
            })
    }

    /// Drop the queues' stale entries once they outnumber the live ones well.
    fn compact(&mut self) {
        let bound = 4 * self.capacity + 1024;
        if self.free.len() > bound {
            let blocks = &self.blocks;
            self.free = self
                .free
                .drain()
                .filter(|Reverse((key, h))| blocks.get(h).is_some_and(|e| e.place == Place::Free { key: *key }))
                .collect();
        }
        if self.queued + self.evict_first.len() > bound {
            let mut evict_first = std::mem::take(&mut self.evict_first);
            evict_first.retain(|&(h, key, s)| self.is_free_of(h, key, s));
            self.evict_first = evict_first;
            let mut open = std::mem::take(&mut self.free_of_open);
            open.retain(|&s, list| {
                list.retain(|&(h, key)| self.is_free_of(h, key, s));
                !list.is_empty()
            });
            self.queued = open.values().map(Vec::len).sum();
            self.free_of_open = open;
        }
    }

    /// A free block of `session` joins its queue: first to go if the session is closed, else
    /// kept aside for its closing.
    fn queue(&mut self, h: u64, key: Key, session: u64) {
        if session == 0 {
            return;
        }
        if self.closings.seq.contains_key(&session) {
            self.evict_first.push_back((h, key, session));
        } else {
            self.free_of_open.entry(session).or_default().push((h, key));
            self.queued += 1;
        }
    }

    /// A request of `agent` in `session` arrived (not a warm-up): a closed session that calls
    /// again is open again, its blocks back in LRU order.
    pub fn arrived(&mut self, agent: u32, session: u64) {
        self.closings.seq.remove(&session);
        self.attribution.arrived(agent, session);
    }

    /// A request of `agent` in `session` finished at `now_us`: the blocks its agent's requests
    /// used go to the free queue's tail, deepest first.
    pub fn finished(&mut self, agent: u32, session: u64, now_us: u64) {
        self.attribution.finished(agent, session);
        let Some(used) = self.in_use.remove(&agent) else { return };
        for h in used {
            let Some(e) = self.blocks.get_mut(&h) else { continue };
            let Place::InUse { agent: a, position } = e.place else {
                continue;
            };
            if a != agent {
                continue;
            }
            let key = (now_us, u32::MAX - position);
            e.place = Place::Free { key };
            let session = e.session;
            self.free.push(Reverse((key, h)));
            self.queue(h, key, session);
        }
    }

    /// The framework closed `session`: its free blocks go first, after those of sessions closed
    /// before it.
    pub fn close(&mut self, session: u64) {
        self.closings.close(session);
        if let Some(list) = self.free_of_open.remove(&session) {
            self.queued -= list.len();
            self.evict_first
                .extend(list.into_iter().map(|(h, key)| (h, key, session)));
        }
    }

    /// Whether any closing has been heard (until then the shadow is LRU exactly).
    pub fn closings_heard(&self) -> bool {
        self.closings.heard > 0
    }

    /// The order of `session`'s closing (smaller: earlier) while it is closed.
    pub fn closed_seq(&self, session: u64) -> Option<u64> {
        self.closings.seq.get(&session).copied()
    }

    /// A ranking's candidate says whose `hash` is: the host knows, the shadow only guessed.
    pub fn label(&mut self, hash: u64, session: u64) {
        if !self.sampled(hash) {
            return;
        }
        let Some(e) = self.blocks.get_mut(&hash) else { return };
        if e.session == session {
            return;
        }
        e.session = session;
        if let Place::Free { key } = e.place {
            self.queue(hash, key, session);
        }
    }

    /// Forget the cache (the engine cleared it); the closings stay.
    pub fn clear(&mut self) {
        self.blocks.clear();
        self.free.clear();
        self.in_use.clear();
        self.free_of_open.clear();
        self.queued = 0;
        self.evict_first.clear();
    }
}

/// The robust expert's scores once closings are heard: closed sessions' own blocks below every
/// other, the earliest closed lowest (the host breaks ties by recency), the rest LRU's
/// (`recency`). Without a closed session among `items`, LRU's scores exactly.
pub fn closed_first_scores(items: &[agentrt_sdk::Item], closed_seq: impl Fn(u64) -> Option<u64>) -> Vec<f32> {
    let mut scores = agentrt_sdk::recency_scores(items);
    let seqs: Vec<Option<u64>> = items
        .iter()
        .map(|i| if i.session == 0 { None } else { closed_seq(i.session) })
        .collect();
    let mut distinct: Vec<u64> = seqs.iter().flatten().copied().collect();
    if distinct.is_empty() {
        return scores;
    }
    distinct.sort_unstable();
    distinct.dedup();
    for (score, seq) in scores.iter_mut().zip(seqs) {
        if let Some(q) = seq {
            let rank = distinct.partition_point(|&d| d < q);
            *score = -((distinct.len() - rank) as f32);
        }
    }
    scores
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One request of agent 1 using `hashes` (depth = index) and finishing at `t`.
    fn request(s: &mut ShadowLru, hashes: &[u64], t: u64) -> Vec<Option<Shadowed>> {
        let out = hashes
            .iter()
            .enumerate()
            .map(|(i, &h)| s.access(h, 0, i as u32 * 16, 1))
            .collect();
        s.finished(1, 1, t);
        out
    }

    #[test]
    fn it_hits_what_an_lru_of_the_same_size_would() {
        use Shadowed::{Hit, Miss};
        let mut s = ShadowLru::default();
        s.resize(3);
        assert_eq!(request(&mut s, &[1], 10), [Some(Miss)]);
        assert_eq!(request(&mut s, &[2], 20), [Some(Miss)]);
        assert_eq!(request(&mut s, &[3], 30), [Some(Miss)]);
        assert_eq!(request(&mut s, &[1], 40), [Some(Hit)]);
        assert_eq!(request(&mut s, &[4], 50), [Some(Miss)]); // 2 was freed longest ago
        assert_eq!(request(&mut s, &[2], 60), [Some(Miss)]);
        assert_eq!(request(&mut s, &[1], 70), [Some(Hit)]);
    }

    #[test]
    fn a_prompt_loses_its_deepest_blocks_first_and_blocks_in_use_stay() {
        use Shadowed::{Hit, Miss};
        let mut s = ShadowLru::default();
        s.resize(3);
        request(&mut s, &[10, 11, 12], 100);
        // A request of agent 2 in flight holds one block; one new block of agent 1 evicts the
        // prompt's last block, not its first and not the block in use.
        assert_eq!(s.access(50, 0, 0, 2), Some(Miss));
        assert_eq!(request(&mut s, &[99], 200), [Some(Miss)]);
        assert_eq!(s.access(50, 0, 0, 2), Some(Hit), "in use: never evicted");
        assert_eq!(request(&mut s, &[10, 11, 12], 300), [Some(Hit), Some(Miss), Some(Miss)]);
    }

    #[test]
    fn a_large_cache_is_sampled_within_the_bound() {
        let mut s = ShadowLru::default();
        s.resize(2_000_000);
        let sampled = (0..200_000u64).filter_map(|h| s.access(h, 0, 0, 1)).count();
        let expected = 200_000.0 * MAX_ENTRIES as f64 / 2_000_000.0;
        assert!(
            (sampled as f64 - expected).abs() < 0.1 * expected,
            "{sampled} vs {expected}"
        );
        s.finished(1, 1, 5);
        assert!(s.blocks.len() <= MAX_ENTRIES);
    }

    /// One request of `session` (its agent has the session's number) for `hashes`, freed at `t`.
    fn call(s: &mut ShadowLru, session: u64, hashes: &[u64], t: u64) -> Vec<Option<Shadowed>> {
        let agent = session as u32;
        s.arrived(agent, session);
        let out = hashes.iter().map(|&h| s.access(h, 0, 0, agent)).collect();
        s.finished(agent, session, t);
        out
    }

    /// Four blocks freed in the order A's 1, B's 2, A's 3, B's 4 (LRU would take 1, 2, 3 first).
    fn four(s: &mut ShadowLru) {
        s.resize(4);
        call(s, 10, &[1], 10);
        call(s, 20, &[2], 20);
        call(s, 10, &[3], 30);
        call(s, 20, &[4], 40);
    }

    #[test]
    fn closed_sessions_blocks_go_first_the_earliest_closed_first_then_lru() {
        use Shadowed::{Hit, Miss};
        let mut s = ShadowLru::default();
        four(&mut s);
        s.close(20);
        s.close(10);
        // Three new blocks take B's two (closed first, oldest first), then A's older one.
        call(&mut s, 30, &[5, 6, 7], 50);
        assert_eq!(
            call(&mut s, 40, &[3], 60),
            [Some(Hit)],
            "A's newer block is the one left"
        );
        assert_eq!(call(&mut s, 41, &[1], 70), [Some(Miss)]);
        let mut t = ShadowLru::default();
        four(&mut t);
        t.close(20);
        call(&mut t, 30, &[5], 50);
        assert_eq!(
            call(&mut t, 41, &[1], 60),
            [Some(Hit)],
            "A is open: B's block went instead"
        );
    }

    #[test]
    fn a_reopened_session_is_back_in_lru_order() {
        use Shadowed::{Hit, Miss};
        let mut s = ShadowLru::default();
        four(&mut s);
        s.close(20);
        s.arrived(99, 20); // B calls again (a request still in flight)
        call(&mut s, 30, &[5], 50);
        assert_eq!(
            call(&mut s, 40, &[2], 60),
            [Some(Hit)],
            "B's oldest stayed: LRU took A's 1"
        );
        assert_eq!(call(&mut s, 41, &[1], 70), [Some(Miss)]);
    }

    #[test]
    fn a_ranking_names_the_session_an_agent_serving_several_could_not() {
        use Shadowed::{Hit, Miss};
        let mut s = ShadowLru::default();
        s.resize(2);
        call(&mut s, 30, &[2], 5);
        // One agent, two conversations in flight at once, and a block on no chain seen: whose
        // block 1 is cannot be told.
        s.arrived(1, 10);
        s.arrived(1, 20);
        assert_eq!(s.access(1, 0xdead, 16, 1), Some(Miss));
        s.finished(1, 10, 10);
        s.finished(1, 20, 10);
        s.close(10);
        s.label(1, 10); // a candidate of the engine's: session 10's
        call(&mut s, 40, &[3], 30);
        assert_eq!(
            call(&mut s, 41, &[2], 40),
            [Some(Hit)],
            "10's block went first, not LRU's 2"
        );
    }

    #[test]
    fn without_a_closing_the_robust_scores_are_lrus() {
        use agentrt_sdk::testing::gpu_block as item;
        let mut items: Vec<agentrt_sdk::Item> = (0..4).map(|i| item(i, 100 + i)).collect();
        assert_eq!(
            closed_first_scores(&items, |_| None),
            agentrt_sdk::recency_scores(&items)
        );
        items[2].session = 7;
        items[3].session = 8;
        items[1].session = 8;
        let scores = closed_first_scores(&items, |s| [(7, 5), (8, 2)].iter().find(|c| c.0 == s).map(|c| c.1));
        let order: Vec<u64> = agentrt_sdk::testing::rank(&items, &scores)
            .into_iter()
            .rev()
            .map(|i| items[i].key)
            .collect();
        assert_eq!(order, [1, 3, 2, 0], "8 closed before 7, each oldest first, then LRU");
    }
}

//! # ARC — adaptive replacement cache, as a baseline
//!
//! Megiddo & Modha, "ARC: A Self-Tuning, Low Overhead Replacement Cache" (FAST '03), over the
//! engine's block stream: a block seen once lives in T1 (recency), a block hit again in T2
//! (frequency); an evicted block leaves a ghost in B1 or B2, and a miss on a ghost moves the target
//! size `p` of T1 towards the list that would have kept it. vLLM's host-tier offloading manager
//! offers it (`CPUOffloadingManager(cache_policy="arc")`) beside LRU, so it is what a user would
//! pick instead of a learned policy.
//!
//! What the engine lets a policy do is rank the cached free blocks; ARC's REPLACE becomes a
//! ranking in three tiers (the host breaks ties by recency, so each tier is LRU inside):
//! first the oldest `|T1| − p` T1 blocks (REPLACE takes T1's LRU while T1 is over its target),
//! then T2's blocks, then the rest of T1. The cache size `c` is the engine's (`engine-load`
//! `total-blocks`), else the most blocks ever resident. Ghosts B1 ∪ B2 are bounded together at
//! `c` (oldest dropped), and everything tracked at `max-entries` (default 2 M, ~60 MB): a larger
//! cache keeps fewer ghosts than ARC would. The snapshot holds `p` alone; the lists are rebuilt
//! from the traffic after a restart.

use std::collections::{HashMap, VecDeque};

use agentrt_sdk::state::{Reader, Writer};
use agentrt_sdk::{info, BlockEvent, BlockOp, Config, Event, Item, Policy, PolicyInfo};

const MAGIC: [u8; 4] = *b"ARC1";
const FORMAT: u16 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum List {
    T1,
    T2,
    B1,
    B2,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    list: List,
    /// When it became a ghost (its place in `ghosts`).
    ghosted: u64,
}

/// The ARC policy.
#[derive(Debug)]
pub struct Arc {
    /// Target size of T1 (blocks), 0 ≤ p ≤ c.
    p: f64,
    total_blocks: usize,
    most_resident: usize,
    max_entries: usize,
    entries: HashMap<u64, Entry>,
    /// Counts per list (T1, T2, B1, B2).
    counts: [usize; 4],
    /// Ghosts oldest first, as (hash, ghosted stamp); stale pairs are skipped.
    ghosts: VecDeque<(u64, u64)>,
    stamp: u64,
}

impl Default for Arc {
    fn default() -> Self {
        Self {
            p: 0.0,
            total_blocks: 0,
            most_resident: 0,
            max_entries: 2_000_000,
            entries: HashMap::new(),
            counts: [0; 4],
            ghosts: VecDeque::new(),
            stamp: 0,
        }
    }
}

fn slot(list: List) -> usize {
    match list {
        List::T1 => 0,
        List::T2 => 1,
        List::B1 => 2,
        List::B2 => 3,
    }
}

impl Arc {
    /// The cache size ARC adapts within.
    fn c(&self) -> f64 {
        self.total_blocks.max(self.most_resident).max(1) as f64
    }

    /// T1's target size now.
    pub fn target_t1(&self) -> f64 {
        self.p
    }

    fn set(&mut self, hash: u64, list: List) {
        let old = self.entries.insert(hash, Entry { list, ghosted: 0 });
        if let Some(old) = old {
            self.counts[slot(old.list)] -= 1;
        }
        self.counts[slot(list)] += 1;
        if matches!(list, List::B1 | List::B2) {
            self.stamp += 1;
            self.entries.get_mut(&hash).expect("just set").ghosted = self.stamp;
            self.ghosts.push_back((hash, self.stamp));
        }
        self.most_resident = self.most_resident.max(self.counts[0] + self.counts[1]);
    }

    /// Drop the oldest ghosts while there are more than `c`, or more entries than allowed; then
    /// drop stale pairs once they outnumber the live ghosts, so the queue stays within twice the
    /// ghosts even when the same blocks keep going ghost → T2 → ghost (each turn queues a pair).
    fn trim(&mut self) {
        let c = self.c() as usize;
        while self.counts[2] + self.counts[3] > c || self.entries.len() > self.max_entries {
            let Some((hash, stamp)) = self.ghosts.pop_front() else {
                break;
            };
            if let Some(e) = self.entries.get(&hash) {
                if matches!(e.list, List::B1 | List::B2) && e.ghosted == stamp {
                    self.counts[slot(e.list)] -= 1;
                    self.entries.remove(&hash);
                }
            }
        }
        let live = self.counts[2] + self.counts[3];
        if self.ghosts.len() > 2 * live + 64 {
            let entries = &self.entries;
            self.ghosts.retain(|(hash, stamp)| {
                entries
                    .get(hash)
                    .is_some_and(|e| matches!(e.list, List::B1 | List::B2) && e.ghosted == *stamp)
            });
        }
    }

    fn stored(&mut self, hash: u64) {
        let c = self.c();
        let (b1, b2) = (self.counts[2].max(1) as f64, self.counts[3].max(1) as f64);
        match self.entries.get(&hash).map(|e| e.list) {
            // A miss on a ghost: the list that would have kept it deserves more room.
            Some(List::B1) => {
                self.p = (self.p + (b2 / b1).max(1.0)).min(c);
                self.set(hash, List::T2);
            }
            Some(List::B2) => {
                self.p = (self.p - (b1 / b2).max(1.0)).max(0.0);
                self.set(hash, List::T2);
            }
            // Stored again while resident (vLLM keeps duplicates): nothing new.
            Some(List::T1 | List::T2) => {}
            None => self.set(hash, List::T1),
        }
        self.trim();
    }

    fn touched(&mut self, hash: u64) {
        match self.entries.get(&hash).map(|e| e.list) {
            Some(List::T1) => self.set(hash, List::T2),
            Some(List::T2) => {}
            // A hit on something not tracked (dropped at max-entries, or before a restart).
            _ => self.set(hash, List::T2),
        }
    }

    fn removed(&mut self, hash: u64) {
        match self.entries.get(&hash).map(|e| e.list) {
            Some(List::T1) => self.set(hash, List::B1),
            Some(List::T2) => self.set(hash, List::B2),
            _ => {}
        }
        self.trim();
    }
}

impl Policy for Arc {
    fn info() -> PolicyInfo {
        info(
            "arc",
            "ARC (Megiddo & Modha, FAST '03) over the engine's blocks: recency and frequency lists whose split adapts to ghost hits",
        )
    }

    fn init(&mut self, config: &Config) -> Result<(), String> {
        config.expect_only(&["max-entries"])?;
        let max = config.parse_or("max-entries", 2_000_000usize)?;
        if max < 1 {
            return Err("config key `max-entries`: must be at least 1".into());
        }
        self.max_entries = max;
        Ok(())
    }

    fn observe(&mut self, event: &Event) {
        if let Event::EngineLoad(load) = event {
            self.total_blocks = load.total_blocks as usize;
        }
    }

    fn observe_block(&mut self, block: &BlockEvent) {
        match block.op {
            BlockOp::Stored => self.stored(block.block_hash),
            BlockOp::Touched => self.touched(block.block_hash),
            BlockOp::Removed => self.removed(block.block_hash),
            BlockOp::AllCleared => {
                self.entries.clear();
                self.ghosts.clear();
                self.counts = [0; 4];
            }
        }
    }

    fn score(&mut self, items: &[Item]) -> Vec<f32> {
        // Tier 0: the oldest |T1| − p of T1's candidates; tier 1: T2; tier 2: the rest of T1.
        let over = (self.counts[0] as f64 - self.p).max(0.0).ceil() as usize;
        let in_t2 = |item: &Item| self.entries.get(&item.key).is_some_and(|e| e.list == List::T2);
        let mut t1: Vec<usize> = (0..items.len()).filter(|&i| !in_t2(&items[i])).collect();
        t1.sort_by_key(|&i| items[i].last_access);
        let mut scores: Vec<f32> = items.iter().map(|i| if in_t2(i) { 1.0 } else { 2.0 }).collect();
        for &i in t1.iter().take(over) {
            scores[i] = 0.0;
        }
        scores
    }

    fn snapshot(&self) -> Vec<u8> {
        let mut w = Writer::new(MAGIC, FORMAT);
        w.f32(self.p as f32);
        w.finish()
    }

    fn restore(&mut self, state: &[u8]) -> Result<(), String> {
        if state.is_empty() {
            return Ok(()); // from a stateless policy (LRU): start afresh
        }
        let mut r = Reader::of_format(state, MAGIC, FORMAT, "ARC")?;
        let p = r.f32()?;
        r.finish()?;
        if !(p.is_finite() && p >= 0.0) {
            return Err(format!("ARC snapshot: target size {p} is not a size"));
        }
        self.p = f64::from(p);
        Ok(())
    }
}

agentrt_sdk::export_policy!(Arc);

#[cfg(test)]
mod tests {
    use super::*;
    use agentrt_sdk::testing::{gpu_block as block, gpu_block_event as ev, rank, Harness};
    use agentrt_sdk::EngineLoad;

    fn load(total: u32) -> Event {
        Event::EngineLoad(EngineLoad {
            queue_depth: 0,
            running: 0,
            free_blocks: total,
            total_blocks: total,
            at_us: 0,
        })
    }

    #[test]
    fn a_block_hit_twice_outlives_newer_blocks_seen_once() {
        let mut arc = Harness::<Arc>::new([]).unwrap();
        arc.observe(&[load(4)]);
        arc.observe_blocks(&[ev(BlockOp::Stored, 1), ev(BlockOp::Touched, 1)]);
        arc.observe_blocks(&[ev(BlockOp::Stored, 2), ev(BlockOp::Stored, 3)]);
        // 1 is the oldest, but frequent (T2); 2 and 3 are T1, over its target of 0.
        let items = [block(1, 1), block(2, 2), block(3, 3)];
        let order = rank(&items, &arc.score(&items));
        assert_eq!(order, vec![0, 2, 1], "keep T2's block, evict T1's oldest first");
    }

    #[test]
    fn a_miss_on_a_recency_ghost_grows_t1s_target() {
        let mut arc = Harness::<Arc>::new([]).unwrap();
        arc.observe(&[load(8)]);
        arc.observe_blocks(&[ev(BlockOp::Stored, 1), ev(BlockOp::Removed, 1)]);
        assert_eq!(arc.policy().target_t1(), 0.0);
        // Stored again: the ghost in B1 says recency would have kept it.
        arc.observe_blocks(&[ev(BlockOp::Stored, 1)]);
        assert_eq!(arc.policy().target_t1(), 1.0);
        // A miss on a frequency ghost shrinks it back.
        arc.observe_blocks(&[ev(BlockOp::Removed, 1), ev(BlockOp::Stored, 1)]);
        assert_eq!(arc.policy().target_t1(), 0.0);
        let state = arc.snapshot();
        let mut fresh = Harness::<Arc>::new([]).unwrap();
        fresh.restore(&state).unwrap();
        assert!(fresh.restore(&[1, 2, 3]).is_err());
    }

    #[test]
    fn ghosts_stay_within_the_cache_size() {
        let mut arc = Harness::<Arc>::new([]).unwrap();
        arc.observe(&[load(3)]);
        for h in 1..=20 {
            arc.observe_blocks(&[ev(BlockOp::Stored, h), ev(BlockOp::Removed, h)]);
        }
        let a = arc.policy();
        assert!(a.counts[2] + a.counts[3] <= 3, "{:?}", a.counts);
        assert_eq!(a.entries.len(), a.counts.iter().sum::<usize>());
    }

    #[test]
    fn blocks_cycling_through_a_ghost_list_keep_the_queue_bounded() {
        let mut arc = Harness::<Arc>::new([]).unwrap();
        arc.observe(&[load(1000)]);
        // Each turn: evicted (a ghost), stored again (a ghost hit → T2), evicted (a ghost again).
        for _ in 0..10_000 {
            for h in 1..=4 {
                arc.observe_blocks(&[ev(BlockOp::Stored, h), ev(BlockOp::Removed, h)]);
            }
        }
        let a = arc.policy();
        assert_eq!(a.counts[2] + a.counts[3], 4);
        assert!(a.ghosts.len() <= 2 * 4 + 64 + 1, "queue of {} pairs", a.ghosts.len());
    }
}

//! The bounded tables, so that no traffic can grow the policy's state without limit: [`Bounded`]
//! forgets its oldest entries past a bound (every table of what the policy was told about
//! sessions — closed, waiting, reported ended — and the guard's pending pairs is one), and
//! [`make_room`] keeps the model's tables of agents and live sessions to theirs.
//!
//! Insertion order is kept as (key, stamp) pairs; an entry inserted again gets a new stamp, so
//! its older pair is stale and skipped. Stale pairs are dropped once they outnumber the live
//! entries, so the queue stays within twice the bound.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher};

/// Block hashes are already spread (the low 64 bits of vLLM's sha256, the simulator's mixes):
/// one multiply-xorshift instead of SipHash, since every block event looks a hash up.
#[derive(Default, Clone, Copy)]
pub struct SpreadHasher(u64);

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

pub type Spread = BuildHasherDefault<SpreadHasher>;

/// `Default`: a table that holds nothing, until it is made anew with a bound.
#[derive(Debug, Clone, Default)]
pub struct Bounded<V, S = std::collections::hash_map::RandomState> {
    map: HashMap<u64, (V, u64), S>,
    order: VecDeque<(u64, u64)>,
    stamp: u64,
    max: usize,
}

impl<V, S: BuildHasher + Default> Bounded<V, S> {
    pub fn new(max: usize) -> Self {
        Self {
            map: HashMap::default(),
            order: VecDeque::new(),
            stamp: 0,
            max,
        }
    }

    /// Insert or replace `key`, now the newest entry; the oldest go past the bound.
    pub fn insert(&mut self, key: u64, value: V) {
        self.stamp += 1;
        self.map.insert(key, (value, self.stamp));
        self.order.push_back((key, self.stamp));
        while self.map.len() > self.max {
            let Some((k, s)) = self.order.pop_front() else { break };
            if self.map.get(&k).is_some_and(|e| e.1 == s) {
                self.map.remove(&k);
            }
        }
        if self.order.len() > 2 * self.max.max(self.map.len()) {
            let map = &self.map;
            self.order.retain(|(k, s)| map.get(k).is_some_and(|e| e.1 == *s));
        }
    }

    pub fn get(&self, key: u64) -> Option<&V> {
        self.map.get(&key).map(|e| &e.0)
    }

    pub fn get_mut(&mut self, key: u64) -> Option<&mut V> {
        self.map.get_mut(&key).map(|e| &mut e.0)
    }

    pub fn remove(&mut self, key: u64) -> Option<V> {
        self.map.remove(&key).map(|e| e.0)
    }

    pub fn contains(&self, key: u64) -> bool {
        self.map.contains_key(&key)
    }

    pub fn retain(&mut self, mut keep: impl FnMut(&V) -> bool) {
        self.map.retain(|_, e| keep(&e.0));
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.map.values().map(|e| &e.0)
    }

    pub fn clear(&mut self) {
        self.map.clear();
        self.order.clear();
    }
}

/// Makes room in `map`, of at most `capacity` entries, for `key`: if it is new and the map is
/// full, the entry `age` says is oldest goes, and its key is returned. `age` ends with the key, so
/// that no tie leaves the choice to the map's order. Rare (a newcomer to a full table), so a scan
/// beats keeping an ordered index.
pub fn make_room<K: Copy + Eq + Hash, V, A: Ord>(
    map: &mut HashMap<K, V>,
    capacity: usize,
    key: K,
    age: impl Fn(&V) -> A,
) -> Option<K> {
    if map.contains_key(&key) || map.len() < capacity {
        return None;
    }
    let oldest = *map.iter().min_by_key(|(_, v)| age(v))?.0;
    map.remove(&oldest);
    Some(oldest)
}

#[cfg(test)]
impl<V, S> Bounded<V, S> {
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Entries and stale pairs queued, for the bounded-state tests.
    pub fn queued(&self) -> usize {
        self.order.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_entries_go_past_the_bound_and_a_reinserted_one_is_new_again() {
        let mut b: Bounded<u32> = Bounded::new(3);
        for k in 1..=3 {
            b.insert(k, k as u32);
        }
        b.insert(1, 10); // 1 is the newest now
        b.insert(4, 4);
        assert_eq!((b.get(1), b.get(2), b.len()), (Some(&10), None, 3), "2 was the oldest");
        for k in 0..1000 {
            b.insert(k % 2, 0);
        }
        assert!(b.queued() <= 2 * 3 + 1, "{}", b.queued());
        assert_eq!(b.remove(4), Some(4));
    }
}

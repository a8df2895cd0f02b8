//! A bounded table that forgets the least recently used entry first: the proxy's per-tenant
//! memory of agents, anchors, sessions and prompt shapes is filled by clients, so every such
//! table is capped by entries and, where it keeps client-sized values, by bytes.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

/// Entries and bytes, least recently used evicted first. `bytes` counts what the caller says an
/// entry weighs (the client-controlled part: names, messages, shape points).
#[derive(Debug)]
pub struct LruTable<K, V> {
    map: HashMap<K, Slot<V>>,
    order: BTreeMap<u64, K>,
    tick: u64,
    bytes: usize,
    max_entries: usize,
    max_bytes: usize,
}

#[derive(Debug)]
struct Slot<V> {
    value: V,
    used: u64,
    bytes: usize,
}

impl<K: Hash + Eq + Clone, V> LruTable<K, V> {
    /// A table of at most `max_entries` (at least 1) entries and `max_bytes` bytes.
    pub fn new(max_entries: usize, max_bytes: usize) -> Self {
        Self {
            map: HashMap::new(),
            order: BTreeMap::new(),
            tick: 0,
            bytes: 0,
            max_entries: max_entries.max(1),
            max_bytes,
        }
    }

    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    /// The value under `key`, marked as just used.
    pub fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        let tick = self.next_tick();
        let slot = self.map.get_mut(key)?;
        self.order.remove(&slot.used);
        slot.used = tick;
        self.order.insert(tick, key.clone());
        Some(&mut slot.value)
    }

    /// The value under `key`, leaving its recency alone.
    pub fn peek(&self, key: &K) -> Option<&V> {
        self.map.get(key).map(|s| &s.value)
    }

    /// Whether `key` has an entry; its recency is left alone.
    pub fn contains(&self, key: &K) -> bool {
        self.map.contains_key(key)
    }

    /// Insert or replace `key` as the most recently used entry, then evict the least recently
    /// used ones until the table fits; returns what was evicted (never the entry just inserted,
    /// unless it alone is over the byte budget).
    pub fn insert(&mut self, key: K, value: V, bytes: usize) -> Vec<(K, V)> {
        self.remove(&key);
        let tick = self.next_tick();
        self.order.insert(tick, key.clone());
        self.bytes += bytes;
        self.map.insert(
            key,
            Slot {
                value,
                used: tick,
                bytes,
            },
        );
        let mut evicted = Vec::new();
        while self.map.len() > self.max_entries || (self.bytes > self.max_bytes && !self.map.is_empty()) {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            if let Some(slot) = self.map.remove(&oldest) {
                self.bytes -= slot.bytes;
                evicted.push((oldest, slot.value));
            }
        }
        evicted
    }

    /// Take `key`'s entry out, giving its bytes back; `None` if there was none.
    pub fn remove(&mut self, key: &K) -> Option<V> {
        let slot = self.map.remove(key)?;
        self.order.remove(&slot.used);
        self.bytes -= slot.bytes;
        // A table that emptied gives its spare room back (a map never shrinks by itself).
        if self.map.capacity() > 64 && self.map.len() * 4 < self.map.capacity() {
            self.map.shrink_to(self.map.len() * 2);
        }
        Some(slot.value)
    }

    /// Remove every entry `drop` selects; returns their keys.
    pub fn remove_where(&mut self, mut drop: impl FnMut(&K, &V) -> bool) -> Vec<K> {
        let keys: Vec<K> = self
            .map
            .iter()
            .filter(|(k, s)| drop(k, &s.value))
            .map(|(k, _)| k.clone())
            .collect();
        for k in &keys {
            self.remove(k);
        }
        keys
    }

    /// Every entry, least recently used first; recency is left alone.
    pub fn oldest_first(&self) -> impl Iterator<Item = (&K, &V)> {
        self.order
            .values()
            .filter_map(|k| self.map.get_key_value(k).map(|(k, s)| (k, &s.value)))
    }

    /// Every entry, in no particular order (not by recency); recency is left alone.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.map.iter().map(|(k, s)| (k, &s.value))
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Bytes held, as weighed by the callers of [`Self::insert`].
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::LruTable;

    #[test]
    fn the_least_recently_used_goes_first_by_count_and_by_bytes() {
        let mut t = LruTable::new(3, 100);
        t.insert(1, "a", 10);
        t.insert(2, "b", 10);
        t.insert(3, "c", 10);
        t.get_mut(&1);
        assert_eq!(t.insert(4, "d", 10), vec![(2, "b")], "2 is the least recently used");
        assert_eq!(t.len(), 3);
        let evicted = t.insert(5, "e", 85);
        assert_eq!(evicted.len(), 2, "over 100 bytes: {evicted:?}");
        assert!(t.bytes() <= 100 && t.contains(&5));
        assert_eq!(t.remove(&5), Some("e"));
        assert_eq!(t.bytes(), t.iter().count() * 10);
    }
}

/// The caps on one tenant's tables (docs/security.md). Each table forgets its least recently used
/// entry first; what is forgotten is re-learned if it comes back (an agent re-registers under a
/// new handle, a session counts as new, a prompt's continuation is not recognised once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableLimits {
    /// Agent names → handles. Names are at most 256 bytes (`crate::names::MAX_NAME_BYTES`), so
    /// this also bounds the bytes of names kept.
    pub max_agents: usize,
    /// Live sessions (their 64-bit ids and last activity).
    pub max_sessions: usize,
    /// Anchors (system messages and tools) kept for warm-ups.
    pub max_anchors: usize,
    /// Bytes of those anchors, serialized.
    pub max_anchor_bytes: usize,
    /// Prompt shapes (one per session and agent), for `continues`.
    pub max_shapes: usize,
    /// Bytes of those shapes (16 per chunk boundary).
    pub max_shape_bytes: usize,
}

impl Default for TableLimits {
    fn default() -> Self {
        Self {
            max_agents: 4096,
            max_sessions: 4096,
            max_anchors: 1024,
            max_anchor_bytes: 16 << 20,
            max_shapes: 4096,
            max_shape_bytes: 16 << 20,
        }
    }
}

//! One tenant's memoized tool results: what they answer, when they were fetched, what they cost.
//!
//! Only the host reads and writes the store; the tenant's tool-memo policy sees its entries as
//! `tool-result` items and says, by their scores, which may still be served and which to drop
//! when the store is over budget ([`crate::memo`]). Each tenant has a store of its own: no key
//! lookup can reach another tenant's results.

use std::collections::HashMap;

use rmcp::model::CallToolResult;

use agentrt_runtime::types::{Item, ItemKind};

use crate::keys::ResultKey;

/// How much one tenant may keep.
#[derive(Clone, Copy, Debug)]
pub struct MemoBudget {
    /// Results kept at most (`--mcp-memo-max-entries`).
    pub max_entries: usize,
    /// Bytes of results (serialized JSON) kept at most (`--mcp-memo-max-bytes`).
    pub max_bytes: usize,
}

impl Default for MemoBudget {
    fn default() -> Self {
        Self {
            max_entries: 4096,
            max_bytes: 32 << 20,
        }
    }
}

/// One memoized result.
#[derive(Clone, Debug)]
pub struct Entry {
    /// The tool and arguments it answers.
    pub key: ResultKey,
    /// The server's answer, served as it came.
    pub result: CallToolResult,
    /// The agent whose call fetched it.
    pub agent: u32,
    /// When the call that fetched it started (µs, the tenant's clock): its age counts from
    /// there, because the server may have read its data at any time during the call.
    pub fetched_at_us: u64,
    /// How long that call took: what a hit saves.
    pub latency_us: u64,
    /// Its size as serialized JSON.
    pub bytes: usize,
}

impl Entry {
    /// The entry as a `tool-result` item: `last-access` is the fetch time (newer = larger, the
    /// host's tie-break keeps the fresher result), `session` 0 (results serve every session of
    /// the tenant), `tokens` the size in tokens (bytes / 4).
    pub fn item(&self) -> Item {
        Item {
            kind: ItemKind::ToolResult,
            key: self.key.key,
            agent: self.agent,
            session: 0,
            last_access: self.fetched_at_us,
            tokens: u32::try_from(self.bytes / 4).unwrap_or(u32::MAX),
            position: 0,
            tier: agentrt_runtime::types::Tier::Gpu,
        }
    }
}

/// The entries of one tenant, by key, and their bytes together.
#[derive(Debug, Default)]
pub struct MemoStore {
    entries: HashMap<u64, Entry>,
    bytes: usize,
}

impl MemoStore {
    /// The entry answering exactly `key` (its full digest too), if any.
    pub fn get(&self, key: &ResultKey) -> Option<&Entry> {
        self.entries.get(&key.key).filter(|e| e.key.digest == key.digest)
    }

    /// Add or replace the entry for its key.
    pub fn insert(&mut self, entry: Entry) {
        self.bytes += entry.bytes;
        if let Some(old) = self.entries.insert(entry.key.key, entry) {
            self.bytes -= old.bytes;
        }
    }

    /// Remove the entry under `key` if it is still the one fetched at `fetched_at_us` (a newer
    /// fetch may have replaced it since the policy was asked). True if removed.
    pub fn remove_if(&mut self, key: u64, fetched_at_us: u64) -> bool {
        if self.entries.get(&key).is_some_and(|e| e.fetched_at_us == fetched_at_us) {
            let old = self.entries.remove(&key).expect("checked above");
            self.bytes -= old.bytes;
            return true;
        }
        false
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries' sizes together ([`Entry::bytes`]).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether the store holds more than `budget` allows.
    pub fn over(&self, budget: &MemoBudget) -> bool {
        self.entries.len() > budget.max_entries || self.bytes > budget.max_bytes
    }

    /// Every entry as an item, with the fetch time that identifies it.
    pub fn items(&self) -> Vec<Item> {
        self.entries.values().map(Entry::item).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(args: &str, at: u64, bytes: usize) -> Entry {
        Entry {
            key: ResultKey::of("s", "t", json!({ "q": args }).as_object()),
            result: CallToolResult::success(vec![]),
            agent: 1,
            fetched_at_us: at,
            latency_us: 10,
            bytes,
        }
    }

    #[test]
    fn entries_are_found_by_full_digest_and_bytes_are_counted() {
        let mut store = MemoStore::default();
        let a = entry("a", 1, 100);
        store.insert(a.clone());
        store.insert(entry("b", 2, 50));
        assert_eq!((store.len(), store.bytes()), (2, 150));
        assert!(store.get(&a.key).is_some());
        // Same 64-bit key, another digest (a collision): not an answer.
        let mut forged = a.key;
        forged.digest[0] ^= 1;
        assert!(store.get(&forged).is_none());
        // A newer fetch replaces the entry; removing by the old fetch time does nothing.
        store.insert(entry("a", 5, 10));
        assert_eq!((store.len(), store.bytes()), (2, 60));
        assert!(!store.remove_if(a.key.key, 1));
        assert!(store.remove_if(a.key.key, 5));
        assert_eq!((store.len(), store.bytes()), (1, 50));
        let budget = MemoBudget {
            max_entries: 1,
            max_bytes: 40,
        };
        assert!(store.over(&budget));
        let item = store.items()[0];
        assert_eq!(
            (item.kind, item.last_access, item.tokens, item.session),
            (ItemKind::ToolResult, 2, 12, 0)
        );
    }
}

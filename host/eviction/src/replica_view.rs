//! One replica's engine inside one policy view across several replicas.
//!
//! Every replica of a model computes the same block hash for the same tokens, so a policy fed by
//! two replicas' plugins would see one block where the engines hold two, and a removal on one
//! replica would read as a removal everywhere. [`ReplicaView`] stands between one replica's
//! plugin connection (and its KV-event subscriber) and the ranker they share: it folds the
//! replica into every block hash the policy hears or ranks ([`fold`]: the hash XOR a per-replica
//! salt), so the same content on two replicas is two blocks to the policy, each stored, touched
//! and removed on its own. Nothing needs unfolding on the way back: a ranking names candidates by
//! their index in the plugin's list. The policy contract (`wit/policy.wit` 0.2.0) is unchanged;
//! a policy that keys its state by block hash simply holds one entry per replica.
//!
//! Two events need more than a fold. A cleared cache (`all-cleared`) on one replica is told as
//! the removal of each block this view knows the replica holds — an `all-cleared` would clear
//! every replica in the policy's view (under shares, those removals count as the tenants'
//! evictions on `/metrics`). And the blocks that start a prompt (position 0, no parent)
//! tell where agents' anchors are: when an agent stores or hits one on this replica, or when one
//! such block is removed, [`AnchorEvents`] hears it (the proxy's hints follow real evictions).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use agentrt_runtime::packed::WORDS_PER_EVENT;
use agentrt_runtime::types::{BlockEvent, BlockOp, Event, Item};
use agentrt_runtime::{PolicyError, Ranking};

use crate::kv_events::BlockSink;
use crate::ranker::{is_host_tier, EngineRanker, HostRanking};

/// Blocks a view tracks per replica at most (a real engine's cache holds far fewer); past it new
/// blocks are folded and forwarded but not tracked, so a clear cannot name them.
pub const MAX_TRACKED_BLOCKS: usize = 4 << 20;
/// Agents remembered per prompt-start block (the one that stored it and those that hit it).
const MAX_USERS: usize = 8;

/// The salt of replica `replica` (its router id): SplitMix64's finalizer, never 0 for an id ≠ 0.
pub fn replica_salt(replica: u64) -> u64 {
    let mut z = replica.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A block hash as the policy sees it on the replica with `salt`; 0 ("no parent") stays 0.
pub fn fold(hash: u64, salt: u64) -> u64 {
    if hash == 0 {
        0
    } else {
        hash ^ salt
    }
}

/// Told where agents' anchors are cached, from one replica's block events.
pub trait AnchorEvents: Send + Sync {
    /// `agent` stored or hit the block that starts its prompt on `replica`.
    fn anchor_cached(&self, replica: u64, agent: u32);
    /// A block that starts `agent`'s prompt left `replica`: no prompt of it hits there until it
    /// is computed again.
    fn anchor_removed(&self, replica: u64, agent: u32);
}

#[derive(Debug, Clone)]
struct Resident {
    agent: u32,
    /// Starts a prompt: position 0, no parent.
    starts: bool,
    /// For a prompt-start block: the agents that stored or hit it.
    users: Vec<u32>,
}

/// One replica's plugin connection and KV events, into a ranker shared with other replicas.
pub struct ReplicaView {
    name: String,
    replica: u64,
    salt: u64,
    inner: Arc<dyn EngineRanker>,
    anchors: Option<Arc<dyn AnchorEvents>>,
    /// The replica's blocks (folded hash → what started it), for clears and anchors.
    resident: Mutex<HashMap<u64, Resident>>,
}

impl ReplicaView {
    /// Replica `name` with router id `replica` (≠ 0) in front of `inner`.
    pub fn new(name: &str, replica: u64, inner: Arc<dyn EngineRanker>) -> Self {
        Self {
            name: name.to_string(),
            replica,
            salt: replica_salt(replica),
            inner,
            anchors: None,
            resident: Mutex::new(HashMap::new()),
        }
    }

    /// Tell `anchors` where agents' prompt-start blocks come and go.
    pub fn with_anchor_events(mut self, anchors: Arc<dyn AnchorEvents>) -> Self {
        self.anchors = Some(anchors);
        self
    }

    /// The replica's router id, the one its salt is derived from.
    pub fn replica(&self) -> u64 {
        self.replica
    }

    /// Blocks this view knows the replica holds.
    pub fn resident_blocks(&self) -> usize {
        self.lock().len()
    }

    /// `hash` as the policy knows it on this replica.
    pub fn fold(&self, hash: u64) -> u64 {
        fold(hash, self.salt)
    }

    /// Candidates with this replica's hashes, for the shared policy to rank.
    fn fold_items(&self, items: &[Item]) -> Vec<Item> {
        items
            .iter()
            .map(|item| Item {
                key: self.fold(item.key),
                ..*item
            })
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Resident>> {
        self.resident.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The events with this replica's hashes, a clear turned into removals; and what the
    /// anchors hear: (cached?, agent).
    fn fold_events(&self, words: &[u64]) -> (Vec<u64>, Vec<(bool, u32)>) {
        let mut out = Vec::with_capacity(words.len());
        let mut anchors = Vec::new();
        let mut resident = self.lock();
        for event in words.chunks_exact(WORDS_PER_EVENT) {
            let Some((op, agent)) = agentrt_runtime::packed::op_and_agent(event) else {
                continue;
            };
            let hash = self.fold(event[1]);
            if is_host_tier(event) {
                // Host-memory copies: folded like any block, but not the replica's GPU residents
                // (anchors and clears track the GPU cache). A host-tier clear is forwarded as is.
                let third = if op == BlockOp::Removed {
                    event[2]
                } else {
                    self.fold(event[2])
                };
                out.extend_from_slice(&[event[0], hash, third]);
                continue;
            }
            match op {
                BlockOp::Stored => {
                    let starts = event[2] == 0 && (event[0] >> 8) & 0xff_ffff == 0;
                    let users = if starts && agent != 0 { vec![agent] } else { Vec::new() };
                    if starts && agent != 0 {
                        anchors.push((true, agent));
                    }
                    if resident.len() < MAX_TRACKED_BLOCKS || resident.contains_key(&hash) {
                        resident.insert(hash, Resident { agent, starts, users });
                    }
                    out.extend_from_slice(&[event[0], hash, self.fold(event[2])]);
                }
                BlockOp::Touched => {
                    if let Some(block) = resident.get_mut(&hash) {
                        if block.starts && agent != 0 {
                            anchors.push((true, agent));
                            if !block.users.contains(&agent) && block.users.len() < MAX_USERS {
                                block.users.push(agent);
                            }
                        }
                    }
                    out.extend_from_slice(&[event[0], hash, self.fold(event[2])]);
                }
                BlockOp::Removed => {
                    if let Some(block) = resident.remove(&hash) {
                        anchors.extend(block.users.iter().map(|&a| (false, a)));
                    }
                    // The third word of a removal is not a hash (the eviction service zeroes it).
                    out.extend_from_slice(&[event[0], hash, event[2]]);
                }
                BlockOp::AllCleared => {
                    for (hash, block) in resident.drain() {
                        anchors.extend(block.users.iter().map(|&a| (false, a)));
                        let removal = BlockEvent {
                            op: BlockOp::Removed,
                            agent: block.agent,
                            block_hash: hash,
                            parent_hash: 0,
                            position: 0,
                            tier: agentrt_runtime::types::Tier::Gpu,
                        };
                        agentrt_runtime::packed::encode(&removal, &mut out);
                    }
                }
            }
        }
        (out, anchors)
    }

    fn tell_anchors(&self, anchors: Vec<(bool, u32)>) {
        if let Some(sink) = &self.anchors {
            for (cached, agent) in anchors {
                if cached {
                    sink.anchor_cached(self.replica, agent);
                } else {
                    sink.anchor_removed(self.replica, agent);
                }
            }
        }
    }
}

impl EngineRanker for ReplicaView {
    fn label(&self) -> String {
        format!("{} (replica {})", self.inner.label(), self.name)
    }

    fn observe_blocks(&self, packed: &[u64]) -> Result<(), PolicyError> {
        let (folded, anchors) = self.fold_events(packed);
        self.tell_anchors(anchors);
        if folded.is_empty() {
            return Ok(());
        }
        self.inner.observe_blocks_on(self.replica, &folded)
    }

    fn rank(&self, items: &[Item]) -> Ranking {
        self.inner.rank_on(self.replica, &self.fold_items(items))
    }

    fn rank_host(&self, items: &[Item]) -> HostRanking {
        self.inner.rank_host_on(self.replica, &self.fold_items(items))
    }

    fn announce(&self, events: &[Event]) -> Result<(), PolicyError> {
        self.inner.announce(events)
    }

    fn count_evictors(&self, evictors: &[u32]) {
        self.inner.count_evictors_on(self.replica, evictors)
    }
}

/// The replica's KV events (from its publisher, without the plugin) take the same path.
impl BlockSink for ReplicaView {
    fn observe_blocks(&self, packed: &[u64]) -> Result<(), String> {
        EngineRanker::observe_blocks(self, packed).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn salts_differ_by_replica_and_fold_is_its_own_inverse() {
        let (a, b) = (replica_salt(1), replica_salt(2));
        assert_ne!(a, b);
        assert_ne!(a, 0);
        assert_ne!(fold(77, a), fold(77, b));
        assert_eq!(fold(fold(77, a), a), 77);
        assert_eq!(fold(0, a), 0, "no parent stays no parent");
    }
}

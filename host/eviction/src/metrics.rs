//! Counters for the two services, readable while they run (relaxed atomics: each counter is
//! independent and only ever grows, so no ordering between them is promised).

use std::sync::atomic::{AtomicU64, Ordering};

fn get(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

pub(crate) fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// What the eviction service has done.
#[derive(Debug, Default)]
pub struct EvictionMetrics {
    pub(crate) connections: AtomicU64,
    pub(crate) open_connections: AtomicU64,
    pub(crate) refused_connections: AtomicU64,
    pub(crate) frames: AtomicU64,
    pub(crate) malformed: AtomicU64,
    pub(crate) agents_defined: AtomicU64,
    pub(crate) block_events: AtomicU64,
    pub(crate) rank_requests: AtomicU64,
    pub(crate) rank_items: AtomicU64,
    pub(crate) policy_fallbacks: AtomicU64,
    pub(crate) plugin_missed: AtomicU64,
    pub(crate) host_tier_ranks: AtomicU64,
    pub(crate) host_tier_declined: AtomicU64,
}

/// A copy of [`EvictionMetrics`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EvictionCounts {
    /// Plugin connections accepted.
    pub connections: u64,
    /// Plugin connections open now (one per vLLM engine core process that has the plugin).
    pub open_connections: u64,
    /// Connections closed as soon as they were accepted: past the cap
    /// (`--eviction-max-connections`).
    pub refused_connections: u64,
    /// Frames read.
    pub frames: u64,
    /// Frames that could not be decoded or had a length out of range (each closed its
    /// connection), and uses of an agent id before its AGENT frame (treated as unknown).
    pub malformed: u64,
    /// AGENT frames accepted (agent names defined under a wire id).
    pub agents_defined: u64,
    /// Block events forwarded to the policy.
    pub block_events: u64,
    /// RANK frames received.
    pub rank_requests: u64,
    /// Candidates in those RANKs, all together.
    pub rank_items: u64,
    /// RANKs answered in LRU order because the policy failed.
    pub policy_fallbacks: u64,
    /// RANKs the plugin reports it stopped waiting for (its deadline passed): it used vLLM's order.
    pub plugin_missed: u64,
    /// RANKs of host-memory-tier candidates (eviction from the host pool, or admission to it).
    pub host_tier_ranks: u64,
    /// Blocks the policy declined to store (scored below zero) in admission asks (host-tier RANKs
    /// with `want` 0).
    pub host_tier_declined: u64,
}

impl EvictionMetrics {
    /// Every counter, read now (each on its own: see the module doc).
    pub fn counts(&self) -> EvictionCounts {
        EvictionCounts {
            connections: get(&self.connections),
            open_connections: get(&self.open_connections),
            refused_connections: get(&self.refused_connections),
            frames: get(&self.frames),
            malformed: get(&self.malformed),
            agents_defined: get(&self.agents_defined),
            block_events: get(&self.block_events),
            rank_requests: get(&self.rank_requests),
            rank_items: get(&self.rank_items),
            policy_fallbacks: get(&self.policy_fallbacks),
            plugin_missed: get(&self.plugin_missed),
            host_tier_ranks: get(&self.host_tier_ranks),
            host_tier_declined: get(&self.host_tier_declined),
        }
    }
}

/// What the KV-event subscriber has done.
#[derive(Debug, Default)]
pub struct KvEventMetrics {
    pub(crate) batches: AtomicU64,
    pub(crate) events: AtomicU64,
    pub(crate) blocks_forwarded: AtomicU64,
    pub(crate) malformed: AtomicU64,
    pub(crate) duplicates: AtomicU64,
    pub(crate) gaps: AtomicU64,
    pub(crate) replays: AtomicU64,
    pub(crate) replayed_batches: AtomicU64,
    pub(crate) lost_batches: AtomicU64,
    pub(crate) restarts: AtomicU64,
    pub(crate) policy_errors: AtomicU64,
}

/// A copy of [`KvEventMetrics`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KvEventCounts {
    /// Batches applied (live or replayed).
    pub batches: u64,
    /// Events decoded in applied batches.
    pub events: u64,
    /// Block events handed to the sink (one per block hash).
    pub blocks_forwarded: u64,
    /// Messages that could not be decoded (logged, skipped).
    pub malformed: u64,
    /// Batches seen twice (live after a replay, or a replayed one already applied): dropped.
    pub duplicates: u64,
    /// Times a sequence number jumped ahead.
    pub gaps: u64,
    /// Replay requests sent.
    pub replays: u64,
    /// Batches recovered by replay.
    pub replayed_batches: u64,
    /// Batches neither received nor recovered.
    pub lost_batches: u64,
    /// Times the sequence went backwards (the publisher restarted).
    pub restarts: u64,
    /// Sink (policy) calls that failed.
    pub policy_errors: u64,
}

impl KvEventMetrics {
    /// Every counter, read now (each on its own: see the module doc).
    pub fn counts(&self) -> KvEventCounts {
        KvEventCounts {
            batches: get(&self.batches),
            events: get(&self.events),
            blocks_forwarded: get(&self.blocks_forwarded),
            malformed: get(&self.malformed),
            duplicates: get(&self.duplicates),
            gaps: get(&self.gaps),
            replays: get(&self.replays),
            replayed_batches: get(&self.replayed_batches),
            lost_batches: get(&self.lost_batches),
            restarts: get(&self.restarts),
            policy_errors: get(&self.policy_errors),
        }
    }
}

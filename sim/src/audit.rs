//! Where a policy's misses come from: every eviction of a replay, what the evicted block held, and
//! whether a later request asked for that content again.
//!
//! An eviction whose content is asked for again is a *regretted* eviction: the request recomputes
//! the block. Bélády's optimum regrets the fewest blocks it can; comparing a policy's regrets with
//! Bélády's, by kind of content and by agent, says which decisions cost the policy its hit rate —
//! the question every eviction change answers first. The audit wraps any [`SimPolicy`] and leaves
//! its decisions untouched.

use std::collections::{BTreeMap, HashSet};
use std::io::Write;

use agentrt_runtime::types::{BlockOp, Event, SideEffect};
use serde::Serialize;

use crate::block_pool::{Block, BlockId, BlockPool, FastMap, PoolObserver};
use crate::policies::{PolicyStats, SimPolicy};
use crate::prepare::PreparedTrace;

/// What an evicted block held (the same classes CacheSage scores differently).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Content {
    /// Part of an agent's anchor (system prompt + tool definitions).
    Anchor,
    /// Hit by requests of more than one session (`session == 0` in the pool).
    Shared,
    /// One session's own history.
    Session,
}

impl Content {
    pub const ALL: [Content; 3] = [Content::Anchor, Content::Shared, Content::Session];

    pub fn name(self) -> &'static str {
        match self {
            Content::Anchor => "anchor",
            Content::Shared => "shared",
            Content::Session => "session",
        }
    }
}

/// One eviction.
#[derive(Debug, Clone, Serialize)]
pub struct Eviction {
    /// Simulated time of the scheduler step that evicted it (µs).
    pub at_us: u64,
    pub hash: u64,
    /// The agent whose request stored the block (the trace's agent index + 1; 0 = none).
    pub agent: u32,
    /// Session id, 0 for shared content.
    pub session: u64,
    /// Token offset of the block in its prompt.
    pub position: u32,
    pub content: Content,
    /// When a trace request next asked for this content (µs), if one did.
    pub requested_again_us: Option<u64>,
}

/// Every eviction of one replay.
#[derive(Debug, Clone, Default)]
pub struct EvictionAudit {
    pub policy: String,
    pub block_size: u32,
    pub evictions: Vec<Eviction>,
}

/// Evictions and regrets of one group (a kind of content, or an agent).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Tally {
    pub evicted: u64,
    pub regretted: u64,
}

/// An audit's figures for `sim run --json` (each policy's `regret`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RegretSummary {
    pub evicted: u64,
    pub regretted_blocks: u64,
    pub regretted_tokens: u64,
    /// By kind of content: `anchor`, `shared`, `session`.
    pub by_content: BTreeMap<&'static str, Tally>,
    pub median_regret_gap_ms: Option<f64>,
}

impl EvictionAudit {
    pub fn summary(&self) -> RegretSummary {
        RegretSummary {
            evicted: self.evictions.len() as u64,
            regretted_blocks: self.regretted(),
            regretted_tokens: self.regretted_tokens(),
            by_content: self.by_content().into_iter().map(|(c, t)| (c.name(), t)).collect(),
            median_regret_gap_ms: self.median_regret_gap_us().map(|us| us as f64 / 1000.0),
        }
    }

    /// Blocks asked for again after their eviction.
    pub fn regretted(&self) -> u64 {
        self.evictions.iter().filter(|e| e.requested_again_us.is_some()).count() as u64
    }

    /// Prompt tokens recomputed because of regretted evictions.
    pub fn regretted_tokens(&self) -> u64 {
        self.regretted() * u64::from(self.block_size)
    }

    pub fn by_content(&self) -> BTreeMap<Content, Tally> {
        self.tally(|e| e.content)
    }

    pub fn by_agent(&self) -> BTreeMap<u32, Tally> {
        self.tally(|e| e.agent)
    }

    fn tally<K: Ord>(&self, key: impl Fn(&Eviction) -> K) -> BTreeMap<K, Tally> {
        let mut out: BTreeMap<K, Tally> = BTreeMap::new();
        for e in &self.evictions {
            let t = out.entry(key(e)).or_default();
            t.evicted += 1;
            t.regretted += u64::from(e.requested_again_us.is_some());
        }
        out
    }

    /// Median time from a regretted eviction to the request that wanted the block back (µs).
    pub fn median_regret_gap_us(&self) -> Option<u64> {
        let mut gaps: Vec<u64> = self
            .evictions
            .iter()
            .filter_map(|e| e.requested_again_us.map(|t| t - e.at_us))
            .collect();
        if gaps.is_empty() {
            return None;
        }
        let mid = gaps.len() / 2;
        Some(*gaps.select_nth_unstable(mid).1)
    }

    /// One JSON object per eviction, each naming the policy and the agent.
    pub fn write_jsonl(&self, trace: &PreparedTrace, out: &mut dyn Write) -> std::io::Result<()> {
        #[derive(Serialize)]
        struct Line<'a> {
            policy: &'a str,
            agent_name: Option<&'a str>,
            #[serde(flatten)]
            eviction: &'a Eviction,
        }
        for e in &self.evictions {
            let line = Line {
                policy: &self.policy,
                agent_name: trace.agent(e.agent).map(|a| a.name.as_str()),
                eviction: e,
            };
            serde_json::to_writer(&mut *out, &line)?;
            out.write_all(b"\n")?;
        }
        Ok(())
    }
}

/// A [`SimPolicy`] that records every eviction and every re-request of evicted content, and
/// otherwise forwards everything to `inner`.
pub struct Audited<'p> {
    inner: &'p mut dyn SimPolicy,
    anchor_blocks: HashSet<u64>,
    now_us: u64,
    audit: EvictionAudit,
    /// hash → index of its latest eviction not yet asked for again.
    open: FastMap<usize>,
}

impl<'p> Audited<'p> {
    pub fn new(inner: &'p mut dyn SimPolicy, trace: &PreparedTrace) -> Self {
        let audit = EvictionAudit {
            policy: inner.name().to_string(),
            block_size: trace.block_size as u32,
            evictions: Vec::new(),
        };
        Self {
            inner,
            anchor_blocks: trace
                .agents
                .iter()
                .flat_map(|a| a.anchor_blocks.iter().copied())
                .collect(),
            now_us: 0,
            audit,
            open: FastMap::default(),
        }
    }

    pub fn into_audit(self) -> EvictionAudit {
        self.audit
    }

    fn content(&self, block: &Block) -> Content {
        if self.anchor_blocks.contains(&block.hash) {
            Content::Anchor
        } else if block.session == 0 {
            Content::Shared
        } else {
            Content::Session
        }
    }
}

impl PoolObserver for Audited<'_> {
    fn block_event(&mut self, op: BlockOp, block: &Block) {
        if op == BlockOp::Removed {
            // A later copy of the same hash supersedes an earlier record: the content is gone
            // only once its last copy is.
            self.open.insert(block.hash, self.audit.evictions.len());
            self.audit.evictions.push(Eviction {
                at_us: self.now_us,
                hash: block.hash,
                agent: block.agent,
                session: block.session,
                position: block.position,
                content: self.content(block),
                requested_again_us: None,
            });
        }
        self.inner.block_event(op, block);
    }

    fn freed(&mut self, pool: &BlockPool, block: BlockId) {
        self.inner.freed(pool, block);
    }

    fn victim(&mut self, pool: &BlockPool) -> Option<BlockId> {
        self.inner.victim(pool)
    }

    fn consumed(&mut self, block: BlockId) {
        self.inner.consumed(block);
    }

    fn may_take(&self, pool: &BlockPool, agent: u32, blocks: usize) -> bool {
        self.inner.may_take(pool, agent, blocks)
    }
}

impl crate::offload::ranked::HostRanker for Audited<'_> {
    fn host_scores(&mut self, blocks: &[crate::offload::ranked::HostBlock]) -> Option<Vec<f32>> {
        self.inner.host_scores(blocks)
    }
    fn host_window(&self, n: usize) -> usize {
        self.inner.host_window(n)
    }
}

impl SimPolicy for Audited<'_> {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn host_block_event(
        &mut self,
        op: crate::offload::host_pool::TierOp,
        key: u64,
        owner: crate::offload::ranked::BlockOwner,
    ) {
        self.inner.host_block_event(op, key, owner);
    }

    fn event(&mut self, event: Event) {
        self.inner.event(event);
    }

    fn admitted(&mut self, pool: &BlockPool, uid: u32, hashes: &[u64], hit_blocks: usize) {
        // Blocks past the hit that were evicted earlier: this request recomputes them.
        for h in &hashes[hit_blocks.min(hashes.len())..] {
            if let Some(i) = self.open.remove(h) {
                self.audit.evictions[i].requested_again_us = Some(self.now_us);
            }
        }
        self.inner.admitted(pool, uid, hashes, hit_blocks);
    }

    fn begin_step(&mut self, now_us: u64) {
        self.now_us = now_us;
        self.inner.begin_step(now_us);
    }

    fn act(&mut self) -> Vec<SideEffect> {
        self.inner.act()
    }

    fn sample_state(&mut self) {
        self.inner.sample_state();
    }

    fn stats(&self) -> PolicyStats {
        self.inner.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policies::NativeLru;
    use crate::trace::Trace;

    /// Two sessions of agent `a`, whose anchor is one 16-token block.
    fn trace() -> PreparedTrace {
        let text = r#"{"session": "s1", "agent": "a", "after_ms": 0, "prompt": [{"seg": "sys/a", "tokens": 16}, {"seg": "s1/q", "tokens": 32}], "output_tokens": 4}
{"session": "s2", "agent": "a", "after_ms": 0, "prompt": [{"seg": "sys/a", "tokens": 16}, {"seg": "s2/q", "tokens": 32}], "output_tokens": 4}"#;
        PreparedTrace::new(&Trace::parse(text).unwrap(), 16, false)
    }

    fn block(hash: u64, session: u64) -> Block {
        let mut pool = BlockPool::new(2);
        let id = pool.allocate(1, &mut NativeLru)[0];
        pool.cache_block(id, hash, 0, 0, 1, session, &mut NativeLru);
        pool.block(id).clone()
    }

    #[test]
    fn an_eviction_is_regretted_when_a_later_request_misses_its_content() {
        let trace = trace();
        let [anchor, s1_first, s1_second] = trace.requests[0].prompt.hashes[..] else {
            panic!("three blocks")
        };
        let pool = BlockPool::new(2);
        let mut lru = NativeLru;
        let mut audited = Audited::new(&mut lru, &trace);
        audited.begin_step(1_000);
        audited.block_event(BlockOp::Removed, &block(anchor, 1));
        audited.block_event(BlockOp::Removed, &block(s1_first, 1));
        audited.block_event(BlockOp::Removed, &block(s1_second, 0));
        audited.begin_step(5_000);
        // s2 hits nothing and needs the anchor back; s1's blocks are not in its prompt.
        audited.admitted(&pool, 1, &trace.requests[1].prompt.hashes, 0);
        // Content stored again in between (by a warm-up, say) and hit is not a regret.
        audited.admitted(&pool, 0, &trace.requests[0].prompt.hashes, 2);
        let audit = audited.into_audit();

        let contents: Vec<Content> = audit.evictions.iter().map(|e| e.content).collect();
        assert_eq!(contents, [Content::Anchor, Content::Session, Content::Shared]);
        let regrets: Vec<Option<u64>> = audit.evictions.iter().map(|e| e.requested_again_us).collect();
        assert_eq!(regrets, [Some(5_000), None, Some(5_000)]);
        assert_eq!(audit.regretted_tokens(), 32);
        assert_eq!(audit.median_regret_gap_us(), Some(4_000));
        assert_eq!(
            audit.by_content()[&Content::Session],
            Tally {
                evicted: 1,
                regretted: 0
            }
        );

        let mut jsonl = Vec::new();
        audit.write_jsonl(&trace, &mut jsonl).unwrap();
        let first: serde_json::Value = serde_json::from_slice(jsonl.split(|&b| b == b'\n').next().unwrap()).unwrap();
        assert_eq!(first["policy"], "lru-native");
        assert_eq!(first["content"], "anchor");
        assert_eq!(first["requested_again_us"], 5_000);
    }

    #[test]
    fn only_the_latest_eviction_of_a_hash_is_regretted() {
        let trace = trace();
        let anchor = trace.requests[0].prompt.hashes[0];
        let pool = BlockPool::new(2);
        let mut lru = NativeLru;
        let mut audited = Audited::new(&mut lru, &trace);
        audited.block_event(BlockOp::Removed, &block(anchor, 1));
        audited.begin_step(10);
        audited.admitted(&pool, 0, &[anchor], 0);
        audited.begin_step(20);
        audited.block_event(BlockOp::Removed, &block(anchor, 1));
        audited.begin_step(30);
        audited.admitted(&pool, 1, &[anchor], 0);
        let gaps: Vec<Option<u64>> = audited
            .into_audit()
            .evictions
            .iter()
            .map(|e| e.requested_again_us)
            .collect();
        assert_eq!(gaps, [Some(10), Some(30)]);
    }
}

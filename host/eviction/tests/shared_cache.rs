//! Cache shares through the eviction service over a real Unix socket: each tenant's own policy
//! component ranks its own blocks, and the tenant past its share gives up blocks first.

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use agentrt_eviction::wire::Request;
use agentrt_eviction::{EvictionService, SharedCache, TenantDirectory};
use agentrt_runtime::{PolicyHandle, Share};
use agentrt_tests::{engine, start, PROBE_LOOP_KEY};
use common::{item, socket_path, Plugin};

/// Agents 1–9 are alpha's, 10–19 beta's; each tenant runs its own policy instance.
struct Directory {
    policies: HashMap<&'static str, Arc<PolicyHandle>>,
}

impl TenantDirectory for Directory {
    fn tenant_of(&self, handle: u32) -> Option<Arc<str>> {
        match handle {
            1..=9 => Some("alpha".into()),
            10..=19 => Some("beta".into()),
            _ => None,
        }
    }
    fn policy_of(&self, tenant: &str) -> Option<Arc<PolicyHandle>> {
        self.policies.get(tenant).cloned()
    }
}

fn block_event(op: agentrt_sdk::BlockOp, agent: u32, block_hash: u64, parent_hash: u64) -> Vec<u64> {
    let mut words = Vec::new();
    agentrt_sdk::packed::encode(
        &agentrt_sdk::BlockEvent {
            op,
            agent,
            block_hash,
            parent_hash,
            position: 0,
            tier: agentrt_sdk::Tier::Gpu,
        },
        &mut words,
    );
    words
}

fn stored(agent: u32, block_hash: u64) -> Vec<u64> {
    block_event(agentrt_sdk::BlockOp::Stored, agent, block_hash, 0)
}

/// The service over two tenants' policies, and a plugin connected to it.
struct Setup {
    plugin: Plugin,
    alpha: Arc<PolicyHandle>,
    beta: Arc<PolicyHandle>,
    cache: Arc<SharedCache>,
    _service: EvictionService,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

async fn setup(alpha: &str, beta: &str, shares: &[(&str, Share)]) -> Setup {
    let (engine, cache) = engine();
    let dir = tempfile::tempdir().unwrap();
    let (alpha, beta) = (
        Arc::new(start(&engine, alpha, &[])),
        Arc::new(start(&engine, beta, &[])),
    );
    let directory = Directory {
        policies: [("alpha", alpha.clone()), ("beta", beta.clone())].into_iter().collect(),
    };
    let shares = shares.iter().map(|(t, s)| (t.to_string(), *s)).collect();
    let ranker = Arc::new(SharedCache::new(Arc::new(directory), "default", shares));
    let service = EvictionService::bind(socket_path(&dir), ranker.clone()).unwrap();
    Setup {
        plugin: Plugin::connect(&service).await,
        alpha,
        beta,
        cache: ranker,
        _service: service,
        _dirs: (dir, cache),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tenant_above_its_guarantee_gives_up_blocks_first_in_its_own_order() {
    let guarantee = Share {
        min_blocks: 3,
        max_blocks: u64::MAX,
    };
    let mut s = setup("lru", "lru", &[("alpha", guarantee)]).await;
    // Alpha holds 3 blocks (its guarantee), beta 4: both stored through the plugin's events.
    let mut words = Vec::new();
    for (agent, hash) in [(1, 100), (1, 101), (2, 102), (10, 200), (10, 201), (11, 202), (11, 203)] {
        words.extend(stored(agent, hash));
    }
    s.plugin.send(&Request::Blocks(words)).await;
    // Alpha's blocks are the oldest of all: one LRU over every block would evict them first.
    let items = vec![
        item(100, 1, 10),
        item(101, 1, 20),
        item(102, 2, 30),
        item(200, 10, 40),
        item(201, 10, 60),
        item(202, 11, 50),
        item(203, 11, 70),
    ];
    let (fallback, evict_first) = s.plugin.rank(1, 7, items).await;
    assert!(!fallback);
    assert_eq!(
        evict_first,
        vec![3, 5, 4, 6, 0, 1, 2],
        "beta (4 above a zero guarantee) goes first, oldest first; alpha, at its guarantee, last"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_whose_policy_fails_falls_back_to_lru_for_its_own_blocks_only() {
    // Beta's policy loops on this key (the probe fixture); alpha's scores by key (probe too, but
    // told nothing to make it fail), so alpha's order is its policy's, not LRU's.
    let mut s = setup("probe", "probe", &[]).await;
    let items = vec![
        item(5, 1, 30),
        item(9, 1, 10),
        item(7, 1, 20),
        item(PROBE_LOOP_KEY, 10, 50),
        item(300, 10, 40),
    ];
    let (fallback, evict_first) = s.plugin.rank(1, 5, items).await;
    assert!(fallback, "beta's ranking fell back");
    let alpha: Vec<u32> = evict_first.iter().copied().filter(|&i| i < 3).collect();
    let beta: Vec<u32> = evict_first.iter().copied().filter(|&i| i >= 3).collect();
    assert_eq!(
        alpha,
        vec![0, 2, 1],
        "alpha: its policy's order (lowest score, key 5, first)"
    );
    assert_eq!(beta, vec![4, 3], "beta: LRU over its own blocks");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_tenants_policy_hears_only_its_own_blocks() {
    let mut s = setup("probe", "probe", &[]).await;
    let mut words = Vec::new();
    for (agent, hash) in [(1, 100), (2, 101), (10, 200)] {
        words.extend(stored(agent, hash));
    }
    s.plugin.send(&Request::Blocks(words)).await;
    // A rank round trip: the service has handled the frame before it answers the next one.
    s.plugin.rank(1, 1, vec![item(100, 1, 1)]).await;
    let (a, b) = (
        common::probe_seen(&s.alpha.snapshot().unwrap()),
        common::probe_seen(&s.beta.snapshot().unwrap()),
    );
    assert_eq!((a.blocks[0], a.block_hash_sum), (2, 201), "alpha: its two blocks");
    assert_eq!((b.blocks[0], b.block_hash_sum), (1, 200), "beta: its one block");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_tenants_blocks_and_evictions_are_counted() {
    let (engine, _cache) = engine();
    let alpha = Arc::new(start(&engine, "lru", &[]));
    let directory = Directory {
        policies: [("alpha", alpha)].into_iter().collect(),
    };
    let cache = SharedCache::new(Arc::new(directory), "default", HashMap::new());
    let mut words = Vec::new();
    for (agent, hash) in [(1, 100), (1, 101), (10, 200), (99, 300)] {
        words.extend(stored(agent, hash));
    }
    words.extend(removed(1, 100, 0));
    agentrt_eviction::EngineRanker::observe_blocks(&cache, &words).unwrap();
    let figures: Vec<(String, u64, u64)> = cache
        .tenants()
        .into_iter()
        .map(|(t, c, _)| (t.to_string(), c.blocks, c.evicted))
        .collect();
    assert_eq!(
        figures,
        [
            ("alpha".to_string(), 1, 1),
            ("beta".to_string(), 1, 0),
            // An agent no tenant named: the default tenant's.
            ("default".to_string(), 1, 0),
        ]
    );
}

/// A removal as the plugin sends it: the evicting request's agent in the third word.
fn removed(agent: u32, block_hash: u64, evictor: u32) -> Vec<u64> {
    block_event(agentrt_sdk::BlockOp::Removed, agent, block_hash, u64::from(evictor))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evictions_are_counted_against_the_tenant_that_suffered_and_the_tenant_that_caused_them() {
    let mut s = setup("lru", "lru", &[]).await;
    let mut words = Vec::new();
    for (agent, hash) in [(1, 100), (1, 101), (10, 200)] {
        words.extend(stored(agent, hash));
    }
    // Beta's request (agent 11) evicts two of alpha's blocks; alpha's own request (agent 2)
    // evicts beta's; a removal outside any request (evictor 0) is nobody's doing.
    words.extend(removed(1, 100, 11));
    words.extend(removed(1, 101, 11));
    words.extend(removed(10, 200, 2));
    words.extend(stored(10, 201));
    words.extend(removed(10, 201, 0));
    s.plugin.send(&Request::Blocks(words)).await;
    s.plugin.rank(1, 1, vec![item(999, 1, 1)]).await;
    let figures: Vec<(String, u64, u64, u64)> = s
        .cache
        .tenants()
        .into_iter()
        .map(|(t, c, _)| (t.to_string(), c.blocks, c.evicted, c.caused))
        .collect();
    assert_eq!(
        figures,
        [("alpha".to_string(), 0, 2, 1), ("beta".to_string(), 0, 2, 2)],
        "(tenant, blocks, evicted, caused)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_tier_is_outside_the_shares_each_owner_ranks_its_own_merged_by_recency() {
    let guarantee = Share {
        min_blocks: 3,
        max_blocks: u64::MAX,
    };
    let mut s = setup("probe", "probe", &[("alpha", guarantee)]).await;
    // Copies reaching host memory are no tenant's GPU blocks.
    let mut words = Vec::new();
    for (agent, hash) in [(1, 50), (1, 10), (10, 300), (10, 5)] {
        let mut event = stored(agent, hash);
        event[0] |= 1 << 4; // tier ordinal 1: host
        words.extend(event);
    }
    s.plugin.send(&Request::Blocks(words)).await;
    let host = |hash, agent, last| agentrt_eviction::wire::WireItem {
        tier: agentrt_runtime::types::Tier::Host,
        ..item(hash, agent, last)
    };
    // Each policy (probe: lowest key first): alpha's says 10 before 50, beta's 5 before 300.
    let items = vec![host(50, 1, 40), host(10, 1, 90), host(300, 10, 20), host(5, 10, 60)];
    s.plugin
        .send(&Request::Rank {
            request_id: 1,
            want: 4,
            missed: 0,
            items,
        })
        .await;
    let agentrt_eviction::wire::Reply::Ranked {
        fallback,
        evict_first,
        declined,
        ..
    } = s.plugin.recv().await
    else {
        panic!("expected RANKED");
    };
    assert!(!fallback);
    // The owners' queues merged by the recency of their heads: beta's 5 (60) before alpha's 10
    // (90); then beta's 300 (20), alpha's 10, alpha's 50 — each owner's own order kept, and no
    // share puts alpha's guarantee in the way.
    assert_eq!(evict_first, vec![3, 2, 1, 0]);
    assert_eq!(declined, Some(vec![]));
    let held: u64 = s.cache.tenants().iter().map(|(_, c, _)| c.blocks).sum();
    assert_eq!(held, 0, "host-tier copies are not counted as GPU blocks");
    let (alpha, beta) = (
        common::probe_seen(&s.alpha.snapshot().unwrap()),
        common::probe_seen(&s.beta.snapshot().unwrap()),
    );
    assert_eq!(alpha.blocks[0], 2, "alpha's policy heard its own two host-tier stores");
    assert_eq!(beta.block_hash_sum, 305, "beta's heard its own");
}

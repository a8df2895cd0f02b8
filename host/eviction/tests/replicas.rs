//! Several replicas' plugins, each on an eviction socket of its own, into one policy view
//! ([`ReplicaView`]), over real Unix sockets: the same content on two replicas is two blocks to
//! the policy, a ranking asked by one replica involves only its candidates, and cache shares are
//! counted per replica.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use agentrt_eviction::kv_events::{decode_batch, pack_event};
use agentrt_eviction::replica_view::{fold, replica_salt};
use agentrt_eviction::wire::Request;
use agentrt_eviction::{
    AnchorEvents, EngineRanker, EvictionService, Forward, KvEventSubscriber, KvEventsConfig, ReplicaView, SharedCache,
    SocketMode, TenantDirectory,
};
use agentrt_runtime::{PolicyHandle, Share};
use agentrt_sdk::{BlockEvent, BlockOp};
use agentrt_tests::{engine, start};
use common::{item, Plugin};

const A: u64 = 0x1a;
const B: u64 = 0x2b;

fn event(op: BlockOp, agent: u32, block_hash: u64, parent_hash: u64, position: u32) -> Vec<u64> {
    let mut words = Vec::new();
    agentrt_sdk::packed::encode(
        &BlockEvent {
            op,
            agent,
            block_hash,
            parent_hash,
            position,
            tier: agentrt_sdk::Tier::Gpu,
        },
        &mut words,
    );
    words
}

fn stored(agent: u32, hash: u64) -> Vec<u64> {
    event(BlockOp::Stored, agent, hash, 0, 0)
}

/// Where agents' prompt-start blocks came and went, as the proxy would hear it.
#[derive(Default)]
struct Anchors(Mutex<Vec<(bool, u64, u32)>>);

impl AnchorEvents for Anchors {
    fn anchor_cached(&self, replica: u64, agent: u32) {
        self.0.lock().unwrap().push((true, replica, agent));
    }
    fn anchor_removed(&self, replica: u64, agent: u32) {
        self.0.lock().unwrap().push((false, replica, agent));
    }
}

/// Two replicas' eviction services over `inner`, and a plugin connected to each.
struct Two {
    a: Plugin,
    b: Plugin,
    views: [Arc<ReplicaView>; 2],
    anchors: Arc<Anchors>,
    _services: [EvictionService; 2],
    _dir: tempfile::TempDir,
}

async fn two_replicas(inner: Arc<dyn EngineRanker>) -> Two {
    let dir = tempfile::tempdir().unwrap();
    let anchors = Arc::new(Anchors::default());
    let view =
        |name: &str, id: u64| Arc::new(ReplicaView::new(name, id, inner.clone()).with_anchor_events(anchors.clone()));
    let views = [view("a", A), view("b", B)];
    let services = [
        EvictionService::bind(dir.path().join("a.sock"), views[0].clone()).unwrap(),
        EvictionService::bind(dir.path().join("b.sock"), views[1].clone()).unwrap(),
    ];
    Two {
        a: Plugin::connect(&services[0]).await,
        b: Plugin::connect(&services[1]).await,
        views,
        anchors,
        _services: services,
        _dir: dir,
    }
}

/// A rank round trip: the service has handled every earlier frame of this plugin.
async fn sync(plugin: &mut Plugin) {
    plugin.rank(99, 1, vec![item(1, 0, 1)]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_on_both_replicas_removed_from_one_stays_known_on_the_other() {
    let (engine, _cache) = engine();
    let policy = Arc::new(start(&engine, "probe", &[]));
    let mut t = two_replicas(policy.clone()).await;
    // The same prompt's first block (agent 3) on both replicas; then replica a evicts it.
    t.a.send(&Request::Blocks(stored(3, 500))).await;
    sync(&mut t.a).await;
    t.b.send(&Request::Blocks(stored(3, 500))).await;
    sync(&mut t.b).await;
    t.a.send(&Request::Blocks(event(BlockOp::Removed, 3, 500, 0, 0))).await;
    sync(&mut t.a).await;

    let (fa, fb) = (fold(500, replica_salt(A)), fold(500, replica_salt(B)));
    assert_ne!(fa, fb, "two replicas, two blocks");
    let seen = common::probe_seen(&policy.snapshot().unwrap());
    assert_eq!(
        seen.blocks,
        [2, 0, 1, 0],
        "stored twice (once per replica), removed once"
    );
    assert_eq!(
        seen.block_hash_sum,
        fa.wrapping_add(fb).wrapping_add(fa),
        "the removal named replica a's block, not b's"
    );
    assert_eq!(t.views[0].resident_blocks(), 0);
    assert_eq!(t.views[1].resident_blocks(), 1, "b still holds it");
    assert_eq!(
        *t.anchors.0.lock().unwrap(),
        vec![(true, A, 3), (true, B, 3), (false, A, 3)],
        "agent 3's anchor left a only"
    );

    // A clear on b is b's blocks' removal, not a clear of every replica's.
    t.a.send(&Request::Blocks(stored(4, 600))).await;
    sync(&mut t.a).await;
    t.b.send(&Request::Blocks(event(BlockOp::AllCleared, 0, 0, 0, 0))).await;
    sync(&mut t.b).await;
    let seen = common::probe_seen(&policy.snapshot().unwrap());
    assert_eq!(seen.blocks, [3, 0, 2, 0], "b's one block removed; no all-cleared");
    assert_eq!(
        seen.block_hash_sum,
        fa.wrapping_add(fb)
            .wrapping_add(fa)
            .wrapping_add(fold(600, replica_salt(A)))
            .wrapping_add(fb)
    );
    assert_eq!((t.views[0].resident_blocks(), t.views[1].resident_blocks()), (1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rank_from_one_replica_answers_its_candidates_in_the_policys_order() {
    let (engine, _cache) = engine();
    // The probe scores a block by its key: the policy's order shows which keys it was given.
    let policy = Arc::new(start(&engine, "probe", &[]));
    let mut t = two_replicas(policy.clone()).await;
    // Hashes that differ in their high bits (a score is an f32 of the key).
    let hashes: Vec<u64> = (1..=5_u64).map(|k| k.wrapping_mul(0x9e37_79b9_7f4a_7c15)).collect();
    let expected = |replica: u64| {
        let mut order: Vec<u32> = (0..hashes.len() as u32).collect();
        let key = |i: &u32| fold(hashes[*i as usize], replica_salt(replica)) as f32;
        order.sort_by(|x, y| key(x).total_cmp(&key(y)));
        order
    };
    assert_ne!(
        expected(A),
        expected(B),
        "the fixture's keys order differently per replica"
    );
    let items = || hashes.iter().map(|&h| item(h, 3, 1)).collect::<Vec<_>>();
    let (fallback, from_a) = t.a.rank(1, 5, items()).await;
    assert!(!fallback);
    assert_eq!(from_a, expected(A), "a's blocks, lowest score first");
    let (_, from_b) = t.b.rank(1, 5, items()).await;
    assert_eq!(from_b, expected(B));
}

/// Agents 1–9 are alpha's, 10–19 beta's.
struct Directory(HashMap<&'static str, Arc<PolicyHandle>>);

impl TenantDirectory for Directory {
    fn tenant_of(&self, handle: u32) -> Option<Arc<str>> {
        match handle {
            1..=9 => Some("alpha".into()),
            10..=19 => Some("beta".into()),
            _ => None,
        }
    }
    fn policy_of(&self, tenant: &str) -> Option<Arc<PolicyHandle>> {
        self.0.get(tenant).cloned()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shares_divide_each_replicas_cache_on_its_own() {
    let (engine, _cache) = engine();
    let directory = Directory(
        [
            ("alpha", Arc::new(start(&engine, "lru", &[]))),
            ("beta", Arc::new(start(&engine, "lru", &[]))),
        ]
        .into_iter()
        .collect(),
    );
    let guarantee = Share {
        min_blocks: 3,
        max_blocks: u64::MAX,
    };
    let shares = HashMap::from([("alpha".to_string(), guarantee)]);
    let cache = Arc::new(SharedCache::new(Arc::new(directory), "default", shares));
    let mut t = two_replicas(cache.clone()).await;
    // On a: alpha holds 3 blocks (its guarantee), beta 2. On b: alpha holds 5 more.
    let mut on_a = Vec::new();
    for (agent, hash) in [(1, 100), (1, 101), (1, 102), (10, 200), (10, 201)] {
        on_a.extend(stored(agent, hash));
    }
    t.a.send(&Request::Blocks(on_a)).await;
    let mut on_b = Vec::new();
    for hash in 300..305 {
        on_b.extend(stored(2, hash));
    }
    t.b.send(&Request::Blocks(on_b)).await;
    sync(&mut t.b).await;
    // Alpha's blocks on a are the oldest: LRU alone would evict them first, and counted over both
    // replicas (8 blocks, 5 above its guarantee) alpha would give first.
    let items = vec![
        item(100, 1, 10),
        item(101, 1, 20),
        item(102, 1, 30),
        item(200, 10, 40),
        item(201, 10, 50),
    ];
    let (fallback, evict_first) = t.a.rank(1, 5, items).await;
    assert!(!fallback);
    assert_eq!(
        evict_first,
        vec![3, 4, 0, 1, 2],
        "on a, alpha is at its guarantee: beta's blocks go first"
    );
    let totals: Vec<(String, u64)> = cache
        .tenants()
        .into_iter()
        .map(|(t, c, _)| (t.to_string(), c.blocks))
        .collect();
    assert_eq!(
        totals,
        [("alpha".to_string(), 8), ("beta".to_string(), 2)],
        "/metrics sums the replicas"
    );
}

/// Publish `payload` as batch 0 on `publisher` until `sub` has it (ZMQ's slow-joiner window drops
/// what is sent before the subscription is up; a repeat of the last batch is a duplicate).
async fn publish_until_received(publisher: &mut zeromq::PubSocket, sub: &KvEventSubscriber, payload: &[u8]) {
    use zeromq::{SocketSend, ZmqMessage};
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while sub.counts().batches == 0 {
        let frames = vec![
            bytes::Bytes::from_static(b"kv"),
            bytes::Bytes::copy_from_slice(&0u64.to_be_bytes()),
            bytes::Bytes::copy_from_slice(payload),
        ];
        publisher.send(ZmqMessage::try_from(frames).unwrap()).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(std::time::Instant::now() < deadline, "the subscriber never connected");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_kv_events_reach_one_policy_as_each_replicas_own_blocks() {
    use zeromq::Socket;
    let (engine, _cache) = engine();
    let policy = Arc::new(start(&engine, "probe", &[]));
    // The same batch, captured from a real vLLM, published by both replicas.
    let payload = &common::captured_batches()[0];
    let mut packed = Vec::new();
    for event in decode_batch(payload).unwrap().events {
        pack_event(&event, Forward::default(), &mut packed);
    }
    let events: Vec<BlockEvent> = agentrt_sdk::packed::decode(&packed).collect();
    assert!(!events.is_empty() && events.iter().all(|e| e.op != BlockOp::AllCleared));

    let mut views = Vec::new();
    for (name, id) in [("a", A), ("b", B)] {
        let view = Arc::new(ReplicaView::new(name, id, policy.clone()));
        let mut publisher = zeromq::PubSocket::new();
        let endpoint = publisher.bind("tcp://127.0.0.1:0").await.unwrap().to_string();
        let config = KvEventsConfig {
            endpoint,
            mode: SocketMode::Connect,
            replay_endpoint: None,
            topic: "kv".into(),
            replay_timeout: std::time::Duration::from_secs(1),
            forward: Forward::default(),
        };
        let sub = KvEventSubscriber::spawn(config, view.clone()).await.unwrap();
        publish_until_received(&mut publisher, &sub, payload).await;
        views.push((view, sub, publisher));
    }
    // The subscriber counts a batch just before it feeds the policy: wait for the policy.
    let stored = events.iter().filter(|e| e.op == BlockOp::Stored).count() as u64;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let seen = loop {
        let seen = common::probe_seen(&policy.snapshot().unwrap());
        if seen.blocks[0] >= 2 * stored || std::time::Instant::now() > deadline {
            break seen;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(seen.blocks[0], 2 * stored, "each replica's stores, apart");
    let folded_sum = |replica: u64| {
        events.iter().fold(0u64, |sum, e| {
            sum.wrapping_add(fold(e.block_hash, replica_salt(replica)))
        })
    };
    assert_eq!(seen.block_hash_sum, folded_sum(A).wrapping_add(folded_sum(B)));
    assert_eq!(views[0].0.resident_blocks(), views[1].0.resident_blocks());
    assert!(views[0].0.resident_blocks() > 0);
}

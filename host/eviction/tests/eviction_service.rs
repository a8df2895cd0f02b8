//! The eviction-ranking service over a real Unix socket, answering with real policy components
//! (`lru`, and the `probe` fixture for what the policy observed and for a policy that hangs).

mod common;

use std::sync::Arc;

use agentrt_eviction::wire::{self, Request};
use agentrt_eviction::EvictionService;
use agentrt_runtime::types::{Pin, SideEffect};
use agentrt_tests::{engine, start, PROBE_LOOP_KEY};
use common::{item, socket_path, Plugin};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lru_ranks_oldest_first_and_sees_the_plugins_blocks() {
    let (engine, _cache) = engine();
    let dir = tempfile::tempdir().unwrap();
    let policy = Arc::new(start(&engine, "lru", &[]));
    let service = EvictionService::bind(socket_path(&dir), policy.clone()).unwrap();
    let mut plugin = Plugin::connect(&service).await;
    plugin
        .send(&Request::Agent {
            wire_agent: wire::DEFINED_AGENT_BIT | 1,
            name: "planner".into(),
        })
        .await;
    let mut words = Vec::new();
    agentrt_sdk::packed::encode(
        &agentrt_sdk::BlockEvent {
            op: agentrt_sdk::BlockOp::Stored,
            agent: wire::DEFINED_AGENT_BIT | 1,
            block_hash: 10,
            parent_hash: 0,
            position: 0,
            tier: agentrt_sdk::Tier::Gpu,
        },
        &mut words,
    );
    plugin.send(&Request::Blocks(words)).await;
    let items = vec![
        item(10, wire::DEFINED_AGENT_BIT | 1, 50),
        item(11, 7, 5),
        item(12, 7, 90),
        item(13, 0, 20),
    ];
    let (fallback, evict_first) = plugin.rank(1, 4, items.clone()).await;
    assert!(!fallback);
    assert_eq!(evict_first, vec![1, 3, 0, 2], "least recently used first");
    let (_, two) = plugin.rank(2, 2, items).await;
    assert_eq!(two, vec![1, 3], "`want` caps the answer");
    let counts = service.counts();
    assert_eq!(counts.connections, 1);
    assert_eq!(counts.agents_defined, 1);
    assert_eq!(counts.block_events, 1);
    assert_eq!(counts.rank_requests, 2);
    assert_eq!(counts.rank_items, 8);
    assert_eq!(counts.malformed, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn block_events_reach_the_policy_with_resolved_agents() {
    let (engine, _cache) = engine();
    let dir = tempfile::tempdir().unwrap();
    let policy = Arc::new(start(&engine, "probe", &[]));
    let service = EvictionService::bind(socket_path(&dir), policy.clone()).unwrap();
    let mut plugin = Plugin::connect(&service).await;
    plugin
        .send(&Request::Agent {
            wire_agent: wire::DEFINED_AGENT_BIT | 1,
            name: "coder".into(),
        })
        .await;
    let mut words = Vec::new();
    for (op, hash) in [
        (agentrt_sdk::BlockOp::Stored, 100),
        (agentrt_sdk::BlockOp::Touched, 100),
        (agentrt_sdk::BlockOp::Removed, 100),
    ] {
        agentrt_sdk::packed::encode(
            &agentrt_sdk::BlockEvent {
                op,
                agent: wire::DEFINED_AGENT_BIT | 1,
                block_hash: hash,
                parent_hash: 0,
                position: 0,
                tier: agentrt_sdk::Tier::Gpu,
            },
            &mut words,
        );
    }
    plugin.send(&Request::Blocks(words)).await;
    // A RANK after the BLOCKS on the same connection is answered after they were observed.
    plugin.rank(1, 1, vec![item(1, 0, 1)]).await;
    let seen = common::probe_seen(&policy.snapshot().unwrap());
    assert_eq!(seen.blocks, [1, 1, 1, 0]);
    assert_eq!(seen.block_hash_sum, 300);
    assert_eq!(seen.agents.len(), 1, "the name was registered with the policy");
    let handle = seen.agents[0].0;
    assert!(handle >= 1 << 20, "stand-alone handles are kept apart from the proxy's");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pins_move_an_agents_blocks_to_the_keep_end() {
    let (engine, _cache) = engine();
    let dir = tempfile::tempdir().unwrap();
    let policy = Arc::new(start(&engine, "lru", &[]));
    let service = EvictionService::bind(socket_path(&dir), policy.clone()).unwrap();
    let pin = Pin {
        agent: 3,
        session: 0,
        ttl_ms: u32::MAX,
    };
    assert!(service.apply(&SideEffect::Pin(pin)));
    let mut plugin = Plugin::connect(&service).await;
    let items = vec![item(1, 3, 1), item(2, 4, 2), item(3, 3, 3), item(4, 4, 4)];
    let (_, evict_first) = plugin.rank(1, 4, items.clone()).await;
    assert_eq!(
        evict_first,
        vec![1, 3, 0, 2],
        "agent 3's blocks go last, LRU within each part"
    );
    assert!(service.apply(&SideEffect::Unpin(pin)));
    let (_, evict_first) = plugin.rank(2, 4, items).await;
    assert_eq!(evict_first, vec![0, 1, 2, 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_policy_is_answered_in_lru_order_and_flagged() {
    let (engine, _cache) = engine();
    let dir = tempfile::tempdir().unwrap();
    let policy = Arc::new(start(&engine, "probe", &[]));
    let service = EvictionService::bind(socket_path(&dir), policy.clone()).unwrap();
    let mut plugin = Plugin::connect(&service).await;
    // The probe's score never returns for this key: the host's CPU deadline stops it.
    let items = vec![item(PROBE_LOOP_KEY, 0, 9), item(2, 0, 1), item(3, 0, 5)];
    let (fallback, evict_first) = plugin.rank(1, 3, items).await;
    assert!(fallback);
    assert_eq!(evict_first, vec![1, 2, 0]);
    assert_eq!(service.counts().policy_fallbacks, 1);
    // The slot recovers for the next call.
    let (fallback, _) = plugin.rank(2, 1, vec![item(5, 0, 1)]).await;
    assert!(!fallback);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_input_closes_only_its_connection() {
    let (engine, _cache) = engine();
    let dir = tempfile::tempdir().unwrap();
    let policy = Arc::new(start(&engine, "lru", &[]));
    let service = EvictionService::bind(socket_path(&dir), policy.clone()).unwrap();
    let mut byte = [0u8; 1];
    // A frame of an unknown kind, a BLOCKS frame that is not whole events, a length prefix past
    // the limit: no plugin sends one, and what follows cannot be trusted, so each closes its
    // connection...
    let garbage: [&[u8]; 3] = [
        &[2, 0, 0, 0, 0x7f, 1],
        &[6, 0, 0, 0, wire::KIND_BLOCKS, 1, 2, 3, 4, 5],
        &u32::MAX.to_le_bytes(),
    ];
    for frame in garbage {
        let mut plugin = Plugin::connect(&service).await;
        let (_, order) = plugin.rank(1, 1, vec![item(1, 0, 1)]).await;
        assert_eq!(order, vec![0], "the connection answers before its garbage");
        plugin.stream.write_all(frame).await.unwrap();
        assert_eq!(plugin.stream.read(&mut byte).await.unwrap(), 0, "closed by the service");
    }
    assert_eq!(service.counts().malformed, 3);
    // ...and the service goes on.
    let mut again = Plugin::connect(&service).await;
    let (_, order) = again.rank(2, 1, vec![item(1, 0, 1)]).await;
    assert_eq!(order, vec![0]);
    assert_eq!(service.counts().connections, 4);
    // The service closes a connection before its task ends and uncounts it: wait for that.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while service.counts().open_connections > 1 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(
        service.counts().open_connections,
        1,
        "the closed ones no longer count as connected"
    );
    drop(again);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while service.counts().open_connections > 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(
        service.counts().open_connections,
        0,
        "a plugin that left is not connected"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_socket_file_is_replaced_on_bind_and_removed_on_drop() {
    let (engine, _cache) = engine();
    let dir = tempfile::tempdir().unwrap();
    let path = socket_path(&dir);
    // A socket nobody listens on, as a crashed host leaves it (anything else there is refused:
    // tests/hostile/eviction_socket.rs).
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let policy = Arc::new(start(&engine, "lru", &[]));
    let service = EvictionService::bind(&path, policy).unwrap();
    Plugin::connect(&service).await;
    drop(service);
    assert!(!path.exists());
}

/// `item` in the host-memory tier.
fn host_item(block_hash: u64, wire_agent: u32, last_access: u64) -> wire::WireItem {
    wire::WireItem {
        tier: agentrt_runtime::types::Tier::Host,
        ..item(block_hash, wire_agent, last_access)
    }
}

/// A RANK answered with its declined list.
async fn rank_host(
    plugin: &mut Plugin,
    request_id: u32,
    want: u32,
    items: Vec<wire::WireItem>,
) -> (Vec<u32>, Vec<u32>) {
    plugin
        .send(&Request::Rank {
            request_id,
            want,
            missed: 0,
            items,
        })
        .await;
    match plugin.recv().await {
        wire::Reply::Ranked {
            request_id: got,
            fallback,
            evict_first,
            declined,
        } => {
            assert_eq!(got, request_id);
            assert!(!fallback);
            (
                evict_first,
                declined.expect("a host-tier RANK is answered with its declined list"),
            )
        }
        other => panic!("expected RANKED, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_tier_candidates_are_ranked_by_the_policy_and_negative_scores_decline_stores() {
    let (engine, _cache) = engine();
    let dir = tempfile::tempdir().unwrap();
    // probe scores key + bias: keys below 100 score below zero.
    let policy = Arc::new(start(&engine, "probe", &[("bias", "-100")]));
    let service = EvictionService::bind(socket_path(&dir), policy).unwrap();
    let mut plugin = Plugin::connect(&service).await;
    // Recency says 300 (oldest) first; the policy says the lowest key first.
    let items = vec![
        host_item(300, 0, 1),
        host_item(20, 0, 9),
        host_item(150, 0, 5),
        host_item(60, 0, 7),
    ];
    let (evict_first, declined) = rank_host(&mut plugin, 1, 2, items.clone()).await;
    assert_eq!(evict_first, vec![1, 3], "the policy's order, not LRU's");
    assert_eq!(declined, vec![1, 3], "keys 20 and 60 score below zero");
    // Admission asks with want 0: no eviction order, only the declines.
    let (evict_first, declined) = rank_host(&mut plugin, 2, 0, items).await;
    assert!(evict_first.is_empty());
    assert_eq!(declined, vec![1, 3]);
    // GPU items on the same connection: no declined list, as protocol 1 had it.
    plugin
        .send(&Request::Rank {
            request_id: 3,
            want: 1,
            missed: 0,
            items: vec![item(20, 0, 1), item(300, 0, 2)],
        })
        .await;
    let wire::Reply::Ranked {
        evict_first, declined, ..
    } = plugin.recv().await
    else {
        panic!("expected RANKED");
    };
    assert_eq!((evict_first, declined), (vec![0], None));
    let counts = service.counts();
    assert_eq!(counts.host_tier_ranks, 2);
    assert_eq!(counts.host_tier_declined, 2, "counted in admission asks only");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_0_2_component_leaves_the_host_tier_in_lru_order_and_stores_everything() {
    let (engine, _cache) = engine();
    let dir = tempfile::tempdir().unwrap();
    assert!(
        !agentrt_tests::load(&engine, "contract-0-2")
            .contract_line()
            .knows_tiers(),
        "the contract-0-2 fixture is of the 0.2 line"
    );
    let policy = Arc::new(start(&engine, "contract-0-2", &[]));
    let service = EvictionService::bind(socket_path(&dir), policy).unwrap();
    let mut plugin = Plugin::connect(&service).await;
    let items = vec![host_item(300, 0, 5), host_item(20, 0, 9), host_item(150, 0, 1)];
    let (evict_first, declined) = rank_host(&mut plugin, 1, 3, items).await;
    assert_eq!(evict_first, vec![2, 0, 1], "least recently used first");
    assert!(declined.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pins_protect_gpu_residency_only() {
    let (engine, _cache) = engine();
    let dir = tempfile::tempdir().unwrap();
    let policy = Arc::new(start(&engine, "lru", &[]));
    let service = EvictionService::bind(socket_path(&dir), policy).unwrap();
    service.apply(&SideEffect::Pin(Pin {
        agent: 7,
        session: 0,
        ttl_ms: u32::MAX,
    }));
    let mut plugin = Plugin::connect(&service).await;
    let (gpu_fallback, gpu) = plugin.rank(1, 1, vec![item(1, 7, 1), item(2, 0, 9)]).await;
    assert!(!gpu_fallback);
    assert_eq!(gpu, vec![1], "the pinned agent's block is kept on the GPU");
    let (host, _) = rank_host(&mut plugin, 2, 1, vec![host_item(1, 7, 1), host_item(2, 0, 9)]).await;
    assert_eq!(host, vec![0], "the host pool keeps its own LRU order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hello_agrees_on_the_highest_protocol_both_speak() {
    let (engine, _cache) = engine();
    let dir = tempfile::tempdir().unwrap();
    let policy = Arc::new(start(&engine, "lru", &[]));
    let service = EvictionService::bind(socket_path(&dir), policy).unwrap();
    for (plugin_speaks, agreed) in [
        (1, 1),
        (wire::PROTOCOL_VERSION, wire::PROTOCOL_VERSION),
        (9, wire::PROTOCOL_VERSION),
    ] {
        let mut plugin = Plugin {
            stream: tokio::net::UnixStream::connect(service.path()).await.unwrap(),
        };
        plugin
            .send(&Request::Hello {
                protocol: plugin_speaks,
                engine_version: "0.32.0+cpu".into(),
            })
            .await;
        assert_eq!(
            plugin.recv().await,
            wire::Reply::HelloOk { protocol: agreed },
            "plugin {plugin_speaks}"
        );
    }
}

//! `agentrt serve` with several replicas (`--replica`), over real HTTP on loopback: the replicas
//! are stub upstreams (stand-ins for vLLM that record what they get and count tokens byte-wise),
//! the router is the real Dynamo selection service where installed (skipped, with the reason,
//! otherwise), or a listener that never answers (a router that hangs).

mod stub_upstream;
mod support;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use agentrt_eviction::wire::{self, Request};
use agentrt_router::testing::SelectionService;
use agentrt_runtime::types::{BlockEvent, BlockOp};
use agentrt_serve::engine::replicas::ReplicaArgs;
use serde_json::{json, Value};
use support::{metrics_text, post_json, settle, Proxy, Setup};

/// Two stub replicas, `a` and `b`, and a proxy in front of them with `args` (replicas filled in).
async fn two_replicas(mut args: ReplicaArgs) -> (Proxy, [stub_upstream::Stub; 2]) {
    let (url_a, a) = stub_upstream::start().await;
    let (url_b, b) = stub_upstream::start().await;
    args.replicas = vec![format!("a={url_a}"), format!("b={url_b}")];
    let proxy = Setup {
        replicas: args,
        ..Setup::new("lru")
    }
    .start()
    .await;
    (proxy, [a, b])
}

fn call(agent: &str, session: &str) -> (Value, [(&'static str, String); 1]) {
    let body = json!({"model": "tiny", "max_tokens": 4, "messages": [
        {"role": "system", "content": format!("You are the {agent}. Follow the plan step by step.")},
        {"role": "user", "content": format!("task of {session}")},
    ]});
    (body, [("x-session-id", session.to_string())])
}

async fn send(p: &Proxy, agent: &str, session: &str) -> reqwest::Response {
    let (body, [(name, value)]) = call(agent, session);
    post_json(p, &body, &[(name, value.as_str())]).await
}

/// session id (as the proxy sends it in `vllm_xargs`) → replicas that received its user requests.
fn sessions_by_replica(stubs: &[stub_upstream::Stub; 2]) -> HashMap<u64, HashSet<usize>> {
    let mut seen: HashMap<u64, HashSet<usize>> = HashMap::new();
    for (i, stub) in stubs.iter().enumerate() {
        for r in stub.user_requests() {
            seen.entry(r.body["vllm_xargs"]["agentrt_session"].as_u64().unwrap())
                .or_default()
                .insert(i);
        }
    }
    seen
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{name} is not in /metrics"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_router_each_session_sticks_to_one_replica_and_sessions_spread() {
    let (p, stubs) = two_replicas(ReplicaArgs::default()).await;
    for round in 0..2 {
        for s in 0..16 {
            let r = send(&p, "planner", &format!("session-{s}")).await;
            assert_eq!(r.status(), 200, "round {round}, session {s}");
        }
    }
    let seen = sessions_by_replica(&stubs);
    assert_eq!(seen.len(), 16);
    assert!(
        seen.values().all(|replicas| replicas.len() == 1),
        "a session on two replicas: {seen:?}"
    );
    assert!(
        stubs.iter().all(|s| !s.user_requests().is_empty()),
        "sessions spread over both replicas"
    );
    settle(&p).await;
    let text = metrics_text(&p).await;
    assert_eq!(metric(&text, "agentrt_router_fallback_total"), 32.0);
    assert_eq!(metric(&text, "agentrt_replica_in_flight{replica=\"a\"}"), 0.0);
    assert_eq!(metric(&text, "agentrt_replica_in_flight{replica=\"b\"}"), 0.0);
}

/// A router that accepts connections and never answers.
async fn hanging_router() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_router_fails_no_request() {
    let (p, _stubs) = two_replicas(ReplicaArgs {
        router: Some(hanging_router().await),
        router_deadline_ms: 100,
        router_retry_ms: 60_000,
        ..ReplicaArgs::default()
    })
    .await;
    let started = std::time::Instant::now();
    for s in 0..6 {
        assert_eq!(send(&p, "planner", &format!("s{s}")).await.status(), 200);
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "one deadline, not six: {:?}",
        started.elapsed()
    );
    let text = metrics_text(&p).await;
    assert_eq!(metric(&text, "agentrt_router_fallback_total"), 6.0);
    assert_eq!(
        metric(&text, "agentrt_router_deadlines_total"),
        1.0,
        "left alone after the first"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_refuses_the_connection_is_left_out_and_the_request_placed_again() {
    let (url_a, a) = stub_upstream::start().await;
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let p = Setup {
        replicas: ReplicaArgs {
            replicas: vec![format!("a={url_a}"), format!("b={dead}")],
            ..ReplicaArgs::default()
        },
        ..Setup::new("lru")
    }
    .start()
    .await;
    // Sessions the hash puts on the dead replica b included: nothing was sent to b, so every
    // request is placed again, on a, and no user sees the failure.
    for s in 0..16 {
        let r = send(&p, "planner", &format!("s{s}")).await;
        assert_eq!(r.status(), 200, "session s{s}: {}", r.text().await.unwrap());
    }
    assert_eq!(a.user_requests().len(), 16, "every request answered by a");
    let text = metrics_text(&p).await;
    assert_eq!(metric(&text, "agentrt_replica_failures_total"), 1.0);
    assert_eq!(
        metric(&text, "agentrt_replica_retried_total"),
        1.0,
        "once: b is left out after its first refusal"
    );
}

/// A replica that takes the connection, reads the request and closes without answering.
async fn replica_that_hangs_up() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        use tokio::io::AsyncReadExt;
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut buf = [0u8; 4096];
            let _ = socket.read(&mut buf).await;
        }
    });
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_a_replica_received_is_not_sent_again() {
    let (url_a, a) = stub_upstream::start().await;
    let p = Setup {
        replicas: ReplicaArgs {
            replicas: vec![format!("a={url_a}"), format!("b={}", replica_that_hangs_up().await)],
            ..ReplicaArgs::default()
        },
        ..Setup::new("lru")
    }
    .start()
    .await;
    let mut failed = 0;
    for s in 0..16 {
        let r = send(&p, "planner", &format!("s{s}")).await;
        if r.status() != 200 {
            assert_eq!(r.status(), 502);
            failed += 1;
            break;
        }
    }
    assert_eq!(failed, 1, "some session hashes to b, and its request fails");
    let text = metrics_text(&p).await;
    assert_eq!(metric(&text, "agentrt_replica_retried_total"), 0.0, "b had the request");
    assert_eq!(metric(&text, "agentrt_replica_failures_total"), 1.0);
    assert!(a.user_requests().len() < 16);
}

/// The vLLM plugin's side of one replica's eviction socket, enough to report block events.
struct Plugin(tokio::net::UnixStream);

impl Plugin {
    async fn connect(path: &std::path::Path) -> Self {
        let mut plugin = Self(tokio::net::UnixStream::connect(path).await.unwrap());
        plugin
            .send(&Request::Hello {
                protocol: wire::PROTOCOL_VERSION,
                engine_version: "0.32.0+cpu".into(),
            })
            .await;
        plugin.reply().await;
        plugin
    }

    async fn send(&mut self, request: &Request) {
        use tokio::io::AsyncWriteExt;
        let mut buf = Vec::new();
        wire::encode_request(request, &mut buf);
        self.0.write_all(&buf).await.unwrap();
    }

    async fn reply(&mut self) -> wire::Reply {
        use tokio::io::AsyncReadExt;
        let len = self.0.read_u32_le().await.unwrap() as usize;
        let mut body = vec![0; len];
        self.0.read_exact(&mut body).await.unwrap();
        wire::decode_reply(body[0], &body[1..]).unwrap()
    }

    /// Report one block event, and wait until the service has handled it (a rank round trip).
    async fn block(&mut self, op: BlockOp, agent: u32, hash: u64) {
        let mut words = Vec::new();
        agentrt_runtime::packed::encode(
            &BlockEvent {
                op,
                agent,
                block_hash: hash,
                parent_hash: 0,
                position: 0,
                tier: agentrt_runtime::types::Tier::Gpu,
            },
            &mut words,
        );
        self.send(&Request::Blocks(words)).await;
        self.send(&Request::Rank {
            request_id: 1,
            want: 1,
            missed: 0,
            items: vec![],
        })
        .await;
        self.reply().await;
    }
}

/// A call of the planner in `session`: which replica got it (the fallback hashes sessions and
/// ignores hints), and the planner's handle.
async fn planner_call(p: &Proxy, stubs: &[stub_upstream::Stub; 2], session: &str) -> (usize, u32) {
    let counts = || stubs.iter().map(|s| s.user_requests().len()).collect::<Vec<_>>();
    let before = counts();
    assert_eq!(send(p, "planner", session).await.status(), 200);
    let after = counts();
    let replica = (0..2).find(|&i| after[i] > before[i]).unwrap();
    let request = stubs[replica].user_requests().pop().unwrap();
    (
        replica,
        request.body["vllm_xargs"]["agentrt_agent"].as_u64().unwrap() as u32,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anchor_evicted_from_a_replica_is_no_longer_hinted_there() {
    let dir = tempfile::tempdir().unwrap();
    let args = ReplicaArgs {
        eviction_sockets: ["a", "b"]
            .iter()
            .map(|n| format!("{n}={}/{n}.sock", dir.path().display()))
            .collect(),
        ..ReplicaArgs::default()
    };
    // The app starts each replica's eviction socket itself, ranked by the engine tenant's policy.
    let (p, stubs) = two_replicas(args).await;
    let hinted = |text: &str| metric(text, "agentrt_router_hinted_total");
    let mut plugins = Vec::new();
    for path in p.app.engine().replica_sockets() {
        plugins.push(Plugin::connect(path).await);
    }
    let (first, agent) = planner_call(&p, &stubs, "s1").await;
    // That replica's plugin reports the planner's prompt-start block stored, then evicted.
    plugins[first].block(BlockOp::Stored, agent, 0xabc).await;
    plugins[first].block(BlockOp::Removed, agent, 0xabc).await;
    assert_eq!(
        metric(&metrics_text(&p).await, "agentrt_router_anchor_evictions_total"),
        1.0
    );
    let (second, _) = planner_call(&p, &stubs, "s2").await;
    assert_eq!(
        hinted(&metrics_text(&p).await),
        0.0,
        "within the 300 s an anchor is assumed cached, but evicted: no hint"
    );
    plugins[second].block(BlockOp::Stored, agent, 0xabc).await;
    plugins[second].block(BlockOp::Removed, agent, 0xabc).await;

    // Computed again on the first replica (a call of the agent stored it): hinted there again.
    plugins[first].block(BlockOp::Stored, agent, 0xabc).await;
    planner_call(&p, &stubs, "s3").await;
    let text = metrics_text(&p).await;
    assert_eq!(hinted(&text), 1.0);
    // Each replica's socket counts its own plugin's traffic.
    let name = ["a", "b"][first];
    assert_eq!(
        metric(
            &text,
            &format!("agentrt_replica_plugin_connections_total{{replica=\"{name}\"}}")
        ),
        1.0
    );
    let blocks = |n: &str| metric(&text, &format!("agentrt_replica_block_events_total{{replica=\"{n}\"}}"));
    let expected_first = if first == second { 5.0 } else { 3.0 };
    assert_eq!(blocks(name), expected_first, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ended_session_is_no_longer_hinted() {
    let (p, _stubs) = two_replicas(ReplicaArgs::default()).await;
    let hinted = |text: &str| metric(text, "agentrt_router_hinted_total");
    assert_eq!(send(&p, "planner", "s1").await.status(), 200);
    // Another agent of the same session: hinted to the session's replica.
    assert_eq!(send(&p, "coder", "s1").await.status(), 200);
    assert_eq!(hinted(&metrics_text(&p).await), 1.0);
    settle(&p).await;
    // The session is reported ended (idle); a new agent in it gets no hint from it.
    assert!(p.app.feed().end_idle_sessions(Duration::ZERO) >= 1);
    assert_eq!(send(&p, "writer", "s1").await.status(), 200);
    assert_eq!(hinted(&metrics_text(&p).await), 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_selection_service_the_router_places_requests_and_an_agent_keeps_its_replica() {
    let service = match SelectionService::start().await {
        Ok(service) => service,
        Err(reason) => {
            eprintln!("skipped: {reason}");
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let (p, stubs) = two_replicas(ReplicaArgs {
        router: Some(service.url.clone()),
        router_model: "tiny".into(),
        router_block_size: 16,
        router_deadline_ms: 2000,
        kv_events: ["a", "b"]
            .iter()
            .map(|n| format!("{n}=ipc://{}/kv-{n}", dir.path().display()))
            .collect(),
        ..ReplicaArgs::default()
    })
    .await;
    // Registration runs in the background: wait until the router places requests.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        assert_eq!(send(&p, "warm", "probe").await.status(), 200);
        if metric(&metrics_text(&p).await, "agentrt_router_routed_total") > 0.0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the router never placed a request"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // One agent over several sessions: the router sees no KV events from these stand-ins, so
    // only agentrt's hint (where the agent's anchor went) keeps the agent on one replica.
    for s in 0..6 {
        assert_eq!(send(&p, "researcher", &format!("task-{s}")).await.status(), 200);
    }
    let researcher: HashSet<usize> = stubs
        .iter()
        .enumerate()
        .filter(|(_, stub)| {
            stub.user_requests().iter().any(|r| {
                r.body["messages"][0]["content"]
                    .as_str()
                    .unwrap()
                    .contains("researcher")
            })
        })
        .map(|(i, _)| i)
        .collect();
    assert_eq!(researcher.len(), 1, "the agent's calls stayed on one replica");
    settle(&p).await;
    let text = metrics_text(&p).await;
    assert!(metric(&text, "agentrt_router_hinted_total") >= 5.0, "{text}");
    // Every booking was released: the router counts no request in flight.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let loads: Value = reqwest::get(format!("{}/loads", service.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let active: u64 = loads[0]["loads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["active_requests"].as_u64().unwrap())
        .sum();
    assert_eq!(active, 0, "{loads}");
}

//! The router client against the real Dynamo selection service (`python -m
//! dynamo.select_service` from `ai-dynamo-runtime` 1.6.1, installed by
//! `adapters/dynamo/setup-venv.sh`; these tests print why and return when it is missing —
//! `agentrt_router::testing`).
//!
//! The replicas' KV events are real ones: the msgpack batch a real vLLM published when it cached a
//! 512-token agent prompt (`host/eviction/tests/fixtures/vllm-0.32.0-cpu/0000.msgpack`), sent on the
//! replica's ZMQ endpoint with vLLM's three frames (topic, sequence, payload), so the service
//! sees the replica hold that prompt exactly as it would from vLLM.
//!
//! One stand-in, for a fault the real service cannot be made to show on cue: `HangingRouter`, a
//! TCP listener that accepts and never answers (a router that hangs).

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentrt_router::fallback::FallbackReason;
use agentrt_router::testing::SelectionService;
use agentrt_router::{
    Decider, FallbackRouter, Hints, Replica, ReplicaId, Replicas, RouteRequest, Router, RouterError, SelectionClient,
    SessionSticky,
};
use zeromq::{PubSocket, Socket, SocketSend, ZmqMessage};

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../eviction/tests/fixtures/vllm-0.32.0-cpu/0000.msgpack"
);

macro_rules! service_or_skip {
    () => {
        match SelectionService::start().await {
            Ok(service) => service,
            Err(reason) => {
                eprintln!("skipped: {reason}");
                return;
            }
        }
    };
}

/// Two replicas, `a` and `b`, each publishing KV events on an ipc endpoint in `dir`.
fn two_replicas(dir: &std::path::Path) -> Replicas {
    let mut replicas = Replicas::new(vec![
        Replica::parse("a=http://127.0.0.1:9").unwrap(),
        Replica::parse("b=http://127.0.0.1:10").unwrap(),
    ])
    .unwrap();
    for name in ["a", "b"] {
        replicas
            .set_kv_events(&format!("{name}=ipc://{}/kv-{name}", dir.display()))
            .unwrap();
    }
    replicas
}

/// The token ids of the prompt the fixture batch stores (512 tokens, 16 blocks of 32).
fn fixture_prompt() -> (Vec<u8>, Vec<u32>) {
    let payload = std::fs::read(FIXTURE).unwrap();
    let batch = rmpv::decode::read_value(&mut payload.as_slice()).unwrap();
    let event = &batch.as_array().unwrap()[1].as_array().unwrap()[0];
    let tokens = event
        .as_map()
        .unwrap()
        .iter()
        .find(|(k, _)| k.as_str() == Some("token_ids"))
        .unwrap()
        .1
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap() as u32)
        .collect();
    (payload, tokens)
}

/// Publish the fixture on `endpoint` (as vLLM: PUB bound, three frames) until the service says
/// `replica` holds the prompt's 16 blocks.
async fn replica_caches_the_fixture(client: &SelectionClient, endpoint: &str, replica: ReplicaId) -> PubSocket {
    let (payload, tokens) = fixture_prompt();
    let mut publisher = PubSocket::new();
    publisher.bind(endpoint).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    for seq in 0u64.. {
        let mut message = ZmqMessage::from(bytes::Bytes::from_static(b"kv"));
        message.push_back(bytes::Bytes::copy_from_slice(&seq.to_be_bytes()));
        message.push_back(bytes::Bytes::from(payload.clone()));
        publisher.send(message).await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let overlap = client.overlap(&tokens, None).await.unwrap();
        if overlap.get(&replica) == Some(&16) {
            return publisher;
        }
        assert!(
            Instant::now() < deadline,
            "the service never saw {replica}'s blocks: {overlap:?}"
        );
    }
    unreachable!()
}

fn request(tokens: &[u32], booking: &str) -> RouteRequest {
    RouteRequest {
        token_ids: tokens.to_vec(),
        session: Some("session-1".into()),
        expected_output_tokens: Some(8),
        booking_id: booking.into(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_routes_a_prompt_to_the_replica_holding_it_and_honours_hints() {
    let service = service_or_skip!();
    let dir = tempfile::tempdir().unwrap();
    let replicas = two_replicas(dir.path());
    let (a, b) = (ReplicaId::of_name("a"), ReplicaId::of_name("b"));
    let client = SelectionClient::new(&service.url, "tiny", replicas.clone(), Duration::from_secs(5));
    client.register(32, None).await.unwrap();
    let _publisher =
        replica_caches_the_fixture(&client, replicas.by_name("b").unwrap().kv_events.as_ref().unwrap(), b).await;

    // The agent's next call: its 512-token prompt plus a new user turn.
    let (_, mut tokens) = fixture_prompt();
    tokens.extend(100..140);
    let route = client.route(&request(&tokens, "call-1")).await.unwrap();
    assert_eq!(route.replica, b, "the replica holding the prompt");
    assert_eq!(route.cached_tokens, Some(512));
    assert_eq!(client.peek(&request(&tokens, "unused")).await.unwrap(), b);
    client.prefill_complete("call-1").await.unwrap();
    client.release("call-1").await.unwrap();
    let again = client.release("call-1").await.unwrap_err().to_string();
    assert!(
        again.contains("DELETE /reservations/call-1") && again.contains("404") && again.contains(&service.url),
        "{again}"
    );

    // agentrt's hint wins while its target is eligible; an unknown target is ignored.
    let mut hinted = request(&tokens, "call-2");
    hinted.hints = Hints {
        affinity: Some(a),
        allowed: None,
    };
    assert_eq!(client.route(&hinted).await.unwrap().replica, a);
    hinted.booking_id = "call-3".into();
    hinted.hints.affinity = Some(ReplicaId(12345));
    assert_eq!(client.route(&hinted).await.unwrap().replica, b);
    hinted.booking_id = "call-4".into();
    hinted.hints = Hints {
        affinity: None,
        allowed: Some(vec![a]),
    };
    assert_eq!(
        client.route(&hinted).await.unwrap().replica,
        a,
        "allowed_worker_ids is a hard limit"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_that_dies_degrades_to_session_hashing_and_errors_name_the_route() {
    let mut service = service_or_skip!();
    let dir = tempfile::tempdir().unwrap();
    let replicas = two_replicas(dir.path());
    let client = SelectionClient::new(&service.url, "tiny", replicas.clone(), Duration::from_secs(2));
    client.register(32, None).await.unwrap();

    let unknown_model = SelectionClient::new(&service.url, "no-such-model", replicas.clone(), Duration::from_secs(2));
    let error = unknown_model
        .route(&request(&[1; 64], "x"))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("POST /select_and_reserve") && error.contains("no-such-model"),
        "{error}"
    );

    let routing = FallbackRouter::new(
        Some(Arc::new(client)),
        SessionSticky::new(&replicas),
        Duration::from_millis(500),
        Duration::from_secs(60),
    );
    let routed = routing.route(&request(&[1; 64], "y")).await.unwrap();
    assert_eq!(routed.decided_by, Decider::Router);

    service.stop();
    let fallback = routing.route(&request(&[1; 64], "z")).await.unwrap();
    assert_eq!(fallback.decided_by, Decider::Fallback(FallbackReason::RouterError));
    assert_eq!(
        fallback.route.replica,
        SessionSticky::new(&replicas).choose(&request(&[1; 64], "z")).unwrap()
    );
    let resting = routing.route(&request(&[1; 64], "z")).await.unwrap();
    assert_eq!(resting.decided_by, Decider::Fallback(FallbackReason::RouterResting));
}

/// A stand-in for a router that hangs: accepts connections, never answers.
struct HangingRouter {
    url: String,
    _task: tokio::task::JoinHandle<()>,
}

impl HangingRouter {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                held.push(socket);
            }
        });
        Self { url, _task: task }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_router_costs_one_deadline_then_none_until_retried() {
    let hanging = HangingRouter::start().await;
    let replicas = two_replicas(std::path::Path::new("/nonexistent"));
    let client = SelectionClient::new(&hanging.url, "tiny", replicas.clone(), Duration::from_secs(30));
    let routing = FallbackRouter::new(
        Some(Arc::new(client)),
        SessionSticky::new(&replicas),
        Duration::from_millis(100),
        Duration::from_millis(400),
    );
    let started = Instant::now();
    let first = routing.route(&request(&[1; 64], "h1")).await.unwrap();
    assert_eq!(first.decided_by, Decider::Fallback(FallbackReason::Deadline));
    assert!(started.elapsed() < Duration::from_secs(1), "{:?}", started.elapsed());
    let started = Instant::now();
    let second = routing.route(&request(&[1; 64], "h2")).await.unwrap();
    assert_eq!(second.decided_by, Decider::Fallback(FallbackReason::RouterResting));
    assert!(
        started.elapsed() < Duration::from_millis(50),
        "no deadline while resting"
    );
    assert_eq!(second.route.replica, first.route.replica, "one session, one replica");
    tokio::time::sleep(Duration::from_millis(450)).await;
    let third = routing.route(&request(&[1; 64], "h3")).await.unwrap();
    assert_eq!(
        third.decided_by,
        Decider::Fallback(FallbackReason::Deadline),
        "asked again after the rest"
    );
    assert_eq!(
        routing
            .counters
            .router_deadlines
            .load(std::sync::atomic::Ordering::Relaxed),
        2
    );
}

#[tokio::test]
async fn registering_a_replica_without_kv_events_names_it_and_the_flag() {
    let replicas = Replicas::new(vec![Replica::parse("gpu0=http://127.0.0.1:9").unwrap()]).unwrap();
    let client = SelectionClient::new("http://127.0.0.1:9", "tiny", replicas, Duration::from_millis(200));
    let error = client.register(32, None).await.unwrap_err().to_string();
    assert!(
        error.contains("gpu0") && error.contains("--replica-kv-events gpu0=ENDPOINT"),
        "{error}"
    );
}

#[tokio::test]
async fn an_unreachable_router_is_named_with_its_url_and_route() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let replicas = two_replicas(std::path::Path::new("/nonexistent"));
    let client = SelectionClient::new(&url, "tiny", replicas, Duration::from_millis(500));
    let error = client.route(&request(&[1; 8], "u")).await.unwrap_err();
    assert!(matches!(error, RouterError::Unreachable { .. }), "{error:?}");
    let text = error.to_string();
    assert!(
        text.contains(&url) && text.contains("POST /select_and_reserve"),
        "{text}"
    );
}

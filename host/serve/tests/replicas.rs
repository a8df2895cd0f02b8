//! `agentrt serve` with several replicas (`--replica`), over real HTTP on loopback: the replicas
//! are stub upstreams (stand-ins for vLLM that record what they get and count tokens byte-wise),
//! the router is the real Dynamo selection service where installed (skipped, with the reason,
//! otherwise), or a listener that never answers (a router that hangs).

mod stub_upstream;
mod support;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use agentrt_router::testing::SelectionService;
use agentrt_serve::replicas::ReplicaArgs;
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
async fn a_replica_that_fails_is_left_out_and_the_next_request_goes_elsewhere() {
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
    // Find a session the hash puts on the dead replica: its first request fails, naming it.
    let mut failed_session = None;
    for s in 0..32 {
        let session = format!("s{s}");
        let r = send(&p, "planner", &session).await;
        if r.status() != 200 {
            assert_eq!(r.status(), 502);
            let text = r.text().await.unwrap();
            assert!(text.contains(&dead), "the error names the replica: {text}");
            failed_session = Some(session);
            break;
        }
    }
    let session = failed_session.expect("some session hashes to b");
    let r = send(&p, "planner", &session).await;
    assert_eq!(r.status(), 200, "b is left out: the session's next call goes to a");
    assert!(!a.user_requests().is_empty());
    assert_eq!(metric(&metrics_text(&p).await, "agentrt_replica_failures_total"), 1.0);
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

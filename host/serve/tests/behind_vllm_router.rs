//! `agentrt serve` in front of vLLM's router (`--upstream` = the router, `--upstream-router
//! vllm-router`), over real HTTP on loopback: the real `vllm-router` 0.1.17 from its venv
//! (skipped, with the reason, without it) in front of two stub workers (stand-ins for vLLM that
//! record what reaches them). What is checked is what the stack promises: the router keeps each
//! agentrt session on one worker from the identity agentrt hands it, and agentrt's own tags for
//! the engines (agent, session, cache salt) pass through the router untouched.

mod stub_upstream;
mod support;

use std::collections::{HashMap, HashSet};

use agentrt_router::testing::VllmRouter;
use agentrt_serve::engine::upstream_router::UpstreamRouter;
use serde_json::Value;
use support::{chat, post_json, Proxy, Setup};

/// Two stub workers behind vllm-router (`router_args`), and agentrt in front with `upstream_router`.
async fn stack(
    router_args: &[&str],
    upstream_router: UpstreamRouter,
) -> Option<(Proxy, [stub_upstream::Stub; 2], VllmRouter)> {
    let (url_a, a) = stub_upstream::start().await;
    let (url_b, b) = stub_upstream::start().await;
    let router = match VllmRouter::start(&[&url_a, &url_b], router_args).await {
        Ok(router) => router,
        Err(why) => {
            eprintln!("skipped: {why}");
            return None;
        }
    };
    let proxy = Setup {
        upstream: Some(router.url.clone()),
        upstream_router,
        keys: [("key-a", "alpha")].map(|(k, t)| (k.to_string(), t.to_string())).into(),
        ..Setup::new("lru")
    }
    .start()
    .await;
    Some((proxy, [a, b], router))
}

/// Whether every session stayed on one worker while the sessions used both: what a router that
/// can tell sessions apart does with [`SESSIONS`] of them. Where a session hashes to depends on
/// the workers' URLs (ports differ from run to run); all sixteen landing on one worker has a
/// chance of 2 in 65,536.
fn sticky_and_spread(placed: &HashMap<String, HashSet<usize>>) -> bool {
    let used: HashSet<usize> = placed.values().flatten().copied().collect();
    placed.values().all(|on| on.len() == 1) && used.len() == 2
}

/// Sessions each test runs.
const SESSIONS: usize = 16;

/// [`SESSIONS`] sessions of three calls each (a planner, a coder, the planner again), every call
/// a different prompt; returns each session's name → the workers its calls reached.
async fn run_sessions(proxy: &Proxy, workers: &[stub_upstream::Stub; 2]) -> HashMap<String, HashSet<usize>> {
    for session in (1..=SESSIONS).map(|i| format!("s{i}")) {
        let session = session.as_str();
        for (turn, agent) in ["planner", "coder", "planner"].into_iter().enumerate() {
            let body = chat(
                &format!("You are the {agent}."),
                &format!("{session}: step {turn}"),
                "tiny",
                false,
            );
            let reply = post_json(
                proxy,
                &body,
                &[
                    ("authorization", "Bearer key-a"),
                    ("x-session-id", session),
                    ("x-agent-id", agent),
                ],
            )
            .await;
            assert_eq!(
                reply.status(),
                200,
                "{session} turn {turn}: {}",
                reply.text().await.unwrap()
            );
        }
    }
    let mut placed: HashMap<String, HashSet<usize>> = HashMap::new();
    for (w, worker) in workers.iter().enumerate() {
        for request in worker.user_requests() {
            let text = request.body["messages"][1]["content"].as_str().unwrap().to_string();
            let session = text.split(':').next().unwrap().to_string();
            placed.entry(session).or_default().insert(w);
        }
    }
    assert_eq!(
        placed.values().map(HashSet::len).filter(|&n| n > 0).count(),
        SESSIONS,
        "every session reached a worker"
    );
    placed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_router_keeps_each_agentrt_session_on_one_worker_and_passes_agentrts_tags_through() {
    let Some((proxy, workers, _router)) = stack(&["--policy", "consistent_hash"], UpstreamRouter::VllmRouter).await
    else {
        return;
    };
    let placed = run_sessions(&proxy, &workers).await;
    assert!(sticky_and_spread(&placed), "sessions per worker: {placed:?}");
    let received: Vec<_> = workers.iter().flat_map(|w| w.user_requests()).collect();
    assert_eq!(received.len(), 3 * SESSIONS);
    for request in &received {
        let xargs = &request.body["vllm_xargs"];
        let session = xargs["agentrt_session"]
            .as_u64()
            .expect("agentrt's session tag reached the worker");
        assert!(
            xargs["agentrt_agent"].is_u64(),
            "agentrt's agent tag reached the worker"
        );
        assert_eq!(
            request.session_header.as_deref(),
            Some(format!("{session:016x}").as_str())
        );
        let context: Value = serde_json::from_str(xargs["agentic_context"].as_str().expect("a JSON string")).unwrap();
        assert_eq!(context["program_id"], format!("{session:016x}"));
        assert!(
            request.body["cache_salt"].is_string(),
            "the tenant's cache salt reached the worker"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_agentrts_identity_the_same_router_cannot_keep_sessions_together_and_apart() {
    // The contrast: without the session the router has nothing to tell sessions apart by (0.1.17
    // sent every call to one worker here), so it cannot both keep and spread them.
    let Some((proxy, workers, _router)) = stack(&["--policy", "consistent_hash"], UpstreamRouter::None).await else {
        return;
    };
    let placed = run_sessions(&proxy, &workers).await;
    assert!(
        !sticky_and_spread(&placed),
        "the router kept and spread sessions without their identity: {placed:?}"
    );
    for request in workers.iter().flat_map(|w| w.user_requests()) {
        assert!(request.session_header.is_none());
        assert!(request.body["vllm_xargs"].get("agentic_context").is_none());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn program_scheduling_takes_each_agentrt_session_as_one_program_on_one_worker() {
    let args = ["--policy", "consistent_hash", "--enable-program-scheduling"];
    let Some((proxy, workers, router)) = stack(&args, UpstreamRouter::VllmRouter).await else {
        return;
    };
    let placed = run_sessions(&proxy, &workers).await;
    for (session, on) in &placed {
        assert_eq!(on.len(), 1, "{session}'s program went to workers {on:?}");
    }
    // The router's own account: one program per session, in which all three calls were steps.
    let diagnostics: Value = reqwest::get(format!("{}/scheduling/diagnostics", router.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut programs = Vec::new();
    collect_programs(&diagnostics, &mut programs);
    let sessions: HashSet<String> = workers
        .iter()
        .flat_map(|w| w.user_requests())
        .map(|r| r.session_header.expect("x-session-id sent"))
        .collect();
    let seen: HashSet<String> = programs
        .iter()
        .map(|p| p["session_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        seen, sessions,
        "the router's programs are agentrt's sessions: {programs:?}"
    );
    for program in &programs {
        assert_eq!(
            program["step_id"], 2,
            "three calls, steps 0–2 of one program: {program}"
        );
        assert_eq!(program["agent_role"], "lead");
    }
}

/// Every program the router's diagnostics list (each once, by its id).
fn collect_programs(value: &Value, out: &mut Vec<Value>) {
    match value {
        Value::Object(map) => {
            if let Some(Value::Array(programs)) = map.get("programs") {
                for p in programs {
                    if p.get("session_id").is_some() && !out.iter().any(|seen| seen["program"] == p["program"]) {
                        out.push(p.clone());
                    }
                }
            }
            map.values().for_each(|v| collect_programs(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| collect_programs(v, out)),
        _ => {}
    }
}

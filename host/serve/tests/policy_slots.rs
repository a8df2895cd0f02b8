//! Several policy slots per tenant over real HTTP on loopback: the guard component (built from
//! `policies/guard`) beside the cache policy hears the same events, denies a looping session and a
//! session over its budget with a 403 naming the rule, leaves other sessions and tenants alone,
//! and is swapped alone.

mod stub_upstream;
mod support;

use std::time::Duration;

use serde_json::Value;
use support::{admin_get, chat, metrics_text, post_json, put_policy_in_slot, settle, Proxy, Setup};

async fn with_guard(init: Vec<(&'static str, &'static str)>) -> Proxy {
    let pairs = |p: &[(&str, &str)]| p.iter().map(|(k, t)| (k.to_string(), t.to_string())).collect();
    Setup {
        extra_slots: vec![("guard", "guard", init)],
        keys: pairs(&[("key-a", "alpha"), ("key-b", "beta")]),
        ..Setup::new("cachesage")
    }
    .start()
    .await
}

/// One call of `agent` in `session` as `key`'s tenant with `task` as its user message.
async fn call(p: &Proxy, key: &str, agent: &str, session: &str, task: &str) -> (u16, Value) {
    let auth = format!("Bearer {key}");
    let headers = [
        ("authorization", auth.as_str()),
        ("x-agent-id", agent),
        ("x-session-id", session),
    ];
    let response = post_json(p, &chat("You are the coder.", task, "tiny", false), &headers).await;
    (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
}

/// Wait until the guard's `act` after the last request has been carried out.
async fn acted(p: &Proxy) {
    settle(p).await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    settle(p).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_looping_session_is_denied_and_no_other_session_or_tenant_is() {
    let p = with_guard(vec![("loop-repeats", "3")]).await;
    // Session s1 re-sends the same prompt; s2 (same tenant) makes progress; beta loops too but
    // only twice.
    for i in 0..4 {
        assert_eq!(
            call(&p, "key-a", "coder", "s1", "Fix the bug.").await.0,
            200,
            "call {i}"
        );
        acted(&p).await;
    }
    let (status, answer) = call(&p, "key-a", "coder", "s1", "Fix the bug.").await;
    assert_eq!(status, 403, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("runaway loop") && message.contains("loop-repeats=3"),
        "{message}"
    );
    assert_eq!(answer["error"]["type"], "permission_error");

    let mut task = String::from("Step");
    for _ in 0..5 {
        task.push_str(" and then the next step, with a new tool result: the file compiled, three tests failed, the log follows, and it is long enough to be progress by any measure.");
        assert_eq!(
            call(&p, "key-a", "coder", "s2", &task).await.0,
            200,
            "progress is not a loop"
        );
        acted(&p).await;
    }
    for _ in 0..2 {
        assert_eq!(call(&p, "key-b", "coder", "s1", "Fix the bug.").await.0, 200);
        acted(&p).await;
    }
    assert_eq!(
        call(&p, "key-b", "coder", "s1", "Fix the bug.").await.0,
        200,
        "beta's s1 is another session"
    );
    let metrics = metrics_text(&p).await;
    assert!(metrics.contains("agentrt_proxy_denied_requests_total 1"), "{metrics}");
    // The refused request never reached the upstream.
    assert_eq!(p.stub.user_requests().len(), 4 + 5 + 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_over_its_token_budget_is_denied() {
    // The stub counts 12 prompt + 3 output tokens per call: the third call passes 40.
    let p = with_guard(vec![("session-token-budget", "40"), ("loop-repeats", "0")]).await;
    for i in 0..3 {
        assert_eq!(call(&p, "key-a", "coder", "s9", &format!("task {i}")).await.0, 200);
        acted(&p).await;
    }
    let (status, answer) = call(&p, "key-a", "coder", "s9", "task 3").await;
    assert_eq!(status, 403, "{answer}");
    assert!(answer["error"]["message"]
        .as_str()
        .unwrap()
        .contains("session-token-budget=40"));
    assert_eq!(
        call(&p, "key-a", "coder", "s10", "task").await.0,
        200,
        "a new session has its own budget"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_slot_is_swapped_alone_and_an_unknown_slot_is_404() {
    let p = with_guard(vec![]).await;
    assert_eq!(call(&p, "key-a", "coder", "s1", "task").await.0, 200);
    let (_, before) = admin_get(&p, "/admin/tenants/alpha/stats", "s3cret").await;
    assert_eq!(before["extra_slots"][0]["name"], "guard");
    // The guard slot becomes LRU (a policy that never denies); the cache slot is untouched.
    let (status, answer) = put_policy_in_slot(&p, "alpha", "lru", "guard").await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["slot"], "guard");
    let (_, after) = admin_get(&p, "/admin/tenants/alpha/stats", "s3cret").await;
    assert_eq!(after["extra_slots"][0]["name"], "lru");
    assert_eq!(after["policy"], before["policy"], "the kv slot kept its policy");
    let (status, answer) = put_policy_in_slot(&p, "alpha", "lru", "admission").await;
    assert_eq!(status, 404, "{answer}");
    assert!(answer["error"]["message"].as_str().unwrap().contains("guard"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_past_its_share_goes_upstream_demoted_and_the_others_do_not() {
    let p = Setup {
        extra_slots: vec![("fair", "fair-share", vec![])],
        engine_priorities: true,
        limits: agentrt_serve::Limits {
            upstream_first_byte_timeout: Duration::from_millis(3000),
            ..agentrt_serve::Limits::default()
        },
        ..Setup::new("lru")
    }
    .start()
    .await;
    // The light session's call hangs upstream (the stub's fault model): it waits, in flight,
    // while the heavy session sends long prompts.
    let light = {
        let url = p.url.clone();
        tokio::spawn(async move {
            let body = chat("You are the coder.", "short", "hang-before-headers", false);
            let headers = [("x-agent-id", "coder"), ("x-session-id", "light")];
            support::post(&format!("{url}/v1/chat/completions"), body.to_string(), &headers).await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let long_task = "a long document to summarise ".repeat(400);
    for _ in 0..3 {
        let headers = [("x-agent-id", "reader"), ("x-session-id", "heavy")];
        let body = chat("You are the reader.", &long_task, "tiny", false);
        assert_eq!(post_json(&p, &body, &headers).await.status(), 200);
        // Not `acted`: that waits for every call in flight, the light one included.
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(light.await.unwrap().status(), 504, "the hanging call times out, as set");
    let sent = p.stub.user_requests();
    let priorities: Vec<(String, Value)> = sent
        .iter()
        .map(|r| {
            (
                r.body["messages"][0]["content"].as_str().unwrap().to_string(),
                r.body["priority"].clone(),
            )
        })
        .collect();
    eprintln!("{priorities:?}");
    let heavy: Vec<&Value> = priorities
        .iter()
        .filter(|(system, _)| system == "You are the reader.")
        .map(|(_, p)| p)
        .collect();
    assert_eq!(heavy[0], &Value::Null, "the first long call is not yet anyone's excess");
    assert!(heavy[1..].iter().all(|p| *p == 10), "later ones go demoted: {heavy:?}");
    assert!(priorities
        .iter()
        .filter(|(system, _)| system == "You are the coder.")
        .all(|(_, p)| p.is_null()));
}

/// A proxy with `--upstream-max-in-flight 1` and the fair-share slot, without engine priorities:
/// the proxy's own queue does the ordering.
async fn with_admission_queue(max_wait: Duration) -> Proxy {
    with_admission_queue_and_slot(max_wait, ("fair", "fair-share", vec![])).await
}

async fn with_admission_queue_and_slot(
    max_wait: Duration,
    slot: (&'static str, &'static str, Vec<(&'static str, &'static str)>),
) -> Proxy {
    Setup {
        extra_slots: vec![slot],
        admission: Some((1, max_wait)),
        limits: agentrt_serve::Limits {
            upstream_first_byte_timeout: Duration::from_millis(1500),
            ..agentrt_serve::Limits::default()
        },
        ..Setup::new("lru")
    }
    .start()
    .await
}

/// A call that holds the one place upstream until the first-byte timeout: the stub's
/// `hang-before-headers` FAULT INJECTION (a real vLLM does not hang on demand).
fn blocker(p: &Proxy) -> tokio::task::JoinHandle<reqwest::Response> {
    let url = p.url.clone();
    tokio::spawn(async move {
        let body = chat("You are the blocker.", "wait", "hang-before-headers", false);
        let headers = [("x-agent-id", "blocker"), ("x-session-id", "blocker")];
        support::post(&format!("{url}/v1/chat/completions"), body.to_string(), &headers).await
    })
}

fn spawn_call(p: &Proxy, system: &'static str, task: String, session: &'static str) -> tokio::task::JoinHandle<u16> {
    let url = p.url.clone();
    tokio::spawn(async move {
        let body = chat(system, &task, "tiny", false);
        let headers = [("x-agent-id", system), ("x-session-id", session)];
        support::post(&format!("{url}/v1/chat/completions"), body.to_string(), &headers)
            .await
            .status()
            .as_u16()
    })
}

/// The proxy's queue depth as `/metrics` shows it.
async fn queue_depth(p: &Proxy) -> u64 {
    let text = metrics_text(p).await;
    let line = text
        .lines()
        .find(|l| l.starts_with("agentrt_proxy_admission_queue_depth "))
        .expect("the queue's series");
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

async fn until_queued(p: &Proxy, n: u64) {
    for _ in 0..500 {
        if queue_depth(p).await == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{n} requests never queued");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_one_place_upstream_a_light_sessions_call_goes_ahead_of_a_demoted_sessions_queued_ones() {
    let p = with_admission_queue(Duration::from_secs(10)).await;
    let order = two_heavy_calls_then_a_light_one_wait_for_one_place(&p).await;
    assert_eq!(
        order,
        [
            "You are the light one.",
            "You are the heavy one.",
            "You are the heavy one."
        ],
        "the light call was admitted first, though it queued last"
    );
    let text = metrics_text(&p).await;
    assert!(text.contains("agentrt_proxy_admission_overtakes_total 1"), "{text}");
    assert!(text.contains("agentrt_proxy_admission_queue_depth 0"), "{text}");
}

/// Fair-share in the `admission` slot, set never to demote (`max-share=1`): the queue's order
/// comes from the slot's scores of the waiting `request` items alone (lightest session first).
/// The same slot under another name only hears events, and the queue stays in arrival order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admission_slot_ranks_its_tenants_waiting_requests_and_another_slot_does_not() {
    let never_demotes = vec![("max-share", "1"), ("max-in-flight", "100")];
    let p = with_admission_queue_and_slot(
        Duration::from_secs(10),
        ("admission", "fair-share", never_demotes.clone()),
    )
    .await;
    let order = two_heavy_calls_then_a_light_one_wait_for_one_place(&p).await;
    assert_eq!(
        order,
        [
            "You are the light one.",
            "You are the heavy one.",
            "You are the heavy one."
        ],
        "scored lightest first"
    );
    // (How many overtakes: 1 or 2 — the two heavy calls were scored a moment apart, and the slot
    // may rank the later one higher; the order of sessions above is the point.)
    assert!(metrics_text(&p).await.contains("agentrt_proxy_admission_queue_depth 0"));

    let p = with_admission_queue_and_slot(Duration::from_secs(10), ("fair", "fair-share", never_demotes)).await;
    let order = two_heavy_calls_then_a_light_one_wait_for_one_place(&p).await;
    assert_eq!(
        order,
        [
            "You are the heavy one.",
            "You are the heavy one.",
            "You are the light one."
        ],
        "no admission slot, no demotion: arrival order"
    );
}

/// A light session calls once and a heavy one three times; then one call holds the only place
/// upstream while two heavy calls queue, then a light one. The system prompts of the three queued
/// calls in the order they reached the upstream.
async fn two_heavy_calls_then_a_light_one_wait_for_one_place(p: &Proxy) -> Vec<String> {
    // The light session uses the engine a little, the heavy one a lot: fair-share demotes it.
    let light_headers = [("x-agent-id", "light"), ("x-session-id", "light")];
    let body = chat("You are the light one.", "short", "tiny", false);
    assert_eq!(post_json(p, &body, &light_headers).await.status(), 200);
    let long_task = "a long document to summarise ".repeat(400);
    for _ in 0..3 {
        let headers = [("x-agent-id", "heavy"), ("x-session-id", "heavy")];
        let body = chat("You are the heavy one.", &long_task, "tiny", false);
        assert_eq!(post_json(p, &body, &headers).await.status(), 200);
    }
    acted(p).await;
    // One call holds the place; two heavy calls queue, then a light one.
    let held = blocker(p);
    for _ in 0..200 {
        if p.stub.user_requests().len() == 5 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let heavy: Vec<_> = (0..2)
        .map(|_| spawn_call(p, "You are the heavy one.", long_task.clone(), "heavy"))
        .collect();
    until_queued(p, 2).await;
    let light = spawn_call(p, "You are the light one.", "short again".into(), "light");
    until_queued(p, 3).await;
    assert_eq!(held.await.unwrap().status(), 504, "the held call times out, as set");
    assert_eq!(light.await.unwrap(), 200);
    for h in heavy {
        assert_eq!(h.await.unwrap(), 200);
    }
    p.stub.user_requests()[5..]
        .iter()
        .map(|r| r.body["messages"][0]["content"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_waits_past_the_limit_gets_a_503_naming_it() {
    let p = with_admission_queue(Duration::from_millis(300)).await;
    let held = blocker(&p);
    for _ in 0..200 {
        if p.stub.user_requests().len() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let started = std::time::Instant::now();
    let headers = [("x-agent-id", "coder"), ("x-session-id", "s1")];
    let response = post_json(&p, &chat("You are the coder.", "hello", "tiny", false), &headers).await;
    let waited = started.elapsed();
    let status = response.status().as_u16();
    let answer: Value = response.json().await.unwrap_or(Value::Null);
    assert_eq!(status, 503, "{answer}");
    assert_eq!(answer["error"]["type"], "service_unavailable");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("--upstream-max-wait-ms") && message.contains("--upstream-max-in-flight"),
        "{message}"
    );
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_millis(1400),
        "{waited:?}"
    );
    assert_eq!(p.stub.user_requests().len(), 1, "the refused call never went upstream");
    assert_eq!(held.await.unwrap().status(), 504);
    // The place is free again: the next call goes through at once.
    let response = post_json(&p, &chat("You are the coder.", "hello again", "tiny", false), &headers).await;
    assert_eq!(response.status(), 200);
    let text = metrics_text(&p).await;
    assert!(text.contains("agentrt_proxy_admission_timeouts_total 1"), "{text}");
}

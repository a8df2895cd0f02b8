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

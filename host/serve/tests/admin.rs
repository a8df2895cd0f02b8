//! The admin API over real HTTP on loopback: per-tenant admin tokens, a tenant's stats and
//! forecasts, and hot swaps under load. The proxy runs the probe fixture, whose forecasts name
//! every agent it has registered (so they show whether learned state survived a swap).

mod stub_upstream;
mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use support::{admin_get, chat, post, post_json, put_policy, settle, Proxy, Setup};

/// Tenants alpha (key `key-a`, admin token `ta`) and beta (`key-b`, `tb`); the operator's token
/// is `s3cret`.
async fn two_tenants(policy: &'static str) -> Proxy {
    let pairs = |p: &[(&str, &str)]| p.iter().map(|(k, t)| (k.to_string(), t.to_string())).collect();
    Setup {
        keys: pairs(&[("key-a", "alpha"), ("key-b", "beta")]),
        tenant_admins: pairs(&[("ta", "alpha"), ("tb", "beta")]),
        ..Setup::new(policy)
    }
    .start()
    .await
}

/// One chat request of `agent` in `session` as the holder of `key`; asserts it was served.
async fn call(p: &Proxy, key: &str, agent: &str, session: &str) {
    let auth = format!("Bearer {key}");
    let headers = [
        ("authorization", auth.as_str()),
        ("x-agent-id", agent),
        ("x-session-id", session),
    ];
    let system = format!("You are the {agent}.");
    let response = post_json(p, &chat(&system, "Task", "tiny", false), &headers).await;
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
}

fn error_type(answer: &Value) -> &str {
    answer["error"]["type"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_admin_token_acts_on_its_own_tenant_only() {
    let p = two_tenants("probe").await;
    call(&p, "key-a", "planner", "s1").await;
    call(&p, "key-b", "planner", "s1").await;

    for (token, own, other) in [("ta", "alpha", "beta"), ("tb", "beta", "alpha")] {
        for route in ["stats", "predict"] {
            let (status, answer) = admin_get(&p, &format!("/admin/tenants/{own}/{route}"), token).await;
            assert_eq!((status, answer["tenant"].as_str()), (200, Some(own)), "{answer}");
            let (status, answer) = admin_get(&p, &format!("/admin/tenants/{other}/{route}"), token).await;
            assert_eq!((status, error_type(&answer)), (403, "permission_error"), "{answer}");
        }
        let (status, answer) = put_policy(&p, other, "lru", token, true).await;
        assert_eq!(status, 403, "{answer}");
        let (status, answer) = admin_get(&p, "/admin/tenants", token).await;
        assert_eq!(status, 403, "the listing of every tenant is the operator's: {answer}");
        assert!(
            answer["error"]["message"].as_str().unwrap().contains("--admin-token"),
            "{answer}"
        );
    }
    let beta = p.app.tenants().get("beta").unwrap();
    assert_eq!(
        (beta.policy.info().name.as_str(), beta.policy.metrics().swaps()),
        ("probe", 0),
        "alpha's token changed nothing of beta's"
    );

    let (status, answer) = put_policy(&p, "alpha", "lru", "ta", true).await;
    assert_eq!((status, answer["policy"].as_str()), (200, Some("lru")), "{answer}");
    assert_eq!(p.app.tenants().get("alpha").unwrap().policy.info().name, "lru");

    // The operator's token still does everything.
    let (status, listing) = admin_get(&p, "/admin/tenants", "s3cret").await;
    assert_eq!((status, listing["tenants"].as_array().map(Vec::len)), (200, Some(2)));
    let (status, _) = admin_get(&p, "/admin/tenants/beta/stats", "s3cret").await;
    assert_eq!(status, 200);
    let (status, answer) = put_policy(&p, "beta", "lru", "s3cret", true).await;
    assert_eq!(status, 200, "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_report_the_policy_its_slot_its_worker_and_its_tables() {
    let p = two_tenants("probe").await;
    call(&p, "key-a", "planner", "s1").await;
    call(&p, "key-a", "coder", "s1").await;
    call(&p, "key-a", "planner", "s2").await;
    settle(&p).await;
    let (status, swap) = put_policy(&p, "alpha", "probe", "ta", false).await;
    assert_eq!(status, 200, "{swap}");
    assert!(swap["state_bytes_carried"].as_u64().unwrap() > 0, "{swap}");

    let (status, stats) = admin_get(&p, "/admin/tenants/alpha/stats", "ta").await;
    assert_eq!(status, 200, "{stats}");
    assert_eq!(stats["policy"]["name"], "probe");
    assert!(stats["policy"]["version"].is_string(), "{stats}");
    let slot = &stats["slot"];
    assert_eq!(slot["swaps"], 1);
    assert_eq!(
        slot["last_swap_pause_us"], swap["paused_us"],
        "the pause the swap reported: {stats}"
    );
    assert_eq!(slot["swap_pause_total_us"], swap["paused_us"]);
    assert!(slot["calls"]["observe"].as_u64().unwrap() >= 1, "{stats}");
    assert_eq!(slot["errors"]["trap"], 0);
    assert_eq!(
        slot["errors"].as_object().unwrap().len(),
        9,
        "every error kind: {stats}"
    );
    assert_eq!(
        (slot["circuit_open"].as_bool(), slot["restarts"].as_u64()),
        (Some(false), Some(0))
    );
    let worker = &stats["worker"];
    // Two registrations, three arrivals, three finishes.
    assert!(worker["events_observed"].as_u64().unwrap() >= 8, "{stats}");
    // Warm-ups may still be telling the policy their events: the queue is not necessarily empty.
    assert!(worker["queued"].is_u64(), "{stats}");
    assert_eq!(worker["events_dropped"], 0);
    let tables = &stats["tables"];
    assert_eq!(tables["agents"], 2, "{stats}");
    assert_eq!(
        (tables["live_sessions"].as_u64(), tables["sessions_seen"].as_u64()),
        (Some(2), Some(2))
    );
    assert_eq!(tables["anchors"], 2);
    assert_eq!(tables["prompt_shapes"], 3, "one per session and agent: {stats}");

    // Beta has not swapped: no pause to report yet.
    call(&p, "key-b", "planner", "s1").await;
    let (_, beta) = admin_get(&p, "/admin/tenants/beta/stats", "tb").await;
    assert_eq!(
        (
            beta["slot"]["swaps"].as_u64(),
            beta["slot"]["last_swap_pause_us"].is_null()
        ),
        (Some(0), true)
    );

    let metrics = reqwest::get(format!("{}/metrics", p.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let series = |name: &str| {
        let prefix = format!("{name}{{tenant=\"alpha\",slot=\"kv\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no {prefix}in {metrics}"))
            .parse::<f64>()
            .unwrap()
    };
    let paused_s = swap["paused_us"].as_f64().unwrap() / 1e6;
    assert!((series("agentrt_policy_last_swap_pause_seconds") - paused_s).abs() < 1e-6);
    assert!((series("agentrt_policy_swap_pause_seconds_total") - paused_s).abs() < 1e-6);

    let (status, answer) = admin_get(&p, "/admin/tenants/gamma/stats", "s3cret").await;
    assert_eq!((status, error_type(&answer)), (404, "not_found_error"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn predict_answers_the_policys_forecasts_with_agent_names_for_a_bounded_horizon() {
    let p = two_tenants("probe").await;
    call(&p, "key-a", "planner", "s1").await;
    call(&p, "key-a", "coder", "s1").await;
    settle(&p).await;

    let (status, answer) = admin_get(&p, "/admin/tenants/alpha/predict?horizon=3", "ta").await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        (answer["horizon"].as_u64(), answer["policy"].as_str()),
        (Some(3), Some("probe"))
    );
    // The probe forecasts each registered agent as the next, uniformly, `horizon` steps out.
    let forecasts = answer["forecasts"].as_array().unwrap();
    let mut names: Vec<&str> = forecasts.iter().map(|f| f["agent_name"].as_str().unwrap()).collect();
    names.sort();
    assert_eq!(names, ["coder", "planner"], "{answer}");
    for f in forecasts {
        assert_eq!(f["kind"], "next-agent");
        assert_eq!(
            (f["steps"].as_u64(), f["probability"].as_f64()),
            (Some(3), Some(0.5)),
            "{f}"
        );
        assert!(f["agent"].as_u64().unwrap() > 0);
    }
    let (_, next_step) = admin_get(&p, "/admin/tenants/alpha/predict", "ta").await;
    assert_eq!(next_step["forecasts"][0]["steps"], 1, "no horizon: the next step");

    for bad in ["0", "65", "many", "-2"] {
        let (status, answer) = admin_get(&p, &format!("/admin/tenants/alpha/predict?horizon={bad}"), "ta").await;
        assert_eq!(
            (status, error_type(&answer)),
            (400, "invalid_request_error"),
            "{bad}: {answer}"
        );
        assert!(
            answer["error"]["message"].as_str().unwrap().contains("from 1 to 64"),
            "{answer}"
        );
    }
    let (status, _) = admin_get(&p, "/admin/tenants/gamma/predict?horizon=1", "s3cret").await;
    assert_eq!(status, 404, "gamma has not started");
    let (status, _) = admin_get(&p, "/admin/tenants/gamma/predict?horizon=1", "ta").await;
    assert_eq!(
        status, 403,
        "alpha's token learns nothing about other tenants, started or not"
    );

    // A policy that fails to answer is a 503; the tenant's requests go on.
    call(&p, "key-a", agentrt_tests::PROBE_PREDICT_FLOOD_AGENT, "s1").await;
    settle(&p).await;
    let (status, answer) = admin_get(&p, "/admin/tenants/alpha/predict?horizon=2", "ta").await;
    assert_eq!((status, error_type(&answer)), (503, "service_unavailable"), "{answer}");
    assert!(
        answer["error"]["message"].as_str().unwrap().contains("predict"),
        "{answer}"
    );
    call(&p, "key-a", "planner", "s1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_swaps_under_concurrent_load_fail_no_request_and_carry_the_learned_state() {
    let p = two_tenants("probe").await;
    // Each tenant's agents register before the swaps; later requests register nothing new, so
    // after the swaps only carried state can still know them.
    for key in ["key-a", "key-b"] {
        call(&p, key, "planner", "s1").await;
        call(&p, key, "coder", "s1").await;
    }
    settle(&p).await;

    let stop = Arc::new(AtomicBool::new(false));
    let (served, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let clients: Vec<_> = (0..4)
        .map(|i| {
            let (stop, served, failed) = (stop.clone(), served.clone(), failed.clone());
            let url = format!("{}/v1/chat/completions", p.url);
            tokio::spawn(async move {
                let auth = format!("Bearer {}", ["key-a", "key-b"][i % 2]);
                let agent = ["planner", "coder"][i / 2];
                let body = chat(&format!("You are the {agent}."), "Task", "tiny", false).to_string();
                let headers = [
                    ("authorization", auth.as_str()),
                    ("x-agent-id", agent),
                    ("x-session-id", "s1"),
                ];
                while !stop.load(Relaxed) {
                    let status = post(&url, body.clone(), &headers).await.status();
                    let counter = if status == 200 { &served } else { &failed };
                    counter.fetch_add(1, Relaxed);
                }
            })
        })
        .collect();

    let mut carried = Vec::new();
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let before = served.load(Relaxed);
        let (status, swap) = put_policy(&p, "alpha", "probe", "ta", false).await;
        assert_eq!(status, 200, "{swap}");
        carried.push(swap["state_bytes_carried"].as_u64().unwrap());
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            served.load(Relaxed) > before,
            "requests were being served around the swap"
        );
    }
    stop.store(true, Relaxed);
    for client in clients {
        client.await.unwrap();
    }
    assert_eq!(
        failed.load(Relaxed),
        0,
        "no request failed ({} served)",
        served.load(Relaxed)
    );
    assert!(
        carried.iter().all(|&bytes| bytes > 0),
        "state was carried on every swap: {carried:?}"
    );

    settle(&p).await;
    let (alpha, beta) = (
        p.app.tenants().get("alpha").unwrap(),
        p.app.tenants().get("beta").unwrap(),
    );
    assert_eq!(alpha.policy.metrics().swaps(), 3);
    assert_eq!(
        alpha.policy.predict(1).unwrap().len(),
        2,
        "alpha's policy still knows the agents it learned before the swaps"
    );
    assert_eq!(beta.policy.metrics().swaps(), 0);
    assert_eq!(beta.policy.predict(1).unwrap().len(), 2);
}

/// `PUT /admin/tenants/{tenant}/policy{query}` with `body` as it is, under the operator's token.
async fn put_body(p: &Proxy, tenant: &str, query: &str, body: &'static str) -> (u16, Value) {
    let response = reqwest::Client::new()
        .put(format!("{}/admin/tenants/{tenant}/policy{query}", p.url))
        .bearer_auth("s3cret")
        .body(body)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_is_swapped_by_name_and_a_state_it_cannot_take_names_fresh() {
    let p = Setup::new("cachesage").start().await;
    call(&p, "none", "planner", "s-1").await;
    settle(&p).await;
    // CacheSage's state is not LRU's: the swap is refused, and the answer says how to go ahead.
    let (status, refused) = put_body(&p, "default", "", "lru").await;
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert_eq!(status, 400, "{refused}");
    assert!(
        message.contains("keeps running") && message.contains("?fresh=true"),
        "{message}"
    );
    let (status, swapped) = put_body(&p, "default", "?fresh=true", "lru\n").await;
    assert_eq!(status, 200, "{swapped}");
    assert_eq!(swapped["policy"], "lru");

    let (status, missing) = put_body(&p, "default", "", "no-such-policy").await;
    assert_eq!(status, 400);
    assert!(
        missing["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no policy component named `no-such-policy`"),
        "{missing}"
    );
    let (status, path) = put_body(&p, "default", "", "/etc/passwd").await;
    assert_eq!(status, 400, "a path is never read: {path}");
    assert!(
        path["error"]["message"].as_str().unwrap().contains("curl --data ttl"),
        "{path}"
    );
}

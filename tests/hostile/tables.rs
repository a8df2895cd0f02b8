//! What clients fill, over real HTTP on loopback against the stub upstream: tenants never
//! share the engine's tags, a PUT whose policy does not start leaves no tenant, a full instance
//! pool is a clear 503, and the tables clients fill stay at their caps.

#[path = "../../host/serve/tests/stub_upstream/mod.rs"]
mod stub_upstream;
#[path = "../../host/serve/tests/support/mod.rs"]
mod support;

use std::sync::atomic::Ordering::Relaxed;

use agentrt_serve::names::MAX_NAME_BYTES as MAX_AGENT_NAME_BYTES;
use agentrt_serve::table::TableLimits;
use serde_json::Value;
use support::{chat, post_json, settle, Setup};

fn keyed(policy: &'static str, keys: &[(&str, &str)]) -> Setup {
    Setup {
        keys: keys.iter().map(|(k, t)| (k.to_string(), t.to_string())).collect(),
        ..Setup::new(policy)
    }
}

async fn listing(p: &support::Proxy) -> Value {
    reqwest::Client::new()
        .get(format!("{}/admin/tenants", p.url))
        .bearer_auth("s3cret")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

fn tenant_names(listing: &Value) -> Vec<String> {
    listing["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["tenant"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_with_the_same_session_id_and_system_prompt_get_different_engine_tags_and_cache_salts() {
    let p = keyed("lru", &[("key-a", "alpha"), ("key-b", "beta")]).start().await;
    let body = chat("You are the planner.", "Task 17", "tiny", false);
    for key in ["Bearer key-a", "Bearer key-b"] {
        let headers = [("authorization", key), ("x-session-id", "shared-session")];
        assert_eq!(post_json(&p, &body, &headers).await.status(), 200);
    }
    settle(&p).await;
    let sent = p.stub.user_requests();
    assert_eq!(sent.len(), 2);
    let (a, b) = (&sent[0].body["vllm_xargs"], &sent[1].body["vllm_xargs"]);
    assert_ne!(
        a["agentrt_session"], b["agentrt_session"],
        "one x-session-id in two tenants is two sessions in the engine: {a} {b}"
    );
    assert_ne!(
        a["agentrt_agent"], b["agentrt_agent"],
        "one system prompt in two tenants is two agents in the engine: {a} {b}"
    );
    // Within a tenant the tags stay stable.
    let headers = [("authorization", "Bearer key-a"), ("x-session-id", "shared-session")];
    assert_eq!(post_json(&p, &body, &headers).await.status(), 200);
    settle(&p).await;
    let again = &p.stub.user_requests()[2].body["vllm_xargs"];
    assert_eq!(
        (&again["agentrt_agent"], &again["agentrt_session"]),
        (&a["agentrt_agent"], &a["agentrt_session"])
    );

    // Each tenant's requests carry a cache salt of their own, so vLLM never lets one tenant's
    // request hit (or time) the other's blocks; within a tenant the salt is stable.
    let salts: Vec<Value> = p
        .stub
        .user_requests()
        .iter()
        .map(|r| r.body["cache_salt"].clone())
        .collect();
    assert!(salts[0].is_string() && salts[1].is_string(), "{salts:?}");
    assert_ne!(salts[0], salts[1], "two tenants, two salts");
    assert_eq!(salts[2], salts[0], "one tenant, one salt");
    // Beta's client sending alpha's salt does not get into alpha's cache.
    let mut forged = body.clone();
    forged["cache_salt"] = salts[0].clone();
    let headers = [("authorization", "Bearer key-b")];
    assert_eq!(post_json(&p, &forged, &headers).await.status(), 200);
    settle(&p).await;
    let sent = p.stub.user_requests()[3].body["cache_salt"].clone();
    assert_ne!(sent, salts[0], "a client cannot choose another tenant's salt");
    assert_ne!(sent, salts[1], "a client's own salt splits its tenant's cache further");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_whose_policy_does_not_start_creates_no_tenant() {
    // Every tenant's policy gets `bias=0.5`: probe takes it, lru refuses any configuration.
    let p = Setup {
        init: vec![("bias", "0.5")],
        ..keyed("probe", &[("key-a", "alpha")])
    }
    .start()
    .await;
    let a = [("authorization", "Bearer key-a")];
    assert_eq!(post_json(&p, &chat("s", "t", "tiny", false), &a).await.status(), 200);
    let before = listing(&p).await;
    assert_eq!(tenant_names(&before), ["alpha"]);

    let lru = std::fs::read(agentrt_tests::component_path("lru")).unwrap();
    let refused = reqwest::Client::new()
        .put(format!("{}/admin/tenants/gamma/policy", p.url))
        .bearer_auth("s3cret")
        .body(lru)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 400);
    let message = refused.text().await.unwrap();
    assert!(
        message.contains("gamma") && message.contains("not created"),
        "{message}"
    );
    assert_eq!(listing(&p).await, before, "no half-created tenant");
    assert!(p.app.tenants().registry().get("gamma", "kv").is_none());

    // A component that does start creates the tenant with it, not with the default.
    let probe = std::fs::read(agentrt_tests::component_path("probe")).unwrap();
    let created = reqwest::Client::new()
        .put(format!("{}/admin/tenants/gamma/policy", p.url))
        .bearer_auth("s3cret")
        .body(probe)
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 200);
    let created: Value = created.json().await.unwrap();
    assert_eq!(created["created"], true, "{created}");
    assert_eq!(tenant_names(&listing(&p).await), ["alpha", "gamma"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_instance_pool_is_a_clear_503_and_starts_no_tenant() {
    let p = Setup {
        pool_instances: Some(1),
        ..keyed("lru", &[("key-a", "alpha"), ("key-b", "beta")])
    }
    .start()
    .await;
    let a = [("authorization", "Bearer key-a")];
    let b = [("authorization", "Bearer key-b")];
    assert_eq!(post_json(&p, &chat("s", "t", "tiny", false), &a).await.status(), 200);
    let full = post_json(&p, &chat("s", "t", "tiny", false), &b).await;
    assert_eq!(full.status(), 503);
    let message = full.text().await.unwrap();
    assert!(
        message.contains("instance pool is full") && message.contains("beta"),
        "{message}"
    );
    let lru = std::fs::read(agentrt_tests::component_path("lru")).unwrap();
    let put = reqwest::Client::new()
        .put(format!("{}/admin/tenants/gamma/policy", p.url))
        .bearer_auth("s3cret")
        .body(lru)
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 503);
    assert_eq!(tenant_names(&listing(&p).await), ["alpha"]);
    assert_eq!(
        post_json(&p, &chat("s", "t", "tiny", false), &a).await.status(),
        200,
        "alpha still serves"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_filled_tables_stay_at_their_caps() {
    let tables = TableLimits {
        max_agents: 5,
        max_sessions: 6,
        max_anchors: 4,
        max_shapes: 7,
        ..TableLimits::default()
    };
    let p = Setup {
        tables,
        ..Setup::new("lru")
    }
    .start()
    .await;
    for i in 0..20 {
        let body = chat(&format!("system {i}"), "task", "tiny", false);
        let headers = [("x-session-id", format!("s-{i}")), ("x-agent-id", format!("agent-{i}"))];
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        assert_eq!(post_json(&p, &body, &headers).await.status(), 200);
    }
    settle(&p).await;
    let tenant = p.app.tenants().get_or_start("default").unwrap();
    assert_eq!(tenant.agents.agents(), 5);
    assert_eq!(tenant.agents.live_sessions(), 6);
    assert_eq!(tenant.agents.anchors().0, 4);
    assert_eq!(tenant.continuations.len(), 7);
    assert_eq!(tenant.agents.sessions(), 20, "sessions seen still counts every one");
    let names = tenant.agents.agent_names();
    assert_eq!(
        names,
        ["agent-15", "agent-16", "agent-17", "agent-18", "agent-19"],
        "the most recent stay"
    );
    let listed = &listing(&p).await["tenants"][0];
    assert_eq!(
        (listed["agents"].as_u64(), listed["live_sessions"].as_u64()),
        (Some(5), Some(6))
    );
    assert_eq!(listed["prompt_shapes"], 7);

    // A session pushed out of the full table is reported ended, so the policy stops valuing its
    // blocks: 20 sessions through a table of 6 end 14. The policy was given every event: each
    // request's registration, arrival and finish, and the 14 ends.
    assert_eq!(p.app.metrics().sessions_ended.load(Relaxed), 14);
    assert_eq!(tenant.worker.stats().observed(), 20 * 3 + 14);
    assert_eq!(tenant.worker.stats().dropped(), 0);
    let metrics = support::metrics_text(&p).await;
    for line in [
        "agentrt_tenant_agents{tenant=\"default\"} 5",
        "agentrt_tenant_live_sessions{tenant=\"default\"} 6",
        "agentrt_tenant_prompt_shapes{tenant=\"default\"} 7",
        "agentrt_proxy_sessions_ended_total 14",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overlong_agent_name_is_refused_with_a_clear_400() {
    let p = Setup::new("lru").start().await;
    let long = "a".repeat(MAX_AGENT_NAME_BYTES + 1);
    let refused = post_json(&p, &chat("s", "t", "tiny", false), &[("x-agent-id", &long)]).await;
    assert_eq!(refused.status(), 400);
    assert!(refused.text().await.unwrap().contains("over the limit of 256"));
    let mut body = chat("s", "t", "tiny", false);
    body["user"] = Value::String(long);
    assert_eq!(post_json(&p, &body, &[]).await.status(), 400, "`user` too");
    let fits = "a".repeat(MAX_AGENT_NAME_BYTES);
    assert_eq!(
        post_json(&p, &chat("s", "t", "tiny", false), &[("x-agent-id", &fits)])
            .await
            .status(),
        200
    );
    let completion = support::post(
        &format!("{}/v1/completions", p.url),
        serde_json::json!({"model": "tiny", "prompt": "x", "user": "b".repeat(300)}).to_string(),
        &[],
    )
    .await;
    assert_eq!(completion.status(), 400, "plain completions too");
    assert!(p.stub.user_requests().len() == 1, "nothing refused went upstream");
}

//! The tenants' config file (`--config`) over real HTTP on loopback: tenants, tokens and quotas
//! from the file, a reload that changes them without a restart, a broken file or a changed
//! `[serve]` table that changes nothing, and the per-tenant warm-up quota.

mod stub_upstream;
mod support;

use std::time::Duration;

use support::{admin_get, chat, metrics_text, post, post_json, settle, Proxy, Setup};

const OPERATOR: &str = "s3cret";

async fn proxy_with_config(policy: &'static str, file: &std::path::Path) -> Proxy {
    Setup {
        config: Some(file.to_path_buf()),
        ..Setup::new(policy)
    }
    .start()
    .await
}

/// One chat request as the holder of `key`, as `agent`: its status.
async fn call(p: &Proxy, key: &str, agent: &str) -> u16 {
    let auth = format!("Bearer {key}");
    let headers = [("authorization", auth.as_str()), ("x-agent-id", agent)];
    let system = format!("You are the {agent}.");
    post_json(p, &chat(&system, "Task", "tiny", false), &headers)
        .await
        .status()
        .as_u16()
}

async fn reload(p: &Proxy, token: &str) -> (u16, serde_json::Value) {
    let response = post(
        &format!("{}/admin/reload", p.url),
        "",
        &[("authorization", &format!("Bearer {token}"))],
    )
    .await;
    (response.status().as_u16(), response.json().await.unwrap())
}

/// The value of `name{tenant="…"}` on `/metrics`.
fn series(metrics: &str, name: &str, tenant: &str) -> Option<u64> {
    let prefix = format!("{name}{{tenant=\"{tenant}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|v| v.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_adds_tenants_revokes_keys_and_changes_quotas_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tenants.toml");
    std::fs::write(
        &file,
        "[tenants.alpha]\napi_keys = [\"key-a\"]\nadmin_tokens = [\"adm-a\"]\nmax_in_flight = 100\n",
    )
    .unwrap();
    let p = proxy_with_config("lru", &file).await;
    assert_eq!(call(&p, "key-a", "planner").await, 200);
    assert_eq!(call(&p, "key-b", "planner").await, 401, "beta is not a tenant yet");
    let metrics = metrics_text(&p).await;
    assert_eq!(series(&metrics, "agentrt_tenant_max_in_flight", "alpha"), Some(100));

    // Beta joins, alpha's key is rotated and its quota lowered; the process keeps running.
    std::fs::write(
        &file,
        "[tenants.alpha]\napi_keys = [\"key-a2\"]\nmax_in_flight = 7\n[tenants.beta]\napi_keys = [\"key-b\"]\n",
    )
    .unwrap();
    let (status, answer) = reload(&p, OPERATOR).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["tenants"], serde_json::json!(["alpha", "beta"]));
    assert_eq!(
        answer["changes"],
        serde_json::json!([
            "alpha: 1 API key added, 1 revoked",
            "tenant beta added (1 API key)",
            "alpha: 1 admin token revoked",
            "alpha: max-in-flight 100 → 7"
        ]),
        "what changed, in words, never a key"
    );
    assert_eq!(call(&p, "key-b", "planner").await, 200, "beta's key works at once");
    assert_eq!(call(&p, "key-a", "planner").await, 401, "alpha's old key is revoked");
    assert_eq!(call(&p, "key-a2", "planner").await, 200);
    let metrics = metrics_text(&p).await;
    assert_eq!(
        series(&metrics, "agentrt_tenant_max_in_flight", "alpha"),
        Some(7),
        "the live tenant's quota changed in place"
    );
    // Alpha's admin token was in the old file only.
    let (status, _) = admin_get(&p, "/admin/tenants/alpha/stats", "adm-a").await;
    assert_eq!(status, 401, "a token the file no longer gives is refused");
    // Alpha kept its policy and what it learned: the reload touched settings, not tenants.
    let (status, stats) = admin_get(&p, "/admin/tenants/alpha/stats", OPERATOR).await;
    assert_eq!(status, 200, "{stats}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_file_is_refused_with_where_and_the_previous_settings_stay() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tenants.toml");
    std::fs::write(&file, "[tenants.alpha]\napi_keys = [\"key-a\"]\n").unwrap();
    let p = proxy_with_config("lru", &file).await;

    for (broken, says) in [
        ("[tenants.alpha]\napi_keys = [\"key-a\"]\nmax_in_flite = 3\n", "line 3"),
        (
            "[tenants.alpha]\napi_keys = [\"key-a\"]\n[tenants.beta]\napi_keys = [\"key-a\"]\n",
            "[tenants.beta] api-keys",
        ),
        (
            "[tenants.alpha]\napi_keys = [\"key-a\"]\nshare = { min_blocks = 5 }\n",
            "--eviction-socket",
        ),
    ] {
        std::fs::write(&file, broken).unwrap();
        let (status, answer) = reload(&p, OPERATOR).await;
        let message = answer["error"]["message"].as_str().unwrap_or_default().to_string();
        assert_eq!(status, 400, "{answer}");
        assert!(message.contains(says), "{message:?} should say {says:?}");
        assert!(!message.contains("\"key-a\""), "errors never repeat a key: {message}");
        assert_eq!(call(&p, "key-a", "planner").await, 200, "the previous settings stay");
    }
    std::fs::remove_file(&file).unwrap();
    let (status, answer) = reload(&p, OPERATOR).await;
    assert_eq!(status, 400);
    assert!(answer["error"]["message"].as_str().unwrap().contains("tenants.toml"));
    assert_eq!(call(&p, "key-a", "planner").await, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_finds_serve_flags_changed_is_refused_naming_them_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agentrt.toml");
    let serve = "[serve]\nmax-connections = 100\npolicy = \"lru\"\n";
    std::fs::write(&file, format!("{serve}[tenants.alpha]\napi_keys = [\"key-a\"]\n")).unwrap();
    let p = proxy_with_config("lru", &file).await;
    assert_eq!(call(&p, "key-a", "planner").await, 200);

    // A flag changed (and one added) beside a new tenant: flags are read at start only, so the
    // whole file is refused rather than applied in part.
    std::fs::write(
        &file,
        "[serve]\nmax-connections = 200\npolicy = \"lru\"\nmax-sessions = 9\n\
         [tenants.alpha]\napi_keys = [\"key-a\"]\n[tenants.beta]\napi_keys = [\"key-b\"]\n",
    )
    .unwrap();
    let (status, answer) = reload(&p, OPERATOR).await;
    assert_eq!(status, 400, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("[serve] `max-connections`, `max-sessions` changed since the start")
            && message.contains("restart agentrt serve"),
        "{message}"
    );
    assert_eq!(call(&p, "key-b", "planner").await, 401, "beta was not added");

    // With [serve] as it started, the same new tenant reloads.
    std::fs::write(
        &file,
        format!("{serve}[tenants.alpha]\napi_keys = [\"key-a\"]\n[tenants.beta]\napi_keys = [\"key-b\"]\n"),
    )
    .unwrap();
    let (status, answer) = reload(&p, OPERATOR).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(call(&p, "key-b", "planner").await, 200, "beta's key works at once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_operator_may_reload_and_only_with_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tenants.toml");
    std::fs::write(
        &file,
        "[tenants.alpha]\napi_keys = [\"key-a\"]\nadmin_tokens = [\"adm-a\"]\n",
    )
    .unwrap();
    let p = proxy_with_config("lru", &file).await;
    assert_eq!(reload(&p, "adm-a").await.0, 403, "a tenant's admin cannot reload");
    assert_eq!(reload(&p, "nope").await.0, 401);
    let without = Setup::new("lru").start().await;
    assert_eq!(
        reload(&without, OPERATOR).await.0,
        409,
        "no --config, nothing to reload"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_past_its_warmup_quota_is_throttled_and_the_other_tenant_is_not() {
    // The probe asks for a warm-up of its last agent's anchor on every act(). The stub counts 12
    // prompt tokens per request; `lo` may warm 1 token per second: its first warm-up goes (the
    // bucket starts full), then it is in debt for seconds.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tenants.toml");
    std::fs::write(
        &file,
        "[tenants.lo]\napi_keys = [\"key-lo\"]\nwarmup_tokens_per_s = 1\n[tenants.hi]\napi_keys = [\"key-hi\"]\n",
    )
    .unwrap();
    let p = proxy_with_config("probe", &file).await;
    for i in 0..6 {
        let agent = format!("agent-{i}");
        assert_eq!(call(&p, "key-lo", &agent).await, 200);
        assert_eq!(call(&p, "key-hi", &agent).await, 200);
        // Past the proxy's own warm-up rate (20 per second) and concurrency.
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    settle(&p).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let lo = p.app.tenants().get("lo").unwrap();
    let hi = p.app.tenants().get("hi").unwrap();
    eprintln!(
        "lo: {} warm-up tokens, {} throttled; hi: {} tokens, {} throttled",
        lo.warmups.tokens(),
        lo.warmups.throttled(),
        hi.warmups.tokens(),
        hi.warmups.throttled()
    );
    assert_eq!(lo.warmups.tokens(), 12, "one warm-up, paid at what the engine counted");
    assert!(lo.warmups.throttled() >= 3, "lo's later warm-ups were skipped");
    assert_eq!(hi.warmups.throttled(), 0, "hi's quota is its own");
    assert!(hi.warmups.tokens() >= 3 * 12, "hi warmed up several anchors");
    let metrics = metrics_text(&p).await;
    assert_eq!(series(&metrics, "agentrt_tenant_warmup_tokens_total", "lo"), Some(12));
    assert_eq!(
        series(&metrics, "agentrt_tenant_warmup_tokens_per_second_quota", "lo"),
        Some(1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anchor_marked_public_carries_one_salt_for_every_tenant() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tenants.toml");
    let tenants = "[tenants.alpha]\napi_keys = [\"key-a\"]\n[tenants.beta]\napi_keys = [\"key-b\"]\n";
    std::fs::write(&file, tenants).unwrap();
    let p = proxy_with_config("lru", &file).await;
    let salt_of_last = || p.stub.user_requests().last().unwrap().body["cache_salt"].clone();

    // The operator finds the anchor's hash in the tenant's stats.
    assert_eq!(call(&p, "key-a", "planner").await, 200);
    let private_alpha = salt_of_last();
    let (_, stats) = admin_get(&p, "/admin/tenants/alpha/stats", OPERATOR).await;
    let listed = &stats["tables"]["anchor_list"][0];
    assert_eq!(listed["agent"], "planner");
    let hash = listed["hash"].as_str().unwrap().to_string();

    std::fs::write(&file, format!("{tenants}[public]\nanchors = [\"{hash}\"]\n")).unwrap();
    assert_eq!(reload(&p, OPERATOR).await.0, 200);
    assert_eq!(call(&p, "key-a", "planner").await, 200);
    let public_alpha = salt_of_last();
    assert_eq!(call(&p, "key-b", "planner").await, 200);
    let public_beta = salt_of_last();
    assert_eq!(
        public_alpha, public_beta,
        "both tenants' requests with the public anchor share a salt"
    );
    assert_ne!(public_alpha, private_alpha);
    // Another anchor stays private.
    assert_eq!(call(&p, "key-b", "coder").await, 200);
    assert_ne!(salt_of_last(), public_beta);
    let metrics = metrics_text(&p).await;
    assert!(
        metrics.contains("agentrt_proxy_public_anchor_requests_total 2"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_a_reload_removes_takes_its_hint_state_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tenants.toml");
    let both = "[tenants.alpha]\napi_keys = [\"key-a\"]\n[tenants.beta]\napi_keys = [\"key-b\"]\n";
    std::fs::write(&file, both).unwrap();
    let p = proxy_with_config("lru", &file).await;
    let closing = serde_json::json!({"hints": [{"type": "session_closed", "session": "s-1"}]});
    for key in ["key-a", "key-b"] {
        let (status, _) = support::call_as(&p.url, "/v1/agentrt/hints", key, closing.to_string()).await;
        assert_eq!(status, 200);
    }
    let beta = std::sync::Arc::downgrade(&p.app.tenants().get_or_start("beta").unwrap());
    let hint_series = |metrics: &str, tenant: &str| {
        metrics
            .lines()
            .filter(|l| l.starts_with("agentrt_hints") && l.contains(&format!("tenant=\"{tenant}\"")))
            .count()
    };
    assert!(hint_series(&metrics_text(&p).await, "beta") > 0);

    std::fs::write(&file, "[tenants.alpha]\napi_keys = [\"key-a\"]\n").unwrap();
    let (status, answer) = reload(&p, OPERATOR).await;
    assert_eq!(status, 200, "{answer}");
    settle(&p).await;
    let metrics = metrics_text(&p).await;
    assert_eq!(
        hint_series(&metrics, "beta"),
        0,
        "beta's hint counters went with it:\n{metrics}"
    );
    assert!(hint_series(&metrics, "alpha") > 0, "alpha's stay");
    // The tenant itself is gone, and with it every hint it kept (closed sessions, tool waits,
    // its rate): nothing outside the tenant holds hint state.
    for _ in 0..500 {
        if beta.upgrade().is_none() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("beta's tenant (and its hint state) is still held 5 s after the reload removed it");
}

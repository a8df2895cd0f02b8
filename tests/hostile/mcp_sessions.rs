//! The MCP gateway's sessions under attack: a session id is its opener's alone, one tenant cannot
//! hold sessions or requests without bound, and sessions that go give their places and memory
//! back. `agentrt serve` on loopback (real tenants and quotas) in front of a real Python MCP
//! server; the attacker is a raw HTTP client (tests/hostile/mcp_support).

mod mcp_support;
#[path = "../../host/serve/tests/stub_upstream/mod.rs"]
mod stub_upstream;
#[path = "../../host/serve/tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use serde_json::json;

use mcp_support::*;

/// Beta holds its own key and alpha's `Mcp-Session-Id`. Before, beta's `tools/call` was served
/// on alpha's session and beta's `DELETE` closed it (alpha's next call: 404).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenants_session_id_is_not_found_on_every_method() {
    let python = python_or_skip!();
    let server = HostileServer::start(&python).await;
    let p = serve(&[format!("h={}", server.url)], false, |_| {}, |_| {}).await;
    let mcp = RawMcp::new(&p, "h");
    let alpha = mcp.open(ALPHA).await.unwrap();
    let unknown = "0123456789abcdef0123456789abcdef";

    // Every method, with another tenant's key or another key of the same tenant: exactly the
    // answer an id that never existed gets.
    for key in [BETA, ALPHA_2] {
        let foreign = mcp.call(key, &alpha, "quick", json!({"tag": "stolen"})).await;
        let never = mcp.call(key, unknown, "quick", json!({"tag": "stolen"})).await;
        assert_eq!(foreign.status, 404, "{key}: {foreign:?}");
        assert_eq!(
            (foreign.status, &foreign.headers, &foreign.body),
            (never.status, &never.headers, &never.body),
            "{key}: tools/call on a live session answered like an unknown id"
        );
        for (foreign, never) in [
            (mcp.get(key, &alpha).await, mcp.get(key, unknown).await),
            (mcp.delete(key, &alpha).await, mcp.delete(key, unknown).await),
        ] {
            assert_eq!(foreign.status, 404, "{key}: {foreign:?}");
            assert_eq!(
                (foreign.status, &foreign.headers, &foreign.body),
                (never.status, &never.headers, &never.body)
            );
        }
    }
    // Alpha's session was neither used nor closed: its own call still works.
    let own = mcp.call(ALPHA, &alpha, "quick", json!({"tag": "mine"})).await;
    assert_eq!(result_text(&own.message()), json!("quick mine"), "{own:?}");
    let stats = result_text(&mcp.call(ALPHA, &alpha, "stats", json!({})).await.message());
    assert_eq!(stats["quick"], 1, "no stolen call reached the server: {stats}");
    assert_eq!(
        metric(&p, "agentrt_mcp_refused_total", "reason=\"unknown_session\"").await,
        12.0
    );
    // The owner's DELETE closes it; from then on the id is unknown to the owner too.
    assert_eq!(mcp.delete(ALPHA, &alpha).await.status, 202);
    assert_eq!(
        mcp.call(ALPHA, &alpha, "quick", json!({"tag": "gone"})).await.status,
        404
    );
}

/// One tenant opens sessions as fast as it can. Before: 5,000 of 5,000 accepted in 15 s (no cap,
/// no gauge), resident memory 40 → 335 MiB and still 335 MiB 10 s later (sessions lived on for
/// rmcp's 5 min).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_flood_is_capped_per_tenant_and_idle_sessions_expire_freeing_their_places() {
    let python = python_or_skip!();
    let server = HostileServer::start(&python).await;
    const CAP: usize = 40;
    let p = serve(
        &[format!("h={}", server.url)],
        false,
        |o| {
            o.max_sessions_per_tenant = CAP;
            o.session_idle = Duration::from_millis(1500);
            o.call_timeout = Duration::from_millis(1000);
        },
        |_| {},
    )
    .await;
    let mcp = RawMcp::new(&p, "h");
    let mut opened = Vec::new();
    let mut refusals = Vec::new();
    for _ in 0..CAP + 60 {
        match mcp.open(ALPHA).await {
            Ok(id) => opened.push(id),
            Err(refused) => refusals.push(refused),
        }
    }
    assert_eq!(opened.len(), CAP, "the cap holds");
    assert!(refusals.iter().all(|r| r.status == 429), "{:?}", refusals[0]);
    assert!(
        refusals[0].body.contains("--mcp-max-sessions") && refusals[0].body.contains("alpha"),
        "{}",
        refusals[0].body
    );
    // Other tenants are not affected; the gauge and the refusals are on /metrics.
    let beta = mcp.open(BETA).await.expect("beta opens its own session");
    assert_eq!(metric(&p, "agentrt_mcp_sessions", "tenant=\"alpha\"").await, CAP as f64);
    assert_eq!(metric(&p, "agentrt_mcp_sessions", "tenant=\"beta\"").await, 1.0);
    assert_eq!(
        metric(&p, "agentrt_mcp_refused_total", "reason=\"session_cap\"").await,
        60.0
    );

    // Idle sessions expire: their places come back and their ids are unknown from then on.
    let deadline = Instant::now() + Duration::from_secs(20);
    while metric(&p, "agentrt_mcp_sessions", "tenant=\"alpha\"").await
        + metric(&p, "agentrt_mcp_sessions", "tenant=\"beta\"").await
        > 0.0
    {
        assert!(Instant::now() < deadline, "idle sessions did not expire");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        mcp.call(ALPHA, &opened[0], "quick", json!({"tag": "x"})).await.status,
        404
    );
    assert_eq!(mcp.call(BETA, &beta, "quick", json!({"tag": "x"})).await.status, 404);
    assert!(metric_unlabelled(&p, "agentrt_mcp_sessions_closed_total").await >= (CAP + 1) as f64);
    let fresh = mcp.open(ALPHA).await.expect("places freed by expiry are usable");
    let answer = mcp.call(ALPHA, &fresh, "quick", json!({"tag": "again"})).await;
    assert_eq!(result_text(&answer.message()), json!("quick again"));
    // The owner table gives its memory back (the flood's map shrinks once it is mostly empty).
    let mcp_gateway = p.app.gateway().expect("mounted");
    assert!(mcp_gateway.sessions.len() <= 1);
}

/// The same flood under a cap it does not reach, with sessions expiring after 3 s idle: once they
/// have gone, the process gives their memory back. (Before: nothing expired within 5 min, and
/// freed memory stayed with the allocator: 166 MiB resident after 5,000 sessions had gone, 49 MiB
/// once trimmed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_sessions_that_went_gives_its_memory_back() {
    let python = python_or_skip!();
    let server = HostileServer::start(&python).await;
    let p = serve(
        &[format!("h={}", server.url)],
        false,
        |o| {
            o.max_sessions_per_tenant = 100_000;
            o.session_idle = Duration::from_secs(3);
            o.call_timeout = Duration::from_secs(1);
        },
        |_| {},
    )
    .await;
    let mcp = RawMcp::new(&p, "h");
    mcp.open(BETA).await.unwrap();
    let start = resident_mib();
    let floods: Vec<_> = (0..50)
        .map(|_| {
            let mcp = mcp.clone();
            tokio::spawn(async move {
                for _ in 0..100 {
                    mcp.open(ALPHA).await.expect("under the cap");
                }
            })
        })
        .collect();
    for flood in floods {
        flood.await.unwrap();
    }
    let peak = resident_mib();
    let deadline = Instant::now() + Duration::from_secs(30);
    while metric(&p, "agentrt_mcp_sessions", "tenant=\"alpha\"").await > 0.0 {
        assert!(Instant::now() < deadline, "idle sessions did not expire");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The trim runs a second after the table shrank.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = resident_mib();
    eprintln!(
        "resident memory: {start:.0} MiB at the start, {peak:.0} MiB at the flood's end, {after:.0} MiB once it went"
    );
    assert!(
        peak - start > 40.0,
        "the flood should cost memory: {start:.0} → {peak:.0} MiB"
    );
    assert!(
        after - start < 0.35 * (peak - start),
        "resident {start:.0} MiB → {peak:.0} MiB at the flood's end → {after:.0} MiB after it went"
    );
    assert!(p.app.gateway().unwrap().sessions.capacity() <= 256);
}

/// MCP calls held open against `--tenant-max-in-flight 4`. Before: 12 of 12 held at once (the
/// quota counted none of them), and the tenant's chat requests were not refused meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_calls_count_against_the_tenants_in_flight_quota() {
    let python = python_or_skip!();
    let server = HostileServer::start(&python).await;
    let p = serve(
        &[format!("h={}", server.url)],
        false,
        |_| {},
        |s| {
            s.quotas.max_in_flight = 4;
        },
    )
    .await;
    let mcp = RawMcp::new(&p, "h");
    let session = mcp.open(ALPHA).await.unwrap();
    let held: Vec<_> = (0..4)
        .map(|_| {
            let (mcp, session) = (mcp.clone(), session.clone());
            tokio::spawn(async move { mcp.call(ALPHA, &session, "hold", json!({"seconds": 3})).await })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(&p, "agentrt_tenant_in_flight", "tenant=\"alpha\"").await < 4.0 {
        assert!(Instant::now() < deadline, "the held calls were not counted in flight");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A fifth call, and a model call of the same tenant: over the quota.
    let over = mcp
        .call(ALPHA, &session, "quick", json!({"tag": "fifth"}))
        .await
        .message();
    assert_eq!(over["error"]["code"], -32029, "{over}");
    let message = over["error"]["message"].as_str().unwrap();
    assert!(message.contains("--tenant-max-in-flight"), "{message}");
    let chat = support::post_json(
        &p,
        &support::chat("s", "t", "m", false),
        &[("authorization", "Bearer key-a")],
    )
    .await;
    assert_eq!(chat.status(), 429);
    // Another tenant is not affected.
    let beta = mcp.open(BETA).await.unwrap();
    let theirs = mcp.call(BETA, &beta, "quick", json!({"tag": "beta"})).await;
    assert_eq!(result_text(&theirs.message()), json!("quick beta"));
    for call in held {
        let answer = call.await.unwrap().message();
        assert_eq!(result_text(&answer), json!("held 3.0"), "{answer}");
    }
    // The places come back when the calls end.
    assert_eq!(metric(&p, "agentrt_tenant_in_flight", "tenant=\"alpha\"").await, 0.0);
    let again = mcp.call(ALPHA, &session, "quick", json!({"tag": "later"})).await;
    assert_eq!(result_text(&again.message()), json!("quick later"));
    assert!(metric(&p, "agentrt_mcp_refused_total", "reason=\"in_flight\"").await >= 1.0);
}

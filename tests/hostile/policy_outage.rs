//! A tenant's policy that fails on every request costs a handful of log lines and restarts, not
//! one per request: its slot's breaker opens, the proxy keeps serving, and `/metrics` says so.
//! In a binary of its own: it installs a global log subscriber to count the lines.

#[path = "../../host/serve/tests/stub_upstream/mod.rs"]
mod stub_upstream;
#[path = "../../host/serve/tests/support/mod.rs"]
mod support;

use agentrt_runtime::Primitive;
use support::{chat, post_json, proxy, settle};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_failing_on_every_request_is_suspended_and_logged_once() {
    let captured = agentrt_tests::CapturedLog::default();
    let sink = captured.clone();
    tracing::subscriber::set_global_default(
        tracing_subscriber::fmt()
            .with_writer(move || sink.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::WARN)
            .finish(),
    )
    .unwrap();

    let p = proxy("probe").await;
    // From this agent's registration on, the probe traps on every event it is given.
    let sick = [("x-agent-id", agentrt_tests::PROBE_SICK_AGENT)];
    assert_eq!(post_json(&p, &chat("s", "t", "tiny", false), &sick).await.status(), 200);
    // Its own request's finish succeeds; let it land first, so the failures below are in a row.
    settle(&p).await;
    let requests = 60;
    for i in 0..requests {
        let body = chat(&format!("system {i}"), "t", "tiny", false);
        assert_eq!(post_json(&p, &body, &[]).await.status(), 200, "request {i} is served");
    }
    settle(&p).await;

    let tenant = p.app.tenants().get_or_start("default").unwrap();
    let m = tenant.policy.metrics();
    assert!(m.circuit_open());
    assert_eq!(m.circuit_opens(), 1);
    // Each request tells the policy of its arrival (with a new agent's registration) and finish.
    assert!(
        m.calls(Primitive::Observe) <= 15,
        "{} observe calls",
        m.calls(Primitive::Observe)
    );
    assert!(m.calls_skipped() >= 2 * requests - 15, "{} skipped", m.calls_skipped());
    assert!(m.restarts() <= 10, "{} restarts", m.restarts());

    let log = captured.text();
    let warnings = log.lines().filter(|l| l.contains(" WARN ")).count();
    // Two lines (the host's and the proxy's) per failed call until the breaker opens after 5 in a
    // row. Before the breaker: two per request's event, ~240 here.
    assert!(warnings <= 10, "{warnings} warnings for {requests} requests:\n{log}");
    assert_eq!(log.lines().filter(|l| l.contains("circuit open")).count(), 1, "{log}");

    let metrics = support::metrics_text(&p).await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("agentrt_policy_circuit_open{") && l.ends_with(" 1")),
        "{metrics}"
    );
}

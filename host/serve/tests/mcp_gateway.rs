//! The MCP gateway inside `agentrt serve`: the proxy's tenant keys guard `/mcp`, an agent's tool
//! calls reach the same policy instance (the tenant's `kv` slot) as its model calls, each tenant's
//! tool-memo policy runs in its own `TENANT/tools` slot, and `/metrics` shows the gateway.
//! The MCP server and client are the official Python SDK's (host/mcp/tests/python); the test
//! skips, saying why, when their venv is missing.

mod exposition;
mod stub_upstream;
mod support;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use agentrt_serve::names::KV_SLOT;
use support::{chat, metrics_text, post_json, settle, Setup};

fn python_scripts() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../mcp/tests/python")
}

fn venv_python() -> Option<PathBuf> {
    let venv = std::env::var_os("AGENTRT_MCP_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/agentrt/venv-mcp"));
    Some(venv.join("bin/python")).filter(|p| p.is_file())
}

/// The probe's count of events observed, from its snapshot.
fn probe_events(p: &support::Proxy, tenant: &str) -> u64 {
    let policy = p.app.tenants().registry().get(tenant, KV_SLOT).unwrap();
    let mut probe = agentrt_sdk::testing::Harness::<agentrt_test_probe::Probe>::new([]).unwrap();
    probe.restore(&policy.snapshot().unwrap()).unwrap();
    probe.policy().events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_through_serve_reach_the_tenants_own_policy_and_metrics() {
    let Some(python) = venv_python() else {
        eprintln!("skipped: no MCP venv (run `bash host/mcp/tests/python/setup-venv.sh`)");
        return;
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = tokio::process::Command::new(&python)
        .arg(python_scripts().join("lookup_server.py"))
        .args(["--port", &port.to_string(), "--delay-ms", "50"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the lookup server did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let options: support::McpOptions = Box::new(move |engine| agentrt_mcp::GatewayOptions {
        servers: vec![
            agentrt_mcp::upstream::UpstreamSpec::parse(&format!("lookup=http://127.0.0.1:{port}/mcp")).unwrap(),
        ],
        memo_policy: Some(agentrt_mcp::MemoPolicy {
            component: agentrt_tests::load(engine, "tool-memo"),
            config: agentrt_runtime::SlotConfig::new(""),
        }),
        ..agentrt_mcp::GatewayOptions::default()
    });
    let p = Setup {
        keys: [("key-a", "alpha"), ("key-b", "beta")]
            .iter()
            .map(|(k, t)| (k.to_string(), t.to_string()))
            .collect(),
        mcp: Some(options),
        ..Setup::new("probe")
    }
    .start()
    .await;

    // The planner calls the model first (the proxy registers it), then its tools.
    let answered = post_json(
        &p,
        &chat("You plan.", "Task 9", "m", false),
        &[
            ("authorization", "Bearer key-a"),
            ("x-agent-id", "planner"),
            ("x-session-id", "s-9"),
        ],
    )
    .await;
    assert_eq!(answered.status(), 200);
    settle(&p).await;
    let before = probe_events(&p, "alpha");

    let url = format!("{}/mcp/lookup", p.url);
    let output = tokio::process::Command::new(&python)
        .arg(python_scripts().join("gateway_client.py"))
        .args([&url, "key-a", "planner", "s-9"])
        .output()
        .await
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let out: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        out["calls"][1]["meta"][agentrt_mcp::MEMO_META_KEY]["hit"],
        json!(true),
        "{out}"
    );
    settle(&p).await;
    // Three completed calls (lookup twice, fail once) = six events on alpha's own stream (the
    // unknown tool is refused before it is a call); the probe's warm-ups add their own events.
    let added = probe_events(&p, "alpha") - before;
    assert!(added >= 6, "{added} events");
    // Four calls received, the unknown tool's included.
    assert!(metrics_text(&p)
        .await
        .contains("agentrt_mcp_tool_calls_total{tenant=\"alpha\",server=\"lookup\"} 4"));
    assert!(p
        .app
        .tenants()
        .registry()
        .get("alpha", agentrt_mcp::TOOLS_SLOT)
        .is_some());
    assert!(p
        .app
        .tenants()
        .registry()
        .get("beta", agentrt_mcp::TOOLS_SLOT)
        .is_none());

    // The proxy's keys guard /mcp, before any body is read.
    let refused = reqwest::Client::new().post(&url).body("{").send().await.unwrap();
    assert_eq!(refused.status(), 401);
    let metrics = metrics_text(&p).await;
    assert!(
        metrics.contains("agentrt_mcp_memo_hits_total{tenant=\"alpha\",server=\"lookup\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("agentrt_mcp_refused_total{reason=\"auth\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("tenant=\"alpha\",slot=\"tools\""),
        "the memo slot is listed with the other slots"
    );
    // The gateway's families and series' label names, as they were written by hand before.
    exposition::assert_golden(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp_metrics_names.txt"),
        &exposition::names(&metrics, |name| name.starts_with("agentrt_mcp_")),
    );
    server.kill().await.unwrap();
}

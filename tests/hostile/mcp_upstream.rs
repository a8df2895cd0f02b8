//! The MCP gateway in front of servers it cannot trust with time or secrets: a server that never
//! answers, or keeps a call alive and never answers, is cut at the call deadline and holds no
//! other agent's call; a `stdio:` server (third-party code) starts with a minimal environment,
//! none of agentrt's secrets; and no error about a server repeats the credentials in its URL.
//! `agentrt serve` on loopback in front of a real Python MCP server (tests/hostile/fixtures).

mod mcp_support;
#[path = "../../host/serve/tests/stub_upstream/mod.rs"]
mod stub_upstream;
#[path = "../../host/serve/tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use mcp_support::*;

/// Agent A's calls hang: on a server that streams its answers, one never answers and one drips a
/// log notification every 100 ms and never answers; on a server in the SDK's JSON response mode
/// (a POST is answered only when its result is ready), twenty never answer. Agent B of the same
/// tenant then calls a quick tool on the second server. Before: none of A's calls had an answer
/// after 25 s (no deadline), and B's call waited 25 s+ behind A's twenty (19.6 ms behind one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers_or_drips_is_cut_at_the_deadline_and_holds_no_other_call() {
    let python = python_or_skip!();
    let streaming = HostileServer::start(&python).await;
    let json_mode = HostileServer::start_with(&python, &["--json-response"]).await;
    let p = serve(
        &[format!("h={}", streaming.url), format!("j={}", json_mode.url)],
        false,
        |o| o.call_timeout = Duration::from_secs(3),
        |_| {},
    )
    .await;
    let (h, j) = (RawMcp::new(&p, "h"), RawMcp::new(&p, "j"));
    let (h_a, j_a, j_b) = (
        h.open(ALPHA).await.unwrap(),
        j.open(ALPHA).await.unwrap(),
        j.open(ALPHA).await.unwrap(),
    );
    let warm = j.call_raw(ALPHA, &j_b, "agent-b", "quick", r#"{"tag":"warm"}"#).await;
    assert_eq!(result_text(&warm.message()), json!("quick warm"));

    let started = Instant::now();
    let stuck = |mcp: &RawMcp, session: &str, tool: &'static str| {
        let (mcp, session) = (mcp.clone(), session.to_string());
        tokio::spawn(async move {
            let answer = mcp
                .call_raw(ALPHA, &session, "agent-a", tool, r#"{"interval_ms":100}"#)
                .await;
            (answer.message(), Instant::now())
        })
    };
    let mut calls = vec![stuck(&h, &h_a, "hang"), stuck(&h, &h_a, "drip")];
    calls.extend((0..20).map(|_| stuck(&j, &j_a, "hang")));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let asked = Instant::now();
    let quick = j.call_raw(ALPHA, &j_b, "agent-b", "quick", r#"{"tag":"b"}"#).await;
    let waited = asked.elapsed();
    assert_eq!(result_text(&quick.message()), json!("quick b"));
    assert!(
        waited < Duration::from_millis(2500),
        "agent B waited {waited:?} behind agent A's stuck calls"
    );

    for call in calls {
        let (answer, at): (Value, Instant) = call.await.unwrap();
        let took = at - started;
        assert_eq!(answer["error"]["code"], -32001, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("--mcp-call-timeout-ms") && message.contains("tools/call `"),
            "{message}"
        );
        assert!(
            took >= Duration::from_secs(3) && took < Duration::from_secs(15),
            "{took:?}"
        );
    }
    for (server, n) in [("h", 2.0), ("j", 20.0)] {
        let labels = format!("tenant=\"alpha\",server=\"{server}\"");
        assert_eq!(
            metric(&p, "agentrt_mcp_call_timeouts_total", &labels).await,
            n,
            "{server}"
        );
    }
    // The servers were told: every stuck handler was cancelled there.
    for (mcp, session, n) in [(&h, &h_a, 2), (&j, &j_b, 20)] {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let stats = result_text(&mcp.call(ALPHA, session, "stats", json!({})).await.message());
            if stats["cancelled"] == n {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the server's handlers were not cancelled: {stats}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

const SECRETS: [(&str, &str); 4] = [
    ("AGENTRT_ADMIN_TOKEN", "admin-sentinel-7f3a"),
    ("AGENTRT_CACHE_SALT_SECRET", "salt-sentinel-7f3a"),
    ("AGENTRT_METRICS_TOKEN", "metrics-sentinel-7f3a"),
    ("AGENTRT_UPSTREAM_API_KEY", "upstream-sentinel-7f3a"),
];

/// agentrt's secrets in its environment, a `stdio:` server launched by the gateway. Before: the
/// child's environment had all four `AGENTRT_*` secrets (and everything else of agentrt's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_server_starts_with_a_minimal_environment_and_none_of_agentrts_secrets() {
    let python = python_or_skip!();
    // The proxy runs in this process: its environment is this one. (std's environment lock
    // orders this with the child's spawn.)
    for (name, value) in SECRETS {
        std::env::set_var(name, value);
    }
    std::env::set_var("AGENTRT_TEST_PASSED_ON", "passed-by-name");
    let p = serve(
        &[HostileServer::stdio_spec(&python, "s")],
        false,
        |o| {
            o.stdio_env = agentrt_mcp::child_env::ChildEnv::parse(&[
                "AGENTRT_TEST_PASSED_ON".into(),
                "TOOL_MODE=set-by-value".into(),
            ])
            .unwrap()
        },
        |_| {},
    )
    .await;
    let mcp = RawMcp::new(&p, "s");
    let session = mcp.open(ALPHA).await.unwrap();
    let env = result_text(&mcp.call(ALPHA, &session, "env", json!({})).await.message());
    let env = env.as_object().expect("the server's environment");
    let text = Value::Object(env.clone()).to_string();
    for (name, value) in SECRETS {
        assert!(
            !env.contains_key(name) && !text.contains(value),
            "{name} reached the child: {text}"
        );
    }
    assert_eq!(env["AGENTRT_TEST_PASSED_ON"], "passed-by-name", "named by the operator");
    assert_eq!(env["TOOL_MODE"], "set-by-value");
    assert_eq!(
        env.get("PATH").and_then(Value::as_str),
        std::env::var("PATH").ok().as_deref(),
        "the base: where programs are"
    );
    // Nothing beyond the base and the operator's two, but what the interpreter sets itself.
    let allowed: Vec<&str> = agentrt_mcp::child_env::BASE
        .iter()
        .copied()
        .chain(["AGENTRT_TEST_PASSED_ON", "TOOL_MODE", "LC_CTYPE", "PYTHONIOENCODING"])
        .collect();
    let extra: Vec<&String> = env.keys().filter(|k| !allowed.contains(&k.as_str())).collect();
    assert!(extra.is_empty(), "more than the base: {extra:?}");
}

/// A server URL with credentials (`user:password@`, `?token=`), unreachable. Before: the
/// `initialize` error the agent got carried the password and the token (the URL in full).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_about_a_server_never_repeat_the_credentials_in_its_url() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let p = serve(
        &[format!("c=http://user:hunter2@127.0.0.1:{closed}/mcp?token=t0ken")],
        false,
        |o| o.connect_timeout = Duration::from_secs(2),
        |_| {},
    )
    .await;
    let mcp = RawMcp::new(&p, "c");
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}});
    let answer = mcp.post(ALPHA, None, init.to_string()).await;
    let message = answer.message();
    let text = message["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("{message}"));
    assert!(
        text.contains("`c`") && text.contains("handshake"),
        "names the server: {text}"
    );
    assert!(!text.contains("hunter2") && !text.contains("t0ken"), "{text}");
    // Nor does a bad --mcp-server value.
    for bad in [
        "x=https://user:hunter2@host/mcp",
        "http://user:hunter2@host/mcp",
        "x=ftp://hunter2@host",
    ] {
        let error = agentrt_mcp::upstream::UpstreamSpec::parse(bad).unwrap_err();
        assert!(!error.contains("hunter2"), "{error}");
    }
}

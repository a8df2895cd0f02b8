//! Lifecycle hints through `agentrt serve` on loopback, in front of the stub upstream, observed in
//! what the tenants' `probe` policy heard (its snapshot, decoded natively): a session closed by
//! header or by `POST /v1/agentrt/hints` ends once as `closed`; a response that asks for a tool
//! (chat whole and streamed, Messages whole and streamed) is a `session-wait` with the tool's
//! hash; one tenant's hint never reaches another's session; malformed, oversized and too fast
//! calls are refused whole; `/metrics` counts them. One proxy for all of it.

mod stub_upstream;
mod support;

use std::time::Duration;

use agentrt_mcp::keys::tool_hash;
use agentrt_serve::identity::tenant_session;
use serde_json::{json, Value};
use support::*;

/// `body` posted to `/v1/agentrt/hints` as the holder of `key`: status, JSON answer, Retry-After.
async fn hint(p: &Proxy, key: &str, body: &Value) -> (u16, Value, Option<String>) {
    let response = reqwest::Client::new()
        .post(format!("{}/v1/agentrt/hints", p.url))
        .bearer_auth(key)
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let retry = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    (status, response.json().await.unwrap_or(Value::Null), retry)
}

/// A call of `path` (`/v1/chat/completions` or `/v1/messages`) by `key` in `session` as `agent`,
/// with `extra` headers: its status.
async fn call(
    p: &Proxy,
    key: &str,
    path: &str,
    body: &Value,
    session: &str,
    agent: &str,
    extra: &[(&str, &str)],
) -> u16 {
    let auth = format!("Bearer {key}");
    let mut headers = vec![
        ("authorization", auth.as_str()),
        ("x-session-id", session),
        ("x-agent-id", agent),
    ];
    headers.extend_from_slice(extra);
    let response = post(&format!("{}{path}", p.url), body.to_string(), &headers).await;
    let status = response.status().as_u16();
    // Read to the end: a stream's end is when its hints apply.
    let _ = response.bytes().await;
    status
}

fn closes(body: &[&str]) -> Value {
    json!({"hints": body.iter().map(|s| json!({"type": "session_closed", "session": s})).collect::<Vec<_>>()})
}

fn messages(model: &str, stream: bool) -> Value {
    json!({"model": model, "stream": stream, "max_tokens": 8, "system": "You run commands.",
        "messages": [{"role": "user", "content": "List the files."}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hints_reach_only_their_tenants_policy_once_and_bad_ones_are_refused_whole() {
    let p = Setup {
        hint_rate: 20.0,
        ..two_tenants("probe")
    }
    .start()
    .await;
    let alpha = |key: &str| tenant_session("alpha", key);
    let chat_path = "/v1/chat/completions";
    let plain = chat("You are the planner.", "Plan it.", "tiny", false);

    // (1) Closed by header, with the next agent; closing it again by the endpoint is a duplicate.
    let closing = [("x-agentrt-session-end", "closed"), ("x-agentrt-next-agent", "coder")];
    assert_eq!(
        call(&p, "key-a", chat_path, &plain, "s-header", "planner", &closing).await,
        200
    );
    let (status, answer, _) = hint(&p, "key-a", &closes(&["s-header"])).await;
    assert_eq!((status, answer), (200, json!({"accepted": 1, "duplicates": 1})));
    // Closed by the endpoint: twice in one call, once more in another, then reopened by a request
    // and closed again; a session never seen is accepted too.
    assert_eq!(call(&p, "key-a", chat_path, &plain, "s-ep", "planner", &[]).await, 200);
    let (status, answer, _) = hint(&p, "key-a", &closes(&["s-ep", "s-ep", "never-seen"])).await;
    assert_eq!((status, answer), (200, json!({"accepted": 3, "duplicates": 1})));
    assert_eq!(hint(&p, "key-a", &closes(&["s-ep"])).await.1["duplicates"], 1);
    assert_eq!(call(&p, "key-a", chat_path, &plain, "s-ep", "planner", &[]).await, 200);
    assert_eq!(hint(&p, "key-a", &closes(&["s-ep"])).await.1["duplicates"], 0);

    let probe = heard(&p, "alpha").await;
    assert_eq!(
        probe.closed,
        vec![alpha("s-header"), alpha("s-ep"), alpha("never-seen"), alpha("s-ep")],
        "each close once per time the session was open"
    );
    let tenant = p.app.tenants().get_or_start("alpha").unwrap();
    assert!(
        !tenant.agents.is_live(alpha("s-ep")),
        "a closed session is not ended again as idle"
    );
    let (planner, coder) = (
        tenant.agents.handle_of("planner").unwrap(),
        tenant.agents.handle_of("coder").unwrap(),
    );
    assert_eq!(probe.handoffs, vec![(alpha("s-header"), planner, coder)]);

    // (2) Responses that ask for a tool: chat whole and streamed, Messages whole and streamed.
    let tool_chat = chat("You are the researcher.", "Find it.", "tool-call", false);
    let tool_chat_streamed = chat("You are the researcher.", "Find it.", "tool-call", true);
    assert_eq!(
        call(&p, "key-a", chat_path, &tool_chat, "s-tool", "researcher", &[]).await,
        200
    );
    // The tool's result comes back after a while: the gap is learned per (agent, tool).
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(
        call(&p, "key-a", chat_path, &tool_chat_streamed, "s-tool", "researcher", &[]).await,
        200
    );
    assert_eq!(
        call(
            &p,
            "key-a",
            "/v1/messages",
            &messages("tool-call", false),
            "s-tool",
            "shell",
            &[]
        )
        .await,
        200
    );
    assert_eq!(
        call(
            &p,
            "key-a",
            "/v1/messages",
            &messages("tool-call", true),
            "s-tool",
            "shell",
            &[]
        )
        .await,
        200
    );
    assert_eq!(
        call(&p, "key-a", chat_path, &plain, "s-tool", "planner", &[]).await,
        200,
        "no tool asked"
    );
    // Said by the framework: a tool wait with its expected time, a user wait.
    let waits = json!({"hints": [
        {"type": "wait", "session": "s-tool", "agent": "researcher", "kind": "tool", "tool": "web_search", "expected_ms": 2000},
        {"type": "wait", "session": "s-tool", "kind": "user"},
    ]});
    assert_eq!(
        hint(&p, "key-a", &waits).await.1,
        json!({"accepted": 2, "duplicates": 0})
    );
    // The same wait read from a response and then said by the framework (the Agents SDK's tool
    // hook runs after the model's answer): told once. Said with an expected time, that time is
    // news and is told, and the wait still started when the response asked for the tool.
    assert_eq!(
        call(&p, "key-a", chat_path, &tool_chat, "s-dup", "researcher", &[]).await,
        200
    );
    let same_wait = |expected_ms: Option<u64>| {
        let mut wait =
            json!({"type": "wait", "session": "s-dup", "agent": "researcher", "kind": "tool", "tool": "web_search"});
        if let Some(ms) = expected_ms {
            wait["expected_ms"] = json!(ms);
        }
        json!({ "hints": [wait] })
    };
    assert_eq!(
        hint(&p, "key-a", &same_wait(None)).await.1,
        json!({"accepted": 1, "duplicates": 1})
    );
    assert_eq!(
        hint(&p, "key-a", &same_wait(Some(1500))).await.1,
        json!({"accepted": 1, "duplicates": 0})
    );
    let probe = heard(&p, "alpha").await;
    let tenant = p.app.tenants().get_or_start("alpha").unwrap();
    let (researcher, shell) = (
        tenant.agents.handle_of("researcher").unwrap(),
        tenant.agents.handle_of("shell").unwrap(),
    );
    let (search, bash, s) = (tool_hash("web_search"), tool_hash("bash"), alpha("s-tool"));
    assert_eq!(
        probe.waits,
        vec![
            (s, researcher, 0, search, 0, false),
            (s, researcher, 0, search, 0, false),
            (s, shell, 0, bash, 0, false),
            (s, shell, 0, bash, 0, false),
            (s, researcher, 0, search, 2_000_000, true),
            (s, 0, 1, 0, 0, true),
            (alpha("s-dup"), researcher, 0, search, 0, false),
            (alpha("s-dup"), researcher, 0, search, 1_500_000, true),
        ]
    );
    let (status, stats) = admin_get(&p, "/admin/tenants/alpha/stats", "s3cret").await;
    assert_eq!(status, 200);
    let times = &stats["hints"]["tool_return_times"];
    let row = times
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["agent"] == "researcher" && r["tool"] == "web_search")
        .unwrap_or_else(|| panic!("{stats}"));
    // Two gaps: the 30 ms wait, and the streamed reply's wait that the Messages call ended.
    assert_eq!(row["samples"], 2, "{row}");
    assert!(row["median_ms"].as_f64().unwrap() >= 15.0, "{row}");

    // (3) Tenant isolation: beta closing alpha's session key closes beta's own session of that
    // name, never alpha's.
    assert_eq!(call(&p, "key-a", chat_path, &plain, "s-iso", "planner", &[]).await, 200);
    assert_eq!(hint(&p, "key-b", &closes(&["s-iso"])).await.0, 200);
    assert!(!heard(&p, "alpha").await.closed.contains(&alpha("s-iso")));
    assert!(tenant.agents.is_live(alpha("s-iso")));
    assert_eq!(heard(&p, "beta").await.closed, vec![tenant_session("beta", "s-iso")]);

    // (4) Refused whole: a bad hint after a good one applies neither; too many; too large; a bad
    // header; a stranger; then beta past its rate.
    assert_eq!(call(&p, "key-a", chat_path, &plain, "s-bad", "planner", &[]).await, 200);
    let bad = json!({"hints": [{"type": "session_closed", "session": "s-bad"},
        {"type": "wait", "session": "s-bad", "kind": "user"}, {"type": "handoff", "session": "s-bad", "to_agent": "coder"},
        {"type": "wait", "session": "s-bad", "kind": "x"}]});
    let (status, answer, _) = hint(&p, "key-a", &bad).await;
    assert_eq!(status, 400);
    assert_eq!(answer["error"]["type"], "invalid_hint");
    assert_eq!(
        answer["error"]["message"],
        "hints[3].kind: expected \"tool\" or \"user\", got \"x\""
    );
    let many: Vec<String> = (0..65).map(|i| format!("m{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let (status, answer, _) = hint(&p, "key-a", &closes(&many)).await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer["error"]["message"]
        .as_str()
        .unwrap()
        .contains("over the limit of 64"));
    let long = "x".repeat(250);
    let huge: Vec<&str> = (0..80).map(|_| long.as_str()).collect();
    assert_eq!(hint(&p, "key-a", &closes(&huge)).await.0, 413, "over 16 KiB");
    let bad_header = [("x-agentrt-session-end", "yes")];
    assert_eq!(
        call(&p, "key-a", chat_path, &plain, "s-bad", "planner", &bad_header).await,
        400
    );
    assert_eq!(hint(&p, "nobody", &closes(&["s-bad"])).await.0, 401);
    let probe = heard(&p, "alpha").await;
    assert!(
        !probe.closed.contains(&alpha("s-bad")),
        "nothing of a refused call applied"
    );
    assert!(p
        .app
        .tenants()
        .get_or_start("alpha")
        .unwrap()
        .agents
        .is_live(alpha("s-bad")));

    let thirty: Vec<String> = (0..30).map(|i| format!("r{i}")).collect();
    let thirty: Vec<&str> = thirty.iter().map(String::as_str).collect();
    assert_eq!(
        hint(&p, "key-b", &closes(&thirty)).await.0,
        200,
        "within the burst of 40"
    );
    let (status, answer, retry) = hint(&p, "key-b", &closes(&thirty)).await;
    assert_eq!(status, 429, "{answer}");
    let retry: u64 = retry.expect("Retry-After").parse().unwrap();
    assert!(
        (1..=2).contains(&retry),
        "30 more at 20 a second, about 10 left: {retry} s"
    );
    assert_eq!(
        heard(&p, "beta").await.closed.len(),
        31,
        "the refused call applied nothing"
    );

    // (5) /metrics counts them.
    let metrics = metrics_text(&p).await;
    for series in [
        "agentrt_hints_total{tenant=\"alpha\",kind=\"closed\",source=\"header\",outcome=\"applied\"} 1",
        "agentrt_hints_total{tenant=\"alpha\",kind=\"closed\",source=\"endpoint\",outcome=\"duplicate\"} 3",
        "agentrt_hints_total{tenant=\"alpha\",kind=\"closed\",source=\"endpoint\",outcome=\"unknown_session\"} 1",
        "agentrt_hints_total{tenant=\"alpha\",kind=\"handoff\",source=\"header\",outcome=\"applied\"} 1",
        "agentrt_hints_total{tenant=\"alpha\",kind=\"wait_tool\",source=\"response\",outcome=\"applied\"} 5",
        "agentrt_hints_total{tenant=\"alpha\",kind=\"wait_tool\",source=\"endpoint\",outcome=\"duplicate\"} 1",
        "agentrt_hints_total{tenant=\"alpha\",kind=\"wait_user\",source=\"endpoint\",outcome=\"applied\"} 1",
        "agentrt_hints_refused_total{tenant=\"alpha\",reason=\"malformed\"} 2",
        "agentrt_hints_refused_total{tenant=\"alpha\",reason=\"too_large\"} 2",
        "agentrt_hints_refused_total{tenant=\"beta\",reason=\"rate\"} 1",
    ] {
        assert!(metrics.contains(series), "{series} missing from:\n{metrics}");
    }
}

/// A malformed hint header is refused from the request's head: a client that declared a 100 MiB
/// body and sent none of it gets its 400 at once, and the proxy read nothing of the body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_hint_header_is_refused_before_any_body_byte() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let p = two_tenants("probe").start().await;
    let address = p.url.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {address}\r\nauthorization: Bearer key-a\r\n\
         content-type: application/json\r\ncontent-length: {}\r\nx-agentrt-session-end: yes\r\n\r\n",
        100 << 20
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    // No body byte is ever sent: the answer can only come from the head.
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), async {
        let mut chunk = [0u8; 4096];
        loop {
            let n = stream.read(&mut chunk).await.unwrap_or(0);
            answer.extend_from_slice(&chunk[..n]);
            if n == 0 || answer.windows(13).any(|w| w == b"invalid_hint\"") {
                break;
            }
        }
    })
    .await;
    let text = String::from_utf8_lossy(&answer);
    assert!(read.is_ok(), "no answer in 10 s without the body: {text:?}");
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
    assert!(
        text.contains("x-agentrt-session-end: expected \\\"closed\\\", got \\\"yes\\\""),
        "{text}"
    );
    assert!(
        metrics_text(&p)
            .await
            .contains("agentrt_hints_refused_total{tenant=\"alpha\",reason=\"malformed\"} 1"),
        "counted for the tenant"
    );
}

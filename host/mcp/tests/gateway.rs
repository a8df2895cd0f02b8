//! The gateway between a real MCP client (rmcp) and a real MCP server (the official Python SDK),
//! with the real tool-memo component: forwarding, events, memo, tenants, errors, failures,
//! cancellation.

mod support;

use std::time::Duration;

use rmcp::model::{GetPromptRequestParams, ReadResourceRequestParams};
use serde_json::json;

use agentrt_mcp::keys::{tool_hash, ResultKey};
use agentrt_runtime::types::Event;

use support::*;

const LABELS_A: &str = "tenant=\"alpha\",server=\"lookup\"";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_resources_and_prompts_are_forwarded_unchanged() {
    let python = python_or_skip!();
    let server = LookupServer::start(&python, 10, 60_000).await;
    let gw = gateway(&[format!("lookup={}", server.url)], Some(&[])).await;
    let direct = client(&server.url, "unused", "planner", "s1").await;
    let through = client(&format!("{}/mcp/lookup", gw.url), "key-a", "planner", "s1").await;

    let listed = |c: &Client| {
        let peer = c.peer().clone();
        async move { serde_json::to_value(peer.list_all_tools().await.unwrap()).unwrap() }
    };
    let (a, b) = (listed(&direct).await, listed(&through).await);
    assert_eq!(a, b, "tools, schemas and annotations as the server lists them");
    assert!(b
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["annotations"]["readOnlyHint"] == json!(true)));
    assert_eq!(
        serde_json::to_value(direct.peer().list_all_resources().await.unwrap()).unwrap(),
        serde_json::to_value(through.peer().list_all_resources().await.unwrap()).unwrap()
    );
    assert_eq!(
        serde_json::to_value(direct.peer().list_all_resource_templates().await.unwrap()).unwrap(),
        serde_json::to_value(through.peer().list_all_resource_templates().await.unwrap()).unwrap()
    );
    assert_eq!(
        serde_json::to_value(direct.peer().list_all_prompts().await.unwrap()).unwrap(),
        serde_json::to_value(through.peer().list_all_prompts().await.unwrap()).unwrap()
    );
    let read = ReadResourceRequestParams::new("facts://topic/paris");
    assert_eq!(
        serde_json::to_value(direct.peer().read_resource(read.clone()).await.unwrap()).unwrap(),
        serde_json::to_value(through.peer().read_resource(read).await.unwrap()).unwrap()
    );
    let mut prompt = GetPromptRequestParams::new("ask");
    prompt.arguments = json!({"topic": "rome"}).as_object().cloned();
    let got = serde_json::to_value(through.peer().get_prompt(prompt.clone()).await.unwrap()).unwrap();
    assert_eq!(
        got,
        serde_json::to_value(direct.peer().get_prompt(prompt).await.unwrap()).unwrap()
    );
    assert!(got.to_string().contains("rome"));
    // The agent sees the server's own name and instructions.
    let info = through.peer().peer_info().unwrap();
    assert_eq!(info.server_info.as_ref().unwrap().name, "lookup");
    assert!(info.instructions.as_deref().unwrap_or("").contains("change over time"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_read_only_call_is_answered_from_memory_and_reported_as_tool_events() {
    let python = python_or_skip!();
    let server = LookupServer::start(&python, 200, 60_000).await;
    let gw = gateway(&[format!("lookup={}", server.url)], Some(&[("ttl-ms", "60000")])).await;
    let url = format!("{}/mcp/lookup", gw.url);
    let first_session = client(&url, "key-a", "planner", "task-1").await;
    let other_session = client(&url, "key-a", "planner", "task-2").await;

    let fetched = first_session
        .peer()
        .call_tool(call("lookup", json!({"topic": "paris"})))
        .await
        .unwrap();
    assert!(!is_memo_hit(&fetched));
    // Another session of the same tenant, the same arguments in another order of keys: from memory.
    let started = std::time::Instant::now();
    let served = other_session
        .peer()
        .call_tool(call("lookup", json!({"topic": "paris"})))
        .await
        .unwrap();
    let waited = started.elapsed();
    assert!(is_memo_hit(&served), "marked in _meta: {:?}", served.meta);
    assert_eq!(text(&served), text(&fetched), "the same answer");
    assert!(waited < Duration::from_millis(150), "no 200 ms server call: {waited:?}");
    let meta = &served.meta.as_ref().unwrap()[agentrt_mcp::MEMO_META_KEY];
    assert!(meta["savedMs"].as_u64().unwrap() >= 200, "{meta}");
    let stats = server_stats(&first_session).await;
    assert_eq!(stats["lookup"], 1, "the server answered once");
    assert_eq!(gw.metric("agentrt_mcp_memo_hits_total", LABELS_A), 1.0);
    assert_eq!(gw.metric("agentrt_mcp_memo_stored_total", LABELS_A), 1.0);
    assert!(gw.metric("agentrt_mcp_memo_saved_seconds_total", LABELS_A) >= 0.2);

    // Each call is a tool-call then a tool-return on the tenant's stream, with the proxy's agent
    // handle and session ids; the hit's return carries what the agent waited.
    let key = ResultKey::of("lookup", "lookup", json!({"topic": "paris"}).as_object()).key;
    let tool_events: Vec<Event> = gw
        .events_of("alpha")
        .into_iter()
        .filter(|e| {
            matches!(e, Event::ToolCall(c) if c.args_hash == key)
                || matches!(e, Event::ToolReturn(r) if r.args_hash == key)
        })
        .collect();
    assert_eq!(tool_events.len(), 4, "{tool_events:?}");
    let (Event::ToolCall(c1), Event::ToolReturn(r1), Event::ToolCall(c2), Event::ToolReturn(r2)) =
        (&tool_events[0], &tool_events[1], &tool_events[2], &tool_events[3])
    else {
        panic!("call, return, call, return: {tool_events:?}");
    };
    assert_eq!((c1.agent, c1.tool), (7, tool_hash("lookup")));
    assert_eq!(c1.session, session_of("alpha", "task-1"));
    assert_eq!(c2.session, session_of("alpha", "task-2"));
    assert!(r1.ok && r2.ok && r1.result_tokens > 0);
    assert!(r1.latency_us >= 200_000 && r2.latency_us < 150_000, "{r1:?} {r2:?}");
    assert!(c2.at_us > c1.at_us);
    assert!(
        gw.events_of("beta").is_empty(),
        "nothing reaches another tenant's stream"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_with_side_effects_errors_and_other_tenants_never_get_memoized_results() {
    let python = python_or_skip!();
    let server = LookupServer::start(&python, 50, 60_000).await;
    let gw = gateway(&[format!("lookup={}", server.url)], Some(&[])).await;
    let url = format!("{}/mcp/lookup", gw.url);
    let alpha = client(&url, "key-a", "planner", "s").await;
    let beta = client(&url, "key-b", "planner", "s").await;

    // A write (no readOnlyHint) runs every time.
    for _ in 0..2 {
        alpha
            .peer()
            .call_tool(call("record", json!({"note": "x"})))
            .await
            .unwrap();
    }
    assert_eq!(server_stats(&alpha).await["record"], 2);
    // A failing read-only tool: its error result passes through and is not kept.
    for _ in 0..2 {
        let failed = alpha
            .peer()
            .call_tool(call("fail", json!({"message": "m"})))
            .await
            .unwrap();
        assert_eq!(failed.is_error, Some(true));
        assert!(!is_memo_hit(&failed));
    }
    assert_eq!(server_stats(&alpha).await["fail"], 2);
    // Alpha's kept result is not beta's: beta's call goes to the server.
    alpha
        .peer()
        .call_tool(call("lookup", json!({"topic": "oslo"})))
        .await
        .unwrap();
    assert!(is_memo_hit(
        &alpha
            .peer()
            .call_tool(call("lookup", json!({"topic": "oslo"})))
            .await
            .unwrap()
    ));
    let for_beta = beta
        .peer()
        .call_tool(call("lookup", json!({"topic": "oslo"})))
        .await
        .unwrap();
    assert!(!is_memo_hit(&for_beta));
    assert_eq!(server_stats(&alpha).await["lookup"], 2, "one call per tenant");
    assert_eq!(gw.metric("agentrt_mcp_tool_errors_total", LABELS_A), 2.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_past_its_ttl_is_fetched_again() {
    let python = python_or_skip!();
    let server = LookupServer::start(&python, 20, 60_000).await;
    let gw = gateway(&[format!("lookup={}", server.url)], Some(&[("ttl-ms", "400")])).await;
    let alpha = client(&format!("{}/mcp/lookup", gw.url), "key-a", "planner", "s").await;
    let lookup = || call("lookup", json!({"topic": "lima"}));
    alpha.peer().call_tool(lookup()).await.unwrap();
    assert!(is_memo_hit(&alpha.peer().call_tool(lookup()).await.unwrap()));
    tokio::time::sleep(Duration::from_millis(450)).await;
    assert!(
        !is_memo_hit(&alpha.peer().call_tool(lookup()).await.unwrap()),
        "older than 400 ms"
    );
    assert_eq!(server_stats(&alpha).await["lookup"], 2);
    assert_eq!(gw.metric("agentrt_mcp_memo_expired_total", LABELS_A), 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_clear_errors_and_the_gateway_keeps_serving() {
    let python = python_or_skip!();
    let server = LookupServer::start(&python, 10, 60_000).await;
    let gw = gateway(&[format!("lookup={}", server.url)], Some(&[])).await;
    let url = format!("{}/mcp/lookup", gw.url);
    let alpha = client(&url, "key-a", "planner", "s").await;

    let unknown = alpha
        .peer()
        .call_tool(call("teleport", json!({})))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        unknown.contains("unknown tool `teleport`") && unknown.contains("lookup"),
        "{unknown}"
    );
    assert!(
        unknown.contains("offers") && unknown.contains("stats"),
        "names what the server offers: {unknown}"
    );

    let http = reqwest::Client::new();
    // No key, or a wrong one: refused from the headers alone.
    let refused = http.post(&url).body("{").send().await.unwrap();
    assert_eq!(refused.status(), 401);
    assert!(refused.text().await.unwrap().contains("Authorization"));
    let refused = http.post(&url).bearer_auth("nope").body("{}").send().await.unwrap();
    assert_eq!(refused.status(), 401);
    // Malformed JSON-RPC from an authenticated caller: an error, not a crash.
    let malformed = http
        .post(&url)
        .bearer_auth("key-a")
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert!(malformed.status().is_client_error(), "{}", malformed.status());
    // A server that is not configured: 404 naming those that are.
    let missing = http
        .post(format!("{}/mcp/nowhere", gw.url))
        .bearer_auth("key-a")
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    assert!(missing.text().await.unwrap().contains("configured: lookup"));
    assert_eq!(
        gw.gateway.metrics.refused(agentrt_mcp::metrics::Refused::Auth),
        2,
        "no key, wrong key"
    );
    // Still serving.
    assert!(alpha
        .peer()
        .call_tool(call("lookup", json!({"topic": "x"})))
        .await
        .is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_dies_mid_call_is_named_in_the_error_and_replaced_on_the_next_request() {
    let python = python_or_skip!();
    // A stdio server the gateway launches itself.
    let stdio = format!(
        "files=stdio:{} {} --stdio --delay-ms 10",
        python.display(),
        server_script().display()
    );
    let gw = gateway(&[stdio], Some(&[])).await;
    let alpha = client(&format!("{}/mcp/files", gw.url), "key-a", "planner", "s").await;
    let first_pid = server_stats(&alpha).await["pid"].clone();
    let error = alpha
        .peer()
        .call_tool(call("crash", json!({})))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("MCP server `files`") && error.contains("tools/call `crash`"),
        "{error}"
    );
    // The next request starts a new server process.
    let answer = alpha
        .peer()
        .call_tool(call("lookup", json!({"topic": "y"})))
        .await
        .unwrap();
    assert_eq!(text(&answer)["topic"], "y");
    assert_ne!(server_stats(&alpha).await["pid"], first_pid, "a new process");
    let labels = "tenant=\"alpha\",server=\"files\"";
    assert!(gw.metric("agentrt_mcp_upstream_errors_total", labels) >= 1.0);

    // An HTTP server killed in the middle of a call, then back on the same port.
    let python2 = python.clone();
    let mut server = LookupServer::start(&python, 10, 60_000).await;
    let port = server.port;
    let gw = gateway(&[format!("lookup={}", server.url)], Some(&[])).await;
    let alpha = client(&format!("{}/mcp/lookup", gw.url), "key-a", "planner", "s").await;
    let peer = alpha.peer().clone();
    let slow = tokio::spawn(async move { peer.call_tool(call("slow", json!({"seconds": 5.0}))).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    server.kill();
    let error = tokio::time::timeout(Duration::from_secs(10), slow)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err()
        .to_string();
    assert!(error.contains("MCP server `lookup`"), "{error}");
    let _back = LookupServer::start_on(&python2, port, 10, 60_000).await;
    let answer = alpha
        .peer()
        .call_tool(call("lookup", json!({"topic": "z"})))
        .await
        .unwrap();
    assert_eq!(text(&answer)["topic"], "z");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_call_is_cancelled_at_the_server() {
    let python = python_or_skip!();
    let server = LookupServer::start(&python, 10, 60_000).await;
    let gw = gateway(&[format!("lookup={}", server.url)], Some(&[])).await;
    let alpha = client(&format!("{}/mcp/lookup", gw.url), "key-a", "planner", "s").await;
    let peer = alpha.peer().clone();
    let slow = tokio::spawn(async move { peer.call_tool(call("slow", json!({"seconds": 30.0}))).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Dropping rmcp's call sends `notifications/cancelled` to the gateway.
    slow.abort();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let stats = server_stats(&alpha).await;
        if stats["slow_cancelled"] == 1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the server never saw the cancellation: {stats}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(gw.metric("agentrt_mcp_cancelled_total", LABELS_A), 1.0);
    let returns: Vec<_> = gw
        .events_of("alpha")
        .into_iter()
        .filter_map(|e| match e {
            Event::ToolReturn(r) if r.tool == tool_hash("slow") => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(returns.len(), 1);
    assert!(!returns[0].ok, "a cancelled call returns not ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_client_works_through_the_gateway() {
    let python = python_or_skip!();
    let server = LookupServer::start(&python, 100, 60_000).await;
    let gw = gateway(&[format!("lookup={}", server.url)], Some(&[])).await;
    let script = server_script().with_file_name("gateway_client.py");
    let url = format!("{}/mcp/lookup", gw.url);
    let output = tokio::process::Command::new(&python)
        .args([script.to_str().unwrap(), &url, "key-a", "planner", "py-session"])
        .output()
        .await
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let out: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(out["tools"].as_array().unwrap().contains(&json!("lookup")), "{out}");
    assert!(out["read_only"].as_array().unwrap().contains(&json!("lookup")), "{out}");
    let calls = out["calls"].as_array().unwrap();
    assert_eq!(calls[0]["text"], calls[1]["text"]);
    assert!(calls[0]["meta"].get(agentrt_mcp::MEMO_META_KEY).is_none(), "{out}");
    assert_eq!(
        calls[1]["meta"][agentrt_mcp::MEMO_META_KEY]["hit"],
        json!(true),
        "{out}"
    );
    assert_eq!(out["fail_is_error"], json!(true));
    assert!(
        out["unknown_tool_error"].as_str().unwrap_or("").contains("teleport"),
        "{out}"
    );
    let sessions: Vec<u64> = gw
        .events_of("alpha")
        .iter()
        .filter_map(|e| match e {
            Event::ToolCall(c) => Some(c.session),
            _ => None,
        })
        .collect();
    assert!(
        sessions.iter().all(|&s| s == session_of("alpha", "py-session")),
        "{sessions:?}"
    );
}

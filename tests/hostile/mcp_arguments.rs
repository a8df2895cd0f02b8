//! Tool arguments the gateway cannot carry exactly must not share a memoized result, nor reach the
//! server changed: numbers past what `serde_json` holds exactly, keys written twice. `agentrt
//! serve` with the real tool-memo policy, in front of a real Python MCP server whose `echo` tool
//! (read-only, so memoizable) says what it received, as Python's exact JSON reads it.

mod mcp_support;
#[path = "../../host/serve/tests/stub_upstream/mod.rs"]
mod stub_upstream;
#[path = "../../host/serve/tests/support/mod.rs"]
mod support;

use serde_json::{json, Value};

use mcp_support::*;

/// What the server received for one call, and whether the gateway answered from memory.
fn echoed(answer: &Answer) -> (String, bool) {
    let message = answer.message();
    let received = result_text(&message)["received"].as_str().unwrap().to_string();
    let hit = message["result"]["_meta"]["agentrt/memo"]["hit"] == json!(true);
    (received, hit)
}

fn refusal(answer: &Answer) -> String {
    let message: Value = answer.message();
    assert_eq!(message["error"]["code"], -32602, "{message}");
    assert!(
        message["id"].as_u64().is_some(),
        "the error answers the request's id: {message}"
    );
    message["error"]["message"].as_str().unwrap().to_string()
}

/// Before: `{"value": 12345678901234567890123}` reached the server as `1.2345678901234568e+22`,
/// and `…124` was answered from memory with the same result; `{"value": "first", "value":
/// "second"}` reached the server as "second" and was memoized under the key `{"value": "second"}`
/// — a later call of exactly that was answered with the duplicate call's result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memo_keys_are_exact_over_the_json_the_server_receives() {
    let python = python_or_skip!();
    let server = HostileServer::start(&python).await;
    let p = serve(&[format!("h={}", server.url)], true, |_| {}, |_| {}).await;
    let mcp = RawMcp::new(&p, "h");
    let s = mcp.open(ALPHA).await.unwrap();
    let call = |args: &'static str| {
        let (mcp, s) = (mcp.clone(), s.clone());
        async move { mcp.call_raw(ALPHA, &s, "agent", "echo", args).await }
    };

    // Numbers a 64-bit integer holds reach the server exactly, and differ in the key.
    let (got, hit) = echoed(&call(r#"{"value":9007199254740993}"#).await);
    assert_eq!((got.as_str(), hit), ("9007199254740993", false));
    let (got, hit) = echoed(&call(r#"{"value":9007199254740992}"#).await);
    assert_eq!(
        (got.as_str(), hit),
        ("9007199254740992", false),
        "2^53 + 1 and 2^53 are two keys"
    );
    let (got, hit) = echoed(&call(r#"{"value":9007199254740993}"#).await);
    assert_eq!(
        (got.as_str(), hit),
        ("9007199254740993", true),
        "and the same one is a hit"
    );

    // Past them: refused, naming the place; nothing reaches the server, nothing is memoized.
    for lossy in [
        r#"{"value":12345678901234567890123}"#,
        r#"{"value":12345678901234567890124}"#,
        r#"{"value":[1,0.30000000000000000001]}"#,
    ] {
        let message = refusal(&call(lossy).await);
        assert!(
            message.contains("/params/arguments/value") && message.contains("send it as a string"),
            "{message}"
        );
    }
    let message = refusal(&call(r#"{"value":"first","value":"second"}"#).await);
    assert!(
        message.contains(r#""value""#) && message.contains("/params/arguments"),
        "{message}"
    );
    // A decimal a double holds is carried as written, the same value.
    let (got, _) = echoed(&call(r#"{"value":0.1}"#).await);
    assert_eq!(got, "0.1");
    let (got, hit) = echoed(&call(r#"{"value":"second"}"#).await);
    assert_eq!(
        (got.as_str(), hit),
        (r#""second""#, false),
        "no duplicate call's result under its key"
    );

    let stats = result_text(&mcp.call(ALPHA, &s, "stats", json!({})).await.message());
    assert_eq!(stats["echo"], 4, "only the exact calls reached the server: {stats}");
    assert_eq!(
        metric(&p, "agentrt_mcp_refused_total", "reason=\"inexact_json\"").await,
        4.0
    );
}

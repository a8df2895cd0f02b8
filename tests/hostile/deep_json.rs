//! JSON nested deeper than anything walks safely. Before: an MCP `tools/call` of ~8,300 nested
//! arrays (16.5 KB) overflowed a worker's stack in the gateway's exact-number scan and aborted the
//! proxy for every tenant (`IgnoredAny`, in front of it, skips any depth without counting). Now
//! one bound, `--max-json-depth`, is measured without recursion before any walk of client JSON,
//! at every JSON entry point; this sends 10 k, 100 k and 1 M levels of arrays and of objects to
//! each, with a tenant's key and without one, and then finds the proxy alive and another tenant
//! served. (An abort here takes the test process with it: the run fails, loudly.)

mod mcp_support;
#[path = "../../host/serve/tests/stub_upstream/mod.rs"]
mod stub_upstream;
#[path = "../../host/serve/tests/support/mod.rs"]
mod support;

use mcp_support::{serve, ALPHA, BETA};
use support::{chat, post};

/// A well-formed body: `levels` of arrays, or of objects, around one number, inside the field a
/// request of `path` walks (so only the depth is wrong with it).
fn deep_body(path: &str, levels: usize, objects: bool) -> String {
    let (open, close) = if objects { ("{\"a\":", "}") } else { ("[", "]") };
    let nested = format!("{}1{}", open.repeat(levels), close.repeat(levels));
    if path.starts_with("/mcp/") {
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"echo","arguments":{{"v":{nested}}}}}}}"#
        )
    } else {
        format!(r#"{{"model":"m","messages":[{{"role":"user","content":{nested}}}],"input":{nested}}}"#)
    }
}

/// POST `body` to `path`, with `key` when given: the status and body, or `None` when the proxy
/// closed the connection before reading the body.
async fn send(url: &str, path: &str, body: String, key: Option<&str>) -> Option<(u16, String)> {
    let mut request = reqwest::Client::new()
        .post(format!("{url}{path}"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    let response = request.send().await.ok()?;
    let status = response.status().as_u16();
    Some((status, response.text().await.unwrap_or_default()))
}

async fn alive(url: &str) -> bool {
    let health = reqwest::get(format!("{url}/healthz")).await;
    health.is_ok_and(|h| h.status() == 200)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_to_a_million_levels_are_refused_everywhere_and_nobody_else_notices() {
    // The gateway refuses before it connects: a server nobody listens on is enough here.
    let p = serve(&["h=http://127.0.0.1:9/mcp".to_string()], false, |_| {}, |_| {}).await;
    let entry_points = [
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/responses",
        "/v1/messages",
        "/mcp/h",
        "/admin/reload",
    ];
    for path in entry_points {
        for levels in [10_000, 100_000, 1_000_000] {
            for objects in [false, true] {
                for key in [Some(ALPHA), None] {
                    let body = deep_body(path, levels, objects);
                    let what = format!(
                        "{path}, {levels} levels of {}, key: {key:?}",
                        ["arrays", "objects"][objects as usize]
                    );
                    // `None`: refused before the body was read (no key, or over the size limit).
                    if let Some((status, text)) = send(&p.url, path, body, key).await {
                        assert!((400..500).contains(&status), "{what}: {status} {text}");
                        if key.is_some() && status == 400 {
                            assert!(
                                text.contains("--max-json-depth"),
                                "{what}: the refusal names its flag: {text}"
                            );
                        }
                    }
                    assert!(alive(&p.url).await, "{what}: the proxy is gone");
                }
            }
        }
    }
    // Another tenant is served as before.
    let served = post(
        &format!("{}/v1/chat/completions", p.url),
        chat("You are beta's agent.", "hello", "m", false).to_string(),
        &[("authorization", &format!("Bearer {BETA}"))],
    )
    .await;
    assert_eq!(served.status(), 200);
    let metrics = support::metrics_text(&p).await;
    assert!(
        metrics.contains("agentrt_proxy_refused_total{reason=\"json_depth\"}")
            && metrics.contains("agentrt_mcp_refused_total{reason=\"too_deep\"}"),
        "both refusals are counted"
    );
}

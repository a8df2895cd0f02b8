//! The Responses API (`/v1/responses`) and the Anthropic Messages API (`/v1/messages`) through
//! the proxy over real HTTP on loopback, against the stub upstream (which answers each in its own
//! shape): the same identity, events, usage, salting and warm-ups as chat completions, each in the
//! agent's own API. The same routes against a real vLLM: adapters/vllm/tests/test_e2e_serve.py.

mod stub_upstream;
mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::{admin_get, post, proxy, proxy_with, settle, Proxy};

async fn call(p: &Proxy, path: &str, body: &Value, headers: &[(&str, &str)]) -> (u16, String) {
    let response = post(&format!("{}{path}", p.url), body.to_string(), headers).await;
    (response.status().as_u16(), response.text().await.unwrap())
}

fn responses_body(stream: bool) -> Value {
    json!({"model": "tiny", "stream": stream, "instructions": "You are the researcher.",
        "tools": [{"type": "function", "name": "search", "parameters": {"type": "object"}}],
        "input": [{"role": "user", "content": "secret research question"}]})
}

fn messages_body(stream: bool) -> Value {
    json!({"model": "tiny", "stream": stream, "max_tokens": 16, "system": "You are the writer.",
        "messages": [{"role": "user", "content": "secret draft"}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_apis_are_forwarded_with_identity_and_their_usage_is_counted() {
    let p = proxy_with("lru", &[("key-a", "alpha")], None).await;
    let auth = [("authorization", "Bearer key-a"), ("x-session-id", "s1")];
    for stream in [false, true] {
        let (status, text) = call(&p, "/v1/responses", &responses_body(stream), &auth).await;
        assert_eq!(status, 200, "{text}");
        let (status, text) = call(&p, "/v1/messages", &messages_body(stream), &auth).await;
        assert_eq!(status, 200, "{text}");
        if stream {
            assert!(
                text.contains("event: message_stop"),
                "the stream is relayed whole: {text}"
            );
        }
    }
    settle(&p).await;
    let sent = p.stub.user_requests();
    assert_eq!(
        sent.iter().map(|r| r.path).collect::<Vec<_>>(),
        ["/v1/responses", "/v1/messages", "/v1/responses", "/v1/messages"],
        "each call goes upstream in its own API"
    );
    for r in &sent {
        assert!(
            r.body["vllm_xargs"]["agentrt_agent"].as_u64().unwrap() > 0,
            "{}",
            r.body
        );
        assert!(
            r.body["cache_salt"].is_string(),
            "a named tenant's calls are salted: {}",
            r.body
        );
    }
    // Two agents (one system prompt each), and every call's usage, whole or streamed.
    let (_, tenants) = admin_get(&p, "/admin/tenants", "s3cret").await;
    assert_eq!(tenants["tenants"][0]["agents"], 2, "{tenants}");
    let alpha = p.app.tenants().get("alpha").unwrap();
    assert_eq!((alpha.prompt_tokens(), alpha.cached_tokens()), (4 * 20, 4 * 16));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warmup_goes_through_the_agents_own_api_and_carries_only_its_anchor() {
    // The probe asks for a warm-up of the last registered agent's anchor on every act().
    for (path, body, anchor_field) in [
        ("/v1/responses", responses_body(false), "instructions"),
        ("/v1/messages", messages_body(false), "system"),
    ] {
        let p = proxy("probe").await;
        assert_eq!(call(&p, path, &body, &[]).await.0, 200);
        let mut warmups = Vec::new();
        for _ in 0..100 {
            warmups = p.stub.warmups();
            if !warmups.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let warm = warmups.first().unwrap_or_else(|| panic!("{path}: a warm-up was sent"));
        assert_eq!(warm.path, path);
        assert_eq!(warm.body[anchor_field], body[anchor_field]);
        assert_eq!(warm.body["vllm_xargs"]["agentrt_warmup"], true);
        assert!(
            !warm.body.to_string().contains("secret"),
            "never session content: {}",
            warm.body
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_calls_get_400_naming_the_field() {
    let p = proxy("lru").await;
    let (status, text) = call(&p, "/v1/responses", &json!({"model": "tiny", "input": 7}), &[]).await;
    assert_eq!(status, 400);
    assert!(text.contains("`input`"), "{text}");
    let (status, text) = call(&p, "/v1/messages", &json!({"model": "tiny"}), &[]).await;
    assert_eq!(status, 400);
    assert!(text.contains("`messages`"), "{text}");
    assert!(p.stub.user_requests().is_empty(), "nothing malformed goes upstream");
}

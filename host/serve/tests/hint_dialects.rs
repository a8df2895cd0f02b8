//! The field's hint dialects through `agentrt serve` on loopback, in front of the stub upstream,
//! observed in what the tenants' `probe` policy heard: vLLM's `kv_hints` envelope with a closing,
//! Dynamo's `nvext.session_control` close and ThunderAgent's `program_id` + `POST /programs/release`
//! each reach the tenant's policy as the same `session-end(closed)`; the dialects' fields never
//! reach the engine; a malformed envelope is a 400 naming the field; no dialect reaches another
//! tenant's session; `/metrics` counts them. One proxy for all of it.

mod stub_upstream;
mod support;

use agentrt_serve::identity::tenant_session;
use serde_json::{json, Value};
use support::*;

/// A chat call by the holder of `key` with `extra` body fields and `headers`: status and answer.
async fn call(p: &Proxy, key: &str, extra: Value, headers: &[(&str, &str)]) -> (u16, Value) {
    let mut body = chat("You are the coder.", "Fix the bug.", "tiny", false);
    for (field, value) in extra.as_object().unwrap() {
        body[field] = value.clone();
    }
    let auth = format!("Bearer {key}");
    let mut all = vec![("authorization", auth.as_str()), ("x-agent-id", "coder")];
    all.extend_from_slice(headers);
    let response = post(&format!("{}/v1/chat/completions", p.url), body.to_string(), &all).await;
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// `POST /programs/release` of `program` by the holder of `key`: status and answer.
async fn release(p: &Proxy, key: &str, program: &str) -> (u16, Value) {
    call_as(
        &p.url,
        "/programs/release",
        key,
        json!({ "program_id": program }).to_string(),
    )
    .await
}

fn envelope(actions: Value) -> Value {
    json!({"kv_hints": {"protocol_version": "0.1", "message_id": "msg-1", "actions": actions}})
}

fn action(id: &str, action_type: &str, payload: Value) -> Value {
    json!({"action_id": id, "action_type": action_type, "action_version": "1", "payload": payload})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dialect_closes_only_its_tenants_session_and_never_reaches_the_engine() {
    let p = two_tenants("probe").start().await;
    let alpha = |key: &str| tenant_session("alpha", key);
    let beta = |key: &str| tenant_session("beta", key);

    // vLLM's envelope: a closing and a retention intent on the request of session s-vllm.
    let closing = envelope(json!([
        action("a1", "kv.retain", json!({"priority": 90, "duration_ms": 5000})),
        action("a2", "agentrt.session_closed", json!({})),
    ]));
    assert_eq!(call(&p, "key-a", closing, &[("x-session-id", "s-vllm")]).await.0, 200);
    // Dynamo's session_control names the session and closes it; its agent hints are noted.
    let dynamo = json!({"nvext": {"session_control": {"session_id": "s-dynamo", "action": "close"},
        "agent_hints": {"priority": 5, "osl": 256, "speculative_prefill": true}}});
    assert_eq!(call(&p, "key-a", dynamo, &[]).await.0, 200);
    // ThunderAgent's program id (as the OpenAI client's extra_body sends it) names the session;
    // the release closes it, once.
    let program = json!({"extra_body": {"program_id": "swe-17"}});
    assert_eq!(call(&p, "key-a", program, &[]).await.0, 200);
    let tenant = p.app.tenants().get_or_start("alpha").unwrap();
    assert!(tenant.agents.is_live(alpha("swe-17")), "program_id named the session");
    assert_eq!(
        release(&p, "key-a", "swe-17").await,
        (200, json!({"program_id": "swe-17", "released": true}))
    );
    assert_eq!(release(&p, "key-a", "swe-17").await.1["released"], false);

    let probe = heard(&p, "alpha").await;
    assert_eq!(
        probe.closed,
        vec![alpha("s-vllm"), alpha("s-dynamo"), alpha("swe-17")],
        "each dialect's closing is the same session-end(closed), once"
    );
    for request in p.stub.user_requests() {
        for field in ["kv_hints", "nvext", "program_id", "extra_body"] {
            assert!(
                request.body.get(field).is_none(),
                "{field} reached the engine: {}",
                request.body
            );
        }
    }

    // A malformed envelope: refused whole with the field named; nothing of it applied.
    let bad = envelope(json!([
        action("b1", "agentrt.session_closed", json!({})),
        action("b2", "kv.retain", json!({"priority": 10})),
        action("b3", "kv.retain", json!({"priority": 101})),
    ]));
    let (status, answer) = call(&p, "key-a", bad, &[("x-session-id", "s-bad")]).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["type"], "invalid_hint");
    assert_eq!(
        answer["error"]["message"],
        "kv_hints.actions[2].payload.priority: expected an integer from 0 to 100, got 101"
    );
    let unknown = envelope(json!([action("c1", "kv.fetch", json!({}))]));
    let (status, answer) = call(&p, "key-a", unknown, &[]).await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("kv_hints.actions[0].action_type: agentrt reads"));
    let (status, answer) = release(&p, "key-a", "").await;
    assert_eq!(
        (status, answer["error"]["message"].as_str()),
        (400, Some("program_id: empty"))
    );

    // Tenant isolation: beta names alpha's session in every dialect and closes only its own.
    let shared = json!({"program_id": "shared"});
    assert_eq!(call(&p, "key-a", shared, &[]).await.0, 200);
    let vllm_close = envelope(json!([action("d1", "agentrt.session_closed", json!({}))]));
    assert_eq!(
        call(&p, "key-b", vllm_close, &[("x-session-id", "shared")]).await.0,
        200
    );
    let dynamo_close = json!({"nvext": {"session_control": {"session_id": "shared", "action": "close"}}});
    assert_eq!(call(&p, "key-b", dynamo_close, &[]).await.0, 200);
    assert_eq!(release(&p, "key-b", "shared").await.0, 200);
    let probe = heard(&p, "alpha").await;
    assert!(!probe.closed.contains(&alpha("shared")), "{:?}", probe.closed);
    assert!(tenant.agents.is_live(alpha("shared")));
    assert_eq!(
        heard(&p, "beta").await.closed,
        vec![beta("shared"); 2],
        "each request reopened beta's own session; the release found it closed"
    );

    let metrics = metrics_text(&p).await;
    for series in [
        "agentrt_hints_total{tenant=\"alpha\",kind=\"closed\",source=\"body\",outcome=\"applied\"} 2",
        "agentrt_hints_total{tenant=\"alpha\",kind=\"closed\",source=\"endpoint\",outcome=\"applied\"} 1",
        "agentrt_hints_total{tenant=\"alpha\",kind=\"closed\",source=\"endpoint\",outcome=\"duplicate\"} 1",
        "agentrt_hints_total{tenant=\"alpha\",kind=\"retain\",source=\"body\",outcome=\"no_event\"} 1",
        "agentrt_hints_total{tenant=\"alpha\",kind=\"priority\",source=\"body\",outcome=\"no_event\"} 1",
        "agentrt_hints_total{tenant=\"alpha\",kind=\"osl\",source=\"body\",outcome=\"no_event\"} 1",
        "agentrt_hints_refused_total{tenant=\"alpha\",reason=\"malformed\"} 3",
    ] {
        assert!(metrics.contains(series), "{series} missing from:\n{metrics}");
    }
}

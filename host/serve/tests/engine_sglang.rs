//! `agentrt serve --engine sglang` over real HTTP on loopback: what goes upstream is what SGLang's
//! server and the agentrt SGLang plugin read. The upstream is the recording stub (stub_upstream),
//! standing for SGLang's OpenAI-compatible server: SGLang's server needs an NVIDIA GPU, which
//! these machines lack (adapters/sglang/README.md); its plugin is tested against SGLang's real
//! radix cache in adapters/sglang/tests.

mod stub_upstream;
mod support;

use std::time::Duration;

use agentrt_serve::engine::kind::EngineKind;
use serde_json::{json, Value};
use support::{chat, post_json, Setup};

fn sglang(policy: &'static str) -> Setup {
    Setup {
        engine: EngineKind::Sglang,
        ..Setup::new(policy)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_requests_carry_the_tags_in_custom_params_and_the_tenant_scoped_session_id() {
    let p = sglang("probe").start().await;
    let mut body = chat("You are the planner.", "Task 1", "tiny", false);
    body["custom_params"] = json!({"client_key": 1});
    body["session_id"] = json!("the-clients-own");
    assert_eq!(post_json(&p, &body, &[("x-session-id", "s-9")]).await.status(), 200);
    let sent = p.stub.user_requests();
    assert_eq!(sent.len(), 1);
    let sent = &sent[0].body;
    let session = agentrt_serve::identity::tenant_session("default", "s-9");
    assert_eq!(
        sent["custom_params"],
        json!({"client_key": 1, "agentrt_agent": 1, "agentrt_session": session, "agentrt_warmup": false}),
        "the tags go where SGLang's Req keeps them (SamplingParams.custom_params), beside the client's own"
    );
    assert_eq!(
        sent["session_id"],
        format!("agentrt-{session:016x}"),
        "SGLang's own session is the tenant-scoped one, never the client's"
    );
    assert!(
        sent.get("vllm_xargs").is_none(),
        "nothing vLLM-only goes to SGLang: {sent}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_warmups_are_marked_in_custom_params_and_belong_to_no_session() {
    let p = sglang("probe").start().await;
    let body = chat("You are the tester.", "Task", "tiny", false);
    assert_eq!(post_json(&p, &body, &[]).await.status(), 200);
    let mut warmups = Vec::new();
    for _ in 0..200 {
        warmups = p.stub.warmups();
        if !warmups.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let w = &warmups.first().expect("the probe policy asks for a warm-up").body;
    assert_eq!(w["custom_params"]["agentrt_warmup"], true);
    assert_eq!(w["custom_params"]["agentrt_session"], 0);
    assert!(w.get("session_id").is_none() && w.get("vllm_xargs").is_none(), "{w}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_sglang_session_params_or_forged_tags_are_refused() {
    let p = sglang("lru").start().await;
    for (field, value) in [
        ("session_params", json!({"id": "another-tenants-session"})),
        ("custom_params", json!({"agentrt_warmup": true})),
    ] {
        let mut body = chat("You are the planner.", "Task", "tiny", false);
        body[field] = value;
        let response = post_json(&p, &body, &[]).await;
        assert_eq!(response.status(), 400, "{field}");
        let error: Value = response.json().await.unwrap();
        assert!(error.to_string().contains(field), "{field}: {error}");
    }
    assert!(p.stub.user_requests().is_empty(), "nothing refused went upstream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vllm_stays_the_default_engine() {
    let p = Setup::new("lru").start().await;
    let body = chat("You are the planner.", "Task", "tiny", false);
    assert_eq!(post_json(&p, &body, &[("x-session-id", "s-1")]).await.status(), 200);
    let sent = &p.stub.user_requests()[0].body;
    assert_eq!(sent["vllm_xargs"]["agentrt_agent"], 1);
    assert!(
        sent.get("custom_params").is_none() && sent.get("session_id").is_none(),
        "{sent}"
    );
}

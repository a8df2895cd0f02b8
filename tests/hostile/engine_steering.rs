//! Clients steering the engine past the proxy's policies: engine-control fields, another
//! tenant's stored responses, agentrt's own tags, numbers the engine should never see, and a
//! tenant named like the unauthenticated one. Real HTTP on loopback against the real router, in
//! front of the stub upstream, which reports exactly what reached it.

#[path = "../../host/serve/tests/stub_upstream/mod.rs"]
mod stub_upstream;
#[path = "../../host/serve/tests/support/mod.rs"]
mod support;

use serde_json::{json, Value};
use support::{call_as, chat, metrics_text, two_tenants, Proxy, Setup};

use agentrt_serve::request::engine_fields::EngineField;

/// `body` to `path` as the holder of `key`: the status and the JSON answer.
async fn call(p: &Proxy, path: &str, key: &str, body: &Value) -> (u16, Value) {
    call_as(&p.url, path, key, body.to_string()).await
}

fn with(mut body: Value, field: &str, value: Value) -> Value {
    body[field] = value;
    body
}

// --- 3. engine-control fields ----------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_control_fields_from_a_client_are_refused_and_never_reach_the_engine() {
    let p = two_tenants("lru").start().await;
    let base = chat("You plan.", "Task", "tiny", false);
    for (field, value) in [
        ("priority", json!(-100)),
        (
            "kv_transfer_params",
            json!({"remote_host": "203.0.113.9", "remote_port": 14579, "do_remote_prefill": true}),
        ),
        ("request_id", json!("chatcmpl-another-tenants-request")),
    ] {
        let (status, answer) = call(&p, "/v1/chat/completions", "key-a", &with(base.clone(), field, value)).await;
        assert_eq!(status, 400, "{field}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(&format!("--client-engine-field {field}")), "{message}");
    }
    let (status, answer) = call(
        &p,
        "/v1/chat/completions",
        "key-a",
        &with(base.clone(), "vllm_xargs", json!({"agentrt_warmup": true})),
    )
    .await;
    assert_eq!(status, 400, "{answer}");
    assert!(p.stub.user_requests().is_empty(), "nothing went upstream");
    // A default value changes nothing: dropped, and the request goes on.
    let (status, _) = call(&p, "/v1/chat/completions", "key-a", &with(base, "priority", json!(0))).await;
    assert_eq!(status, 200);
    assert!(p.stub.user_requests()[0].body.get("priority").is_none());
    let metrics = metrics_text(&p).await;
    assert!(
        metrics.contains("agentrt_proxy_refused_total{reason=\"engine_field\"} 4"),
        "{metrics}"
    );
}

/// Before: with `--engine sglang`, 9 of 9 of SGLang's own steering fields went upstream as sent
/// (`lora_path: "/etc/passwd"`, a pickled `custom_logit_processor`) while vLLM's were refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglangs_steering_fields_are_refused_like_vllms_and_never_reach_the_engine() {
    let p = Setup {
        engine: agentrt_serve::engine::kind::EngineKind::Sglang,
        ..two_tenants("lru")
    }
    .start()
    .await;
    let base = chat("You plan.", "Task", "tiny", false);
    let fields = [
        ("rid", json!("another-tenants-request")),
        ("bootstrap_host", json!("203.0.113.9")),
        ("bootstrap_port", json!(8998)),
        ("bootstrap_room", json!(12345)),
        ("extra_key", json!("another-tenants-salt")),
        ("data_parallel_rank", json!(1)),
        (
            "custom_logit_processor",
            json!("gASVKAAAAAAAAACMBXBvc2l4lIwGc3lzdGVtlJOUjAJpZJSFlFKULg=="),
        ),
        ("return_hidden_states", json!(true)),
        ("lora_path", json!("/etc/passwd")),
    ];
    for (field, value) in &fields {
        let (status, answer) = call(
            &p,
            "/v1/chat/completions",
            "key-a",
            &with(base.clone(), field, value.clone()),
        )
        .await;
        assert_eq!(status, 400, "{field}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(&format!("--client-engine-field {field}")), "{message}");
    }
    assert!(p.stub.user_requests().is_empty(), "nothing went upstream");
    let metrics = metrics_text(&p).await;
    assert!(
        metrics.contains(&format!(
            "agentrt_proxy_refused_total{{reason=\"engine_field\"}} {}",
            fields.len()
        )),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_may_allow_a_field_by_name() {
    let p = Setup {
        client_engine_fields: vec![EngineField::Priority],
        ..two_tenants("lru")
    }
    .start()
    .await;
    let body = with(chat("You plan.", "Task", "tiny", false), "priority", json!(5));
    assert_eq!(call(&p, "/v1/chat/completions", "key-a", &body).await.0, 200);
    assert_eq!(p.stub.user_requests()[0].body["priority"], 5);
    let other = with(chat("You plan.", "Task", "tiny", false), "request_id", json!("x"));
    assert_eq!(
        call(&p, "/v1/chat/completions", "key-a", &other).await.0,
        400,
        "only what is allowed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_continues_its_own_stored_responses_never_another_tenants() {
    let p = two_tenants("lru").start().await;
    let first = json!({"model": "tiny", "input": "Plan the trip.", "store": true});
    let (status, answer) = call(&p, "/v1/responses", "key-a", &first).await;
    assert_eq!(status, 200, "{answer}");
    let id = answer["id"].as_str().unwrap().to_string();
    let next = json!({"model": "tiny", "input": "And then?", "previous_response_id": id});
    // Beta names alpha's response: the same 404 as an id nobody has.
    let (status, stolen) = call(&p, "/v1/responses", "key-b", &next).await;
    assert_eq!(status, 404, "{stolen}");
    let unknown = with(next.clone(), "previous_response_id", json!("resp_nobody"));
    let (status, nobody) = call(&p, "/v1/responses", "key-b", &unknown).await;
    assert_eq!(status, 404);
    assert_eq!(
        stolen["error"]["message"].as_str().unwrap().replace(&id, "ID"),
        nobody["error"]["message"]
            .as_str()
            .unwrap()
            .replace("resp_nobody", "ID"),
        "indistinguishable from an unknown id"
    );
    assert_eq!(p.stub.user_requests().len(), 1, "beta's calls never reached the engine");
    let (status, _) = call(&p, "/v1/responses", "key-a", &next).await;
    assert_eq!(status, 200, "alpha continues its own");
}

// --- 5. a tenant named `default` -------------------------------------------------------------

#[test]
fn a_keyed_tenant_cannot_be_named_like_the_unauthenticated_one() {
    let flags = agentrt_serve::tenant::settings::FlagSettings {
        keys: [("key-d".to_string(), "default".to_string())].into(),
        ..Default::default()
    };
    let e = flags.settings().unwrap_err();
    assert!(e.contains("a tenant is named `default`"), "{e}");
    let file = agentrt_serve::tenant::settings::ConfigFile::parse("[tenants.default]\napi_keys = [\"k\"]\n").unwrap();
    let e = agentrt_serve::tenant::settings::FlagSettings::default()
        .merge(file)
        .unwrap_err();
    assert!(e.contains("another name"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_keyed_tenant_is_salted_and_a_clients_salt_never_goes_upstream_verbatim() {
    let p = two_tenants("lru").start().await;
    let body = with(
        chat("You plan.", "Task", "tiny", false),
        "cache_salt",
        json!("chosen-by-client"),
    );
    for key in ["key-a", "key-b"] {
        assert_eq!(call(&p, "/v1/chat/completions", key, &body).await.0, 200);
    }
    let sent = p.stub.user_requests();
    let salts: Vec<&str> = sent.iter().map(|r| r.body["cache_salt"].as_str().unwrap()).collect();
    assert!(salts.iter().all(|s| *s != "chosen-by-client"), "{salts:?}");
    assert_ne!(salts[0], salts[1], "each tenant its own");
}

// --- 12. engine-bound numbers ----------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn numbers_the_engine_would_refuse_are_refused_in_each_apis_error_shape() {
    let p = two_tenants("lru").start().await;
    let chat_body = chat("You plan.", "Task", "tiny", false);
    for value in [
        json!(-1),
        json!(9_223_372_036_854_775_807i64),
        json!(1e308),
        json!("999"),
    ] {
        let (status, answer) = call(
            &p,
            "/v1/chat/completions",
            "key-a",
            &with(chat_body.clone(), "max_tokens", value.clone()),
        )
        .await;
        assert_eq!(status, 400, "{value}: {answer}");
        assert_eq!(answer["error"]["param"], "max_tokens", "{answer}");
        assert_eq!(answer["error"]["type"], "invalid_request_error");
    }
    let responses = json!({"model": "tiny", "input": "hi", "max_output_tokens": -1});
    let (status, answer) = call(&p, "/v1/responses", "key-a", &responses).await;
    assert_eq!(
        (status, answer["error"]["param"].as_str()),
        (400, Some("max_output_tokens")),
        "{answer}"
    );
    let messages = json!({"model": "tiny", "max_tokens": "999", "messages": [{"role": "user", "content": "hi"}]});
    let (status, answer) = call(&p, "/v1/messages", "key-a", &messages).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["type"], "error", "Anthropic's error shape: {answer}");
    assert_eq!(answer["error"]["type"], "invalid_request_error");
    assert!(answer["error"]["message"].as_str().unwrap().contains("`max_tokens`"));
    let completion = json!({"model": "tiny", "prompt": "hi", "max_tokens": 1e308});
    assert_eq!(call(&p, "/v1/completions", "key-a", &completion).await.0, 400);
    assert!(p.stub.user_requests().is_empty(), "none reached the engine");
    assert!(metrics_text(&p)
        .await
        .contains("agentrt_proxy_refused_total{reason=\"sampling_field\"} 7"));
}

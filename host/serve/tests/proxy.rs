//! `agentrt serve` over real HTTP on loopback, with real policy components, against a stub
//! upstream for the faults a real vLLM cannot be made to produce on demand (see stub_upstream).

mod stub_upstream;
mod support;

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{json, Value};
use support::{chat, post, post_json, proxy, proxy_with, settle};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwards_with_agent_identity_and_tells_the_policy() {
    let p = proxy("probe").await;
    let response = post_json(&p, &chat("You are the planner.", "Task 1", "tiny", false), &[]).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body["choices"][0]["message"]["content"], "hi",
        "the answer passes through"
    );

    let coder = chat("You are the coder.", "Task 1", "tiny", false);
    assert_eq!(post_json(&p, &coder, &[("x-session-id", "s-9")]).await.status(), 200);
    let sent = p.stub.user_requests();
    assert_eq!(sent.len(), 2, "each request reaches the upstream exactly once");
    let (first, second) = (&sent[0].body["vllm_xargs"], &sent[1].body["vllm_xargs"]);
    assert_eq!(
        (first["agentrt_agent"].as_u64(), second["agentrt_agent"].as_u64()),
        (Some(1), Some(2))
    );
    assert_eq!(
        second["agentrt_session"],
        agentrt_serve::identity::tenant_session("default", "s-9"),
        "the session id is the tenant's own"
    );
    assert_eq!(first["agentrt_warmup"], false);

    // The probe policy registered both agents (it forecasts one next agent per registered agent).
    settle(&p).await;
    let tenant = p.app.tenants().get_or_start("default").unwrap();
    assert_eq!(tenant.policy.predict(1).unwrap().len(), 2);
    assert!(
        tenant.policy.metrics().calls(agentrt_runtime::Primitive::Observe) >= 4,
        "arrivals and finishes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_hears_how_a_call_continues_its_agents_previous_prompt() {
    use agentrt_serve::tenant::continuation::PromptShape;
    let p = proxy("probe").await;
    let turn1 = chat("You are helpful.", "What is 2 + 2?", "tiny", false);
    let mut turn2 = turn1.clone();
    let messages = turn2["messages"].as_array_mut().unwrap();
    messages.push(json!({"role": "assistant", "content": "4"}));
    messages.push(json!({"role": "user", "content": "And 3 + 3?"}));
    let session = [("x-session-id", "s-1"), ("x-agent-id", "helper")];
    assert_eq!(post_json(&p, &turn1, &session).await.status(), 200);
    assert_eq!(post_json(&p, &turn2, &session).await.status(), 200);
    // Another session's first call of the agent continues nothing.
    let elsewhere = [("x-session-id", "s-2"), ("x-agent-id", "helper")];
    assert_eq!(post_json(&p, &turn2, &elsewhere).await.status(), 200);
    settle(&p).await;

    let tenant = p.app.tenants().get_or_start("default").unwrap();
    let mut probe = agentrt_sdk::testing::Harness::<agentrt_test_probe::Probe>::new([]).unwrap();
    probe.restore(&tenant.policy.snapshot().unwrap()).unwrap();
    assert_eq!(
        probe.policy().continued_tokens,
        u64::from(PromptShape::of_chat(&turn1).tokens()),
        "turn 2 carried all of turn 1 forward; nothing else continued"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_pass_through_chunk_by_chunk() {
    let p = proxy("lru").await;
    let response = post_json(&p, &chat("s", "t", "tiny", true), &[]).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut chunks = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        chunks.push(String::from_utf8(chunk.unwrap().to_vec()).unwrap());
    }
    let all = chunks.concat();
    assert!(chunks.len() >= 3, "delivered as it came, not buffered: {chunks:?}");
    assert!(
        all.contains("\"a\"") && all.contains("\"b\"") && all.ends_with("data: [DONE]\n\n"),
        "{all}"
    );
}

/// The text of a streamed answer, whole.
async fn streamed_text(response: reqwest::Response) -> String {
    assert_eq!(response.status(), 200);
    String::from_utf8(response.bytes().await.unwrap().to_vec()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_call_is_counted_whether_or_not_the_client_asked_for_usage() {
    let p = proxy("lru").await;
    // Most frameworks stream without `stream_options`: the proxy asks the engine for usage and
    // drops the usage chunk before the client sees it.
    let quiet = streamed_text(post_json(&p, &chat("s", "t", "tiny", true), &[]).await).await;
    assert!(!quiet.contains("usage"), "the client did not ask for usage: {quiet}");
    assert!(quiet.ends_with("data: [DONE]\n\n"), "{quiet}");
    assert_eq!(
        p.stub.user_requests()[0].body["stream_options"],
        json!({"include_usage": true, "continuous_usage_stats": false})
    );
    settle(&p).await;
    let tenant = p.app.tenants().get("default").unwrap();
    assert_eq!((tenant.prompt_tokens(), tenant.cached_tokens()), (12, 8));

    let mut asked = chat("s", "t", "tiny", true);
    asked["stream_options"] = json!({"include_usage": true});
    let text = streamed_text(post_json(&p, &asked, &[]).await).await;
    assert!(
        text.contains("\"prompt_tokens\":12"),
        "the client asked for usage: {text}"
    );
    settle(&p).await;
    assert_eq!((tenant.prompt_tokens(), tenant.cached_tokens()), (24, 16));
}

/// Whether a client asked for usage is read by the engine's rule (vLLM 0.32's request model: a
/// string `"true"` is true, `stream_options: {}` asks for none), and the usage chunk the proxy
/// asked for never reaches a client that did not — even when the upstream's last event lacks
/// the blank line that ends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_reaches_the_client_exactly_when_the_engines_rule_says_it_asked() {
    let p = proxy("lru").await;
    let with = |options: Value, model: &str| {
        let mut body = chat("s", "t", model, true);
        body["stream_options"] = options;
        body
    };
    let coerced = streamed_text(post_json(&p, &with(json!({"include_usage": "true"}), "tiny"), &[]).await).await;
    assert!(
        coerced.contains("\"prompt_tokens\":12"),
        "\"true\" asks for usage: {coerced}"
    );
    assert_eq!(
        p.stub.user_requests()[0].body["stream_options"]["include_usage"],
        "true",
        "sent as the client wrote it"
    );
    for declined in [
        json!({}),
        json!({"continuous_usage_stats": true}),
        json!({"include_usage": "false"}),
    ] {
        let text = streamed_text(post_json(&p, &with(declined.clone(), "tiny"), &[]).await).await;
        assert!(!text.contains("usage"), "{declined} asks for none: {text}");
    }
    let unterminated = streamed_text(post_json(&p, &chat("s", "t", "usage-unterminated", true), &[]).await).await;
    assert!(
        !unterminated.contains("usage"),
        "the proxy's usage chunk, last and unterminated, is dropped too: {unterminated}"
    );
    let asked =
        streamed_text(post_json(&p, &with(json!({"include_usage": true}), "usage-unterminated"), &[]).await).await;
    assert!(
        asked.contains("\"prompt_tokens\":12") && !asked.ends_with("\n\n"),
        "a client that asked gets the last event as it came: {asked}"
    );
    settle(&p).await;
    let tenant = p.app.tenants().get("default").unwrap();
    assert_eq!(tenant.prompt_tokens(), 6 * 12, "every call counted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_get_a_clear_error_and_the_proxy_keeps_serving() {
    let p = proxy("lru").await;
    let response = post(
        &format!("{}/v1/chat/completions", p.url),
        "{\"model\": \"tiny\", \"messages\": [",
        &[],
    )
    .await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("not valid JSON") && message.contains("line 1"),
        "{message}"
    );

    let response = post_json(&p, &json!({"model": "tiny"}), &[]).await;
    assert_eq!(response.status(), 400);
    assert!(response.text().await.unwrap().contains("`messages`"));

    assert_eq!(post_json(&p, &chat("s", "t", "tiny", false), &[]).await.status(), 200);
    assert_eq!(
        p.stub.user_requests().len(),
        1,
        "malformed requests never reach the upstream"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_errors_are_returned_faithfully() {
    let p = proxy("lru").await;
    let response = post_json(&p, &chat("s", "t", "unknown", false), &[]).await;
    assert_eq!(response.status(), 404);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["message"], "The model `unknown` does not exist.");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_down_upstream_is_a_502_naming_it() {
    // Bind and drop a listener: nothing listens on that port now.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let down = format!("http://127.0.0.1:{port}");
    let p = proxy_with("lru", &[], Some(down.clone())).await;
    let response = post_json(&p, &chat("s", "t", "tiny", false), &[]).await;
    assert_eq!(response.status(), 502);
    let body: Value = response.json().await.unwrap();
    assert!(body["error"]["message"].as_str().unwrap().contains(&down), "{body}");
    assert_eq!(p.app.metrics().upstream_errors.load(Relaxed), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_failing_mid_stream_ends_the_stream_with_an_error_event() {
    let p = proxy("lru").await;
    let response = post_json(&p, &chat("s", "t", "fail-mid-stream", true), &[]).await;
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap_or_default();
    assert!(text.contains("\"a\""), "the chunk before the failure arrives: {text}");
    assert!(
        text.contains("upstream failed mid-stream"),
        "then an error event: {text}"
    );
    assert_eq!(
        post_json(&p, &chat("s", "t", "tiny", false), &[]).await.status(),
        200,
        "still serving"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_leaving_mid_stream_is_noticed_and_nothing_is_retried() {
    let p = proxy("lru").await;
    let response = post_json(&p, &chat("s", "t", "tiny", true), &[]).await;
    let mut stream = response.bytes_stream();
    let _first = stream.next().await.unwrap().unwrap();
    drop(stream);
    for _ in 0..100 {
        if p.app.metrics().streams_cancelled.load(Relaxed) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(p.app.metrics().streams_cancelled.load(Relaxed), 1);
    settle(&p).await; // the cancelled request is reported ended, and no longer in flight
    assert_eq!(post_json(&p, &chat("s", "t", "tiny", false), &[]).await.status(), 200);
    assert_eq!(
        p.stub.user_requests().len(),
        2,
        "the cancelled request was sent once, not retried"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_that_traps_during_a_request_does_not_fail_it() {
    let p = proxy("probe").await;
    let trap = [("x-agent-id", agentrt_tests::PROBE_TRAP_AGENT)];
    let response = post_json(&p, &chat("s", "t", "tiny", false), &trap).await;
    assert_eq!(response.status(), 200, "served despite the policy trapping");
    settle(&p).await;
    let tenant = p.app.tenants().get_or_start("default").unwrap();
    assert!(tenant.worker.stats().failed() >= 1, "the failed observe is counted");
    assert!(tenant.policy.metrics().errors("trap") >= 1);
    assert_eq!(post_json(&p, &chat("s2", "t", "tiny", false), &[]).await.status(), 200);
    assert!(
        tenant.policy.predict(1).is_ok(),
        "the policy answers again on a fresh instance"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warmups_are_marked_and_carry_only_the_anchor() {
    // The probe asks for a warm-up of the last registered agent's anchor on every act().
    let p = proxy("probe").await;
    let mut body = chat("You are the tester.", "secret session content", "tiny", false);
    body["tools"] = json!([{"type": "function", "function": {"name": "run_tests"}}]);
    assert_eq!(post_json(&p, &body, &[]).await.status(), 200);
    for _ in 0..100 {
        if !p.stub.warmups().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let warmups = p.stub.warmups();
    assert!(!warmups.is_empty(), "a warm-up was sent");
    let w = &warmups[0].body;
    assert_eq!(w["max_tokens"], 1);
    assert_eq!(w["vllm_xargs"]["agentrt_warmup"], true);
    assert_eq!(w["messages"][0]["content"], "You are the tester.");
    assert_eq!(w["tools"], body["tools"]);
    assert_eq!(
        w["tool_choice"], "none",
        "a warm-up with tools asks for no tool call (vLLM refuses \"auto\" without a parser)"
    );
    assert!(
        !w.to_string().contains("secret session content"),
        "never session content: {w}"
    );
    assert_eq!(
        p.stub.user_requests().len(),
        1,
        "warm-ups are never counted as (or retried into) user traffic"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_are_isolated_by_api_key() {
    let p = proxy_with("probe", &[("key-a", "alpha"), ("key-b", "beta")], None).await;
    let a = [("authorization", "Bearer key-a")];
    let b = [("authorization", "Bearer key-b")];
    assert_eq!(
        post_json(&p, &chat("agent one", "t", "tiny", false), &a).await.status(),
        200
    );
    assert_eq!(
        post_json(&p, &chat("agent two", "t", "tiny", false), &a).await.status(),
        200
    );
    assert_eq!(
        post_json(&p, &chat("agent three", "t", "tiny", false), &b)
            .await
            .status(),
        200
    );
    assert_eq!(
        post_json(&p, &chat("x", "t", "tiny", false), &[("authorization", "Bearer nope")])
            .await
            .status(),
        401
    );
    assert_eq!(post_json(&p, &chat("x", "t", "tiny", false), &[]).await.status(), 401);
    settle(&p).await;
    let alpha = p.app.tenants().get_or_start("alpha").unwrap();
    let beta = p.app.tenants().get_or_start("beta").unwrap();
    assert_eq!(
        alpha.policy.predict(1).unwrap().len(),
        2,
        "alpha's policy saw alpha's two agents"
    );
    assert_eq!(
        beta.policy.predict(1).unwrap().len(),
        1,
        "beta's policy saw only beta's agent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_is_authenticated_and_swaps_policies_safely() {
    let p = proxy("cachesage").await;
    let url = format!("{}/admin/tenants/default/policy?fresh=true", p.url);
    let lru = std::fs::read(agentrt_tests::component_path("lru")).unwrap();
    let client = reqwest::Client::new();
    let status = |r: reqwest::Response| r.status().as_u16();
    assert_eq!(status(client.put(&url).body(lru.clone()).send().await.unwrap()), 401);
    let wrong = client
        .put(&url)
        .bearer_auth("guess")
        .body(lru.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(status(wrong), 401);

    let garbage = client
        .put(&url)
        .bearer_auth("s3cret")
        .body("not wasm")
        .send()
        .await
        .unwrap();
    assert_eq!(garbage.status(), 400);
    assert!(garbage.text().await.unwrap().contains("neither a Wasm component"));
    let tenant = p.app.tenants().get_or_start("default").unwrap();
    assert_eq!(
        tenant.policy.info().name,
        "cachesage",
        "a failed upload changes nothing"
    );

    let swapped = client.put(&url).bearer_auth("s3cret").body(lru).send().await.unwrap();
    assert_eq!(swapped.status(), 200);
    assert_eq!(tenant.policy.info().name, "lru");
    let listing: Value = client
        .get(format!("{}/admin/tenants", p.url))
        .bearer_auth("s3cret")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listing["tenants"][0]["policy"], "lru");

    let metrics = client
        .get(format!("{}/metrics", p.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("agentrt_proxy_requests_total")
            && metrics.contains("agentrt_policy_swaps_total{tenant=\"default\",slot=\"kv\"} 1"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_listing_counts_agents_and_sessions() {
    let p = proxy("lru").await;
    for task in ["Task A", "Task B"] {
        for system in ["You are the planner.", "You are the coder.", "You are the reviewer."] {
            assert_eq!(
                post_json(&p, &chat(system, task, "tiny", false), &[]).await.status(),
                200
            );
        }
    }
    let listing: Value = reqwest::Client::new()
        .get(format!("{}/admin/tenants", p.url))
        .bearer_auth("s3cret")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let tenant = &listing["tenants"][0];
    assert_eq!(tenant["agents"], 3, "{listing}");
    assert_eq!(tenant["agent_names"].as_array().unwrap().len(), 3);
    assert_eq!(tenant["sessions"], 2, "one session per task: {listing}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_agents_anchor_is_counted_once_by_the_upstream() {
    let p = proxy("lru").await;
    let mut body = chat("You are the tester.", "Task 1", "tiny", false);
    body["tools"] = json!([{"type": "function", "function": {"name": "run_tests"}}]);
    assert_eq!(post_json(&p, &body, &[]).await.status(), 200);
    let mut again = chat("You are the tester.", "Task 2", "tiny", false);
    again["tools"] = body["tools"].clone();
    assert_eq!(post_json(&p, &again, &[]).await.status(), 200);
    let asked = p.stub.tokenized();
    assert_eq!(asked.len(), 1, "once per agent, not per request");
    assert_eq!(
        asked[0]["messages"],
        json!([{"role": "system", "content": "You are the tester."}])
    );
    assert_eq!(asked[0]["tools"], body["tools"]);
    assert_eq!(asked[0]["add_generation_prompt"], false);
    assert!(!asked[0].to_string().contains("Task 1"), "only the anchor is counted");
    assert_eq!(p.app.metrics().anchors_tokenized.load(Relaxed), 1);

    // An upstream without /tokenize (the stub's `no-tokenize` model answers 404): the byte
    // estimate stays and the request goes through.
    let other = chat("You are the planner.", "Task 1", "no-tokenize", false);
    assert_eq!(post_json(&p, &other, &[]).await.status(), 200);
    assert_eq!(p.app.metrics().anchors_estimated.load(Relaxed), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sessions_are_reported_ended_to_the_policy() {
    // LRU asks for no warm-ups, whose events would reach the policy at any moment.
    let p = proxy("lru").await;
    for task in ["Task A", "Task B"] {
        assert_eq!(
            post_json(&p, &chat("You are the planner.", task, "tiny", false), &[])
                .await
                .status(),
            200
        );
    }
    let tenant = p.app.tenants().get_or_start("default").unwrap();
    assert_eq!(tenant.agents.live_sessions(), 2);
    // A response can reach the client a moment before its request-finish reaches the policy.
    settle(&p).await;
    assert_eq!(
        p.app.feed().end_idle_sessions(Duration::from_secs(3600)),
        0,
        "nothing is idle for an hour"
    );
    let observed = tenant.policy.metrics().calls(agentrt_runtime::Primitive::Observe);
    assert_eq!(p.app.feed().end_idle_sessions(Duration::ZERO), 2);
    settle(&p).await;
    assert_eq!(
        tenant.policy.metrics().calls(agentrt_runtime::Primitive::Observe),
        observed + 1,
        "both session-end events went to the policy in one call"
    );
    assert_eq!(tenant.agents.live_sessions(), 0);
    assert_eq!(p.app.metrics().sessions_ended.load(Relaxed), 2);
    assert_eq!(
        p.app.feed().end_idle_sessions(Duration::ZERO),
        0,
        "each session ends once"
    );
}

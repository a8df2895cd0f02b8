//! What the serve benches share: a fast in-process upstream, `agentrt serve` (CacheSage) in front
//! of it — the real router behind the real accept loop, on loopback — a planner → coder → tester
//! workload, components by name, and percentiles.
// Each bench uses part of this module.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use agentrt_runtime::{
    ComponentLookup, ComponentSource, EmbeddedSet, EngineOptions, PolicyEngine, PolicyRegistry, SlotConfig,
};
use agentrt_serve::auth::AdminTokens;
use agentrt_serve::tenant::settings::TenantSettings;
use agentrt_serve::tenant::Tenants;
use agentrt_serve::{App, AppConfig};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

/// An upstream that answers every chat completion at once with the same small reply.
pub async fn fast_upstream() -> String {
    let answer = json!({"id": "c", "object": "chat.completion", "model": "tiny",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 300, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 256}}});
    let app = Router::new()
        .route(
            "/v1/chat/completions",
            post(move |Json(_): Json<Value>| {
                let answer = answer.clone();
                async move { Json(answer) }
            }),
        )
        // What a router in front checks before it sends a worker requests (vllm-router does).
        .route("/health", get(|| async { "ok" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

/// The bytes of the component `name` (`cachesage`, `lru`), found as `agentrt serve` finds it
/// (`cargo xtask build-policies` builds them).
pub fn component_bytes(name: &str) -> Vec<u8> {
    let source = ComponentLookup::from_environment(EmbeddedSet::NONE)
        .find(name)
        .unwrap_or_else(|e| panic!("{e}"));
    match source {
        ComponentSource::File(path) => std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
        ComponentSource::Embedded(c) => c.bytes.to_vec(),
    }
}

/// `agentrt serve` in front of `upstream`, every tenant on CacheSage, plus `extra_slots` (slot
/// name, component name): its URL and state.
pub async fn start_proxy(
    upstream: &str,
    keys: HashMap<String, String>,
    admin_tokens: AdminTokens,
    extra_slots: &[(&str, &str)],
) -> (String, App) {
    let settings = TenantSettings {
        keys,
        admin: admin_tokens,
        ..TenantSettings::default()
    };
    let engine = PolicyEngine::new(EngineOptions::default()).unwrap();
    let component = Arc::new(
        engine
            .load_bytes("cachesage", &component_bytes("cachesage"))
            .expect("loading cachesage"),
    );
    let extra_slots = extra_slots
        .iter()
        .map(|(slot, name)| {
            let component = engine
                .load_bytes(name, &component_bytes(name))
                .expect("loading a slot's component");
            (slot.to_string(), Arc::new(component), SlotConfig::new(""))
        })
        .collect();
    let tenants = Tenants::new(PolicyRegistry::new(engine), component, SlotConfig::new(""), settings)
        .with_extra_slots(extra_slots);
    let app = App::build(AppConfig::new(tenants, upstream)).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    // Through the real accept loop, so the figures include what the front door's limits cost.
    let serving = app.clone();
    tokio::spawn(async move { serving.serve(listener, std::future::pending()).await });
    (url, app)
}

/// Request `i` of a planner → coder → tester workload: distinct anchors (~1.2 KB system
/// prompts), one session per task of three calls.
pub fn chat_body(i: usize) -> String {
    let agent = ["planner", "coder", "tester"][i % 3];
    let system = format!(
        "You are the {agent}. {}",
        "Follow the team's conventions carefully. ".repeat(30)
    );
    json!({"model": "tiny", "max_tokens": 1, "messages": [
        {"role": "system", "content": system},
        {"role": "user", "content": format!("Task {}", i / 3)},
    ]})
    .to_string()
}

/// The `p`-quantile (0–1) of `sorted`.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// A loopback port free at the moment (for a process that binds it next).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

//! Working-set admission in `serve` (`--session-admission working-set`), end to end on loopback:
//! agent sessions that pause between calls, more of them than the engine's KV cache holds, sent
//! through the real router and accept loop.
//!
//! ENGINE STAND-IN, named as such: the decision holds sessions only where prefilling the
//! engine's whole cache takes longer than a session's typical pause — a GPU engine serving an
//! 8B model (~15 s against pauses of seconds). This machine's real engine (vLLM on CPU, the tiny
//! model) prefills in microseconds a token, where holding must never happen; that side runs here
//! too, against the same stand-in with its prefill made nearly free. The stand-in speaks vLLM's
//! OpenAI stream (a usage chunk when asked) and states its cache in `vllm:cache_config_info`
//! as vLLM 0.32's `/metrics` does; its prefill sleeps a fixed time per prompt token.

mod stub_upstream;
mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use agentrt_serve::engine::admission::WorkingSetOptions;
use support::{Proxy, Setup};

/// 1,000 blocks of 16: 16,000 tokens.
const METRICS: &str = "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n\
    # TYPE vllm:cache_config_info gauge\n\
    vllm:cache_config_info{block_size=\"16\",cache_dtype=\"auto\",enable_prefix_caching=\"True\",\
    num_cpu_blocks=\"None\",num_gpu_blocks=\"1000\"} 1.0\n";
const CAPACITY_TOKENS: u64 = 16_000;

/// What the stand-in's tokenizer counts: tokens per 4 characters of a prompt's messages.
const BYTES_OVER_4: f64 = 1.0;

/// Sessions, calls per session, the pause between two calls of a session, and the prompt's
/// characters (~2,000 tokens: 12 sessions need 24,000 tokens against the cache's 16,000).
const SESSIONS: usize = 12;
const CALLS: usize = 6;
const PAUSE: Duration = Duration::from_millis(200);
const PROMPT_CHARS: usize = 8_000;
/// A held stream hears from the proxy this often.
const KEEPALIVE: Duration = Duration::from_millis(100);

#[derive(Clone)]
struct Engine {
    /// Prefill time per prompt token.
    per_token: Duration,
    /// Tokens its tokenizer counts per 4 characters.
    density: f64,
    calls: Arc<AtomicU64>,
}

async fn completions(State(engine): State<Engine>, Json(body): Json<Value>) -> Response {
    engine.calls.fetch_add(1, Relaxed);
    let chars: usize = body["messages"]
        .as_array()
        .map(|m| m.iter().filter_map(|m| m["content"].as_str()).map(str::len).sum())
        .unwrap_or(0);
    let prompt = (chars as f64 / 4.0 * engine.density) as u32;
    let usage = body["stream_options"]["include_usage"].as_bool() == Some(true);
    tokio::time::sleep(engine.per_token * prompt).await;
    let chunk = |content: &str| {
        json!({"id": "c", "object": "chat.completion.chunk", "model": "m",
               "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": null}]})
    };
    let mut events = vec![chunk("ok"), chunk(" done")];
    if usage {
        events.push(
            json!({"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [],
            "usage": {"prompt_tokens": prompt, "completion_tokens": 2, "total_tokens": prompt + 2,
                      "prompt_tokens_details": {"cached_tokens": 0}}}),
        );
    }
    let mut text: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
    text.push_str("data: [DONE]\n\n");
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from(text))
        .unwrap()
}

async fn engine(per_token: Duration, density: f64) -> (String, Arc<AtomicU64>) {
    let calls = Arc::new(AtomicU64::new(0));
    let state = Engine {
        per_token,
        density,
        calls: calls.clone(),
    };
    let app = Router::new()
        .route("/v1/chat/completions", post(completions))
        .route("/metrics", get(|| async { METRICS }))
        .route("/v1/models", get(|| async { Json(json!({"data": [{"id": "m"}]})) }))
        .with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, calls)
}

/// `serve` with working-set admission (held calls wait at most `max_hold`) in front of an
/// engine prefilling `per_token` a token, its tokenizer counting `density` tokens per 4 characters.
async fn proxy(per_token: Duration, density: f64, max_hold: Duration) -> (Proxy, Arc<AtomicU64>) {
    proxy_for_tenants(per_token, density, max_hold, HashMap::new()).await
}

/// The same, with API `keys` naming tenants.
async fn proxy_for_tenants(
    per_token: Duration,
    density: f64,
    max_hold: Duration,
    keys: HashMap<String, String>,
) -> (Proxy, Arc<AtomicU64>) {
    let (upstream, calls) = engine(per_token, density).await;
    let max_hold_us = max_hold.as_micros() as u64;
    let proxy = Setup {
        upstream: Some(upstream),
        working_set: Some(WorkingSetOptions {
            settings: agentrt_admission::Settings {
                max_hold_us,
                max_first_wait_us: max_hold_us,
                ..Default::default()
            },
            capacity_tokens: None,
            keepalive: Some(KEEPALIVE),
        }),
        keys,
        ..Setup::new("lru")
    }
    .start()
    .await;
    (proxy, calls)
}

/// What a call came back with: its status, whether its stream ended with `[DONE]`, and whether
/// the proxy kept it alive while it was held (SSE comment lines before the first event).
#[derive(Debug, Clone, Copy)]
struct Answer {
    status: u16,
    done: bool,
    kept_alive: bool,
}

/// Every session's calls, a pause between two, the last saying the session is closed.
async fn run_sessions(url: &str) -> Vec<Answer> {
    let client = reqwest::Client::new();
    let mut tasks = Vec::new();
    for s in 0..SESSIONS {
        let (client, url) = (client.clone(), url.to_string());
        tasks.push(tokio::spawn(async move {
            let mut results = Vec::new();
            for turn in 0..CALLS {
                let body = json!({
                    "model": "m", "stream": true, "max_tokens": 2,
                    "messages": [
                        {"role": "system", "content": format!("You are agent {}.", s % 3)},
                        {"role": "user", "content": format!("turn {turn} {}", "x".repeat(PROMPT_CHARS))}
                    ]
                });
                let mut request = client
                    .post(format!("{url}/v1/chat/completions"))
                    .header("x-agent-id", format!("agent-{}", s % 3))
                    .header("x-session-id", format!("session-{s}"));
                // The framework says the session is over with its last call.
                if turn + 1 == CALLS {
                    request = request.header("x-agentrt-session-end", "closed");
                }
                let reply = request.json(&body).send().await.unwrap();
                let status = reply.status().as_u16();
                let text = reply.text().await.unwrap_or_default();
                let first_event = text.find("data: ").unwrap_or(text.len());
                results.push(Answer {
                    status,
                    done: text.ends_with("data: [DONE]\n\n"),
                    kept_alive: text[..first_event].lines().any(|l| l.starts_with(": ")),
                });
                tokio::time::sleep(PAUSE).await;
            }
            results
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all
}

/// The value of the unlabelled series `name` (or the one with `labels`) on the metrics page.
fn series(page: &str, name: &str) -> f64 {
    page.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no series {name} in:\n{page}"))
}

async fn metrics(url: &str) -> String {
    reqwest::get(format!("{url}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// Wait until the capacity has been read from the engine's `/metrics` (the first read is at
/// start).
async fn capacity_read(url: &str) {
    let start = Instant::now();
    while series(&metrics(url).await, "agentrt_admission_capacity_tokens") == 0.0 {
        assert!(start.elapsed() < Duration::from_secs(10), "the capacity was never read");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn past_the_cache_sessions_are_held_where_prefill_costs_and_never_where_it_is_free() {
    let max_hold = Duration::from_secs(5);

    // Prefill that costs: 100 µs a token, so the whole cache takes 1.6 s against pauses of
    // 0.2 s. Once 32 answers have priced it, sessions past the cache are held.
    let (p, calls) = proxy(Duration::from_micros(100), BYTES_OVER_4, max_hold).await;
    let url = p.url.clone();
    capacity_read(&url).await;
    let started = Instant::now();
    let results = run_sessions(&url).await;
    let took = started.elapsed();
    let page = metrics(&url).await;
    assert_eq!(results.len(), SESSIONS * CALLS);
    assert!(
        results.iter().all(|a| a.status == 200 && a.done),
        "every call answered whole, kept alive or not: {results:?}"
    );
    assert_eq!(
        calls.load(Relaxed),
        (SESSIONS * CALLS) as u64,
        "each call went upstream once"
    );
    assert_eq!(
        series(&page, "agentrt_admission_capacity_tokens"),
        CAPACITY_TOKENS as f64
    );
    assert_eq!(series(&page, "agentrt_admission_holding_pays"), 1.0, "{page}");
    let holds = series(&page, "agentrt_admission_holds_total");
    let resumes = series(&page, "agentrt_admission_resumes_total");
    assert!(
        holds >= 1.0 && resumes >= 1.0,
        "holds {holds}, resumes {resumes}:\n{page}"
    );
    let longest = series(&page, "agentrt_admission_held_wait_max_seconds");
    assert!(
        longest <= max_hold.as_secs_f64() + 1.5,
        "a held call waited {longest} s, past its bound of {max_hold:?}"
    );
    // A held streamed call heard from the proxy while it waited, once it waited past the interval.
    let kept_alive = results.iter().filter(|a| a.kept_alive).count();
    assert_eq!(
        series(&page, "agentrt_admission_held_streams_kept_alive_total"),
        kept_alive as f64,
        "/metrics counts the held streams kept alive"
    );
    let interval = KEEPALIVE.as_secs_f64();
    assert!(
        kept_alive as f64 <= holds
            && (longest < 2.0 * interval || kept_alive > 0)
            && (longest > interval || kept_alive == 0),
        "{kept_alive} calls kept alive, {holds} holds, the longest {longest} s"
    );
    // Every session closed with its last call: none is left in the ledger, held or resident.
    for state in ["held", "resident"] {
        let line = format!("agentrt_admission_sessions{{state=\"{state}\"}} 0");
        assert!(page.contains(&line), "{line}:\n{page}");
    }
    eprintln!(
        "prefill priced: {holds} holds, {resumes} resumes, longest hold {longest:.2} s, {kept_alive} calls kept alive, {took:?}"
    );

    // Prefill nearly free (the tiny model on CPU): holding never pays, nothing is held.
    let (p, calls) = proxy(Duration::from_nanos(100), BYTES_OVER_4, max_hold).await;
    let url = p.url.clone();
    capacity_read(&url).await;
    let results = run_sessions(&url).await;
    let page = metrics(&url).await;
    assert!(
        results.iter().all(|a| a.status == 200 && a.done && !a.kept_alive),
        "{results:?}"
    );
    assert_eq!(calls.load(Relaxed), (SESSIONS * CALLS) as u64);
    assert_eq!(series(&page, "agentrt_admission_holding_pays"), 0.0, "{page}");
    assert_eq!(series(&page, "agentrt_admission_holds_total"), 0.0, "{page}");
    assert_eq!(series(&page, "agentrt_admission_held_streams_kept_alive_total"), 0.0);
}

/// One call of `session` with a prompt of `chars` characters; its status.
async fn call(client: &reqwest::Client, url: &str, session: &str, chars: usize) -> u16 {
    call_as(client, url, None, session, chars).await
}

/// The same, with the API `key` of a tenant.
async fn call_as(client: &reqwest::Client, url: &str, key: Option<&str>, session: &str, chars: usize) -> u16 {
    let body = json!({
        "model": "m", "stream": true, "max_tokens": 2, "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "y".repeat(chars)}]
    });
    let mut request = client
        .post(format!("{url}/v1/chat/completions"))
        .header("x-agent-id", "agent")
        .header("x-session-id", session);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    let reply = request.json(&body).send().await.unwrap();
    let status = reply.status().as_u16();
    reply.text().await.unwrap();
    status
}

/// The working set `serve` reports as soon as the engine has received `calls` calls in all.
async fn working_set_once_the_engine_has(url: &str, engine_calls: &AtomicU64, calls: u64) -> f64 {
    let start = Instant::now();
    while engine_calls.load(Relaxed) < calls {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the engine never received {calls} calls"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    series(&metrics(url).await, "agentrt_admission_working_set_tokens")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn calls_in_flight_count_as_the_engine_counts_their_prompts_not_as_bytes_over_four() {
    // A tokenizer three times denser than the proxy's guess (bytes ÷ 4): the tiny test model's
    // reads agent prompts so. 250 µs a token: a 6,000-token prompt is in the engine for 1.5 s.
    let density = 3.0;
    let (p, engine_calls) = proxy(Duration::from_micros(250), density, Duration::from_secs(5)).await;
    let url = p.url.clone();
    capacity_read(&url).await;
    let client = reqwest::Client::new();
    // One answer pairs a guess with the engine's count.
    assert_eq!(call(&client, &url, "calibration", 8_000).await, 200);

    // Four new sessions' first calls at once, 8,000 characters each: 6,000 tokens as the engine
    // counts them, ~2,000 as bytes ÷ 4. Fewer than 32 answers were priced: nothing is held.
    let mut calls = Vec::new();
    for s in 0..4 {
        let (client, url) = (client.clone(), url.clone());
        calls.push(tokio::spawn(async move {
            call(&client, &url, &format!("s{s}"), 8_000).await
        }));
    }
    // Once the engine has all four, none has been answered yet: the ledger counts them in flight.
    let in_flight = working_set_once_the_engine_has(&url, &engine_calls, 5).await;
    assert!(
        calls.iter().all(|c| !c.is_finished()),
        "a call was answered before the ledger was read"
    );
    for c in calls {
        assert_eq!(c.await.unwrap(), 200);
    }
    // The calibration session's 6,000 (idle, answered) and the four in flight, as counted.
    let counted = 5.0 * 8_000.0 / 4.0 * density;
    assert!(
        in_flight >= 0.9 * counted,
        "with four calls in flight the working set was {in_flight} tokens; the engine counts {counted}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_tenants_answers_do_not_move_another_tenants_sizes() {
    // The same dense tokenizer for both; only `alpha` has been answered.
    let density = 3.0;
    let keys = [("key-a", "alpha"), ("key-b", "beta")].map(|(k, t)| (k.to_string(), t.to_string()));
    let (p, engine_calls) =
        proxy_for_tenants(Duration::from_micros(250), density, Duration::from_secs(5), keys.into()).await;
    let url = p.url.clone();
    capacity_read(&url).await;
    let client = reqwest::Client::new();
    assert_eq!(call_as(&client, &url, Some("key-a"), "calibration", 8_000).await, 200);

    // `beta`'s first call, in the engine: counted at its own (unscaled) guess, not at `alpha`'s scale.
    let call = {
        let (client, url) = (client.clone(), url.clone());
        tokio::spawn(async move { call_as(&client, &url, Some("key-b"), "b0", 8_000).await })
    };
    let tokens = working_set_once_the_engine_has(&url, &engine_calls, 2).await;
    assert!(!call.is_finished(), "the call was answered before the ledger was read");
    assert_eq!(call.await.unwrap(), 200);
    // alpha's answered session at the count (6,000) and beta's call at bytes ÷ 4 (~2,000); alpha's
    // scale applied to beta would make it ~12,000.
    let alpha = 8_000.0 / 4.0 * density;
    assert!(
        tokens < alpha + 3_000.0,
        "beta's call in flight counted at alpha's scale: the working set was {tokens} tokens"
    );
    assert!(
        tokens >= alpha + 1_500.0,
        "beta's call was not counted: {tokens} tokens"
    );
}

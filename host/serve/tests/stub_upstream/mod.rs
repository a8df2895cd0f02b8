//! STUB UPSTREAM — a stand-in for vLLM, used only where a real one cannot cause the fault under
//! test (an upstream that fails mid-stream, answers 404 for a model, or must report exactly what
//! the proxy sent). The real vLLM path is exercised by tests/e2e_vllm.rs.
//!
//! Behaviour by request `model`: `fail-mid-stream` sends one SSE chunk then cuts the connection;
//! `unknown` answers 404 like vLLM; anything else answers, streaming (three chunks, the last with
//! usage when `stream_options.include_usage` asks for it, as vLLM does) when `stream` is true. `/tokenize` answers a count of 321 and stand-in token ids (404 for model `no-tokenize`).
//! `/v1/responses` and `/v1/messages` answer a fixed reply in their own shapes, streamed as each
//! API streams when asked. Model `tool-call` asks for a tool instead of answering, as a model
//! does (whole or streamed): chat completions `web_search` (`finish_reason: "tool_calls"`), the
//! Messages API `bash` (`stop_reason: "tool_use"`).
//!
//! FAULT INJECTION, for the proxy's upstream limits (a real vLLM does not hang or flood on
//! demand): `hang-before-headers` never answers; `hang-mid-body` sends the start of a
//! non-streamed reply, then nothing; `hang-mid-stream` sends one SSE chunk, then nothing;
//! `huge-reply` answers 2 MiB with a `Content-Length`, `huge-reply-chunked` 2 MiB without one;
//! `slow-MS` answers after MS milliseconds (an engine busy with each request for that long);
//! `firehose` streams [`FIREHOSE_BYTES`] of events as fast as they are taken (a long generation,
//! for clients that read slowly; the stub's own server buffers up to ~400 KiB of it per stream).

// Each test binary uses part of the stub.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::StreamExt;
use serde_json::{json, Value};

/// What the stub received.
#[derive(Debug, Clone)]
pub struct Received {
    pub body: Value,
    pub warmup_header: bool,
    /// The route it came to.
    pub path: &'static str,
    /// Its `x-session-id` header, which a router in front reads (`--upstream-router`).
    pub session_header: Option<String>,
}

#[derive(Clone, Default)]
pub struct Stub {
    pub received: Arc<Mutex<Vec<Received>>>,
    /// Bodies of `/tokenize` requests.
    pub tokenize: Arc<Mutex<Vec<Value>>>,
}

impl Stub {
    pub fn tokenized(&self) -> Vec<Value> {
        self.tokenize.lock().unwrap().clone()
    }
    pub fn user_requests(&self) -> Vec<Received> {
        self.received
            .lock()
            .unwrap()
            .iter()
            .filter(|r| !r.warmup_header)
            .cloned()
            .collect()
    }
    pub fn warmups(&self) -> Vec<Received> {
        self.received
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.warmup_header)
            .cloned()
            .collect()
    }
}

pub async fn start() -> (String, Stub) {
    let stub = Stub::default();
    let recorder = stub.clone();
    let (responses_recorder, messages_recorder) = (stub.clone(), stub.clone());
    let tokenize = stub.tokenize.clone();
    let app = Router::new()
        .route(
            "/tokenize",
            post(move |Json(body): Json<Value>| {
                let tokenize = tokenize.clone();
                async move {
                    let missing = body["model"] == "no-tokenize";
                    let tokens = stand_in_tokens(&body);
                    tokenize.lock().unwrap().push(body);
                    if missing {
                        return StatusCode::NOT_FOUND.into_response();
                    }
                    Json(json!({"count": 321, "max_model_len": 2048, "tokens": tokens})).into_response()
                }
            }),
        )
        .route(
            "/v1/chat/completions",
            post(move |headers: HeaderMap, Json(body): Json<Value>| {
                let recorder = recorder.clone();
                async move { chat(recorder, headers, body).await }
            }),
        )
        .route(
            "/v1/responses",
            post(move |headers: HeaderMap, Json(body): Json<Value>| {
                let recorder = responses_recorder.clone();
                async move { other_api(recorder, "/v1/responses", headers, body) }
            }),
        )
        .route(
            "/v1/messages",
            post(move |headers: HeaderMap, Json(body): Json<Value>| {
                let recorder = messages_recorder.clone();
                async move { other_api(recorder, "/v1/messages", headers, body) }
            }),
        )
        // A router in front (vLLM's) checks its workers' health.
        .route("/health", get(|| async { StatusCode::OK }))
        .route(
            "/v1/models",
            get(|| async { Json(json!({"object": "list", "data": [{"id": "tiny", "object": "model"}]})) }),
        )
        // vLLM takes prompts as long as the proxy forwards (`--max-body-bytes`); axum's default is 2 MB.
        .layer(axum::extract::DefaultBodyLimit::max(64 << 20));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), stub)
}

fn session_header(headers: &HeaderMap) -> Option<String> {
    headers
        .get("x-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// The Responses and Messages APIs: a fixed reply in each one's shape, usage included (a prompt of
/// 20 tokens, 16 of them cached, 2 output — in Anthropic's words 4 input tokens and 16 cache
/// reads); streamed as that API streams it when `stream` is true.
fn other_api(stub: Stub, path: &'static str, headers: HeaderMap, body: Value) -> Response {
    stub.received.lock().unwrap().push(Received {
        body: body.clone(),
        warmup_header: headers.get("x-agentrt-warmup").is_some(),
        path,
        session_header: session_header(&headers),
    });
    let stream = body["stream"].as_bool() == Some(true);
    let tool_call = body["model"] == "tool-call";
    let (whole, events) = if path == "/v1/messages" && tool_call {
        tool_use_message()
    } else if path == "/v1/responses" {
        let usage = json!({"input_tokens": 20, "output_tokens": 2, "input_tokens_details": {"cached_tokens": 16}});
        let response = json!({"id": "r1", "object": "response", "status": "completed", "usage": usage,
            "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hi"}]}]});
        let events = vec![
            (
                "response.created",
                json!({"type": "response.created", "response": {"id": "r1", "usage": null}}),
            ),
            (
                "response.output_text.delta",
                json!({"type": "response.output_text.delta", "delta": "hi"}),
            ),
            (
                "response.completed",
                json!({"type": "response.completed", "response": response}),
            ),
        ];
        (response, events)
    } else {
        let message = json!({"id": "m1", "type": "message", "role": "assistant", "content": [{"type": "text", "text": "hi"}],
            "usage": {"input_tokens": 4, "output_tokens": 2, "cache_read_input_tokens": 16}});
        let events = vec![
            (
                "message_start",
                json!({"type": "message_start", "message": {"id": "m1", "usage": {"input_tokens": 4, "output_tokens": 0, "cache_read_input_tokens": 16}}}),
            ),
            (
                "content_block_delta",
                json!({"type": "content_block_delta", "delta": {"type": "text_delta", "text": "hi"}}),
            ),
            (
                "message_delta",
                json!({"type": "message_delta", "usage": {"output_tokens": 2}}),
            ),
            ("message_stop", json!({"type": "message_stop"})),
        ];
        (message, events)
    };
    if !stream {
        return Json(whole).into_response();
    }
    let sse: String = events
        .into_iter()
        .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
        .collect();
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from(sse))
        .unwrap()
}

/// A Messages API reply that stops for tool `bash`, whole and as its stream's events.
fn tool_use_message() -> (Value, Vec<(&'static str, Value)>) {
    let usage = json!({"input_tokens": 4, "output_tokens": 2, "cache_read_input_tokens": 16});
    let message = json!({"id": "m1", "type": "message", "role": "assistant", "stop_reason": "tool_use",
        "content": [{"type": "tool_use", "id": "t1", "name": "bash", "input": {"cmd": "ls"}}], "usage": usage});
    let events = vec![
        (
            "message_start",
            json!({"type": "message_start", "message": {"id": "m1", "usage": usage}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t1", "name": "bash", "input": {}}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"cmd\": \"ls\"}"}}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 2}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ];
    (message, events)
}

/// Token ids standing in for a tokenizer's: the bytes of each message's role and content (or of
/// the prompt), so prompts that share a start share their first tokens, as real ones do.
fn stand_in_tokens(body: &Value) -> Vec<u32> {
    let mut text = String::new();
    for m in body["messages"].as_array().into_iter().flatten() {
        text.push_str(m["role"].as_str().unwrap_or_default());
        text.push_str(m["content"].as_str().unwrap_or_default());
    }
    text.push_str(body["prompt"].as_str().unwrap_or_default());
    text.bytes().take(4096).map(u32::from).collect()
}

async fn chat(stub: Stub, headers: HeaderMap, body: Value) -> Response {
    stub.received.lock().unwrap().push(Received {
        body: body.clone(),
        warmup_header: headers.get("x-agentrt-warmup").is_some(),
        path: "/v1/chat/completions",
        session_header: session_header(&headers),
    });
    let model = body["model"].as_str().unwrap_or_default().to_string();
    if model == "unknown" {
        let error = json!({"object": "error", "message": "The model `unknown` does not exist.", "type": "NotFoundError", "code": 404});
        return (StatusCode::NOT_FOUND, Json(error)).into_response();
    }
    if model == "hang-before-headers" {
        std::future::pending::<()>().await;
    }
    if let Some(ms) = model.strip_prefix("slow-").and_then(|ms| ms.parse().ok()) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    if let Some(fault) = fault(&model) {
        return fault;
    }
    if model == "firehose" && body["stream"].as_bool() == Some(true) {
        return firehose();
    }
    let usage = json!({"prompt_tokens": 12, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 8}});
    let tool_call = model == "tool-call";
    if body["stream"].as_bool() != Some(true) && tool_call {
        let call = json!({"id": "call1", "type": "function", "function": {"name": "web_search", "arguments": "{}"}});
        return Json(json!({"id": "c1", "object": "chat.completion", "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": [call]}, "finish_reason": "tool_calls"}],
            "usage": usage}))
        .into_response();
    }
    if body["stream"].as_bool() != Some(true) && model != "fail-mid-stream" {
        return Json(json!({"id": "c1", "object": "chat.completion", "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
            "usage": usage}))
        .into_response();
    }
    let fail = model == "fail-mid-stream";
    // Like vLLM: the usage chunk only when the request asks for it, `include_usage` read as its
    // request model reads a boolean (a few of the forms it takes: enough for the tests).
    let with_usage = matches!(
        body.pointer("/stream_options/include_usage"),
        Some(v) if v == &json!(true) || v == &json!("true") || v == &json!("1") || v == &json!(1)
    );
    // The usage chunk last, without the blank line that ends an event (and no `[DONE]`).
    let unterminated = model == "usage-unterminated";
    let chunks = futures_util::stream::unfold(0u32, move |i| {
        let usage = usage.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            match i {
                // A tool call streams its name in the first delta, its finish reason last.
                0 if tool_call => Some((
                    Ok::<_, std::io::Error>(Bytes::from(
                        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call1\",\"function\":{\"name\":\"web_search\",\"arguments\":\"\"}}]}}]}\n\n",
                    )),
                    1,
                )),
                1 if tool_call => Some((
                    Ok::<_, std::io::Error>(Bytes::from(
                        "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
                    )),
                    2,
                )),
                0 => Some((
                    Ok::<_, std::io::Error>(Bytes::from("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n")),
                    1,
                )),
                1 if fail => Some((Err(std::io::Error::other("stub cuts the stream")), 9)),
                1 => Some((
                    Ok::<_, std::io::Error>(Bytes::from("data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\n")),
                    2,
                )),
                2 if with_usage && unterminated => Some((
                    Ok(Bytes::from(format!("data: {}", json!({"choices": [], "usage": usage})))),
                    3,
                )),
                2 if with_usage => Some((
                    Ok(Bytes::from(format!(
                        "data: {}\n\ndata: [DONE]\n\n",
                        json!({"choices": [], "usage": usage})
                    ))),
                    3,
                )),
                2 => Some((Ok(Bytes::from("data: [DONE]\n\n")), 3)),
                _ => None,
            }
        }
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(chunks))
        .unwrap()
}

/// Bytes of events the `firehose` model streams.
pub const FIREHOSE_BYTES: usize = 1 << 20;

/// The `firehose` model's stream: 16 KiB chunks of token events, one shared buffer for all.
fn firehose() -> Response {
    static CHUNK: std::sync::OnceLock<Bytes> = std::sync::OnceLock::new();
    let chunk = CHUNK.get_or_init(|| {
        let event = "data: {\"choices\":[{\"delta\":{\"content\":\"firehose firehose firehose\"}}]}\n\n";
        Bytes::from(event.repeat((16 << 10) / event.len()))
    });
    let chunks =
        futures_util::stream::iter((0..FIREHOSE_BYTES / chunk.len()).map(|_| Ok::<_, std::io::Error>(chunk.clone())))
            .chain(futures_util::stream::once(async {
                Ok(Bytes::from_static(b"data: [DONE]\n\n"))
            }));
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(chunks))
        .unwrap()
}

/// Size of the `huge-reply` models' answers.
pub const HUGE_REPLY_BYTES: usize = 2 << 20;

/// The fault-injection models' answers (see the module's doc).
fn fault(model: &str) -> Option<Response> {
    let never = || futures_util::stream::pending::<Result<Bytes, std::io::Error>>();
    let response = match model {
        "hang-mid-body" => {
            let start =
                futures_util::stream::once(async { Ok::<_, std::io::Error>(Bytes::from_static(b"{\"id\": \"c1\", ")) });
            Response::builder()
                .header("content-type", "application/json")
                .body(Body::from_stream(start.chain(never())))
        }
        "hang-mid-stream" => {
            let first = futures_util::stream::once(async {
                Ok::<_, std::io::Error>(Bytes::from("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n"))
            });
            Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(first.chain(never())))
        }
        "huge-reply" => Response::builder()
            .header("content-type", "application/json")
            .body(Body::from(vec![b' '; HUGE_REPLY_BYTES])),
        "huge-reply-chunked" => {
            let chunks = futures_util::stream::iter(
                (0..HUGE_REPLY_BYTES / 65536).map(|_| Ok::<_, std::io::Error>(Bytes::from(vec![b' '; 65536]))),
            );
            Response::builder()
                .header("content-type", "application/json")
                .body(Body::from_stream(chunks))
        }
        _ => return None,
    };
    Some(response.unwrap())
}

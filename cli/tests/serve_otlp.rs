//! One trace from the client through `agentrt serve` to the engine, exported over OTLP to a real
//! receiver: the receiver (tests/otlp/receiver.py) decodes every export with the OpenTelemetry
//! protocol's own definitions (PyPI `opentelemetry-proto`, installed by tests/otlp/setup-venv.sh,
//! which `.ci/run` calls); without that venv the test says so and skips.
//!
//! `agentrt serve` runs as a process with `OTEL_EXPORTER_OTLP_ENDPOINT` pointing at the receiver,
//! the `probe` policy (its `act` warms the last agent it registered, so every request leads to a
//! warm-up) and an admission queue. Two chat calls, one whole and one streamed, each with its
//! client's `traceparent`, then SIGTERM: what the batch processor still holds is flushed at
//! shutdown. The test then reads every span the receiver decoded and checks each trace: the
//! client's trace id throughout, the spans of each step with the right parents, the upstream and
//! the warm-up sent `traceparent`s of the same trace, and no prompt text in any attribute.

#![cfg(unix)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use serde_json::{json, Value};

/// The client's trace context of each call: W3C `traceparent` = version-trace-parent-flags.
const WHOLE_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const WHOLE_PARENT: &str = "00f067aa0ba902b7";
const STREAMED_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const STREAMED_PARENT: &str = "b7ad6b7169203331";
/// In every prompt: no exported attribute may contain it.
const PROMPT_MARKER: &str = "zebra-umbrella-7731";

/// A child process killed when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn venv_python() -> Option<PathBuf> {
    let venv = std::env::var_os("AGENTRT_OTLP_VENV")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/agentrt/venv-otlp")))?;
    let python = venv.join("bin/python");
    python.is_file().then_some(python)
}

/// The receiver on a free port: (process, its base URL).
fn start_receiver(python: &PathBuf) -> (Process, String) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/otlp/receiver.py");
    let mut child = Command::new(python)
        .arg(script)
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting the OTLP receiver");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("the receiver said {line:?}, not `listening on PORT`"));
    (Process(child), format!("http://127.0.0.1:{port}"))
}

/// What the stub upstream received: (path, `traceparent`, whether a warm-up).
type Seen = Arc<Mutex<Vec<(String, Option<String>, bool)>>>;

/// STUB UPSTREAM — a stand-in for vLLM that records the `traceparent` of each request (a real
/// vLLM would make it the parent of its own spans). It answers chat completions whole, or as
/// three SSE chunks when `stream` is true; anything else (`/tokenize`) is a 404, which the proxy
/// takes as "estimate the anchor's tokens".
async fn start_stub() -> (String, Seen) {
    let seen: Seen = Arc::default();
    let recorded = seen.clone();
    let app = Router::new().route(
        "/v1/chat/completions",
        post(move |headers: HeaderMap, body: String| {
            let recorded = recorded.clone();
            async move {
                let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
                recorded.lock().unwrap().push((
                    "/v1/chat/completions".to_string(),
                    header("traceparent"),
                    header("x-agentrt-warmup").is_some(),
                ));
                let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
                let usage = json!({"prompt_tokens": 20, "completion_tokens": 2, "total_tokens": 22});
                if body["stream"] == json!(true) {
                    let chunk = |content: &str| {
                        format!(
                            "data: {}\n\n",
                            json!({"choices": [{"index": 0, "delta": {"content": content}}]})
                        )
                    };
                    let sse = chunk("hel") + &chunk("lo") + &format!("data: {}\n\n", json!({"choices": [], "usage": usage})) + "data: [DONE]\n\n";
                    let pieces: Vec<Result<String, std::io::Error>> =
                        sse.split_inclusive("\n\n").map(|p| Ok(p.to_string())).collect();
                    Response::builder()
                        .header("content-type", "text/event-stream")
                        .body(Body::from_stream(futures_util::stream::iter(pieces)))
                        .unwrap()
                } else {
                    let reply = json!({
                        "id": "chatcmpl-1", "object": "chat.completion",
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}],
                        "usage": usage,
                    });
                    Response::builder()
                        .header("content-type", "application/json")
                        .body(Body::from(reply.to_string()))
                        .unwrap()
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, seen)
}

/// `agentrt serve` exporting to `receiver`, in front of `upstream`: (process, its base URL).
fn start_serve(upstream: &str, receiver: &str) -> (Process, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentrt"))
        .args(["serve", "--upstream", upstream, "--listen", "127.0.0.1:0"])
        .args(["--policy", "probe", "--upstream-max-in-flight", "4"])
        // Room for every warm-up the two calls ask for (two each, one after arrival and one after
        // the end): the default burst of 2 would skip the second call's as over the rate.
        .args(["--warmup-concurrency", "8", "--warmup-rate", "1000"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver)
        .env("OTEL_SERVICE_NAME", "agentrt-under-test")
        // Batches go every 100 ms instead of 5 s: the spans reach the receiver while the test looks.
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_PROTOCOL")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .env("AGENTRT_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting agentrt serve");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut said = Vec::new();
    let addr = loop {
        let Some(line) = lines.next() else {
            panic!("agentrt serve exited before listening; it said:\n{}", said.join("\n"))
        };
        let line = line.unwrap();
        said.push(line.clone());
        if let Some(rest) = line.split("listening on http://").nth(1) {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    // Keep draining its log so it never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    (Process(child), format!("http://{addr}"))
}

fn chat(stream: bool) -> Value {
    json!({
        "model": "m",
        "stream": stream,
        "stream_options": {"include_usage": true},
        "messages": [
            {"role": "system", "content": format!("You are the tester. {PROMPT_MARKER}")},
            {"role": "user", "content": format!("Run the suite, stream={stream}. {PROMPT_MARKER}")},
        ],
    })
}

/// A client's `tracestate` of 32 members of 60 bytes (~2.2 KB): it was copied whole onto every
/// span of the trace (44.7 KB exported per request instead of 1.9 KB).
fn client_tracestate() -> String {
    let members: Vec<String> = (0..32).map(|i| format!("vendor{i:02}={}", "x".repeat(50))).collect();
    members.join(",")
}

/// The password in the `--upstream` URL: it must reach no exported span.
const UPSTREAM_PASSWORD: &str = "PASSWORD-4f3a";

/// Send one chat call with the client's trace context; the whole answer, read to its end.
/// Wait until a warm-up went upstream in `trace` (20 s at most).
async fn wait_for_warmup(seen: &Seen, trace: &str) {
    let started = Instant::now();
    while upstream_parents(seen, trace, true).is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no warm-up upstream in trace {trace} within 20 s: {:?}",
            seen.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn call(client: &reqwest::Client, serve: &str, stream: bool, trace: &str, parent: &str) -> String {
    let reply = client
        .post(format!("{serve}/v1/chat/completions"))
        .header("content-type", "application/json")
        .header("traceparent", format!("00-{trace}-{parent}-01"))
        .header("tracestate", client_tracestate())
        .header("x-agent-id", "tester")
        .header("x-session-id", format!("session-{stream}"))
        .body(chat(stream).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 200, "the chat call through agentrt");
    reply.text().await.unwrap()
}

/// A span as the receiver decoded it.
#[derive(Debug, Clone)]
struct Span {
    name: String,
    trace_id: String,
    span_id: String,
    parent: String,
    kind: String,
    status: String,
    attributes: serde_json::Map<String, Value>,
    service: String,
}

fn spans_of(received: &Value) -> Vec<Span> {
    received["spans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| Span {
            name: s["name"].as_str().unwrap().to_string(),
            trace_id: s["trace_id"].as_str().unwrap().to_string(),
            span_id: s["span_id"].as_str().unwrap().to_string(),
            parent: s["parent_span_id"].as_str().unwrap().to_string(),
            kind: s["kind"].as_str().unwrap().to_string(),
            status: s["status"].as_str().unwrap().to_string(),
            attributes: s["attributes"].as_object().unwrap().clone(),
            service: s["service_name"].as_str().unwrap_or_default().to_string(),
        })
        .collect()
}

/// The spans of one trace by name; each name the test reads must be there.
struct Trace(Vec<Span>);

impl Trace {
    fn one(&self, name: &str) -> &Span {
        let found: Vec<&Span> = self.0.iter().filter(|s| s.name == name).collect();
        match found.as_slice() {
            [span] => span,
            [] => panic!("no `{name}` span in the trace; it has {:?}", self.names()),
            _ => panic!("{} `{name}` spans in the trace, expected one", found.len()),
        }
    }

    /// The one span of `kind` (OpenTelemetry's names for the server and client spans are
    /// `METHOD route`, the same for both here).
    fn of_kind(&self, kind: &str) -> &Span {
        let found: Vec<&Span> = self.0.iter().filter(|s| s.kind == kind).collect();
        assert_eq!(found.len(), 1, "one {kind} span in the trace; it has {found:?}");
        found[0]
    }

    fn all(&self, name: &str) -> Vec<&Span> {
        self.0.iter().filter(|s| s.name == name).collect()
    }

    fn names(&self) -> Vec<&str> {
        self.0.iter().map(|s| s.name.as_str()).collect()
    }
}

/// The parent span ids in the `traceparent`s of the user calls (`warmup` false) or the warm-ups
/// the stub received in `trace`.
fn upstream_parents(seen: &Seen, trace: &str, warmup: bool) -> Vec<String> {
    seen.lock()
        .unwrap()
        .iter()
        .filter(|(_, _, w)| *w == warmup)
        .filter_map(|(_, traceparent, _)| traceparent.clone())
        .filter_map(|tp| {
            let parts: Vec<&str> = tp.split('-').collect();
            (parts.len() == 4 && parts[1] == trace).then(|| parts[2].to_string())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requests_spans_reach_an_otlp_receiver_in_the_clients_trace() {
    let Some(python) = venv_python() else {
        eprintln!(
            "SKIPPED: no OTLP venv (run `bash cli/tests/otlp/setup-venv.sh`; AGENTRT_OTLP_VENV overrides \
             ~/.cache/agentrt/venv-otlp)"
        );
        return;
    };
    let (_receiver, receiver) = start_receiver(&python);
    let (upstream, seen) = start_stub().await;
    // The operator's upstream URL carries credentials (the stub ignores them).
    let with_credentials = upstream.replacen("http://", &format!("http://agentrt:{UPSTREAM_PASSWORD}@"), 1);
    let (mut serve_process, serve) = start_serve(&with_credentials, &receiver);

    let client = reqwest::Client::new();
    let whole = call(&client, &serve, false, WHOLE_TRACE, WHOLE_PARENT).await;
    assert!(whole.contains("hello"), "the whole answer: {whole}");
    // Each call's `act` warms the agent. The second call waits for the first's warm-up: both
    // calls are one agent's, and a warm-up of an anchor already warming is skipped ("already
    // warming"), so on a loaded machine the second call's could otherwise never go.
    wait_for_warmup(&seen, WHOLE_TRACE).await;
    let streamed = call(&client, &serve, true, STREAMED_TRACE, STREAMED_PARENT).await;
    assert!(streamed.contains("[DONE]"), "the streamed answer: {streamed}");
    drop(client);
    wait_for_warmup(&seen, STREAMED_TRACE).await;

    // SIGTERM: a graceful stop flushes the spans still batched.
    let pid = serve_process.0.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let started = Instant::now();
    let exit = loop {
        if let Some(status) = serve_process.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "agentrt serve did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(exit.success(), "agentrt serve stopped with {exit}");

    let received = reqwest::get(format!("{receiver}/spans"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        !received.contains(UPSTREAM_PASSWORD),
        "the upstream URL's password was exported"
    );
    let received: Value = serde_json::from_str(&received).unwrap();
    assert_eq!(received["rejected"], json!([]), "exports the receiver could not decode");
    for span in received["spans"].as_array().unwrap() {
        let state = span["trace_state"].as_str().unwrap_or_default();
        assert!(
            state.len() <= 512,
            "span `{}` carries {} bytes of the client's tracestate",
            span["name"],
            state.len()
        );
    }
    let spans = spans_of(&received);
    assert!(!spans.is_empty(), "no span reached the receiver");
    for span in &spans {
        assert_eq!(
            span.service, "agentrt-under-test",
            "OTEL_SERVICE_NAME names the service"
        );
        let attributes = Value::Object(span.attributes.clone()).to_string();
        assert!(
            !attributes.contains(PROMPT_MARKER),
            "span `{}` carries prompt text: {attributes}",
            span.name
        );
    }

    for (trace_id, client_parent, stream) in [
        (WHOLE_TRACE, WHOLE_PARENT, false),
        (STREAMED_TRACE, STREAMED_PARENT, true),
    ] {
        let trace = Trace(spans.iter().filter(|s| s.trace_id == trace_id).cloned().collect());
        let request = trace.of_kind("SPAN_KIND_SERVER");
        assert_eq!(request.name, "POST /v1/chat/completions");
        assert_eq!(
            request.parent, client_parent,
            "the server span is the child of the client's span"
        );
        assert_eq!(request.attributes["http.route"], json!("/v1/chat/completions"));
        assert_eq!(request.attributes["http.response.status_code"], json!(200));
        assert_eq!(request.attributes["tenant"], json!("default"));
        assert_eq!(request.attributes["agent"], json!("tester"));
        for who in ["session", "request_id"] {
            assert!(
                request.attributes.contains_key(who),
                "the request span has no `{who}`: {:?}",
                request.attributes
            );
        }

        let child_of_request = |name: &str| {
            let span = trace.one(name);
            assert_eq!(
                span.parent, request.span_id,
                "`{name}` is a child of the request's span"
            );
            span
        };
        let identity = child_of_request("identity");
        assert_eq!(identity.attributes["agent"], json!("tester"));
        child_of_request("admission");
        let upstream = trace.of_kind("SPAN_KIND_CLIENT");
        assert_eq!(upstream.name, "POST /v1/chat/completions");
        assert_eq!(
            upstream.parent, request.span_id,
            "the upstream call is a child of the request's span"
        );
        assert_eq!(upstream.attributes["http.response.status_code"], json!(200));
        let relay = child_of_request("relay");
        assert_eq!(relay.attributes["streamed"], json!(stream));
        if stream {
            assert!(
                relay.attributes["chunks"].as_i64().unwrap() >= 3,
                "chunks relayed: {:?}",
                relay.attributes
            );
        }
        // The policy is asked to act when the call arrives (in the request's span) and when it
        // finishes (in the relay's, for a stream), and told of both; a warm-up it asks for is
        // told to it too, in the warm-up's span.
        let under = |what: &str, parents: &[&str]| {
            let spans = trace.all(what);
            assert!(
                !spans.is_empty(),
                "no `{what}` span in the trace; it has {:?}",
                trace.names()
            );
            for span in &spans {
                assert!(
                    parents.contains(&span.parent.as_str()),
                    "`{what}` outside the request: {span:?}"
                );
                assert_eq!(span.attributes["tenant"], json!("default"));
            }
            spans
        };
        let in_request = [request.span_id.as_str(), relay.span_id.as_str()];
        under("policy.act", &in_request);
        let warmups = under("warmup", &in_request);
        let in_request_or_warmup: Vec<&str> = in_request
            .iter()
            .copied()
            .chain(warmups.iter().map(|w| w.span_id.as_str()))
            .collect();
        under("policy.observe", &in_request_or_warmup);
        let sent: Vec<&str> = warmups
            .iter()
            .filter(|w| w.attributes.get("ok") == Some(&json!(true)))
            .map(|w| w.span_id.as_str())
            .collect();
        assert!(!sent.is_empty(), "no warm-up went upstream: {warmups:?}");
        for span in &trace.0 {
            assert_eq!(span.status, "STATUS_CODE_UNSET", "span `{}` failed", span.name);
        }

        // One trace into the engine: the upstream got agentrt's spans as the parents.
        assert_eq!(
            upstream_parents(&seen, trace_id, false),
            std::slice::from_ref(&upstream.span_id)
        );
        let warmed = upstream_parents(&seen, trace_id, true);
        assert!(!warmed.is_empty(), "no warm-up upstream in trace {trace_id}");
        for parent in &warmed {
            assert!(
                sent.contains(&parent.as_str()),
                "a warm-up's traceparent names {parent}, not a sent warm-up's span {sent:?}"
            );
        }
    }
}

/// A collector's gRPC port named as the protocol is refused at start, saying what to do, rather
/// than every span lost in silence (only http/protobuf is built in).
#[test]
fn an_otlp_protocol_agentrt_cannot_speak_is_refused_at_start() {
    let output = Command::new(env!("CARGO_BIN_EXE_agentrt"))
        .args(["serve", "--upstream", "http://127.0.0.1:9", "--listen", "127.0.0.1:0"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .output()
        .expect("running agentrt serve");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "agentrt serve started with OTLP over gRPC: {stderr}"
    );
    assert!(
        stderr.contains("OTEL_EXPORTER_OTLP_PROTOCOL=grpc") && stderr.contains("http/protobuf only"),
        "the error names the variable and the protocol agentrt speaks: {stderr}"
    );
}

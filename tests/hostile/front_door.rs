//! The front door's limits (docs/security.md), over real HTTP on loopback against the real router
//! behind the real accept loop: tenant keys, connections, request bodies, the upstream's time and
//! size, and `/metrics`. Faults a real vLLM cannot be made to produce on demand come from the
//! stub upstream's fault-injection models (see stub_upstream).

#[path = "../../host/serve/tests/stub_upstream/mod.rs"]
mod stub_upstream;
#[path = "../../host/serve/tests/support/mod.rs"]
mod support;

use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::Value;
use support::{chat, post_json, settle, Proxy, Setup};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use agentrt_serve::Limits;

fn addr(p: &Proxy) -> String {
    p.url.trim_start_matches("http://").to_string()
}

/// Send `request` as is on a fresh connection and read the response: its status and body (up to
/// its `Content-Length`). `None` when no complete response head arrives within `within`.
async fn raw_exchange(p: &Proxy, request: &[u8], within: Duration) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(addr(p)).await.unwrap();
    stream.write_all(request).await.unwrap();
    let deadline = Instant::now() + within;
    let mut read = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&read).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let status = text[9..12].parse().ok()?;
            let length = text[..end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().to_string())
                })
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(0);
            if read.len() >= end + 4 + length {
                return Some((status, text[end + 4..].to_string()));
            }
        }
        let left = deadline.checked_duration_since(Instant::now())?;
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Err(_) => return None,
            Ok(Ok(n)) => read.extend_from_slice(&buf[..n]),
            Ok(Err(_)) => return None,
        }
    }
}

/// A request head announcing a body of `length` bytes, sent without the body.
fn head_only(method: &str, path: &str, length: usize, extra: &str) -> Vec<u8> {
    format!(
        "{method} {path} HTTP/1.1\r\nhost: test\r\ncontent-type: application/json\r\ncontent-length: {length}\r\n{extra}\r\n"
    )
    .into_bytes()
}

fn error_message(body: &str) -> String {
    let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"));
    v["error"]["message"].as_str().unwrap_or_default().to_string()
}

// --- 1. tenant keys --------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_base64_tenant_key_ending_in_equals_selects_its_tenant() {
    // `--tenant a2V5===team-a`: the key is `a2V5==` (base64 of "key"), the tenant `team-a`.
    let keys = agentrt_serve::cli::tenant_keys(&["a2V5===team-a".to_string()]).unwrap();
    let p = Setup {
        keys,
        ..Setup::new("lru")
    }
    .start()
    .await;
    let response = post_json(
        &p,
        &chat("s", "t", "tiny", false),
        &[("authorization", "Bearer a2V5==")],
    )
    .await;
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    let names: Vec<String> = p.app.tenants().list().iter().map(|t| t.name.clone()).collect();
    assert_eq!(names, ["team-a"]);
}

#[test]
fn malformed_tenant_options_are_refused_naming_what_is_wrong_but_not_the_key() {
    let error = |raw: &str| {
        agentrt_serve::cli::tenant_keys(&[raw.to_string()])
            .unwrap_err()
            .to_string()
    };
    assert!(error("sk-secret").contains("no `=`"), "{}", error("sk-secret"));
    assert!(!error("sk-secret").contains("sk-secret"), "the key is a secret");
    assert!(error("sk-secret=team/a").contains("'/'"));
    assert!(error("sk-secret=").contains("tenant name is empty"));
    let twice = agentrt_serve::cli::tenant_keys(&["k=a".into(), "k=b".into()]).unwrap_err();
    assert!(twice.to_string().contains("more than once"), "{twice}");
}

#[test]
fn malformed_tenant_admin_options_are_refused_naming_what_is_wrong_but_not_the_token() {
    let error = |raw: &[&str]| {
        let raw: Vec<String> = raw.iter().map(|r| r.to_string()).collect();
        agentrt_serve::cli::tenant_admin_tokens(&raw).unwrap_err().to_string()
    };
    let no_tenant = error(&["tok-secret"]);
    assert!(
        no_tenant.starts_with("--tenant-admin: expected TOKEN=TENANT") && no_tenant.contains("no `=`"),
        "{no_tenant}"
    );
    assert!(!no_tenant.contains("tok-secret"), "the token is a secret: {no_tenant}");
    assert!(error(&["tok-secret=team/a"]).contains("'/'"));
    let twice = error(&["tok-secret=a", "tok-secret=b"]);
    assert!(
        twice.contains("more than once") && !twice.contains("tok-secret"),
        "{twice}"
    );
    // A base64 token ending in `=` keeps its padding.
    let tokens = agentrt_serve::cli::tenant_admin_tokens(&["dG9r==alpha".to_string()]).unwrap();
    assert_eq!(tokens.get("dG9r=").map(String::as_str), Some("alpha"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_admin_token_is_refused_on_another_tenant_before_a_byte_of_the_upload_is_read() {
    let p = Setup {
        keys: [("key-a", "alpha"), ("key-b", "beta")]
            .map(|(k, t)| (k.to_string(), t.to_string()))
            .into(),
        tenant_admins: [("ta".to_string(), "alpha".to_string())].into(),
        ..Setup::new("lru")
    }
    .start()
    .await;
    let started = post_json(&p, &chat("s", "t", "tiny", false), &[("authorization", "Bearer key-b")]).await;
    assert_eq!(started.status(), 200);

    // An upload to beta's slot announced at 50 MB and never sent: refused from the headers alone.
    let upload = head_only(
        "PUT",
        "/admin/tenants/beta/policy",
        50_000_000,
        "authorization: Bearer ta\r\n",
    );
    let (status, body) = raw_exchange(&p, &upload, Duration::from_secs(3))
        .await
        .expect("answered without the body");
    assert_eq!(status, 403, "{body}");
    assert!(error_message(&body).contains("only on tenant `alpha`"), "{body}");

    // Names that look like alpha's but are another tenant's, and beta's and everyone's routes.
    for path in [
        "/admin/tenants/beta/stats",
        "/admin/tenants/beta/predict?horizon=1",
        "/admin/tenants/alpha%2F..%2Fbeta/stats",
        "/admin/tenants/Alpha/stats",
        "/admin/tenants/alpha./predict",
        "/admin/tenants",
    ] {
        let (status, answer) = support::admin_get(&p, path, "ta").await;
        assert_eq!(status, 403, "{path}: {answer}");
    }
    let (status, answer) = support::put_policy(&p, "beta", "lru", "ta", true).await;
    assert_eq!(status, 403, "{answer}");
    let beta = p.app.tenants().get("beta").unwrap();
    assert_eq!(beta.policy.metrics().swaps(), 0, "beta's policy was never touched");
    assert_eq!(
        p.app.tenants().list().len(),
        1,
        "no tenant was started by a refused request (alpha neither)"
    );
}

// --- 2. connections ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_open_connections_are_capped_and_timed_out_and_healthz_still_answers() {
    let timeout = Duration::from_millis(600);
    let limits = Limits {
        max_connections: 32,
        header_read_timeout: timeout,
        ..Limits::default()
    };
    let p = Setup {
        limits,
        ..Setup::new("lru")
    }
    .start()
    .await;
    // Slowloris: 200 connections that start a request and never finish its headers.
    let opened = Instant::now();
    let mut half_open = Vec::new();
    for _ in 0..200 {
        let mut stream = TcpStream::connect(addr(&p)).await.unwrap();
        let _ = stream.write_all(b"GET /healthz HTTP/1.1\r\nhost: test\r\n").await;
        half_open.push(stream);
    }
    let connections = &p.app.connections();
    assert!(
        connections.open.load(Relaxed) <= 32,
        "never more than --max-connections open: {}",
        connections.open.load(Relaxed)
    );
    assert!(
        connections.refused.load(Relaxed) > 0,
        "the connections beyond the cap were refused"
    );

    // Every one of them is closed: refused at once, or after the header-read timeout.
    for stream in &mut half_open {
        let mut buf = [0u8; 64];
        let closed = tokio::time::timeout(timeout * 5, stream.read(&mut buf)).await;
        assert!(
            matches!(closed, Ok(Ok(0)) | Ok(Err(_))),
            "a half-open connection is still open {:?} after opening",
            opened.elapsed()
        );
    }
    assert!(connections.header_timeouts.load(Relaxed) > 0);
    for _ in 0..100 {
        if connections.open.load(Relaxed) == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(connections.open.load(Relaxed), 0, "nothing is left open");

    // With the attackers' connections closed for them, a health check gets through.
    let health = reqwest::get(format!("{}/healthz", p.url)).await.unwrap();
    assert_eq!(health.text().await.unwrap(), "ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_never_finishes_its_headers_is_closed_after_the_timeout() {
    let timeout = Duration::from_millis(500);
    let limits = Limits {
        header_read_timeout: timeout,
        ..Limits::default()
    };
    let p = Setup {
        limits,
        ..Setup::new("lru")
    }
    .start()
    .await;
    let mut stream = TcpStream::connect(addr(&p)).await.unwrap();
    stream
        .write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: t")
        .await
        .unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 64];
    let closed = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf)).await;
    assert!(matches!(closed, Ok(Ok(0)) | Ok(Err(_))), "still open after 10 s");
    let after = started.elapsed();
    assert!(
        after >= timeout - Duration::from_millis(50),
        "closed too early: {after:?}"
    );
    assert_eq!(p.app.connections().header_timeouts.load(Relaxed), 1);
    // A client that finishes its request in time is served as before.
    assert_eq!(post_json(&p, &chat("s", "t", "tiny", false), &[]).await.status(), 200);
}

/// Before: a connection could buffer ~400 KiB of unfinished headers (hyper's default) until the
/// header timeout — 4,000 of them held 1.65 GB. Now a head past `--max-header-bytes` (32 KiB)
/// is answered 431 at once, and the connection's buffer is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_past_the_header_cap_is_a_431_at_once_not_held_until_the_timeout() {
    let p = Setup::new("lru").start().await;
    let mut head = b"POST /v1/chat/completions HTTP/1.1\r\nhost: t\r\nx-pad: ".to_vec();
    head.extend(std::iter::repeat_n(b'a', 100 << 10));
    // Never finished: no CRLF ends the header, no blank line ends the head.
    let answer = raw_exchange(&p, &head, Duration::from_secs(3)).await;
    let (status, _) = answer.expect("an answer well before the 10 s header timeout");
    assert_eq!(status, 431);
    assert_eq!(
        Limits::default().max_header_bytes,
        32 << 10,
        "docs/security.md states this default"
    );
    // A client that sends a normal request is served as before.
    assert_eq!(post_json(&p, &chat("s", "t", "tiny", false), &[]).await.status(), 200);
}

// --- 3. request bodies ------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strangers_are_refused_before_a_byte_of_their_body_is_read() {
    // Each request announces a body and never sends it: only an answer from the headers alone
    // comes back.
    let keys = [("key-a".to_string(), "alpha".to_string())].into();
    let p = Setup {
        keys,
        ..Setup::new("lru")
    }
    .start()
    .await;
    let quick = Duration::from_secs(3);
    let chat = head_only(
        "POST",
        "/v1/chat/completions",
        100_000,
        "authorization: Bearer wrong\r\n",
    );
    let (status, body) = raw_exchange(&p, &chat, quick).await.expect("answered without the body");
    assert_eq!((status, error_message(&body).as_str()), (401, "unknown API key"));
    let completion = head_only("POST", "/v1/completions", 100_000, "");
    assert_eq!(raw_exchange(&p, &completion, quick).await.map(|r| r.0), Some(401));

    let upload = head_only(
        "PUT",
        "/admin/tenants/alpha/policy",
        50_000_000,
        "authorization: Bearer guess\r\n",
    );
    assert_eq!(raw_exchange(&p, &upload, quick).await.map(|r| r.0), Some(401));
    let disabled = Setup {
        admin_token: None,
        ..Setup::new("lru")
    }
    .start()
    .await;
    let upload = head_only("PUT", "/admin/tenants/default/policy", 50_000_000, "");
    let (status, body) = raw_exchange(&disabled, &upload, quick)
        .await
        .expect("answered without the body");
    assert_eq!(status, 403);
    assert!(error_message(&body).contains("admin API is disabled"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_body_is_a_413_with_an_openai_error() {
    let limits = Limits {
        max_body_bytes: 4096,
        max_upload_bytes: 1000,
        ..Limits::default()
    };
    let p = Setup {
        limits,
        ..Setup::new("lru")
    }
    .start()
    .await;
    let quick = Duration::from_secs(3);
    // Announced too large: refused before it is read.
    let (status, body) = raw_exchange(&p, &head_only("POST", "/v1/chat/completions", 1 << 20, ""), quick)
        .await
        .expect("answered without the body");
    assert_eq!(status, 413);
    let error: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(error["error"]["type"], "invalid_request_error");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("4096 bytes") && message.contains("--max-body-bytes"),
        "{message}"
    );

    // Without a length (chunked): read until it passes the limit, then refused.
    let mut chunked = b"POST /v1/chat/completions HTTP/1.1\r\nhost: t\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
    chunked.extend_from_slice(format!("{:x}\r\n", 5000).as_bytes());
    chunked.extend_from_slice(&[b' '; 5000]);
    chunked.extend_from_slice(b"\r\n");
    assert_eq!(raw_exchange(&p, &chunked, quick).await.map(|r| r.0), Some(413));

    // An upload over --max-upload-bytes, from the admin.
    let upload = head_only(
        "PUT",
        "/admin/tenants/default/policy",
        5000,
        "authorization: Bearer s3cret\r\n",
    );
    let (status, body) = raw_exchange(&p, &upload, quick)
        .await
        .expect("answered without the body");
    assert_eq!(status, 413);
    assert!(error_message(&body).contains("--max-upload-bytes"), "{body}");

    // Under the limit, served; nothing refused reached the upstream.
    assert_eq!(post_json(&p, &chat("s", "t", "tiny", false), &[]).await.status(), 200);
    assert_eq!(p.stub.user_requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_component_uploads_within_the_default_limit() {
    let p = Setup::new("cachesage").start().await;
    let lru = std::fs::read(agentrt_tests::component_path("lru")).unwrap();
    assert!(lru.len() < Limits::default().max_upload_bytes);
    let swapped = reqwest::Client::new()
        .put(format!("{}/admin/tenants/default/policy?fresh=true", p.url))
        .bearer_auth("s3cret")
        .body(lru)
        .send()
        .await
        .unwrap();
    assert_eq!(swapped.status(), 200, "{}", swapped.text().await.unwrap());
}

// --- 4. the upstream's time and size ----------------------------------------------------------

fn quick_upstream_limits() -> Limits {
    Limits {
        upstream_connect_timeout: Duration::from_millis(300),
        upstream_first_byte_timeout: Duration::from_millis(800),
        upstream_idle_timeout: Duration::from_millis(400),
        max_upstream_reply_bytes: 1 << 20,
        ..Limits::default()
    }
}

async fn expect_error(p: &Proxy, model: &str, status: u16, names: &str) {
    let started = Instant::now();
    // Bounded here too, so that without the proxy's limits this fails instead of hanging.
    let response = tokio::time::timeout(
        Duration::from_secs(10),
        post_json(p, &chat("s", "t", model, false), &[]),
    )
    .await
    .unwrap_or_else(|_| panic!("model {model}: no answer within 10 s"));
    assert_eq!(response.status(), status, "model {model}");
    let body: Value = response.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(names), "model {model}: {body}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "model {model}: took {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_upstream_ends_the_request_with_a_504_naming_the_timeout() {
    let p = Setup {
        limits: quick_upstream_limits(),
        ..Setup::new("lru")
    }
    .start()
    .await;
    expect_error(&p, "hang-before-headers", 504, "--upstream-first-byte-timeout-ms").await;
    expect_error(&p, "hang-mid-body", 504, "--upstream-idle-timeout-ms").await;

    // Mid-stream the status is already sent: the stream ends with an error event instead.
    let response = post_json(&p, &chat("s", "t", "hang-mid-stream", true), &[]).await;
    assert_eq!(response.status(), 200);
    let text = tokio::time::timeout(Duration::from_secs(5), response.text())
        .await
        .expect("the stream ends")
        .unwrap();
    assert!(
        text.contains("\"a\"") && text.contains("--upstream-idle-timeout-ms"),
        "{text}"
    );

    settle(&p).await; // no request is left open
    assert_eq!(p.app.metrics().upstream_timeouts.load(Relaxed), 3);
    assert_eq!(post_json(&p, &chat("s", "t", "tiny", false), &[]).await.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_reply_over_the_cap_is_a_502() {
    let p = Setup {
        limits: quick_upstream_limits(),
        ..Setup::new("lru")
    }
    .start()
    .await;
    assert!(stub_upstream::HUGE_REPLY_BYTES > quick_upstream_limits().max_upstream_reply_bytes);
    expect_error(&p, "huge-reply", 502, "--max-upstream-reply-bytes").await;
    expect_error(&p, "huge-reply-chunked", 502, "--max-upstream-reply-bytes").await;
    settle(&p).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_never_accepts_is_a_504_naming_the_connect_timeout() {
    // A listener whose accept queue is full and never drained: the kernel drops further SYNs, so
    // a connect to it hangs — on loopback, without a fault-injecting stub.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(1).unwrap();
    let upstream = listener.local_addr().unwrap();
    let mut filling = Vec::new();
    let mut full = false;
    for _ in 0..16 {
        match tokio::time::timeout(Duration::from_millis(200), TcpStream::connect(upstream)).await {
            Ok(Ok(stream)) => filling.push(stream),
            _ => {
                full = true;
                break;
            }
        }
    }
    assert!(full, "the accept queue never filled");
    let p = Setup {
        upstream: Some(format!("http://{upstream}")),
        limits: Limits {
            upstream_first_byte_timeout: Duration::from_secs(5),
            ..quick_upstream_limits()
        },
        ..Setup::new("lru")
    }
    .start()
    .await;
    expect_error(&p, "tiny", 504, "--upstream-connect-timeout-ms").await;
    drop(listener);
}

// --- 5. /metrics ------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_require_the_metrics_token_when_one_is_set() {
    let keys = [("key-a".to_string(), "alpha".to_string())].into();
    let p = Setup {
        keys,
        metrics_token: Some("m3trics".into()),
        ..Setup::new("lru")
    }
    .start()
    .await;
    let a = [("authorization", "Bearer key-a")];
    assert_eq!(post_json(&p, &chat("s", "t", "tiny", false), &a).await.status(), 200);
    let client = reqwest::Client::new();
    let url = format!("{}/metrics", p.url);
    let anonymous = client.get(&url).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
    let text = anonymous.text().await.unwrap();
    assert!(!text.contains("alpha"), "no tenant name leaks: {text}");
    let tenant_key = client.get(&url).bearer_auth("key-a").send().await.unwrap();
    assert_eq!(tenant_key.status(), 401, "a tenant's key is not the metrics token");
    let metrics = client.get(&url).bearer_auth("m3trics").send().await.unwrap();
    assert_eq!(metrics.status(), 200);
    let text = metrics.text().await.unwrap();
    assert!(
        text.contains("tenant=\"alpha\"") && text.contains("agentrt_proxy_connections_open"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_relay_still_passes_chunks_under_the_idle_timeout() {
    // The idle timeout is between pieces, not on the whole response: the stub's stream takes
    // 60 ms in all, 20 ms between chunks, against a 400 ms idle limit.
    let p = Setup {
        limits: quick_upstream_limits(),
        ..Setup::new("lru")
    }
    .start()
    .await;
    let response = post_json(&p, &chat("s", "t", "tiny", true), &[]).await;
    let mut stream = response.bytes_stream();
    let mut all = String::new();
    while let Some(chunk) = stream.next().await {
        all.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
    }
    assert!(all.ends_with("data: [DONE]\n\n"), "{all}");
}

//! Memory and time one client controls: bodies that cost far more to parse than their bytes,
//! anchors that weigh more than they are counted at, one tenant's heavy requests beside another
//! tenant, and one tenant's backlog in the admission queue. Real HTTP on loopback against the
//! real router, in front of the stub upstream.

#[path = "../../host/serve/tests/stub_upstream/mod.rs"]
mod stub_upstream;
#[path = "../../host/serve/tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{call_as, chat, metrics_text, two_tenants, Proxy, Setup};

use agentrt_serve::engine::admission::QueuedBytes;

async fn call(p: &Proxy, path: &str, key: &str, body: &Value) -> (u16, Value) {
    call_as(&p.url, path, key, body.to_string()).await
}

/// The process's peak resident memory so far (Linux `VmHWM`), in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

// --- 6. parse amplification ------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn floods_of_items_and_tools_are_refused_before_they_cost_memory() {
    let p = two_tenants("lru").start().await;
    let before = peak_rss();
    // 15 MiB of empty Responses input items: 5.2 M of them. Two at once.
    let items = 15 * (1 << 20) / 3;
    let flood = format!(r#"{{"model":"tiny","input":[{}{{}}]}}"#, "{},".repeat(items - 1));
    let (a, b) = tokio::join!(
        call_as(&p.url, "/v1/responses", "key-a", flood.clone()),
        call_as(&p.url, "/v1/responses", "key-a", flood.clone()),
    );
    drop(flood);
    for (status, answer) in [a, b] {
        assert_eq!(status, 413, "{answer}");
        assert!(answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--max-json-elements"));
    }
    // 100,000 tools in one chat request.
    let tools: Vec<Value> = (0..100_000)
        .map(|i| json!({"type": "function", "function": {"name": format!("t{i}")}}))
        .collect();
    let mut many = chat("You plan.", "Task", "tiny", false);
    many["tools"] = Value::Array(tools);
    let (status, _) = call(&p, "/v1/chat/completions", "key-a", &many).await;
    assert_eq!(status, 413, "100,000 tools are over the element budget too");
    many["tools"] = Value::Array(many["tools"].as_array().unwrap()[..2_000].to_vec());
    let (status, answer) = call(&p, "/v1/chat/completions", "key-a", &many).await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer["error"]["message"]
        .as_str()
        .unwrap()
        .contains("--max-request-tools"));
    drop(many);
    let grew = peak_rss().saturating_sub(before);
    // The flood and the tools as built by this test are ~60 MB; parsing the flood took 4.6 GB.
    assert!(grew < 400 << 20, "peak memory grew by {} MB", grew >> 20);
    assert!(p.stub.user_requests().is_empty());
    let metrics = metrics_text(&p).await;
    assert!(
        metrics.contains("agentrt_proxy_refused_total{reason=\"json_elements\"} 3"),
        "{metrics}"
    );
    assert!(metrics.contains("agentrt_proxy_refused_total{reason=\"request_tools\"} 1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_anchor_is_counted_at_what_the_table_holds() {
    let p = two_tenants("lru").start().await;
    let tools: Vec<Value> = (0..1_000)
        .map(|i| json!({"type": "function", "function": {"name": format!("tool_{i}"), "parameters": {"type": "object"}}}))
        .collect();
    let mut body = chat("You plan.", "Task", "tiny", false);
    body["tools"] = Value::Array(tools.clone());
    assert_eq!(call(&p, "/v1/chat/completions", "key-a", &body).await.0, 200);
    let alpha = p.app.tenants().get("alpha").unwrap();
    let (anchors, bytes) = alpha.agents.anchors();
    let text = serde_json::to_string(&json!([[{"role": "system", "content": "You plan."}], tools, null])).unwrap();
    assert_eq!(anchors, 1);
    assert_eq!(
        bytes,
        text.len() + "tiny".len() + alpha_salt_len(&p),
        "held as its text, counted exactly"
    );
}

/// The length of alpha's cache salt as the stub received it.
fn alpha_salt_len(p: &Proxy) -> usize {
    p.stub.user_requests()[0].body["cache_salt"].as_str().unwrap().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tenants_heavy_requests_do_not_stall_another_tenant() {
    let p = two_tenants("lru").start().await;
    // Alpha: five 12 MiB prompts at once (a long document pasted in), parsed off the async
    // workers (five: 60 MiB fit in a tenant's 64 MiB of bodies being read, --max-reading-mib-per-tenant).
    let huge = chat(&"x".repeat(12 << 20), "Summarize.", "tiny", false).to_string();
    let heavy: Vec<_> = (0..5)
        .map(|_| {
            let (url, body) = (p.url.clone(), huge.clone());
            tokio::spawn(async move { call_as(&url, "/v1/chat/completions", "key-a", body).await.0 })
        })
        .collect();
    let mut slowest = Duration::ZERO;
    for _ in 0..20 {
        let started = Instant::now();
        assert_eq!(
            call(
                &p,
                "/v1/chat/completions",
                "key-b",
                &chat("You plan.", "T", "tiny", false)
            )
            .await
            .0,
            200
        );
        slowest = slowest.max(started.elapsed());
    }
    for h in heavy {
        assert_eq!(h.await.unwrap(), 200);
    }
    // Generous for a loaded 2-core machine: before, another tenant's requests waited 15 s.
    assert!(slowest < Duration::from_secs(3), "beta's slowest call took {slowest:?}");
}

// --- 10. the admission queue between tenants -------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tenants_backlog_does_not_make_another_tenant_wait_it_out() {
    let p = Setup {
        admission: Some((1, Duration::from_secs(5))),
        ..two_tenants("lru")
    }
    .start()
    .await;
    // Alpha keeps 150 requests in line for an engine that takes 30 ms over each: 4.5 s of work.
    let backlog: Vec<_> = (0..150)
        .map(|i| {
            let url = p.url.clone();
            let body = chat("You plan.", &format!("task {i}"), "slow-30", false).to_string();
            tokio::spawn(async move { call_as(&url, "/v1/chat/completions", "key-a", body).await.0 })
        })
        .collect();
    let queue = p.app.admission().cloned().unwrap();
    while queue.depth().1 < 100 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut waits = Vec::new();
    for i in 0..5 {
        let started = Instant::now();
        let body = chat("You plan.", &format!("beta {i}"), "slow-30", false);
        let (status, answer) = call(&p, "/v1/chat/completions", "key-b", &body).await;
        assert_eq!(status, 200, "{answer}");
        waits.push(started.elapsed());
    }
    for b in backlog {
        let _ = b.await;
    }
    let slowest = waits.iter().max().unwrap();
    // Beta's turn comes every other place: about two of alpha's 30 ms calls, not alpha's 4.5 s.
    assert!(*slowest < Duration::from_millis(1500), "beta waited {waits:?}");
}

/// Two tenants behind one place upstream, with 3 MiB of waiting bodies in all and 2 MiB per
/// tenant.
async fn one_place_small_queue() -> Proxy {
    Setup {
        admission: Some((1, Duration::from_secs(30))),
        queued_bytes: QueuedBytes {
            total: 3 << 20,
            per_tenant: 2 << 20,
        },
        ..two_tenants("lru")
    }
    .start()
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_bodies_are_bounded_per_tenant_and_in_all() {
    let p = one_place_small_queue().await;
    // The first call holds the one place for 8 s (time enough for the others to line up on a
    // loaded machine); ~700 KiB of prompt each.
    let body = |i: usize| {
        let model = if i == 0 { "slow-8000" } else { "tiny" };
        chat(
            "You summarize.",
            &format!("a{i} {}", "y".repeat(700 << 10)),
            model,
            false,
        )
        .to_string()
    };
    // Alpha's first call takes the place; three more of ~700 KiB wait: the third is over 2 MiB.
    let queue = p.app.admission().cloned().unwrap();
    let mut calls = Vec::new();
    for i in 0..4 {
        let (url, body) = (p.url.clone(), body(i));
        calls.push(tokio::spawn(async move {
            call_as(&url, "/v1/chat/completions", "key-a", body).await
        }));
        let settled = (1, i.min(2));
        let deadline = Instant::now() + Duration::from_secs(5);
        while queue.depth() != settled {
            assert!(Instant::now() < deadline, "the queue never reached {settled:?}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let mut statuses = Vec::new();
    for c in calls {
        statuses.push(c.await.unwrap().0);
    }
    statuses.sort();
    assert_eq!(
        statuses,
        [200, 200, 200, 503],
        "one over alpha's 2 MiB of waiting bodies"
    );
    let metrics = metrics_text(&p).await;
    assert!(
        metrics.contains("agentrt_proxy_admission_refused_bytes_total 1"),
        "{metrics}"
    );
}

/// The status line of the answer to `head` (a request head whose body is never sent), when one
/// comes within `within`.
async fn status_before_the_body(p: &Proxy, head: &str, within: Duration) -> Option<u16> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(p.url.trim_start_matches("http://"))
        .await
        .unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut read = [0u8; 12];
    let got = tokio::time::timeout(within, stream.read_exact(&mut read)).await;
    match got {
        Ok(Ok(_)) => std::str::from_utf8(&read[9..12]).ok()?.parse().ok(),
        _ => None,
    }
}

/// Before: while the queue was full, bodies were read (and parsed) before their bytes were
/// counted — 60 large bodies at once while 8 waited took the proxy to 1,088 MB, though 52 were
/// then refused. Now a body that may wait counts against the caps before its first byte is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_the_full_queue_has_no_room_for_is_refused_before_it_is_read() {
    let p = one_place_small_queue().await;
    let queue = p.app.admission().cloned().unwrap();
    let url = p.url.clone();
    let holder = tokio::spawn(async move {
        let body = chat("You plan.", "hold the place", "slow-8000", false).to_string();
        call_as(&url, "/v1/chat/completions", "key-a", body).await
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    while queue.depth() != (1, 0) {
        assert!(Instant::now() < deadline, "the first call never took the place");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // 4 MiB announced, over alpha's 2 MiB: refused from the head alone.
    let head = |length: usize| {
        format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: t\r\nauthorization: Bearer key-a\r\n\
             content-type: application/json\r\ncontent-length: {length}\r\n\r\n"
        )
    };
    let status = status_before_the_body(&p, &head(4 << 20), Duration::from_secs(3)).await;
    assert_eq!(status, Some(503), "refused before a byte of the body");
    // 1 MiB fits: the proxy waits for it (no answer from the head alone).
    let status = status_before_the_body(&p, &head(1 << 20), Duration::from_millis(500)).await;
    assert_eq!(status, None, "a body that fits is read");
    let metrics = metrics_text(&p).await;
    assert!(
        metrics.contains("agentrt_proxy_admission_refused_bytes_total 1"),
        "{metrics}"
    );
    assert_eq!(holder.await.unwrap().0, 200);
}

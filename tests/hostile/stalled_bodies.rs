//! Bodies that never end, once a request is authenticated: each is cut at its deadline, the bytes
//! being read are bounded per tenant and in all, the hint route takes the tenant's in-flight
//! places, uploads are bounded per tenant, and another tenant is served throughout. Also the
//! other edges this round bounded: the head's total size, hints by header under the tenant's
//! hint rate, and a shutdown that cuts what is left at its drain deadline and logs it.
//!
//! The deadlines are set short here (`--body-idle-timeout-ms 1500`), so that each test waits
//! seconds, not the default's tens.

mod log_capture;
mod slow_stream_support;
mod stalled_body_support;
#[path = "../../host/serve/tests/stub_upstream/mod.rs"]
mod stub_upstream;
#[path = "../../host/serve/tests/support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use agentrt_guards::body_read::BodyTiming;
use agentrt_serve::tenant::quotas::Quotas;
use agentrt_serve::Limits;
use slow_stream_support::SlowReader;
use stalled_body_support::{Framing, StalledBody};
use support::{chat, metrics_text, post, post_json, Proxy, Setup};

const IDLE: Duration = Duration::from_millis(1500);
/// How late past its deadline a cut may come on a busy two-core machine.
const SLACK: Duration = Duration::from_secs(3);

fn limits() -> Limits {
    Limits {
        body_timing: BodyTiming {
            idle: IDLE,
            min_bytes_per_s: 1024,
        },
        max_body_bytes: 1 << 20,
        max_upload_bytes: 4 << 20,
        max_reading_bytes: 32 << 20,
        max_reading_bytes_per_tenant: 8 << 20,
        ..Limits::default()
    }
}

/// Alice (`key-alice`, her admin `tok-alice`) and bob (`key-bob`).
fn two_tenants(limits: Limits, quotas: Quotas) -> Setup {
    Setup {
        keys: [("key-alice", "alice"), ("key-bob", "bob")]
            .map(|(k, t)| (k.to_string(), t.to_string()))
            .into(),
        tenant_admins: HashMap::from([("tok-alice".to_string(), "alice".to_string())]),
        limits,
        quotas,
        ..Setup::new("lru")
    }
}

fn addr(p: &Proxy) -> String {
    p.url.trim_start_matches("http://").to_string()
}

/// The value of the unlabelled series `name` on `/metrics`.
async fn series(p: &Proxy, name: &str) -> f64 {
    let text = metrics_text(p).await;
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics"))
}

/// Bob's chats, one at a time, until `until`: their statuses.
fn bob_until(p: &Proxy, until: Instant) -> tokio::task::JoinHandle<Vec<u16>> {
    let url = format!("{}/v1/chat/completions", p.url);
    tokio::spawn(async move {
        let mut statuses = Vec::new();
        let body = chat("You are bob's agent.", "t", "tiny", false).to_string();
        while Instant::now() < until {
            let status = post(&url, body.clone(), &[("authorization", "Bearer key-bob")])
                .await
                .status()
                .as_u16();
            statuses.push(status);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        statuses
    })
}

/// The three stalled-body attacks — 24 chat bodies of 1 MiB − 1 byte of 1 MiB, then 200 hint
/// calls with a 16,000-byte chunked body and no end beside two uploads of 1 MiB of 4 MiB — each
/// answered in time: cut with 408 at the idle deadline, or refused at once where a budget or a
/// bound is full; bob's chats all served meanwhile; every byte given back after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_bodies_are_cut_at_their_deadline_within_their_budgets_and_bob_is_served() {
    let p = two_tenants(limits(), Quotas::default()).start().await;
    let proxy = addr(&p);
    let bob = bob_until(&p, Instant::now() + 2 * IDLE + Duration::from_secs(2));
    let alice = [
        ("authorization", "Bearer key-alice"),
        ("content-type", "application/json"),
    ];
    let admin = [("authorization", "Bearer tok-alice")];
    let mut answers: HashMap<(&str, u16), usize> = HashMap::new();
    // Chat bodies first, alone: each announces its length and is counted whole at once, so
    // alice's 8 MiB take exactly eight of them; the rest are refused before a byte is read.
    let mut chats = Vec::new();
    for _ in 0..24 {
        let framing = Framing::Length(1 << 20);
        let body = StalledBody::open(&proxy, "POST", "/v1/chat/completions", &alice, framing, (1 << 20) - 1);
        chats.push(("chat", body.await.unwrap()));
    }
    collect(&mut chats, &mut answers).await;
    let mut rest = Vec::new();
    for _ in 0..200 {
        let body = StalledBody::open(&proxy, "POST", "/v1/agentrt/hints", &alice, Framing::Chunked, 16_000);
        rest.push(("hints", body.await.unwrap()));
    }
    for _ in 0..2 {
        let framing = Framing::Length(4 << 20);
        let body = StalledBody::open(&proxy, "PUT", "/admin/tenants/alice/policy", &admin, framing, 1 << 20);
        rest.push(("upload", body.await.unwrap()));
    }
    collect(&mut rest, &mut answers).await;
    let expected = HashMap::from([
        (("chat", 408), 8),
        (("chat", 429), 16),
        (("hints", 408), 200),
        (("upload", 408), 1),
        (("upload", 429), 1),
    ]);
    assert_eq!(answers, expected);
    let bob = bob.await.unwrap();
    assert!(bob.len() >= 10 && bob.iter().all(|s| *s == 200), "bob: {bob:?}");
    assert_eq!(series(&p, "agentrt_proxy_body_reading_bytes").await, 0.0);
    let text = metrics_text(&p).await;
    for reason in ["stalled", "tenant_budget"] {
        assert!(
            text.lines().any(|l| l.starts_with(&format!(
                "agentrt_proxy_body_reads_refused_total{{reason=\"{reason}\"}}"
            )) && !l.ends_with(" 0")),
            "{reason} counted: {text}"
        );
    }
}

/// Each stalled body's answer, counted by (what, status); each must come within the idle
/// deadline (and the slack a busy machine needs) of its last byte.
async fn collect<'a>(stalled: &mut [(&'a str, StalledBody)], answers: &mut HashMap<(&'a str, u16), usize>) {
    for (what, body) in stalled {
        let (status, after) = body.answer(IDLE + SLACK).await.unwrap_or_else(|| {
            panic!(
                "a stalled {what} body was still held {:?} after its last byte",
                IDLE + SLACK
            )
        });
        assert!(after <= IDLE + SLACK, "{what}: answered {status} after {after:?}");
        *answers.entry((*what, status)).or_default() += 1;
    }
}

/// A hint call holds one of its tenant's in-flight places while its body is read (it took none,
/// and 4,096 such calls held every connection): past `max_in_flight` the next call — a hint or a
/// chat — gets 429 before a byte is read, and the places come back when the stalled ones are cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hint_call_takes_an_in_flight_place_while_its_body_is_read() {
    let quotas = Quotas {
        max_in_flight: 4,
        ..Quotas::default()
    };
    let p = two_tenants(limits(), quotas).start().await;
    let alice = [("authorization", "Bearer key-alice")];
    let mut stalled = Vec::new();
    for _ in 0..4 {
        stalled.push(
            StalledBody::open(&addr(&p), "POST", "/v1/agentrt/hints", &alice, Framing::Chunked, 100)
                .await
                .unwrap(),
        );
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let hints = format!("{}/v1/agentrt/hints", p.url);
    let refused = post(&hints, r#"{"hints": []}"#, &alice).await;
    assert_eq!(refused.status(), 429, "{}", refused.text().await.unwrap());
    let chat_refused = post_json(&p, &chat("s", "t", "tiny", false), &alice).await;
    assert_eq!(chat_refused.status(), 429);
    assert_eq!(
        post_json(
            &p,
            &chat("s", "t", "tiny", false),
            &[("authorization", "Bearer key-bob")]
        )
        .await
        .status(),
        200,
        "bob's places are his own"
    );
    for body in &mut stalled {
        assert_eq!(body.answer(IDLE + SLACK).await.map(|a| a.0), Some(408));
    }
    assert_eq!(post(&hints, r#"{"hints": []}"#, &alice).await.status(), 200);
}

/// A request head's size is held to `--max-header-bytes` to the byte, whether it arrives in one
/// write or many (a head sent whole in one write once passed up to 48 KB of a 32 KiB cap).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_header_cap_is_exact_to_the_byte_in_one_write() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let p = Setup::new("lru").start().await;
    let cap = Limits::default().max_header_bytes;
    let head = |bytes: usize| {
        let start = "GET /healthz HTTP/1.1\r\nhost: proxy\r\nx-pad: ";
        let end = "\r\n\r\n";
        format!("{start}{}{end}", "a".repeat(bytes - start.len() - end.len()))
    };
    let status = |text: String| {
        let addr = addr(&p);
        async move {
            let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            stream.write_all(text.as_bytes()).await.unwrap();
            let mut answer = vec![0u8; 512];
            let n = stream.read(&mut answer).await.unwrap_or(0);
            String::from_utf8_lossy(&answer[..n])
                .get(9..12)
                .unwrap_or("")
                .to_string()
        }
    };
    assert_eq!(head(cap).len(), cap);
    assert_eq!(status(head(cap)).await, "200", "a head of exactly --max-header-bytes");
    assert_eq!(status(head(cap + 1)).await, "431", "one byte over");
    assert_eq!(status(head(48 << 10)).await, "431", "48 KiB in one write");
}

/// Hints sent as headers share the tenant's `--hint-rate` with the endpoint's (they had none:
/// 2,827 a second against 200 on the endpoint), and a call of no hints costs one. Past the rate a
/// header's hints are dropped and counted; the model call is served all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_hints_and_empty_calls_are_held_to_the_hint_rate() {
    let p = Setup {
        hint_rate: 20.0,
        ..Setup::new("lru")
    }
    .start()
    .await;
    let started = Instant::now();
    for i in 0..150 {
        let session = format!("s{i}");
        let headers = [("x-session-id", session.as_str()), ("x-agentrt-session-end", "closed")];
        let response = post_json(&p, &chat("s", "t", "tiny", false), &headers).await;
        assert_eq!(response.status(), 200, "the model call is served whatever its hints");
    }
    let elapsed = started.elapsed().as_secs_f64();
    support::settle(&p).await;
    let text = metrics_text(&p).await;
    let count = |needle: &str| -> f64 {
        text.lines()
            .filter(|l| l.contains(needle))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let taken = count("agentrt_hints_total{") - count("source=\"response\"");
    let refused = count("agentrt_hints_refused_total{tenant=\"default\",reason=\"rate\"}");
    assert_eq!(taken + refused, 150.0, "{text}");
    // The burst (40) plus the rate for the time it took: within 2× of --hint-rate.
    let allowed = 40.0 + 20.0 * elapsed;
    assert!(
        taken <= allowed + 1.0,
        "{taken} taken in {elapsed:.1} s (allowed {allowed:.0})"
    );
    assert!(refused > 0.0);

    let hints = format!("{}/v1/agentrt/hints", p.url);
    let started = Instant::now();
    let mut served = 0;
    for _ in 0..100 {
        if post(&hints, r#"{"hints": []}"#, &[]).await.status() == 200 {
            served += 1;
        }
    }
    // At most the burst and the rate for the time it took: a call of no hints costs one.
    let allowed = 40.0 + 20.0 * started.elapsed().as_secs_f64() + 1.0;
    assert!(
        (served as f64) <= allowed && served < 100,
        "{served} empty calls served, {allowed:.0} allowed"
    );
}

/// `SIGTERM` with a stalled body and a slow stream open: the accept loop stops, lets them run for
/// the drain time, then cuts them — within the drain deadline + 1 s — and logs each one cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_cuts_what_is_left_at_the_drain_deadline_and_logs_it() {
    log_capture::capture(tracing::Level::WARN);
    let drain = Duration::from_secs(2);
    let limits = Limits {
        drain_timeout: drain,
        // Longer than the drain: only the shutdown ends them.
        body_timing: BodyTiming {
            idle: Duration::from_secs(60),
            min_bytes_per_s: 0,
        },
        ..Limits::default()
    };
    let mut p = Setup {
        upstream: Some(slow_stream_support::firehose().await),
        limits,
        ..Setup::new("lru")
    }
    .start()
    .await;
    let mut body = StalledBody::open(
        &addr(&p),
        "POST",
        "/v1/chat/completions",
        &[("content-type", "application/json")],
        Framing::Length(1000),
        10,
    )
    .await
    .unwrap();
    let reader = SlowReader::open_model(&addr(&p), "none", "firehose").await;
    assert_eq!(reader.status, 200, "{}", reader.refusal);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let took = p.shut_down().await;
    assert!(
        took >= drain && took <= drain + Duration::from_secs(1),
        "shut down in {took:?}"
    );
    assert_eq!(
        body.answer(Duration::from_secs(1)).await.map(|a| a.0),
        Some(0),
        "its connection was closed"
    );
    let log = log_capture::text();
    let cut: Vec<&str> = log.lines().filter(|l| l.contains("cut at shutdown")).collect();
    assert_eq!(cut.len(), 2, "{log}");
    assert!(
        cut.iter().any(|l| l.contains("while its answer was being sent")),
        "{log}"
    );
    assert!(cut.iter().any(|l| l.contains("before its answer")), "{log}");
    assert!(log.contains("cut=2"), "{log}");
    drop(reader);
}

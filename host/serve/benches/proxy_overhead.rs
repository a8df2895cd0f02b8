//! What `agentrt serve` adds to a request: latency (p50/p99) and throughput through the proxy vs a
//! direct connection to the same fast local upstream, in the same run.
//!
//! `cargo bench -p agentrt-serve --bench proxy_overhead [-- REQUESTS CONCURRENCY]`
//! (components must be built: `cargo xtask build-policies`). Prints a table.
//!
//! The upstream answers a fixed chat completion at once (an in-process HTTP server), so the
//! difference between the two columns is the proxy: parsing, identity, the policy's `observe`
//! calls, the upstream hop. The proxy runs CacheSage, the default policy; two more rows add a
//! second (`guard`) and a third (`ttl`) policy slot, which get the same events.
//!
//! The process logs as `agentrt serve` does (warnings to stderr) and, when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set, exports every request's spans over OTLP as the binary
//! would: run it with and without, and the proxy rows' difference is the spans' cost per request
//! (docs/performance.md, "OpenTelemetry").

mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::{chat_body, fast_upstream, percentile, start_proxy};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::Layer as _;

/// Send `n` requests with `concurrency` in flight; per-request latencies and the wall time.
async fn drive(url: &str, n: usize, concurrency: usize) -> (Vec<Duration>, Duration) {
    let client = reqwest::Client::new();
    let endpoint = format!("{url}/v1/chat/completions");
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let started = Instant::now();
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (client, endpoint, next) = (client.clone(), endpoint.clone(), next.clone());
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= n {
                        return latencies;
                    }
                    let t = Instant::now();
                    let response = client
                        .post(&endpoint)
                        .header("content-type", "application/json")
                        .body(chat_body(i))
                        .send()
                        .await
                        .unwrap();
                    assert!(response.status().is_success());
                    let _ = response.bytes().await.unwrap();
                    latencies.push(t.elapsed());
                }
            })
        })
        .collect();
    let mut all = Vec::with_capacity(n);
    for w in workers {
        all.extend(w.await.unwrap());
    }
    (all, started.elapsed())
}

/// Install the binary's subscriber (cli/src/main.rs): warnings to stderr, spans over OTLP
/// when the environment asks. Returns the exporter's guard (dropped last, to flush) and the
/// endpoint the spans go to, if any.
fn init_tracing() -> (Option<agentrt_serve::telemetry::Telemetry>, Option<String>) {
    let (otlp, telemetry) = match agentrt_serve::telemetry::from_environment() {
        Ok(Some((layer, guard))) => (Some(layer), Some(guard)),
        Ok(None) => (None, None),
        Err(e) => panic!("{e:#}"),
    };
    let log = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_filter(tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::registry().with(log).with(otlp).init();
    let exporting = std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT")
        .ok()
        .filter(|_| telemetry.is_some());
    (telemetry, exporting)
}

/// One path's figures: its label, p50, p99 and throughput (req/s).
type Row = (&'static str, Duration, Duration, f64);

/// Warm every path, then drive `n` requests through each in turn.
async fn measure(paths: &[(&'static str, &String)], n: usize, concurrency: usize) -> Vec<Row> {
    // Warm every path (connections, the policy's first compile-cache hit, allocations).
    for (_, url) in paths {
        drive(url, 300, concurrency).await;
    }
    let mut rows = Vec::new();
    for (label, url) in paths {
        let (mut latencies, wall) = drive(url, n, concurrency).await;
        latencies.sort();
        rows.push((
            *label,
            percentile(&latencies, 0.5),
            percentile(&latencies, 0.99),
            n as f64 / wall.as_secs_f64(),
        ));
    }
    rows
}

/// The table: each path's figures, then what the proxy adds over the direct path.
fn report(rows: &[Row], n: usize, concurrency: usize, exporting: Option<&str>) {
    println!("{n} requests, {concurrency} in flight, fast local upstream, CacheSage in the kv slot");
    match exporting {
        Some(endpoint) => println!("OpenTelemetry: every request's spans exported over OTLP to {endpoint}"),
        None => println!("OpenTelemetry: off (OTEL_EXPORTER_OTLP_ENDPOINT unset)"),
    }
    println!("{:<24} {:>10} {:>10} {:>12}", "path", "p50 µs", "p99 µs", "req/s");
    for (label, p50, p99, rps) in rows {
        println!(
            "{label:<24} {:>10.0} {:>10.0} {:>12.0}",
            p50.as_secs_f64() * 1e6,
            p99.as_secs_f64() * 1e6,
            rps
        );
    }
    let (d, p) = (&rows[0], &rows[1]);
    println!(
        "{:<24} {:>10.0} {:>10.0}",
        "added by the proxy",
        (p.1.as_secs_f64() - d.1.as_secs_f64()) * 1e6,
        (p.2.as_secs_f64() - d.2.as_secs_f64()) * 1e6
    );
}

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let n = args.first().copied().unwrap_or(5_000);
    let concurrency = args.get(1).copied().unwrap_or(8);
    let (telemetry, exporting) = init_tracing();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let upstream = fast_upstream().await;
        let (proxied, _app) = start_proxy(&upstream, HashMap::new(), Default::default(), &[]).await;
        // A second and a third policy slot: the same events to each, their `act`s merged.
        let (two_slots, _state2) =
            start_proxy(&upstream, HashMap::new(), Default::default(), &[("guard", "guard")]).await;
        let (three_slots, _state3) = start_proxy(
            &upstream,
            HashMap::new(),
            Default::default(),
            &[("guard", "guard"), ("extra", "ttl")],
        )
        .await;
        let paths = [
            ("direct", &upstream),
            ("through agentrt serve", &proxied),
            ("  + guard slot", &two_slots),
            ("  + guard + ttl slots", &three_slots),
        ];
        let rows = measure(&paths, n, concurrency).await;
        report(&rows, n, concurrency, exporting.as_deref());
    });
    // Flushes the spans still batched before the figures are trusted to have included export.
    drop(telemetry);
}

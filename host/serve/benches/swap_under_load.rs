//! Hot swaps under load: how long a swap holds a tenant's policy callers, and what requests see
//! meanwhile, through `agentrt serve` (the real router behind the real accept loop, on loopback)
//! in front of a fast in-process upstream.
//!
//! `cargo bench -p agentrt-serve --bench swap_under_load [-- RATE SWAPS]`
//! (components must be built: `cargo xtask build-policies`). Prints tables.
//!
//! Two tenants, alpha and beta, both on CacheSage, send a planner → coder → tester workload,
//! RATE requests per second together (500 by default), open loop: each request starts on
//! schedule whether or not earlier ones have finished, so a stall shows as latency, not as a
//! lower rate. After a warm-up second and a baseline without swaps (SWAPS × 100 ms), alpha's
//! policy is hot-swapped SWAPS times (50 by default), one every 100 ms, by uploads through the
//! admin API, in a cycle of three kinds:
//!
//! - CacheSage → CacheSage, state carried: redeploying a version, what it learned moves over;
//! - CacheSage → LRU, fresh: LRU keeps no state and refuses CacheSage's (`?fresh=true`);
//! - LRU → CacheSage, state carried: LRU's state is empty, so CacheSage starts from scratch.
//!
//! The pause is each swap's own report (`paused_us`: how long the slot's callers were held); the
//! round trip is the whole admin request (upload, load, swap).

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentrt_serve::auth::AdminTokens;
use serde_json::Value;
use support::{chat_body, component_bytes, fast_upstream, percentile, start_proxy};

const ADMIN_TOKEN: &str = "bench-operator";
const TENANTS: [(&str, &str); 2] = [("key-alpha", "alpha"), ("key-beta", "beta")];
const SWAP_EVERY: Duration = Duration::from_millis(100);

/// When a request started: it is counted in that phase.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Phase {
    WarmUp,
    Baseline,
    Swapping,
    After,
}

impl Phase {
    fn from_u8(v: u8) -> Self {
        [Phase::WarmUp, Phase::Baseline, Phase::Swapping, Phase::After][v as usize]
    }
}

/// One swap of the cycle: the component uploaded and whether the state is carried.
struct SwapKind {
    label: &'static str,
    component: &'static str,
    fresh: bool,
}

const CYCLE: [SwapKind; 3] = [
    SwapKind {
        label: "CacheSage → CacheSage, state carried",
        component: "cachesage",
        fresh: false,
    },
    SwapKind {
        label: "CacheSage → LRU, fresh",
        component: "lru",
        fresh: true,
    },
    SwapKind {
        label: "LRU → CacheSage, state carried (none)",
        component: "cachesage",
        fresh: false,
    },
];

struct RequestSample {
    tenant: usize,
    phase: Phase,
    latency: Duration,
    ok: bool,
}

struct SwapSample {
    kind: usize,
    ok: bool,
    paused: Duration,
    state_bytes: u64,
    round_trip: Duration,
}

/// Send requests at `rate` per second, alternating tenants, until `stop`; each is tagged with the
/// phase it started in.
async fn drive(url: String, rate: f64, phase: Arc<AtomicU8>, stop: Arc<AtomicBool>) -> Vec<RequestSample> {
    let client = reqwest::Client::new();
    let endpoint = format!("{url}/v1/chat/completions");
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    // Requests a late tick missed are sent at once: the rate holds.
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut requests = Vec::new();
    let mut i = 0usize;
    while !stop.load(Relaxed) {
        tick.tick().await;
        let tenant = i % TENANTS.len();
        let request = client
            .post(&endpoint)
            .bearer_auth(TENANTS[tenant].0)
            .header("content-type", "application/json")
            .body(chat_body(i / TENANTS.len()));
        let phase = Phase::from_u8(phase.load(Relaxed));
        requests.push(tokio::spawn(async move {
            let started = Instant::now();
            let ok = match request.send().await {
                Ok(response) => response.status().is_success() && response.bytes().await.is_ok(),
                Err(_) => false,
            };
            RequestSample {
                tenant,
                phase,
                latency: started.elapsed(),
                ok,
            }
        }));
        i += 1;
    }
    let mut samples = Vec::with_capacity(requests.len());
    for request in requests {
        samples.push(request.await.unwrap());
    }
    samples
}

/// Swap alpha's policy `swaps` times, one every [`SWAP_EVERY`], cycling through [`CYCLE`].
async fn swap_repeatedly(url: &str, swaps: usize) -> Vec<SwapSample> {
    let client = reqwest::Client::new();
    let uploads: HashMap<&str, Vec<u8>> = ["cachesage", "lru"]
        .into_iter()
        .map(|name| (name, component_bytes(name)))
        .collect();
    let mut tick = tokio::time::interval(SWAP_EVERY);
    let mut samples = Vec::with_capacity(swaps);
    for n in 0..swaps {
        tick.tick().await;
        let kind = &CYCLE[n % CYCLE.len()];
        let started = Instant::now();
        let response = client
            .put(format!("{url}/admin/tenants/alpha/policy?fresh={}", kind.fresh))
            .bearer_auth(ADMIN_TOKEN)
            .body(uploads[kind.component].clone())
            .send()
            .await
            .unwrap();
        let ok = response.status().is_success();
        let answer: Value = response.json().await.unwrap_or_default();
        let round_trip = started.elapsed();
        if !ok {
            eprintln!("swap {n} ({}) failed: {answer}", kind.label);
        }
        samples.push(SwapSample {
            kind: n % CYCLE.len(),
            ok,
            paused: Duration::from_micros(answer["paused_us"].as_u64().unwrap_or(0)),
            state_bytes: answer["state_bytes_carried"].as_u64().unwrap_or(0),
            round_trip,
        });
    }
    samples
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e3)
}

/// p50, p99 and max of `samples` (sorted here).
fn spread(samples: &mut [Duration]) -> (Duration, Duration, Duration) {
    samples.sort();
    match samples.last() {
        Some(&max) => (percentile(samples, 0.5), percentile(samples, 0.99), max),
        None => Default::default(),
    }
}

/// What the phases measured: every request, every swap, and how long each measured phase ran.
struct Measured {
    requests: Vec<RequestSample>,
    swaps: Vec<SwapSample>,
    baseline_wall: Duration,
    swapping_wall: Duration,
}

/// Warm up, run the baseline, then swap alpha's policy `swaps` times, all under one open-loop
/// load that tags each request with the phase it started in.
async fn run_phases(url: &str, rate: f64, swaps: usize) -> Measured {
    let phase = Arc::new(AtomicU8::new(Phase::WarmUp as u8));
    let stop = Arc::new(AtomicBool::new(false));
    let load = tokio::spawn(drive(url.to_string(), rate, phase.clone(), stop.clone()));
    tokio::time::sleep(Duration::from_secs(1)).await;

    phase.store(Phase::Baseline as u8, Relaxed);
    let baseline_started = Instant::now();
    tokio::time::sleep(SWAP_EVERY * swaps as u32).await;
    let baseline_wall = baseline_started.elapsed();

    phase.store(Phase::Swapping as u8, Relaxed);
    let swapping_started = Instant::now();
    let swap_samples = swap_repeatedly(url, swaps).await;
    // The last swap's effect on requests: one more interval of load.
    tokio::time::sleep(SWAP_EVERY).await;
    let swapping_wall = swapping_started.elapsed();
    phase.store(Phase::After as u8, Relaxed);
    stop.store(true, Relaxed);
    Measured {
        requests: load.await.unwrap(),
        swaps: swap_samples,
        baseline_wall,
        swapping_wall,
    }
}

/// The requests' table: each tenant's rate and latency without swaps and while alpha swaps.
fn report_requests(measured: &Measured) {
    let requests = &measured.requests;
    println!("| phase | tenant | requests | failed | req/s | p50 ms | p99 ms | max ms |");
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    for (phase, label, wall) in [
        (Phase::Baseline, "no swaps", measured.baseline_wall),
        (Phase::Swapping, "swapping alpha", measured.swapping_wall),
    ] {
        for (tenant, (_, name)) in TENANTS.iter().enumerate() {
            let of_tenant: Vec<_> = requests
                .iter()
                .filter(|r| r.phase == phase && r.tenant == tenant)
                .collect();
            let failed = of_tenant.iter().filter(|r| !r.ok).count();
            let mut latencies: Vec<Duration> = of_tenant.iter().map(|r| r.latency).collect();
            let (p50, p99, max) = spread(&mut latencies);
            println!(
                "| {label} | {name} | {} | {failed} | {:.0} | {} | {} | {} |",
                of_tenant.len(),
                of_tenant.len() as f64 / wall.as_secs_f64(),
                ms(p50),
                ms(p99),
                ms(max)
            );
        }
    }
    let sent = requests.len();
    let failed = requests.iter().filter(|r| !r.ok).count();
    println!("\nall phases (warm-up included): {sent} requests sent, {failed} failed\n");
}

/// The swaps' table: per kind of swap and overall, the state carried and the pauses.
fn report_swaps(swap_samples: &[SwapSample]) {
    println!("| swaps | count | failed | state carried (median) | pause p50 ms | pause p99 ms | pause max ms | round trip p50 ms |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let mut rows: Vec<(&str, Vec<&SwapSample>)> = CYCLE
        .iter()
        .enumerate()
        .map(|(k, kind)| (kind.label, swap_samples.iter().filter(|s| s.kind == k).collect()))
        .collect();
    rows.push(("all", swap_samples.iter().collect()));
    for (label, samples) in rows {
        let done: Vec<_> = samples.iter().filter(|s| s.ok).collect();
        let mut bytes: Vec<u64> = done.iter().map(|s| s.state_bytes).collect();
        bytes.sort();
        let mut pauses: Vec<Duration> = done.iter().map(|s| s.paused).collect();
        let (p50, p99, max) = spread(&mut pauses);
        let mut trips: Vec<Duration> = done.iter().map(|s| s.round_trip).collect();
        let (trip50, _, _) = spread(&mut trips);
        println!(
            "| {label} | {} | {} | {} B | {} | {} | {} | {} |",
            samples.len(),
            samples.len() - done.len(),
            bytes.get(bytes.len() / 2).copied().unwrap_or(0),
            ms(p50),
            ms(p99),
            ms(max),
            ms(trip50)
        );
    }
}

fn main() {
    let args: Vec<f64> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let rate = args.first().copied().unwrap_or(500.0);
    let swaps = args.get(1).map_or(50, |&n| n as usize);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let upstream = fast_upstream().await;
        let keys = TENANTS.iter().map(|(k, t)| (k.to_string(), t.to_string())).collect();
        let admin = AdminTokens::operator(Some(ADMIN_TOKEN.to_string()));
        let (url, app) = start_proxy(&upstream, keys, admin, &[]).await;
        let measured = run_phases(&url, rate, swaps).await;

        println!(
            "{rate} req/s offered (two tenants, open loop), {swaps} hot swaps of alpha's policy, one every {} ms\n",
            SWAP_EVERY.as_millis()
        );
        report_requests(&measured);
        report_swaps(&measured.swaps);
        let alpha = app.tenants().get("alpha").expect("alpha started");
        let slot = alpha.policy.metrics();
        println!(
            "\nalpha's slot: {} swaps, {} restarts, {} rollbacks, {} fallbacks",
            slot.swaps(),
            slot.restarts(),
            slot.rollbacks(),
            slot.fallbacks()
        );
    });
}

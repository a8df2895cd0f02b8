//! A tenant's policy worker under a flood of request events: one job's events per `observe` call
//! (the worker before batching) against events queued while the policy was busy taken together
//! (`PolicyWorker::spawn`'s default), with CacheSage and with LRU.
//!
//! `cargo bench -p agentrt-serve --bench policy_worker [-- REQUESTS]` (default 200,000). A
//! producer thread hands the worker each request's two events (arrival, finish) as the proxy
//! does — one job per event list, never waiting — as fast as it can, retrying a job the full
//! queue refused after a yield, so nothing is lost and the worker's pace sets the time. Printed:
//! requests per second through the worker, the process's CPU time per request (producer and
//! worker together), and the events per `observe` call. Both builds of the worker run in the same
//! process, alternated over the repeats.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentrt_runtime::types::{Event, RequestArrival, RequestFinish};
use agentrt_serve::tenant::quotas::{LiveQuotas, Quotas};
use agentrt_serve::tenant::worker::{PolicyWorker, MAX_BATCH_EVENTS};

const REPEATS: usize = 3;
const AGENTS: u32 = 8;
const SESSIONS: u64 = 256;

/// Request `i`'s two events: arrival then finish, agents and sessions in rotation.
fn request(i: u64) -> [Vec<Event>; 2] {
    let agent = (i % u64::from(AGENTS)) as u32 + 1;
    let session = (i / u64::from(AGENTS)) % SESSIONS;
    let arrival = Event::RequestArrival(RequestArrival {
        request_id: i,
        agent,
        session,
        anchor_hash: 0xa000 + u64::from(agent),
        prompt_tokens: 900,
        continues: None,
        warmup: false,
        at_us: i * 100,
    });
    let finish = Event::RequestFinish(RequestFinish {
        request_id: i,
        agent,
        session,
        prompt_tokens: 900,
        cached_tokens: 512,
        output_tokens: 64,
        warmup: false,
        ok: true,
        at_us: i * 100 + 50,
    });
    [vec![arrival], vec![finish]]
}

/// CPU time of the whole process so far.
fn process_cpu() -> Duration {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: getrusage writes the struct it is given and reads nothing else.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

struct Run {
    requests_per_s: f64,
    cpu_us_per_request: f64,
    events_per_call: f64,
}

/// `requests` requests' events through a fresh worker of `policy` taking up to `max_batch`
/// events per call; the run ends when the worker has observed them all.
fn run(policy: &str, max_batch: usize, requests: u64) -> Run {
    let (engine, _cache) = agentrt_tests::engine();
    let handle = Arc::new(agentrt_tests::start(&engine, policy, &[]));
    let quotas = Arc::new(LiveQuotas::new(Quotas::default()));
    let worker = PolicyWorker::spawn_batching("bench", handle, 1024, quotas, max_batch).unwrap();
    let (cpu, started) = (process_cpu(), Instant::now());
    for i in 0..requests {
        for events in request(i) {
            while !worker.observe(events.clone()) {
                std::thread::yield_now();
            }
        }
    }
    while worker.stats().queued() > 0 {
        std::thread::sleep(Duration::from_micros(200));
    }
    let (wall, cpu) = (started.elapsed(), process_cpu() - cpu);
    let stats = worker.stats();
    Run {
        requests_per_s: requests as f64 / wall.as_secs_f64(),
        cpu_us_per_request: cpu.as_secs_f64() * 1e6 / requests as f64,
        events_per_call: stats.observed() as f64 / stats.observe_calls().max(1) as f64,
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let requests: u64 = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(200_000);
    println!("{requests} requests (two events each), {REPEATS} repeats alternated; medians\n");
    println!("| policy | worker | requests/s | CPU µs per request | events per observe call |");
    println!("|---|---|---:|---:|---:|");
    for policy in ["lru", "cachesage"] {
        let builds = [("one job per call", 1), ("batched (default)", MAX_BATCH_EVENTS)];
        let mut runs: Vec<Vec<Run>> = builds.iter().map(|_| Vec::new()).collect();
        for _ in 0..REPEATS {
            for (i, (_, max)) in builds.iter().enumerate() {
                runs[i].push(run(policy, *max, requests));
            }
        }
        for ((name, _), runs) in builds.iter().zip(runs) {
            println!(
                "| {policy} | {name} | {:.0} | {:.2} | {:.1} |",
                median(runs.iter().map(|r| r.requests_per_s).collect()),
                median(runs.iter().map(|r| r.cpu_us_per_request).collect()),
                median(runs.iter().map(|r| r.events_per_call).collect()),
            );
        }
    }
}

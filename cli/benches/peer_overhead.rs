//! `agentrt serve` beside vLLM's own router (`vllm-router`), in front of the same upstream, at the
//! same offered loads: the latency each adds, the rate at which each saturates, and peak memory.
//!
//! `cargo bench -p agentrt --bench peer_overhead [-- --secs S --repeats N --rates 200,500,...]`
//! (components must be built: `cargo xtask build-policies`; the router comes from
//! `bash adapters/vllm-router/setup-venv.sh`, and its rows are skipped, saying why, without it).
//!
//! Every proxy runs as a process of its own (the release `agentrt` binary, the router's binary)
//! in front of one fast in-process upstream, which answers a fixed chat completion at once. The
//! load is open-loop: request `i` is sent at `i / rate` whatever came back, and its latency counts
//! from that moment, so a proxy that falls behind pays for its queue. A path's *added* latency is
//! its quantile less the direct path's at the same rate in the same repeat; repeats interleave the
//! paths, and the table gives the median of the repeats with their range. Past saturation (fewer
//! than 90 % of the offered requests answered in time, or a p99 over a second) a path is not
//! offered more. The ceiling is closed-loop: 64 requests always in flight.

#[path = "../../host/serve/benches/support/mod.rs"]
mod support;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::{chat_body, fast_upstream, free_port, percentile};

/// A way to the upstream: its label, its URL, and the process behind it (none when direct).
struct Path {
    label: String,
    url: String,
    process: Option<Child>,
}

impl Drop for Path {
    fn drop(&mut self) {
        if let Some(child) = &mut self.process {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Path {
    /// Peak resident memory of the proxy's process (Linux: VmHWM), in MB.
    fn peak_rss_mb(&self) -> Option<f64> {
        let pid = self.process.as_ref()?.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let kb: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        Some(kb / 1024.0)
    }
}

/// Waits until `url` answers a chat completion; panics with the process's fate after 60 s.
async fn wait_ready(label: &str, url: &str, child: &mut Child) {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let answer = client
            .post(format!("{url}/v1/chat/completions"))
            .header("content-type", "application/json")
            .body(chat_body(0))
            .send()
            .await;
        if answer.is_ok_and(|a| a.status().is_success()) {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{label} exited before it answered: {status}");
        }
        assert!(Instant::now() < deadline, "{label} did not answer at {url} within 60 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn start(label: &str, mut command: Command, url: String) -> Path {
    let mut child = command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {label}: {e}"));
    wait_ready(label, &url, &mut child).await;
    Path {
        label: label.into(),
        url,
        process: Some(child),
    }
}

async fn agentrt(label: &str, upstream: &str, extra: &[&str]) -> Path {
    let port = free_port();
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentrt"));
    command.args([
        "serve",
        "--upstream",
        upstream,
        "--listen",
        &format!("127.0.0.1:{port}"),
    ]);
    command.args(extra);
    start(label, command, format!("http://127.0.0.1:{port}")).await
}

async fn vllm_router(binary: &PathBuf, policy: &str, upstream: &str) -> Path {
    let (port, metrics) = (free_port(), free_port());
    let mut command = Command::new(binary);
    command.args([
        "--host",
        "127.0.0.1",
        "--port",
        &port.to_string(),
        "--worker-urls",
        upstream,
    ]);
    command.args([
        "--policy",
        policy,
        "--prometheus-port",
        &metrics.to_string(),
        "--log-level",
        "error",
    ]);
    // Its defaults queue past 100 waiting requests and cap nothing else; keep the queue out of
    // the way so saturation shows as latency, as it does for agentrt.
    command.args(["--queue-size", "100000"]);
    start(
        &format!("vllm-router {policy}"),
        command,
        format!("http://127.0.0.1:{port}"),
    )
    .await
}

/// One open-loop run: `rate` requests per second for `secs`.
struct Run {
    latencies: Vec<Duration>,
    offered: usize,
    /// Answered 503 with `Retry-After` at once: the proxy shedding load past its ceiling.
    shed: usize,
    /// No answer within the client's 10 s, or any other error.
    failed: usize,
}

/// How one open-loop request ended.
enum Outcome {
    Answered(Duration),
    Shed,
    Failed,
}

impl Run {
    fn saturated(&self) -> bool {
        self.latencies.len() < self.offered * 9 / 10 || percentile(&self.latencies, 0.99) > Duration::from_secs(1)
    }
}

async fn open_loop(client: &reqwest::Client, url: &str, rate: f64, secs: f64) -> Run {
    let endpoint = Arc::new(format!("{url}/v1/chat/completions"));
    let offered = (rate * secs) as usize;
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(offered);
    for i in 0..offered {
        let due = started + Duration::from_secs_f64(i as f64 / rate);
        tokio::time::sleep_until(due.into()).await;
        let (client, endpoint) = (client.clone(), endpoint.clone());
        tasks.push(tokio::spawn(async move {
            let answer = client
                .post(endpoint.as_str())
                .header("content-type", "application/json")
                .body(chat_body(i))
                .timeout(Duration::from_secs(10))
                .send()
                .await;
            match answer {
                Ok(a) if a.status().is_success() => match a.bytes().await {
                    Ok(_) => Outcome::Answered(due.elapsed()),
                    Err(_) => Outcome::Failed,
                },
                Ok(a) if a.status() == 503 && a.headers().contains_key("retry-after") => Outcome::Shed,
                _ => Outcome::Failed,
            }
        }));
    }
    let mut latencies = Vec::with_capacity(offered);
    let (mut shed, mut failed) = (0, 0);
    for task in tasks {
        match task.await.unwrap() {
            Outcome::Answered(latency) => latencies.push(latency),
            Outcome::Shed => shed += 1,
            Outcome::Failed => failed += 1,
        }
    }
    latencies.sort();
    Run {
        latencies,
        offered,
        shed,
        failed,
    }
}

/// Closed loop: `in_flight` requests always outstanding for `secs`; answered requests per second.
async fn ceiling(client: &reqwest::Client, url: &str, in_flight: usize, secs: f64) -> f64 {
    let endpoint = Arc::new(format!("{url}/v1/chat/completions"));
    let until = Instant::now() + Duration::from_secs_f64(secs);
    let workers: Vec<_> = (0..in_flight)
        .map(|w| {
            let (client, endpoint) = (client.clone(), endpoint.clone());
            tokio::spawn(async move {
                let mut done = 0usize;
                while Instant::now() < until {
                    let answer = client
                        .post(endpoint.as_str())
                        .header("content-type", "application/json")
                        .body(chat_body(w + done * in_flight))
                        .send()
                        .await;
                    if let Ok(a) = answer {
                        if a.status().is_success() && a.bytes().await.is_ok() {
                            done += 1;
                        }
                    }
                }
                done
            })
        })
        .collect();
    let mut done = 0;
    for w in workers {
        done += w.await.unwrap();
    }
    done as f64 / secs
}

fn flag<T: std::str::FromStr>(args: &[String], name: &str) -> Option<T> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// "median (min–max)" of `v`, in ms.
fn spread_ms(v: &[f64]) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{:.2} ({:.2}–{:.2})", median(v.to_vec()), lo, hi)
}

/// The command line's settings: seconds per run, repeats, and the offered rates.
struct Settings {
    secs: f64,
    repeats: usize,
    rates: Vec<f64>,
}

impl Settings {
    fn from_args() -> Self {
        let args: Vec<String> = std::env::args().skip(1).collect();
        Self {
            secs: flag(&args, "--secs").unwrap_or(2.0),
            repeats: flag(&args, "--repeats").unwrap_or(3),
            rates: flag::<String>(&args, "--rates")
                .unwrap_or_else(|| "200,500,1000,2000,3000,4000,6000".into())
                .split(',')
                .filter_map(|r| r.trim().parse().ok())
                .collect(),
        }
    }
}

/// The paths compared: direct first (every other path is measured against it), then agentrt's,
/// then the router's when its binary is there.
async fn start_paths(upstream: &str) -> Vec<Path> {
    let mut paths = vec![
        Path {
            label: "direct".into(),
            url: upstream.to_string(),
            process: None,
        },
        agentrt("agentrt serve, lru", upstream, &["--policy", "lru"]).await,
        agentrt("agentrt serve, cachesage + guard", upstream, &["--slot", "guard=guard"]).await,
    ];
    match agentrt_router::testing::vllm_router_binary() {
        Ok(binary) => {
            paths.push(vllm_router(&binary, "round_robin", upstream).await);
            paths.push(vllm_router(&binary, "cache_aware", upstream).await);
        }
        Err(why) => println!("vllm-router rows skipped: {why}"),
    }
    paths
}

/// What the sweep over the rates measured, per path.
struct Sweep {
    /// `added[path][rate]` = per-repeat (p50, p99) less the direct path's; saturated paths stop.
    added: Vec<Vec<Vec<(f64, f64)>>>,
    saturated_at: Vec<Option<f64>>,
    shed: Vec<usize>,
    failures: Vec<usize>,
}

impl Sweep {
    /// Offer each rate to every path not yet saturated, `repeats` times.
    async fn run(client: &reqwest::Client, paths: &[Path], settings: &Settings) -> Self {
        let Settings { secs, repeats, rates } = settings;
        let mut sweep = Sweep {
            added: vec![vec![Vec::new(); rates.len()]; paths.len()],
            saturated_at: vec![None; paths.len()],
            shed: vec![0; paths.len()],
            failures: vec![0; paths.len()],
        };
        for (r, &rate) in rates.iter().enumerate() {
            eprintln!("peer_overhead: {rate} req/s, {repeats} × {secs} s per path");
            for repeat in 0..*repeats {
                // Rotate the order so no path always runs first or last in a repeat.
                let order: Vec<usize> = (0..paths.len()).map(|k| (k + repeat) % paths.len()).collect();
                let mut runs: Vec<Option<Run>> = (0..paths.len()).map(|_| None).collect();
                for &p in &order {
                    if sweep.saturated_at[p].is_some() {
                        continue;
                    }
                    runs[p] = Some(open_loop(client, &paths[p].url, rate, *secs).await);
                }
                sweep.record(r, rate, runs);
            }
        }
        sweep
    }

    /// Record one repeat at rate index `r`: each path's quantiles less the direct path's.
    fn record(&mut self, r: usize, rate: f64, runs: Vec<Option<Run>>) {
        let direct = runs[0]
            .as_ref()
            .map(|run| (percentile(&run.latencies, 0.5), percentile(&run.latencies, 0.99)));
        for (p, run) in runs.into_iter().enumerate() {
            let Some(run) = run else { continue };
            self.shed[p] += run.shed;
            self.failures[p] += run.failed;
            if run.saturated() {
                self.saturated_at[p].get_or_insert(rate);
                continue;
            }
            if let Some((d50, d99)) = direct {
                let ms = |d: Duration| d.as_secs_f64() * 1e3;
                let p50 = ms(percentile(&run.latencies, 0.5)) - ms(d50);
                let p99 = ms(percentile(&run.latencies, 0.99)) - ms(d99);
                self.added[p][r].push((p50, p99));
            }
        }
    }

    /// The two tables: added latency per rate, then saturation, ceiling, memory and failures.
    fn report(&self, paths: &[Path], settings: &Settings, ceilings: &[f64]) {
        let Settings { secs, repeats, rates } = settings;
        println!(
            "\nAdded latency (ms) over the direct path at each offered load: median of {repeats} runs of {secs} s (min–max); \
             open loop, one fast in-process upstream, loopback, {} cores shared by all",
            std::thread::available_parallelism().map_or(0, |n| n.get())
        );
        let header: Vec<String> = rates.iter().map(|r| format!("{r} req/s")).collect();
        println!("| path | quantile | {} |", header.join(" | "));
        println!("|---|---|{}", "---:|".repeat(rates.len()));
        for (p, path) in paths.iter().enumerate().skip(1) {
            for (q, name) in [(0, "p50"), (1, "p99")] {
                let cells: Vec<String> = (0..rates.len())
                    .map(|r| {
                        let v: Vec<f64> = self.added[p][r]
                            .iter()
                            .map(|a| if q == 0 { a.0 } else { a.1 })
                            .collect();
                        if v.is_empty() {
                            "saturated".into()
                        } else {
                            spread_ms(&v)
                        }
                    })
                    .collect();
                println!("| {} | {name} | {} |", path.label, cells.join(" | "));
            }
        }
        println!(
            "\n| path | saturates at (offered req/s) | ceiling, 64 in flight (req/s) | peak RSS (MB) | shed (503 + Retry-After) | failed (timeouts, errors) |"
        );
        println!("|---|---:|---:|---:|---:|---:|");
        for (p, path) in paths.iter().enumerate() {
            println!(
                "| {} | {} | {:.0} | {} | {} | {} |",
                path.label,
                self.saturated_at[p].map_or("beyond the last rate".into(), |r| format!("{r}")),
                ceilings[p],
                path.peak_rss_mb().map_or("–".into(), |m| format!("{m:.0}")),
                self.shed[p],
                self.failures[p],
            );
        }
    }
}

fn main() {
    let settings = Settings::from_args();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let upstream = fast_upstream().await;
        let paths = start_paths(&upstream).await;
        let client = reqwest::Client::builder().pool_max_idle_per_host(1024).build().unwrap();
        for path in &paths {
            open_loop(&client, &path.url, 500.0, 1.0).await; // warm connections and caches
        }
        let sweep = Sweep::run(&client, &paths, &settings).await;
        let mut ceilings = Vec::new();
        for path in &paths {
            ceilings.push(ceiling(&client, &path.url, 64, settings.secs.max(2.0)).await);
        }
        sweep.report(&paths, &settings, &ceilings);
    });
}

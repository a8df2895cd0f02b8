//! Bodies that never end, against the release `agentrt serve`: the three stalled-body attacks of
//! the fifth hardening round and a SIGTERM in the middle of them, each on a fresh process, with
//! the proxy's resident memory (its base before the attack, its peak during, and 5 s after), how
//! many of the other tenant's chats were answered meanwhile, and how long after its last byte
//! each stalled body was let go.
//!
//! `cargo bench -p agentrt --bench body_attacks [-- --secs S --hint-connections N]`
//! (components must be built: `cargo xtask build-policies`).
//!
//! The proxy runs with its defaults (`--body-idle-timeout-ms 10000`, `--max-reading-mib 256`,
//! `--max-reading-mib-per-tenant 64`, `--max-uploads-per-tenant 1`, `--tenant-max-in-flight
//! 1024`, `--drain-timeout-ms 25000`) as a process of its own, in front of a stand-in upstream on
//! loopback (the hostile suite's firehose: a small completion, or a long stream). Alice attacks
//! for `--secs` (default 30): each of her connections, once answered or closed, is opened again
//! at once (after 50 ms when it was refused, so that the bench's own two cores are not all
//! hers); bob sends one chat at a time, 20 ms apart, each given 10 s.

#[path = "../../tests/hostile/slow_stream_support/mod.rs"]
mod slow_stream_support;
#[path = "../../tests/hostile/stalled_body_support/mod.rs"]
mod stalled_body_support;

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use slow_stream_support::SlowReader;
use stalled_body_support::{Framing, StalledBody};

/// `agentrt serve` as a process: its address, its log lines, and its resident memory.
struct Proxy {
    child: Child,
    addr: String,
    log: Arc<Mutex<Vec<String>>>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proxy {
    /// The release binary in front of `upstream`, two keyed tenants and alice's admin.
    fn start(upstream: &str) -> Proxy {
        let mut child = Command::new(env!("CARGO_BIN_EXE_agentrt"))
            .args([
                "serve",
                "--upstream",
                upstream,
                "--listen",
                "127.0.0.1:0",
                "--policy",
                "lru",
            ])
            .args(["--tenant", "key-alice=alice", "--tenant", "key-bob=bob"])
            .args(["--tenant-admin", "tok-alice=alice"])
            .env("AGENTRT_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting agentrt serve");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().expect("piped");
        let lines = log.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(at) = line.split("listening on http://").nth(1) {
                    let _ = tx.send(at.split_whitespace().next().unwrap_or_default().to_string());
                }
                lines.lock().unwrap().push(line);
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("agentrt serve said where it listens within 60 s");
        Proxy { child, addr, log }
    }

    /// Resident memory now, in MB (Linux: /proc/PID/status).
    fn rss_mb(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    }
}

/// One row of the table.
struct Row {
    attack: String,
    load: String,
    bob: (u64, u64),
    rss: (f64, f64, f64),
    stalled: Stalled,
}

/// What alice's stalled bodies got: cut (408, or closed) and when after their last byte, and
/// refused at once.
#[derive(Default)]
struct Stalled {
    cut: u64,
    refused: u64,
    latest_cut: Duration,
    statuses: std::collections::BTreeMap<u16, u64>,
}

/// Bob's chats, one at a time until `stop`: (answered 200, sent).
fn bob(addr: &str, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<(u64, u64)> {
    let url = format!("http://{addr}/v1/chat/completions");
    tokio::spawn(async move {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap();
        let body = r#"{"model":"tiny","messages":[{"role":"system","content":"You are bob's agent."},{"role":"user","content":"hi"}]}"#;
        let (mut ok, mut sent) = (0, 0);
        while !stop.load(Relaxed) {
            sent += 1;
            let answer = client
                .post(&url)
                .header("authorization", "Bearer key-bob")
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await;
            if answer.is_ok_and(|a| a.status() == 200) {
                ok += 1;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        (ok, sent)
    })
}

/// How alice sends one stalled body.
#[derive(Clone, Copy)]
struct Attack {
    method: &'static str,
    path: &'static str,
    token: &'static str,
    framing: Framing,
    sent: usize,
}

/// `connections` of alice's `attack` kept open for `secs`, each opened again once answered.
async fn attack(addr: &str, attack: Attack, connections: usize, secs: f64) -> Stalled {
    let until = Instant::now() + Duration::from_secs_f64(secs);
    let stalled = Arc::new(Mutex::new(Stalled::default()));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..connections {
        let (addr, stalled) = (addr.to_string(), stalled.clone());
        tasks.spawn(async move {
            let auth = format!("Bearer {}", attack.token);
            let headers = [("authorization", auth.as_str()), ("content-type", "application/json")];
            while Instant::now() < until {
                let opened =
                    StalledBody::open(&addr, attack.method, attack.path, &headers, attack.framing, attack.sent).await;
                let Ok(mut body) = opened else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                let answer = body.answer(Duration::from_secs(120)).await;
                let (status, after) = answer.unwrap_or((1, Duration::from_secs(120)));
                let refused_at_once = after < Duration::from_secs(1) && status != 408;
                {
                    let mut s = stalled.lock().unwrap();
                    *s.statuses.entry(status).or_default() += 1;
                    if refused_at_once {
                        s.refused += 1;
                    } else {
                        s.cut += 1;
                        s.latest_cut = s.latest_cut.max(after);
                    }
                }
                if refused_at_once {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    Arc::try_unwrap(stalled).ok().unwrap().into_inner().unwrap()
}

/// A fresh proxy under `run` (alice's attack), with bob beside it and its memory sampled.
async fn scenario<F, Fut>(upstream: &str, attack_name: &str, load: String, run: F) -> Row
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = Stalled>,
{
    let proxy = Proxy::start(upstream);
    // A warm proxy: bob's tenant started, the allocator's first arenas taken.
    let warm = Arc::new(AtomicBool::new(false));
    let warming = bob(&proxy.addr, warm.clone());
    tokio::time::sleep(Duration::from_secs(2)).await;
    warm.store(true, Relaxed);
    warming.await.unwrap();
    let base = proxy.rss_mb();
    let peak = Arc::new(AtomicU64::new(base.to_bits()));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (pid, peak, sampling) = (proxy.child.id(), peak.clone(), sampling.clone());
        std::thread::spawn(move || {
            let proxy_rss = || {
                std::fs::read_to_string(format!("/proc/{pid}/status"))
                    .ok()
                    .and_then(|s| {
                        s.lines()
                            .find_map(|l| l.strip_prefix("VmRSS:"))
                            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
                    })
                    .map_or(0.0, |kb| kb / 1024.0)
            };
            while sampling.load(Relaxed) {
                let now = proxy_rss();
                if now > f64::from_bits(peak.load(Relaxed)) {
                    peak.store(now.to_bits(), Relaxed);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let stop = Arc::new(AtomicBool::new(false));
    let bob = bob(&proxy.addr, stop.clone());
    let stalled = run(proxy.addr.clone()).await;
    stop.store(true, Relaxed);
    let bob = bob.await.unwrap();
    sampling.store(false, Relaxed);
    sampler.join().unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = proxy.rss_mb();
    eprintln!("body_attacks: {attack_name} done");
    Row {
        attack: attack_name.to_string(),
        load,
        bob,
        rss: (base, f64::from_bits(peak.load(Relaxed)), after),
        stalled,
    }
}

/// SIGTERM with stalled bodies and slow streams open: seconds to exit, and the cut requests the
/// log names.
async fn sigterm(upstream: &str) -> (Duration, usize, usize) {
    let proxy = Proxy::start(upstream);
    let alice = [
        ("authorization", "Bearer key-alice"),
        ("content-type", "application/json"),
    ];
    // Four: alice's 64 MiB reading budget holds four bodies of 16 MiB.
    let mut held = Vec::new();
    for _ in 0..4 {
        let framing = Framing::Length(16 << 20);
        held.push(StalledBody::open(&proxy.addr, "POST", "/v1/chat/completions", &alice, framing, 1 << 20).await);
    }
    let mut readers = Vec::new();
    for _ in 0..20 {
        readers.push(SlowReader::open_model(&proxy.addr, "key-alice", "firehose").await);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let pid = proxy.child.id() as i32;
    let started = Instant::now();
    // SAFETY: kill(2) with a pid of a child this process started and still holds.
    unsafe {
        libc::kill(pid, libc::SIGTERM);
    }
    let mut proxy = proxy;
    let exited = loop {
        if proxy.child.try_wait().ok().flatten().is_some() {
            break started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "serve still running 120 s after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let log = proxy.log.lock().unwrap().clone();
    let cut = log.iter().filter(|l| l.contains("cut at shutdown")).count();
    drop((held, readers));
    (exited, cut, 24)
}

fn flag<T: std::str::FromStr>(name: &str) -> Option<T> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
}

fn main() {
    let secs: f64 = flag("--secs").unwrap_or(30.0);
    let hint_connections: usize = flag("--hint-connections").unwrap_or(4200);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let upstream = slow_stream_support::firehose().await;
        let attacks = [
            (
                "hint calls, chunked body of 16,000 B, no end",
                Attack {
                    method: "POST",
                    path: "/v1/agentrt/hints",
                    token: "key-alice",
                    framing: Framing::Chunked,
                    sent: 16_000,
                },
                hint_connections,
            ),
            (
                "chat bodies of 16 MiB − 1 B, last byte withheld",
                Attack {
                    method: "POST",
                    path: "/v1/chat/completions",
                    token: "key-alice",
                    framing: Framing::Length(16 << 20),
                    sent: (16 << 20) - 1,
                },
                48,
            ),
            (
                "policy uploads of 60 MiB (tenant admin), last byte withheld",
                Attack {
                    method: "PUT",
                    path: "/admin/tenants/alice/policy",
                    token: "tok-alice",
                    framing: Framing::Length(60 << 20),
                    sent: (60 << 20) - 1,
                },
                16,
            ),
        ];
        let mut rows = Vec::new();
        for (name, how, connections) in attacks {
            let load = format!("{connections} connections for {secs:.0} s");
            let run = |addr: String| async move { attack(&addr, how, connections, secs).await };
            rows.push(scenario(&upstream, name, load, run).await);
        }
        let (exited, cut, held) = sigterm(&upstream).await;
        report(&rows, (exited, cut, held));
    });
}

fn report(rows: &[Row], (exited, cut, held): (Duration, usize, usize)) {
    println!("| attack (alice) | load | bob's chats answered | proxy RSS base / peak / 5 s after (MB) | stalled bodies cut, latest after its last byte | refused at once | statuses |");
    println!("|---|---|---|---|---|---|---|");
    for r in rows {
        let (ok, sent) = r.bob;
        let share = 100.0 * ok as f64 / sent.max(1) as f64;
        let statuses: Vec<String> = r.stalled.statuses.iter().map(|(s, n)| format!("{s}: {n}")).collect();
        println!(
            "| {} | {} | {ok} of {sent} ({share:.1} %) | {:.0} / {:.0} / {:.0} (+{:.0} peak, +{:.0} after) | {} in ≤ {:.1} s | {} | {} |",
            r.attack,
            r.load,
            r.rss.0,
            r.rss.1,
            r.rss.2,
            r.rss.1 - r.rss.0,
            r.rss.2 - r.rss.0,
            r.stalled.cut,
            r.stalled.latest_cut.as_secs_f64(),
            r.stalled.refused,
            statuses.join(", "),
        );
    }
    println!();
    println!(
        "SIGTERM with 4 stalled chat bodies (cut by their own 10 s deadline during the drain) and 20 slow-reading \
         streams open ({held} requests): exited after {:.1} s (--drain-timeout-ms 25000); {cut} requests logged as cut",
        exited.as_secs_f64()
    );
}

//! Minutes of mixed traffic with a misbehaving tenant: the other tenant's latency and the
//! process's peak memory stay bounded.
//!
//! Alice runs the probe and throws everything at it and at the front door: cues that make her
//! policy slow, trap, flood the log, return oversize results or loop in `snapshot`; a new 64 KB
//! system prompt on every other request (agents, anchors and prompt shapes to remember);
//! over-long agent names, malformed JSON, unknown keys; through the Responses and Messages APIs,
//! engine-control fields, numbers the engine would refuse, another tenant's response id, a
//! flood of JSON elements, JSON nested 100 k levels deep and 100 KiB request heads; and a hot swap of her policy every 10 s. Meanwhile the operator's
//! config file is rewritten and reloaded every 2 s — in turn a valid file (by rename), a key-less
//! one and a malformed one written in place, both of which must be refused. Bob runs CacheSage
//! with a plain two-agent workflow, one request at a time, and measures. When the MCP venv is
//! there, a real MCP server sits behind the gateway too: alice opens sessions past her cap, calls a
//! tool that never answers (cut at the call deadline), sends a `tools/call` nested 100 k levels
//! deep and uses bob's session id; bob calls a
//! quick tool on his own session every few requests, and each of his calls must succeed.
//!
//! Alice also keeps about [`SLOW_READERS`] streams of a long, fast reply (the stub's `firehose`)
//! stalled: clients that read the response head and nothing more for 5 s, then leave. And every
//! [`STALLED_BODY_EVERY`] she sends a body that never ends — a hint call's chunked body, a chat
//! body of 1 MiB with its last byte withheld, a policy upload (the operator's token, for a tenant
//! of its own) — each of which must be cut with 408 within the body deadline
//! ([`BODY_IDLE`], set short here) and a slack.
//!
//! `AGENTRT_SOAK_SECS` sets the length (default 120).

mod mcp_support;
mod slow_stream_support;
mod stalled_body_support;
#[path = "../../host/serve/tests/stub_upstream/mod.rs"]
mod stub_upstream;
#[path = "../../host/serve/tests/support/mod.rs"]
mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentrt_test_probe as probe;
use slow_stream_support::SlowReader;
use support::{chat, install_policy, post, post_json, quantile, settle, Proxy, Setup};

/// How often alice opens a stream she then stalls on, and how long she holds each: about
/// [`SLOW_READERS`] stalled at once. (Each stream costs the proxy's debug build ~30 ms of CPU while
/// the client's socket buffers fill; slow_streams.rs measures 600 at once.)
const SLOW_READER_EVERY: Duration = Duration::from_millis(100);
const SLOW_READER_HOLDS: Duration = Duration::from_secs(5);
const SLOW_READERS: u128 = SLOW_READER_HOLDS.as_millis() / SLOW_READER_EVERY.as_millis();

/// How often alice sends a body that never ends, and the body deadline it must be cut at.
const STALLED_BODY_EVERY: Duration = Duration::from_millis(250);
const BODY_IDLE: Duration = Duration::from_secs(2);
/// How late past its deadline a cut may come while the soak loads both cores.
const CUT_SLACK: Duration = Duration::from_secs(4);

const ALICE: &str = "Bearer key-alice";
const BOB: &str = "Bearer key-bob";

/// The operator's file: alice and bob, with every tenant's in-flight quota at `max_in_flight`.
fn tenants_file(max_in_flight: u64) -> String {
    format!(
        "[defaults]\nmax_in_flight = {max_in_flight}\n\n[tenants.alice]\napi_keys = [\"key-alice\"]\n\n\
         [tenants.bob]\napi_keys = [\"key-bob\"]\n"
    )
}

/// The process's resident memory now and at its peak, in bytes (Linux: /proc/self/status).
fn resident() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// The MCP side of the soak: the gateway's raw client and bob's session.
struct Mcp {
    client: mcp_support::RawMcp,
    bob_session: String,
}

/// One of alice's MCP attacks, chosen by `i`; returns the status and the statuses it may answer.
async fn mcp_attack(mcp: &Mcp, i: u64) -> (u16, &'static [u16]) {
    match i % 4 {
        // A new session each time, left open: past her cap, 429; idle ones expire.
        0 => match mcp.client.open("key-alice").await {
            Ok(_) => (200, &[200]),
            Err(refused) => (refused.status, &[429]),
        },
        // Bob's session id with her own key: the same 404 as an unknown id.
        1 => {
            let answer = mcp
                .client
                .call("key-alice", &mcp.bob_session, "quick", serde_json::json!({"tag": "x"}))
                .await;
            (answer.status, &[404])
        }
        // A `tools/call` of 100 k nested arrays: it once aborted the process (--max-json-depth).
        2 => {
            let nested = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
            let body = format!(
                r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{{"name":"quick","arguments":{{"v":{nested}}}}}}}"#
            );
            (mcp.client.post("key-alice", None, body).await.status, &[400])
        }
        // A tool that never answers, on a session of her own: cut at the call deadline.
        _ => match mcp.client.open("key-alice").await {
            Ok(session) => {
                let answer = mcp
                    .client
                    .call("key-alice", &session, "hang", serde_json::json!({}))
                    .await;
                let cut = answer.status == 200 && answer.message()["error"]["code"] == -32001;
                (if cut { 200 } else { answer.status + 1000 }, &[200])
            }
            Err(refused) => (refused.status, &[429]),
        },
    }
}

/// One of alice's attacks, chosen by `i`; returns the statuses it may answer.
async fn attack(p: &Proxy, i: u64) -> (u16, &'static [u16]) {
    let cues = [
        probe::SLOW_AGENT,
        probe::TRAP_AGENT,
        probe::LOG_FLOOD_AGENT,
        probe::ACT_FLOOD_AGENT,
        probe::LONG_STRING_AGENT,
        probe::PREDICT_FLOOD_AGENT,
        probe::SNAPSHOT_LOOP_AGENT,
        probe::SNAPSHOT_FLOOD_AGENT,
    ];
    let auth = ("authorization", ALICE);
    let url = format!("{}/v1/chat/completions", p.url);
    let responses = format!("{}/v1/responses", p.url);
    match i % 13 {
        // A cue. It reaches the policy when its agent registers: first, and again each time the
        // new prompts below have pushed it out of alice's agent table.
        0 => {
            let agent = cues[(i / 6) as usize % cues.len()];
            let body = chat("cue", "t", "tiny", false);
            let status = post_json(p, &body, &[auth, ("x-agent-id", agent)]).await.status();
            (status.as_u16(), &[200])
        }
        // A new 64 KB system prompt: a new agent, anchor and prompt shape to remember.
        1 | 2 => {
            let system = format!("{i:08} {}", "policy ".repeat(64 * 1024 / 7));
            let status = post_json(p, &chat(&system, "t", "tiny", false), &[auth]).await.status();
            (status.as_u16(), &[200])
        }
        3 => {
            let name = "n".repeat(4096);
            let status = post_json(p, &chat("s", "t", "tiny", false), &[auth, ("x-agent-id", &name)])
                .await
                .status();
            (status.as_u16(), &[400])
        }
        4 => (post(&url, "{\"messages\": [", &[auth]).await.status().as_u16(), &[400]),
        // The agent APIs: a plain Responses call, then the attacks on them.
        6 => {
            let body = serde_json::json!({"model": "tiny", "input": format!("step {i}")});
            (
                post(&responses, body.to_string(), &[auth]).await.status().as_u16(),
                &[200],
            )
        }
        7 => {
            let body = serde_json::json!({"model": "tiny", "input": "me first", "priority": -100});
            (
                post(&responses, body.to_string(), &[auth]).await.status().as_u16(),
                &[400],
            )
        }
        8 => {
            let body = serde_json::json!({"model": "tiny", "input": "theirs", "previous_response_id": "resp_bobs"});
            (
                post(&responses, body.to_string(), &[auth]).await.status().as_u16(),
                &[404],
            )
        }
        9 => {
            let body = serde_json::json!({"model": "tiny", "max_tokens": "999",
                "messages": [{"role": "user", "content": "hi"}]});
            let messages = format!("{}/v1/messages", p.url);
            (
                post(&messages, body.to_string(), &[auth]).await.status().as_u16(),
                &[400],
            )
        }
        10 => {
            let flood = format!(r#"{{"model":"tiny","input":[{}{{}}]}}"#, "{},".repeat(300_000));
            (post(&responses, flood, &[auth]).await.status().as_u16(), &[413])
        }
        // JSON nested 100 k levels deep: it once aborted the process (--max-json-depth).
        11 => {
            let deep = format!(
                r#"{{"model":"tiny","input":{}1{}}}"#,
                "[".repeat(100_000),
                "]".repeat(100_000)
            );
            (post(&responses, deep, &[auth]).await.status().as_u16(), &[400])
        }
        // A head of 100 KiB of headers: refused at --max-header-bytes (431), or the connection
        // closed while the client still writes (0).
        12 => {
            let pad = "a".repeat(100 << 10);
            let sent = reqwest::Client::new()
                .post(&url)
                .header("x-pad", pad)
                .body("{}")
                .send()
                .await;
            (sent.map_or(0, |r| r.status().as_u16()), &[431, 0])
        }
        _ => {
            let status = post_json(p, &chat("s", "t", "tiny", false), &[("authorization", "Bearer nobody")])
                .await
                .status();
            (status.as_u16(), &[401])
        }
    }
}

/// Alice's slow readers until `until`: a stream of the firehose opened every
/// [`SLOW_READER_EVERY`], answered 200 and stalled for [`SLOW_READER_HOLDS`], so that about
/// [`SLOW_READERS`] are stalled at any time; the number opened.
fn slow_stream_rounds(p: &Arc<Proxy>, until: Instant) -> tokio::task::JoinHandle<u32> {
    let addr = p.url.trim_start_matches("http://").to_string();
    tokio::spawn(async move {
        let mut stalled = std::collections::VecDeque::new();
        let mut opened = 0;
        while Instant::now() < until {
            let reader = SlowReader::open_retrying(&addr, "key-alice", "firehose", 10).await;
            assert_eq!(
                reader.status, 200,
                "a slow reader's stream; refused with:\n{}",
                reader.refusal
            );
            stalled.push_back((Instant::now(), reader));
            opened += 1;
            while stalled.front().is_some_and(|(at, _)| at.elapsed() > SLOW_READER_HOLDS) {
                stalled.pop_front();
            }
            tokio::time::sleep(SLOW_READER_EVERY).await;
        }
        opened
    })
}

/// Alice's bodies that never end, until `until`: one every [`STALLED_BODY_EVERY`], in turn a hint
/// call, a chat and a policy upload, each awaited on a task of its own, which checks it was cut
/// with 408 in time; the number sent and the latest cut after its last byte.
fn stalled_body_rounds(p: &Arc<Proxy>, until: Instant) -> tokio::task::JoinHandle<(u32, Duration)> {
    use stalled_body_support::{Framing, StalledBody};
    let addr = p.url.trim_start_matches("http://").to_string();
    tokio::spawn(async move {
        let mut cuts = tokio::task::JoinSet::new();
        let mut sent = 0u32;
        while Instant::now() < until {
            let alice = [("authorization", ALICE), ("content-type", "application/json")];
            let (what, opened) = match sent % 3 {
                0 => (
                    "hint call",
                    StalledBody::open(&addr, "POST", "/v1/agentrt/hints", &alice, Framing::Chunked, 16_000).await,
                ),
                1 => (
                    "chat",
                    StalledBody::open(
                        &addr,
                        "POST",
                        "/v1/chat/completions",
                        &alice,
                        Framing::Length(1 << 20),
                        (1 << 20) - 1,
                    )
                    .await,
                ),
                _ => {
                    // A tenant of its own each time: one upload at a time per tenant.
                    let operator = [("authorization", "Bearer s3cret")];
                    let path = format!("/admin/tenants/uploader-{}/policy", sent / 3 % 16);
                    (
                        "upload",
                        StalledBody::open(&addr, "PUT", &path, &operator, Framing::Length(8 << 20), 1 << 20).await,
                    )
                }
            };
            let mut body = opened.unwrap();
            cuts.spawn(async move {
                let answer = body.answer(BODY_IDLE + CUT_SLACK).await;
                let (status, after) =
                    answer.unwrap_or_else(|| panic!("a stalled {what} body was held past its deadline"));
                assert_eq!(status, 408, "a stalled {what} body answered {status}");
                after
            });
            sent += 1;
            tokio::time::sleep(STALLED_BODY_EVERY).await;
        }
        let mut latest = Duration::ZERO;
        while let Some(after) = cuts.join_next().await {
            latest = latest.max(after.unwrap());
        }
        (sent, latest)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misbehaving_tenant_for_minutes_moves_neither_the_other_tenant_nor_memory() {
    let secs = std::env::var("AGENTRT_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(120u64);
    let config_dir = tempfile::tempdir().unwrap();
    let config = config_dir.path().join("tenants.toml");
    std::fs::write(&config, tenants_file(256)).unwrap();
    std::thread::sleep(agentrt_serve::tenant::config_file::SETTLE);
    let python = mcp_support::venv_python();
    let mcp_server = match &python {
        Ok(python) => Some(mcp_support::HostileServer::start(python).await),
        Err(reason) => {
            eprintln!("soak: the MCP part is {reason}");
            None
        }
    };
    let mcp_options = mcp_server.as_ref().map(|server| {
        let spec = agentrt_mcp::upstream::UpstreamSpec::parse(&format!("h={}", server.url)).unwrap();
        Box::new(move |_: &agentrt_runtime::PolicyEngine| agentrt_mcp::GatewayOptions {
            servers: vec![spec],
            max_sessions_per_tenant: 16,
            session_idle: Duration::from_secs(3),
            call_timeout: Duration::from_millis(1000),
            ..agentrt_mcp::GatewayOptions::default()
        }) as support::McpOptions
    });
    let p = Arc::new(
        Setup {
            config: Some(config.clone()),
            mcp: mcp_options,
            limits: agentrt_serve::Limits {
                body_timing: agentrt_guards::body_read::BodyTiming {
                    idle: BODY_IDLE,
                    ..Default::default()
                },
                ..Default::default()
            },
            ..Setup::new("cachesage")
        }
        .start()
        .await,
    );
    let mcp = match mcp_server {
        Some(_) => {
            let client = mcp_support::RawMcp::new(&p, "h");
            let bob_session = client.open("key-bob").await.expect("bob opens his MCP session");
            Some(Arc::new(Mcp { client, bob_session }))
        }
        None => None,
    };
    install_policy(&p, "alice", "probe").await;
    let (rss_start, _) = resident();
    let until = Instant::now() + Duration::from_secs(secs);
    let stop = Arc::new(AtomicBool::new(false));
    let attacks = Arc::new(AtomicU64::new(0));

    let attackers: Vec<_> = (0..4u64)
        .map(|a| {
            let (p, attacks, mcp) = (p.clone(), attacks.clone(), mcp.clone());
            tokio::spawn(async move {
                let mut i = a;
                while Instant::now() < until {
                    // Every fifth attack of the first attacker goes through the MCP gateway.
                    let (status, expected) = match &mcp {
                        Some(mcp) if a == 0 && i % 5 == 0 => mcp_attack(mcp, i / 5).await,
                        _ => attack(&p, i).await,
                    };
                    assert!(
                        expected.contains(&status),
                        "attack {i} answered {status}, expected {expected:?}"
                    );
                    attacks.fetch_add(1, Relaxed);
                    i += 4;
                }
            })
        })
        .collect();
    let slow_streams = slow_stream_rounds(&p, until);
    let stalled_bodies = stalled_body_rounds(&p, until);
    let swapper = {
        let (p, stop) = (p.clone(), stop.clone());
        tokio::spawn(async move {
            let mut swaps = 0u32;
            while !stop.load(Relaxed) {
                tokio::time::sleep(Duration::from_secs(10)).await;
                install_policy(&p, "alice", "probe").await;
                swaps += 1;
            }
            swaps
        })
    };
    let reloader = {
        let (p, stop) = (p.clone(), stop.clone());
        tokio::spawn(async move {
            let (mut applied, mut refused) = (0u32, 0u32);
            let mut n = 0u32;
            while !stop.load(Relaxed) {
                tokio::time::sleep(Duration::from_secs(2)).await;
                let expected = match n % 3 {
                    // A valid file, by rename: atomic.
                    0 => {
                        let next = config.with_extension("next");
                        std::fs::write(&next, tenants_file(256 + n as u64)).unwrap();
                        std::fs::rename(&next, &config).unwrap();
                        200
                    }
                    // Written in place: emptied, then malformed. Both refused, nothing changes.
                    1 => {
                        std::fs::write(&config, "").unwrap();
                        400
                    }
                    _ => {
                        std::fs::write(&config, "[tenants.alice]\napi_keys = \"key-alice\"\n").unwrap();
                        400
                    }
                };
                let status = post(
                    &format!("{}/admin/reload", p.url),
                    "",
                    &[("authorization", "Bearer s3cret")],
                )
                .await
                .status()
                .as_u16();
                assert_eq!(status, expected, "reload {n}");
                if status == 200 {
                    applied += 1;
                } else {
                    refused += 1;
                }
                n += 1;
            }
            (applied, refused)
        })
    };
    let sampler = {
        let (p, stop) = (p.clone(), stop.clone());
        tokio::spawn(async move {
            let (mut peak, started) = (0, Instant::now());
            let mut tick = 0u64;
            while !stop.load(Relaxed) {
                // The stub records every body it receives, for other tests' assertions; here
                // that is the test's memory, not the proxy's.
                p.stub.received.lock().unwrap().clear();
                p.stub.tokenize.lock().unwrap().clear();
                let now = resident().0;
                peak = peak.max(now);
                // Progress, and the shape of the memory curve, every 10 s.
                if tick.is_multiple_of(20) {
                    eprintln!("soak {:>4} s: resident {} MB", started.elapsed().as_secs(), now >> 20);
                }
                tick += 1;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            peak
        })
    };

    let mut bob = Vec::new();
    let mut mcp_calls = 0u32;
    let mut i = 0u64;
    while Instant::now() < until {
        let (agent, system) = if i.is_multiple_of(2) {
            ("planner", "You are a planner. Break the task into steps.")
        } else {
            ("coder", "You are a coder. Write the code for one step.")
        };
        let body = chat(system, &format!("task {}", i / 6), "tiny", false);
        let started = Instant::now();
        let response = post_json(
            &p,
            &body,
            &[
                ("authorization", BOB),
                ("x-agent-id", agent),
                ("x-session-id", &format!("s{}", i / 6)),
            ],
        )
        .await;
        bob.push(started.elapsed());
        assert_eq!(response.status(), 200, "bob's request {i}");
        if let Some(mcp) = mcp.as_ref().filter(|_| i % 10 == 9) {
            let answer = mcp
                .client
                .call(
                    "key-bob",
                    &mcp.bob_session,
                    "quick",
                    serde_json::json!({"tag": i.to_string()}),
                )
                .await;
            assert_eq!(
                mcp_support::result_text(&answer.message()),
                serde_json::json!(format!("quick {i}")),
                "bob's MCP call {i}"
            );
            mcp_calls += 1;
        }
        i += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for a in attackers {
        a.await.unwrap();
    }
    let slow_rounds = slow_streams.await.unwrap();
    let (stalled_sent, latest_cut) = stalled_bodies.await.unwrap();
    stop.store(true, Relaxed);
    let swaps = swapper.await.unwrap();
    let (reloads_applied, reloads_refused) = reloader.await.unwrap();
    let rss_peak_sampled = sampler.await.unwrap();
    settle(&p).await;
    let (rss_end, hwm) = resident();

    let (p50, p99, max) = (
        quantile(&mut bob, 0.5),
        quantile(&mut bob, 0.99),
        quantile(&mut bob, 1.0),
    );
    let alice = p.app.tenants().get_or_start("alice").unwrap();
    let m = alice.policy.metrics();
    eprintln!(
        "soak {secs} s: bob {} requests, p50 {p50:?} p99 {p99:?} max {max:?}; alice {} attacks, {swaps} swaps, \
         {} restarts, {} circuit opens, {} events dropped; {reloads_applied} reloads applied, {reloads_refused} \
         refused; {slow_rounds} slow readers (~{SLOW_READERS} stalled at once); {stalled_sent} stalled bodies, each cut \
         with 408, the latest {latest_cut:?} after its last byte; bob's MCP calls {mcp_calls}; RSS start {} MB, end {} MB, \
         peak {} MB (sampled {} MB)",
        bob.len(),
        attacks.load(Relaxed),
        m.restarts(),
        m.circuit_opens(),
        alice.worker.stats().dropped(),
        rss_start >> 20,
        rss_end >> 20,
        hwm >> 20,
        rss_peak_sampled >> 20,
    );
    assert!(p99 < Duration::from_millis(100), "bob's p99 {p99:?}");
    // The tables alice fills are capped (16 MiB of anchors, 16 MiB of shapes by default), her
    // policy's instance at 128 MiB; bodies and results are bounded before they are buffered.
    // Measured: 89 MB after 120 s (from 38 MB), flattening. Unbounded tables once held 985 MB.
    assert!(hwm < 256 << 20, "peak resident memory {} MB", hwm >> 20);
    let bob_tenant = p.app.tenants().get_or_start("bob").unwrap();
    assert_eq!(bob_tenant.policy.metrics().restarts(), 0, "bob's policy never failed");
}

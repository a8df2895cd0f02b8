//! A GAIA-like workload replayed through the gateway: sessions of an agent look topics up
//! (popular topics recur across sessions) against a real MCP server whose answers change over
//! time. Three runs of the same calls: no memo; the tool-memo policy with a TTL shorter than the
//! server's change period; and, as a control for the checker, a TTL far longer than the freshness
//! the run demands. Every answer is checked: the right topic, and read by the server no earlier
//! than the demanded freshness before the call started. Prints the figures docs/mcp.md quotes.

mod support;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;

use agentrt_tests::Rng;

use support::*;

const SERVER_DELAY_MS: u64 = 150;
const CHANGE_EVERY_MS: u64 = 2000;
const FRESHNESS_MS: u64 = 1500;
/// The agent's model call between two tool calls.
const THINK_MS: u64 = 40;
const SESSIONS: usize = 16;
const CALLS_PER_SESSION: usize = 8;
const TOPICS: u64 = 16;
const CONCURRENT_SESSIONS: usize = 4;

/// Each session's topics: a skewed popularity (a few questions many tasks ask), fixed seed.
fn plan() -> Vec<Vec<String>> {
    let mut rng = Rng::new(15);
    (0..SESSIONS)
        .map(|_| {
            (0..CALLS_PER_SESSION)
                .map(|_| {
                    // min of two uniform draws: topic k has probability ∝ (2·(T−k) − 1).
                    let topic = rng.below(TOPICS).min(rng.below(TOPICS));
                    format!("topic-{topic}")
                })
                .collect()
        })
        .collect()
}

fn wall() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

#[derive(Debug, Default)]
struct Figures {
    calls: usize,
    server_calls: u64,
    hits: usize,
    mean_ms: f64,
    p50_ms: f64,
    wrong: usize,
    superseded: usize,
}

async fn replay(server_url: &str, memo: Option<&[(&str, &str)]>) -> Figures {
    let gw = gateway(&[format!("lookup={server_url}")], memo).await;
    let url = format!("{}/mcp/lookup", gw.url);
    let stats_client = client(&url, "key-a", "planner", "stats").await;
    let stats = server_stats(&stats_client).await;
    let (before, epoch) = (stats["lookup"].as_u64().unwrap(), stats["epoch"].as_f64().unwrap());
    let sessions = plan();
    let mut latencies = Vec::new();
    let mut figures = Figures::default();
    for wave in sessions.chunks(CONCURRENT_SESSIONS) {
        let mut tasks = Vec::new();
        for (i, topics) in wave.iter().enumerate() {
            let (url, topics) = (url.clone(), topics.clone());
            tasks.push(tokio::spawn(async move {
                let session = client(&url, "key-a", "planner", &format!("task-{i}-{}", topics[0])).await;
                let mut answers = Vec::new();
                for topic in topics {
                    tokio::time::sleep(Duration::from_millis(THINK_MS)).await;
                    let (start_wall, started) = (wall(), Instant::now());
                    let result = session
                        .peer()
                        .call_tool(call("lookup", json!({ "topic": topic })))
                        .await
                        .unwrap();
                    answers.push((
                        topic,
                        start_wall,
                        started.elapsed(),
                        text(&result),
                        is_memo_hit(&result),
                    ));
                }
                answers
            }));
        }
        for task in tasks {
            for (topic, start_wall, latency, answer, hit) in task.await.unwrap() {
                figures.calls += 1;
                figures.hits += usize::from(hit);
                latencies.push(latency);
                let read_at = answer["read_at"].as_f64().unwrap();
                let fresh_enough = read_at >= start_wall - FRESHNESS_MS as f64 / 1000.0 - 0.001;
                if answer["topic"] != json!(topic) || !fresh_enough {
                    figures.wrong += 1;
                }
                // Informative: the server had moved to a newer version by the time of the call.
                let current = ((start_wall - epoch) * 1000.0 / CHANGE_EVERY_MS as f64) as u64;
                if answer["version"].as_u64().unwrap() < current {
                    figures.superseded += 1;
                }
            }
        }
    }
    figures.server_calls = server_stats(&stats_client).await["lookup"].as_u64().unwrap() - before;
    latencies.sort();
    figures.mean_ms = latencies.iter().map(Duration::as_secs_f64).sum::<f64>() * 1000.0 / latencies.len() as f64;
    figures.p50_ms = latencies[latencies.len() / 2].as_secs_f64() * 1000.0;
    figures
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gaia_like_lookups_through_the_gateway_save_calls_without_a_wrong_answer() {
    let python = python_or_skip!();
    let server = LookupServer::start(&python, SERVER_DELAY_MS, CHANGE_EVERY_MS).await;
    let ttl = FRESHNESS_MS.to_string();
    let baseline = replay(&server.url, None).await;
    let memo = replay(&server.url, Some(&[("ttl-ms", ttl.as_str())])).await;
    let control = replay(&server.url, Some(&[("ttl-ms", "60000")])).await;
    for (name, f) in [
        ("no memo", &baseline),
        ("tool-memo ttl 1.5 s", &memo),
        ("control: ttl 60 s", &control),
    ] {
        eprintln!(
            "workload {name:>22}: {} calls, {} to the server ({} saved), {} hits, mean {:.1} ms, p50 {:.1} ms, \
             {} older than {FRESHNESS_MS} ms or wrong topic, {} superseded within the TTL",
            f.calls,
            f.server_calls,
            f.calls as u64 - f.server_calls,
            f.hits,
            f.mean_ms,
            f.p50_ms,
            f.wrong,
            f.superseded
        );
    }
    assert_eq!(baseline.calls, SESSIONS * CALLS_PER_SESSION);
    assert_eq!((baseline.hits, baseline.server_calls), (0, baseline.calls as u64));
    assert_eq!(memo.wrong, 0, "no answer older than the TTL, none for another topic");
    assert_eq!(
        memo.server_calls + memo.hits as u64,
        memo.calls as u64,
        "every call is a hit or a server call"
    );
    // At least a third of the server calls and of the waiting saved (docs/mcp.md has the figures).
    assert!(
        memo.server_calls * 3 < baseline.server_calls * 2,
        "{memo:?} vs {baseline:?}"
    );
    assert!(memo.mean_ms * 3.0 < baseline.mean_ms * 2.0, "{memo:?} vs {baseline:?}");
    // The checker bites: a TTL the run does not allow shows up as old answers.
    assert!(control.wrong > 0, "{control:?}");
}

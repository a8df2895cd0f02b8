//! What one eviction costs the policy host, against the size of the cache: a full pool of N
//! cached free blocks, a policy component ranking them through the real host, and a stream of
//! evictions (each new block cached and freed, so the pool stays full). Reported per eviction:
//! wall time and items scored, for a window ranking (the replay's default) and a full one.
//!
//! ```sh
//! cargo xtask build-policies
//! cargo run --release -p agentrt-sim --example ranking_cost -- 30000 300000 3000000
//! ```
//! Figures in docs/performance.md ("ranking cost").

use std::time::Instant;

use agentrt_runtime::{ComponentLookup, EmbeddedSet};
use agentrt_sim::block_pool::{BlockPool, PoolObserver};
use agentrt_sim::harness::PolicyHost;
use agentrt_sim::policies::{RankWindow, Rerank, SimPolicy, WasmPolicy};
use agentrt_sim::tokens::mix64;

/// Evictions measured per setting (after one ranking's worth of warm-up).
const EVICTIONS: u64 = 40_960;

/// Fill a pool of `n` blocks with cached free blocks (stamps in allocation order).
fn full_pool(n: usize, obs: &mut dyn PoolObserver) -> BlockPool {
    let mut pool = BlockPool::new(n + 1);
    let ids = pool.allocate(n, obs);
    for (i, &id) in ids.iter().enumerate() {
        pool.cache_block(id, mix64(i as u64 + 1), 0, 0, 1, 1 + (i as u64 % 64), obs);
    }
    pool.free(ids, obs);
    pool
}

/// Evict `count` blocks from `pool` under `policy`; returns (seconds, items scored).
fn evict(pool: &mut BlockPool, policy: &mut WasmPolicy, count: u64, next_hash: &mut u64) -> (f64, u64) {
    let items_before = policy.stats().score_items;
    let t = Instant::now();
    for _ in 0..count {
        let id = pool.allocate(1, policy)[0];
        *next_hash += 1;
        pool.cache_block(id, mix64(*next_hash), 0, 0, 1, 1, policy);
        pool.free([id], policy);
    }
    policy.flush();
    (t.elapsed().as_secs_f64(), policy.stats().score_items - items_before)
}

fn main() -> anyhow::Result<()> {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().map_err(|e| anyhow::anyhow!("{a:?}: {e}")))
        .collect::<anyhow::Result<_>>()?;
    let sizes = if sizes.is_empty() {
        vec![30_000, 300_000, 3_000_000]
    } else {
        sizes
    };
    let host = PolicyHost::new(ComponentLookup::from_environment(EmbeddedSet::NONE))?;
    println!("| blocks | policy | ranking | µs per eviction | items scored per eviction |");
    println!("|---:|---|---|---:|---:|");
    for &n in &sizes {
        for component in ["lru", "cachesage"] {
            for (label, window) in [("window", RankWindow::DEFAULT), ("full", RankWindow::Full)] {
                let mut policy = host
                    .start(component, component, &[], 16, Rerank::EveryMs(100.0))?
                    .with_window(window);
                let mut pool = full_pool(n, &mut policy);
                let mut next = n as u64 + 1;
                // One ranking's worth first, so the measured part is the steady state.
                evict(&mut pool, &mut policy, 4096, &mut next);
                let failed_before = policy.stats().failed_calls;
                let (s, items) = evict(&mut pool, &mut policy, EVICTIONS, &mut next);
                let failed = policy.stats().failed_calls - failed_before;
                let note = if failed > 0 {
                    let how: Vec<String> = policy
                        .stats()
                        .failures
                        .iter()
                        .map(|(what, n)| format!("{what} ×{n}"))
                        .collect();
                    format!(" ({failed} rankings failed: {})", how.join(", "))
                } else {
                    String::new()
                };
                println!(
                    "| {n} | {component} | {label} | {:.3}{note} | {:.1} |",
                    s * 1e6 / EVICTIONS as f64,
                    items as f64 / EVICTIONS as f64
                );
            }
        }
    }
    Ok(())
}

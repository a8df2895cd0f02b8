//! What ranking the host tier costs, against the host pool's size: a full pool of N resident
//! blocks (vLLM's `CPUOffloadingManager`, simulated), and a stream of requests each offering 16
//! new blocks to store, so that every store evicts 16. Reported per store: wall time and items
//! scored, for vLLM's own `lru` (no policy call), the pool ranked by a policy component through
//! the real host (`--host-policy policy`: the evict-first window of LRU's order and the offered
//! blocks' admission, scored as host-tier items), and the two-tier Bélády ranking's window.
//!
//! ```sh
//! cargo xtask build-policies
//! cargo run --release -p agentrt-sim --example host_ranking_cost -- 100000 1000000
//! ```
//! Figures in docs/performance.md ("host-tier ranking cost").

use std::time::Instant;

use agentrt_runtime::{ComponentLookup, EmbeddedSet};
use agentrt_sim::harness::PolicyHost;
use agentrt_sim::offload::host_policy::HostPolicyKind;
use agentrt_sim::offload::host_pool::{HostPool, KeyAt};
use agentrt_sim::offload::ranked::{BlockOwner, HostRanker, NoRanker};
use agentrt_sim::policies::{Rerank, SimPolicy};
use agentrt_sim::tokens::mix64;

/// Blocks a request offers per store (one 256-token step of a prompt, at 16 tokens a block).
const OFFER: usize = 16;
/// Stores measured per setting, after as many unmeasured ones.
const STORES: u64 = 4_096;

/// Request `req`'s offer: `OFFER` fresh keys of agent `1 + req % 8`, session `req / 4`.
fn offer(req: u64) -> Vec<KeyAt> {
    (0..OFFER as u64)
        .map(|i| KeyAt {
            key: mix64(req * OFFER as u64 + i + 1),
            end_token: 16 * (i as u32 + 1),
            owner: BlockOwner {
                agent: 1 + (req % 8) as u32,
                session: 1 + req / 4,
                position: 16 * i as u32,
            },
        })
        .collect()
}

/// Store one request's offer and finish it, as the connector does over a request's life.
fn store(pool: &mut HostPool, req: u64, ranker: &mut dyn HostRanker) {
    let keys = offer(req);
    if let Some(out) = pool.prepare_store(req, &keys, ranker) {
        pool.complete_store(&out.keys_to_store, true);
    }
    pool.on_request_finished(req);
}

fn fill(n: usize, kind: HostPolicyKind) -> HostPool {
    let mut pool = HostPool::new(n, kind, false);
    for req in 0..(n / OFFER) as u64 {
        store(&mut pool, req, &mut NoRanker);
    }
    pool
}

/// Seconds for `STORES` stores past a full pool, and blocks evicted.
fn measure(pool: &mut HostPool, first_req: u64, ranker: &mut dyn HostRanker) -> (f64, u64) {
    for req in first_req..first_req + STORES {
        store(pool, req, ranker);
    }
    let evicted = pool.stats.evicted;
    let t = Instant::now();
    for req in first_req + STORES..first_req + 2 * STORES {
        store(pool, req, ranker);
    }
    (t.elapsed().as_secs_f64(), pool.stats.evicted - evicted)
}

fn main() -> anyhow::Result<()> {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().map_err(|e| anyhow::anyhow!("{a:?}: {e}")))
        .collect::<anyhow::Result<_>>()?;
    let sizes = if sizes.is_empty() {
        vec![100_000, 1_000_000]
    } else {
        sizes
    };
    let host = PolicyHost::new(ComponentLookup::from_environment(EmbeddedSet::NONE))?;
    println!("| host blocks | ranking | µs per store (16 evicted) | items scored per store | failed calls |");
    println!("|---:|---|---:|---:|---:|");
    for &n in &sizes {
        let first = (n / OFFER) as u64;
        let mut pool = fill(n, HostPolicyKind::Lru);
        let (s, evicted) = measure(&mut pool, first, &mut NoRanker);
        println!(
            "| {n} | vLLM lru (no policy) | {:.1} | 0 | 0 |",
            s * 1e6 / STORES as f64
        );
        assert_eq!(evicted, STORES * OFFER as u64, "every store evicts {OFFER}");
        for component in ["lru", "cachesage"] {
            let mut policy = host.start(component, component, &[], 16, Rerank::EveryMs(100.0))?;
            let mut pool = fill(n, HostPolicyKind::Ranked);
            let (items, failed) = (policy.stats().score_items, policy.stats().failed_calls);
            let (s, _) = measure(&mut pool, first, &mut policy);
            let items = policy.stats().score_items - items;
            println!(
                "| {n} | {component} component | {:.1} | {:.0} | {} |",
                s * 1e6 / STORES as f64,
                // Half the items were scored in the unmeasured stores.
                items as f64 / (2 * STORES) as f64,
                policy.stats().failed_calls - failed
            );
        }
    }
    Ok(())
}

//! Round-trip latency of one RANK over the Unix socket, as the plugin sees it: write the frame,
//! wait for the answer. The service runs the `lru` component (`cargo xtask build-policies`).
//!
//! ```text
//! cargo run --release -p agentrt-eviction --example rank_latency [ITEMS] [ROUNDS]
//! ```

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Instant;

use agentrt_eviction::wire::{self, Request, WireItem};
use agentrt_eviction::EvictionService;
use agentrt_runtime::{ComponentLookup, EmbeddedSet, EngineOptions, PolicyEngine, PolicyHandle, SlotConfig};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let items: usize = args.next().map_or(Ok(64), |a| a.parse())?;
    let rounds: usize = args.next().map_or(Ok(5000), |a| a.parse())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let engine = PolicyEngine::new(EngineOptions::default())?;
    let lru = ComponentLookup::from_environment(EmbeddedSet::NONE)
        .find("lru")?
        .load(&engine)?;
    let policy = Arc::new(PolicyHandle::start(&engine, Arc::new(lru), SlotConfig::new("bench"))?);
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("evict.sock");
    let _service = runtime.block_on(async { EvictionService::bind(&path, policy) })?;

    let mut stream = UnixStream::connect(&path)?;
    let batch: Vec<WireItem> = (0..items as u64)
        .map(|i| WireItem {
            block_hash: i * 7919,
            session: 1,
            last_access: (i * 31) % 97,
            wire_agent: (i % 4) as u32,
            tokens: 32,
            position: 0,
            tier: agentrt_runtime::types::Tier::Gpu,
        })
        .collect();
    let mut samples = Vec::with_capacity(rounds);
    let mut frame = Vec::new();
    let mut reply = vec![0u8; 16 + 4 * items];
    for round in 0..rounds + 200 {
        frame.clear();
        wire::encode_request(
            &Request::Rank {
                request_id: round as u32,
                want: items as u32,
                missed: 0,
                items: batch.clone(),
            },
            &mut frame,
        );
        let started = Instant::now();
        stream.write_all(&frame)?;
        let mut len = [0u8; 4];
        stream.read_exact(&mut len)?;
        let len = u32::from_le_bytes(len) as usize;
        stream.read_exact(&mut reply[..len])?;
        if round >= 200 {
            samples.push(started.elapsed().as_secs_f64() * 1e6);
        }
    }
    samples.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let pct = |p: f64| samples[((samples.len() as f64 * p) as usize).min(samples.len() - 1)];
    println!(
        "RANK of {items} items, {rounds} rounds: p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs",
        pct(0.5),
        pct(0.99),
        samples[samples.len() - 1]
    );
    Ok(())
}

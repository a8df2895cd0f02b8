//! Runs one of the policy host's measured phases in a loop and nothing else, so that a profiler
//! sees only that phase (the criterion bench compiles components between its groups, which buries
//! a microsecond-scale phase under the compiler):
//!
//! ```text
//! cargo build --release -p agentrt-tests --example host_phase
//! perf record -g target/release/examples/host_phase load 5
//! ```
//!
//! Phases: `load` (a component from the artifact cache), `start` / `start-pooling` (instantiate +
//! `init` + `info`), `observe-typed` (1,024 request arrivals to LRU), `score-cachesage` (64 items)
//! and `score-cachesage-native` (the same, the policy compiled natively). Prints the mean time per
//! iteration. `AGENTRT_PERF_MAP=1` writes `/tmp/perf-PID.map`, so that perf names the guest's
//! functions (build the component with its names: `CARGO_PROFILE_WASM_STRIP=false`).

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentrt_runtime::types::*;
use agentrt_runtime::{EngineOptions, PolicyEngine, PolicyHandle, PoolingOptions, SandboxLimits, SlotConfig};
use agentrt_tests::component_path;

#[path = "../benches/native/mod.rs"]
mod native;
use native::native_items;

fn main() {
    let mut args = std::env::args().skip(1);
    let phase = args.next().unwrap_or_else(|| usage());
    let seconds: f64 = args
        .next()
        .map(|s| s.parse().unwrap_or_else(|_| usage()))
        .unwrap_or(5.0);
    let cache = tempfile::tempdir().expect("temporary artifact cache");
    let pooling = phase != "start";
    let engine = PolicyEngine::new(EngineOptions {
        pooling: pooling.then(PoolingOptions::default),
        cache_dir: Some(cache.path().to_path_buf()),
        seed: Some(1),
        // `load` measures the artifact cache: nothing kept in memory, every load deserializes.
        keep_compiled_bytes: if phase == "load" {
            0
        } else {
            agentrt_runtime::DEFAULT_KEEP_COMPILED_BYTES
        },
        ..EngineOptions::default()
    })
    .expect("engine");

    let mut step: Box<dyn FnMut()> = match phase.as_str() {
        "load" => {
            let path = component_path("cachesage");
            engine.load_file(&path).expect("load"); // fills the artifact cache
            Box::new(move || {
                black_box(engine.load_file(&path).expect("load"));
            })
        }
        "start" | "start-pooling" => {
            let component = Arc::new(engine.load_file(&component_path("cachesage")).expect("load"));
            Box::new(move || {
                black_box(PolicyHandle::start(&engine, component.clone(), slot_config()).expect("start"));
            })
        }
        "observe-typed" => {
            let policy = start(&engine, "lru");
            let events = arrivals(1024);
            Box::new(move || policy.observe(black_box(&events)).expect("observe"))
        }
        "score-cachesage" => {
            let policy = start(&engine, "cachesage");
            policy.observe(&arrivals(256)).expect("observe");
            let items = items(64);
            Box::new(move || {
                black_box(policy.score(black_box(&items)).expect("score"));
            })
        }
        "score-cachesage-native" => {
            // The same policy, state and items, compiled natively (the SDK's test harness): what
            // the Wasm ÷ native ratio divides by.
            let policy = start(&engine, "cachesage");
            policy.observe(&arrivals(256)).expect("observe");
            let mut native = agentrt_sdk::testing::Harness::<agentrt_policy_cachesage::CacheSage>::new([]).unwrap();
            native.observe(&native_registrations());
            native.restore(&policy.snapshot().expect("snapshot")).expect("restore");
            let items = native_items(&items(64));
            Box::new(move || {
                black_box(native.score(black_box(&items)));
            })
        }
        _ => usage(),
    };

    let started = Instant::now();
    let mut iterations = 0u64;
    while started.elapsed() < Duration::from_secs_f64(seconds) {
        for _ in 0..16 {
            step();
        }
        iterations += 16;
    }
    let per = started.elapsed() / iterations as u32;
    println!("{phase}: {iterations} iterations, {per:?} each");
}

fn usage() -> ! {
    eprintln!(
        "usage: host_phase load|start|start-pooling|observe-typed|score-cachesage|score-cachesage-native [SECONDS]"
    );
    std::process::exit(2)
}

fn slot_config() -> SlotConfig {
    let limits = SandboxLimits {
        call_deadline: Duration::from_secs(1),
        ..SandboxLimits::default()
    };
    SlotConfig {
        checkpoint_every: None,
        ..SlotConfig::new("phase").with_limits(limits)
    }
}

fn start(engine: &PolicyEngine, name: &str) -> PolicyHandle {
    let component = Arc::new(engine.load_file(&component_path(name)).expect("load"));
    PolicyHandle::start(engine, component, slot_config()).expect("start")
}

fn arrivals(n: u64) -> Vec<Event> {
    let mut events: Vec<Event> = (1..=8u32)
        .map(|agent| {
            Event::AgentRegistered(AgentRegistered {
                agent,
                name: format!("agent-{agent}"),
                anchor_hash: 0xa000 + u64::from(agent),
                anchor_tokens: 512,
            })
        })
        .collect();
    events.extend((0..n).map(|i| {
        let agent = 1 + (i % 8) as u32;
        Event::RequestArrival(RequestArrival {
            request_id: i,
            agent,
            session: i % 64,
            anchor_hash: 0xa000 + u64::from(agent),
            prompt_tokens: 900,
            continues: None,
            warmup: false,
            at_us: i,
        })
    }));
    events.truncate(n as usize);
    events
}

/// The agents `arrivals` registers, for the native harness (a snapshot does not carry them).
fn native_registrations() -> Vec<agentrt_sdk::Event> {
    arrivals(8)
        .into_iter()
        .filter_map(|event| match event {
            Event::AgentRegistered(a) => Some(agentrt_sdk::Event::AgentRegistered(agentrt_sdk::AgentRegistered {
                agent: a.agent,
                name: a.name,
                anchor_hash: a.anchor_hash,
                anchor_tokens: a.anchor_tokens,
            })),
            _ => None,
        })
        .collect()
}

fn items(n: u64) -> Vec<Item> {
    (0..n)
        .map(|i| Item {
            kind: ItemKind::KvBlock,
            key: 0x1000 + i,
            agent: 1 + (i % 8) as u32,
            session: i % 64,
            last_access: i,
            tokens: 16,
            position: (i % 64) as u32 * 16,
            tier: Tier::Gpu,
        })
        .collect()
}

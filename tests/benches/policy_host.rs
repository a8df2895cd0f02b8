//! The policy host's costs, through real components: a call's fixed overhead, observe per event
//! (typed and packed), score per item, starting a slot (default vs pooling allocator), loading a
//! compiled artifact, and the same policy logic native vs through Wasm.
//!
//! `cargo xtask bench` (builds the components first). Figures go in docs/performance.md.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use agentrt_runtime::types::*;
use agentrt_runtime::{
    packed, EngineOptions, LoadSource, PolicyEngine, PolicyHandle, PoolingOptions, SandboxLimits, SlotConfig,
    DEFAULT_KEEP_COMPILED_BYTES,
};
use agentrt_tests::{component_path, session_end, Rng};

mod native;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

fn engine_options(pooling: bool, cache: &tempfile::TempDir) -> EngineOptions {
    EngineOptions {
        pooling: pooling.then(PoolingOptions::default),
        cache_dir: Some(cache.path().to_path_buf()),
        seed: Some(1),
        ..EngineOptions::default()
    }
}

fn engine(pooling: bool, cache: &tempfile::TempDir) -> PolicyEngine {
    PolicyEngine::new(engine_options(pooling, cache)).unwrap()
}

fn start(engine: &PolicyEngine, name: &str) -> PolicyHandle {
    let component = Arc::new(engine.load_file(&component_path(name)).unwrap());
    PolicyHandle::start(engine, component, slot_config(&format!("bench/{name}"))).unwrap()
}

/// A slot without checkpoints whose limits measure cost, not limits: a generous CPU bound keeps a
/// descheduled thread on a busy machine from turning into a failed run.
fn slot_config(name: &str) -> SlotConfig {
    let limits = SandboxLimits {
        call_deadline: Duration::from_secs(1),
        call_fuel: u64::MAX / 2,
        ..SandboxLimits::default()
    };
    SlotConfig {
        checkpoint_every: None,
        ..SlotConfig::new(name).with_limits(limits)
    }
}

const AGENTS: u32 = 8;

fn arrivals(n: usize, rng: &mut Rng) -> Vec<Event> {
    (0..n)
        .map(|i| {
            let agent = 1 + (i as u32 % AGENTS);
            Event::RequestArrival(RequestArrival {
                request_id: i as u64,
                agent,
                session: rng.below(64),
                anchor_hash: 0xa000 + u64::from(agent),
                prompt_tokens: 900,
                continues: None,
                warmup: false,
                at_us: i as u64,
            })
        })
        .collect()
}

fn block_words(n: usize, rng: &mut Rng) -> Vec<u64> {
    let mut words = Vec::with_capacity(n * 3);
    for i in 0..n {
        let op = if i % 3 == 0 { BlockOp::Stored } else { BlockOp::Touched };
        let ev = BlockEvent {
            op,
            agent: 1 + (rng.below(u64::from(AGENTS)) as u32),
            block_hash: rng.next_u64(),
            parent_hash: rng.next_u64(),
            position: 16 * (i as u32 % 64),
            tier: Tier::Gpu,
        };
        packed::encode(&ev, &mut words);
    }
    words
}

fn items(n: usize, rng: &mut Rng) -> Vec<Item> {
    (0..n)
        .map(|i| Item {
            kind: ItemKind::KvBlock,
            key: rng.next_u64(),
            agent: 1 + (rng.below(u64::from(AGENTS)) as u32),
            session: rng.below(64),
            last_access: rng.below(100_000),
            tokens: 16,
            position: 16 * (i as u32 % 64),
            tier: Tier::Gpu,
        })
        .collect()
}

/// A realistic learned state for CacheSage: sessions cycling through a chain of agents.
fn teach_chain(policy: &PolicyHandle) {
    let mut events = Vec::new();
    for agent in 1..=AGENTS {
        events.push(Event::AgentRegistered(AgentRegistered {
            agent,
            name: format!("agent-{agent}"),
            anchor_hash: 0xa000 + u64::from(agent),
            anchor_tokens: 512,
        }));
    }
    for session in 0..64u64 {
        for agent in 1..=AGENTS {
            events.push(Event::RequestArrival(RequestArrival {
                request_id: 0,
                agent,
                session,
                anchor_hash: 0xa000 + u64::from(agent),
                prompt_tokens: 900,
                continues: None,
                warmup: false,
                at_us: 0,
            }));
        }
    }
    policy.observe(&events).unwrap();
}

fn primitives(c: &mut Criterion) {
    let cache = tempfile::tempdir().unwrap();
    let engine = engine(true, &cache);
    let mut rng = Rng::new(3);
    // `frequency` is the Python policy (CPython inside the component): the cost of the language.
    for name in ["lru", "cachesage", "frequency"] {
        let policy = start(&engine, name);
        if name == "cachesage" {
            teach_chain(&policy);
        }
        let mut group = c.benchmark_group(name.to_string());
        group.bench_function("act (fixed call overhead)", |b| {
            b.iter(|| black_box(policy.act().unwrap()))
        });
        for n in [1usize, 64, 1024] {
            let events = arrivals(n, &mut rng);
            group.throughput(Throughput::Elements(n as u64));
            group.bench_with_input(BenchmarkId::new("observe typed", n), &events, |b, e| {
                b.iter(|| policy.observe(black_box(e)).unwrap())
            });
        }
        for n in [64usize, 1024] {
            let words = block_words(n, &mut rng);
            group.throughput(Throughput::Elements(n as u64));
            group.bench_with_input(BenchmarkId::new("observe-blocks packed", n), &words, |b, w| {
                b.iter(|| policy.observe_blocks(black_box(w)).unwrap())
            });
        }
        for n in [64usize, 1024] {
            let items = items(n, &mut rng);
            group.throughput(Throughput::Elements(n as u64));
            group.bench_with_input(BenchmarkId::new("score", n), &items, |b, i| {
                b.iter(|| black_box(policy.score(black_box(i)).unwrap()))
            });
        }
        group.finish();
    }
}

fn lifecycle(c: &mut Criterion) {
    let cache = tempfile::tempdir().unwrap();
    let mut group = c.benchmark_group("lifecycle");
    let slots = [
        ("default allocator", false, "cachesage"),
        ("pooling allocator", true, "cachesage"),
        ("python, pooling allocator", true, "frequency"),
    ];
    for (label, pooling, name) in slots {
        let engine = engine(pooling, &cache);
        let component = Arc::new(engine.load_file(&component_path(name)).unwrap());
        group.bench_function(BenchmarkId::new("start slot (instantiate + init + info)", label), |b| {
            b.iter(|| black_box(PolicyHandle::start(&engine, component.clone(), slot_config("bench")).unwrap()))
        });
    }
    // A load from the on-disk artifact cache (what a restarted process pays), with nothing kept
    // in memory, and a load of a component this process holds already (a reload, a swap back, a
    // second tenant on the same policy).
    let path = component_path("cachesage");
    let loads = [
        ("load from artifact cache", 0, LoadSource::ArtifactCache),
        (
            "load again (compiled code kept in memory)",
            DEFAULT_KEEP_COMPILED_BYTES,
            LoadSource::InMemory,
        ),
    ];
    for (label, keep_compiled_bytes, source) in loads {
        let engine = PolicyEngine::new(EngineOptions {
            keep_compiled_bytes,
            ..engine_options(true, &cache)
        })
        .unwrap();
        engine.load_file(&path).unwrap(); // warm the artifact cache
        group.bench_function(label, |b| {
            b.iter(|| {
                let c = engine.load_file(&path).unwrap();
                assert_eq!(c.load_stats().source, source);
                black_box(c)
            })
        });
    }
    group.finish();
}

/// The CPU guard's price on the hot path: epoch deadlines (the default) vs fuel vs no guard.
fn cpu_guards(c: &mut Criterion) {
    use agentrt_runtime::CpuBound;
    let cache = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(5);
    let items = items(64, &mut rng);
    let events = arrivals(1024, &mut rng);
    let mut group = c.benchmark_group("cpu guard (cachesage)");
    for (label, bound) in [("epoch deadline", CpuBound::EpochDeadline), ("fuel", CpuBound::Fuel)] {
        let engine = PolicyEngine::new(EngineOptions {
            cpu_bound: bound,
            cache_dir: Some(cache.path().to_path_buf()),
            ..EngineOptions::default()
        })
        .unwrap();
        let policy = start(&engine, "cachesage");
        teach_chain(&policy);
        group.bench_function(BenchmarkId::new("score 64", label), |b| {
            b.iter(|| black_box(policy.score(black_box(&items)).unwrap()))
        });
        group.bench_function(BenchmarkId::new("observe 1024 typed", label), |b| {
            b.iter(|| policy.observe(black_box(&events)).unwrap())
        });
    }
    group.finish();
}

fn native_vs_wasm(c: &mut Criterion) {
    use agentrt_sdk::testing::Harness;
    let cache = tempfile::tempdir().unwrap();
    let engine = engine(true, &cache);
    let mut rng = Rng::new(9);
    let wasm_items = items(64, &mut rng);
    let native_items = native::native_items(&wasm_items);

    let mut group = c.benchmark_group("native vs wasm: score 64");
    let lru = start(&engine, "lru");
    let mut native_lru = Harness::<agentrt_policy_lru::Lru>::new([]).unwrap();
    group.bench_function("lru wasm", |b| {
        b.iter(|| black_box(lru.score(black_box(&wasm_items)).unwrap()))
    });
    group.bench_function("lru native", |b| {
        b.iter(|| black_box(native_lru.score(black_box(&native_items))))
    });

    let sage = start(&engine, "cachesage");
    teach_chain(&sage);
    let mut native_sage = Harness::<agentrt_policy_cachesage::CacheSage>::new([]).unwrap();
    for agent in 1..=AGENTS {
        native_sage.observe(&[agentrt_sdk::Event::AgentRegistered(agentrt_sdk::AgentRegistered {
            agent,
            name: String::new(),
            anchor_hash: 0xa000 + u64::from(agent),
            anchor_tokens: 512,
        })]);
    }
    native_sage.restore(&sage.snapshot().unwrap()).unwrap();
    group.bench_function("cachesage wasm", |b| {
        b.iter(|| black_box(sage.score(black_box(&wasm_items)).unwrap()))
    });
    group.bench_function("cachesage native", |b| {
        b.iter(|| black_box(native_sage.score(black_box(&native_items))))
    });
    group.finish();
}

/// Agents and live sessions of the fleet-scale benchmark: one engine serving thousands of agents.
const FLEET_AGENTS: u32 = 10_000;
const FLEET_LIVE_SESSIONS: u64 = 2_000;

/// 10,000 agents in 2,500 four-agent pipelines; 20,000 sessions ran, the last 2,000 still live.
fn teach_fleet(policy: &PolicyHandle) -> u64 {
    let mut events: Vec<Event> = (1..=FLEET_AGENTS)
        .map(|agent| {
            Event::AgentRegistered(AgentRegistered {
                agent,
                name: format!("agent-{agent}"),
                anchor_hash: 0xa000 + u64::from(agent),
                anchor_tokens: 2048,
            })
        })
        .collect();
    let mut at_us = 0;
    for session in 0..20_000u64 {
        let app = (session % 2_500) as u32;
        for step in 0..4u32 {
            let agent = 1 + app * 4 + step;
            at_us += 1_000;
            events.push(Event::RequestArrival(RequestArrival {
                request_id: at_us,
                agent,
                session,
                anchor_hash: 0xa000 + u64::from(agent),
                prompt_tokens: 3000,
                continues: None,
                warmup: false,
                at_us,
            }));
            events.push(Event::RequestFinish(RequestFinish {
                request_id: at_us,
                agent,
                session,
                prompt_tokens: 3000,
                cached_tokens: 0,
                output_tokens: 100,
                warmup: false,
                ok: true,
                at_us: at_us + 500,
            }));
        }
        if session < 20_000 - FLEET_LIVE_SESSIONS {
            events.push(session_end(session));
        }
        if events.len() > 4096 {
            policy.observe(&events).unwrap();
            events.clear();
        }
    }
    policy.observe(&events).unwrap();
    at_us
}

/// CacheSage's scaled model (the default) at fleet scale: block events, scoring with and without
/// a refresh of the live sessions' forecasts, and the state size.
fn fleet_scale(c: &mut Criterion) {
    let cache = tempfile::tempdir().unwrap();
    let engine = engine(true, &cache);
    let mut rng = Rng::new(11);
    let policy = start(&engine, "cachesage");
    let mut at_us = teach_fleet(&policy);
    println!(
        "cachesage (scaled) state at {FLEET_AGENTS} agents, {FLEET_LIVE_SESSIONS} live sessions: {} bytes",
        policy.snapshot().unwrap().len()
    );
    let mut group = c.benchmark_group("cachesage at 10,000 agents");
    let mut words = Vec::new();
    for i in 0..1024u32 {
        let ev = BlockEvent {
            op: if i % 3 == 0 { BlockOp::Stored } else { BlockOp::Touched },
            agent: 1 + rng.below(u64::from(FLEET_AGENTS)) as u32,
            block_hash: rng.next_u64(),
            parent_hash: rng.next_u64(),
            position: 16 * (i % 256),
            tier: Tier::Gpu,
        };
        packed::encode(&ev, &mut words);
    }
    group.throughput(Throughput::Elements(1024));
    group.bench_function("observe-blocks packed 1024", |b| {
        b.iter(|| policy.observe_blocks(black_box(&words)).unwrap())
    });
    // Candidates of live sessions' agents: anchors and session content, mixed.
    let live: Vec<Item> = (0..64u64)
        .map(|i| {
            let session = 20_000 - FLEET_LIVE_SESSIONS + rng.below(FLEET_LIVE_SESSIONS);
            let agent = 1 + ((session % 2_500) as u32) * 4 + (i % 4) as u32;
            Item {
                kind: ItemKind::KvBlock,
                key: rng.next_u64(),
                agent,
                session,
                last_access: rng.below(100_000),
                tokens: 16,
                position: 16 * (i as u32 % 256),
                tier: Tier::Gpu,
            }
        })
        .collect();
    group.throughput(Throughput::Elements(64));
    group.bench_function("score 64", |b| {
        b.iter(|| black_box(policy.score(black_box(&live)).unwrap()))
    });
    // A request arrived since the last ranking: the forecasts of all live sessions are redone.
    group.bench_function("score 64 after an arrival (refresh of 2,000 sessions)", |b| {
        b.iter(|| {
            at_us += 1_000;
            let arrival = Event::RequestArrival(RequestArrival {
                request_id: at_us,
                agent: 1,
                session: 19_999,
                anchor_hash: 0xa001,
                prompt_tokens: 3000,
                continues: None,
                warmup: false,
                at_us,
            });
            policy.observe(std::slice::from_ref(&arrival)).unwrap();
            black_box(policy.score(black_box(&live)).unwrap())
        })
    });
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
}

criterion_group! { name = benches; config = config(); targets = primitives, lifecycle, cpu_guards, native_vs_wasm, fleet_scale }
criterion_main!(benches);

//! A policy written in Python (`policies/frequency/app.py`, built by componentize-py with the
//! Python SDK in `sdk/python/`) through the same host, sandbox and contract as the Rust ones.
//!
//! The component carries CPython (~18 MB): compiling it takes seconds, so every test here shares
//! one engine and one loaded component.

use std::sync::{Arc, OnceLock};

use agentrt_runtime::types::{Event, ForecastKind, Item, RequestArrival};
use agentrt_runtime::{PolicyComponent, PolicyEngine, PolicyHandle, SandboxLimits, SlotConfig};
use agentrt_tests::{block_item, engine, load, register};

struct Loaded {
    engine: PolicyEngine,
    frequency: Arc<PolicyComponent>,
    _cache: tempfile::TempDir,
}

fn loaded() -> &'static Loaded {
    static LOADED: OnceLock<Loaded> = OnceLock::new();
    LOADED.get_or_init(|| {
        let (engine, cache) = engine();
        let frequency = load(&engine, "frequency");
        Loaded {
            engine,
            frequency,
            _cache: cache,
        }
    })
}

fn config(label: &str, init: &[(&str, &str)]) -> SlotConfig {
    // Behaviour, not limits, is under test: a generous deadline for a loaded 2-core machine.
    let limits = SandboxLimits {
        call_deadline: std::time::Duration::from_secs(2),
        ..SandboxLimits::default()
    };
    SlotConfig::new(label)
        .with_init(init.iter().copied())
        .with_limits(limits)
}

fn start(init: &[(&str, &str)]) -> PolicyHandle {
    let l = loaded();
    PolicyHandle::start(&l.engine, l.frequency.clone(), config("test/frequency", init)).expect("starting frequency")
}

fn arrival(request_id: u64, agent: u32) -> Event {
    Event::RequestArrival(RequestArrival {
        request_id,
        agent,
        session: 1,
        anchor_hash: u64::from(agent),
        prompt_tokens: 100,
        continues: None,
        warmup: false,
        at_us: request_id * 1000,
    })
}

/// Agent 1 (the orchestrator) is called 10 times, agent 2 (a helper) once, last.
fn busy_and_rare() -> Vec<Event> {
    let mut events = vec![register(1, "orchestrator", 11), register(2, "helper", 22)];
    events.extend((0..10).map(|i| arrival(i, 1)));
    events.push(arrival(10, 2));
    events
}

/// An older block of the busy agent and a newer one of the rare agent.
fn items() -> Vec<Item> {
    vec![block_item(100, 1, 10), block_item(200, 2, 20)]
}

#[test]
fn a_python_component_imports_nothing_but_the_host() {
    let l = loaded();
    let world = l.frequency.world(l.engine.wasmtime());
    let imports: Vec<&str> = world.imports.iter().map(|(name, _)| name.as_str()).collect();
    assert!(
        imports.iter().all(|i| i.starts_with("agentrt:policy/")),
        "componentize-py --stub-wasi leaves no WASI import: {imports:?}"
    );
    let handle = start(&[]);
    let info = handle.info();
    assert_eq!(info.name, "frequency");
    assert!(info.description.contains("Python"));
}

#[test]
fn init_refuses_unknown_keys_and_bad_values_by_name() {
    let l = loaded();
    let start = |init: &[(&str, &str)]| {
        PolicyHandle::start(&l.engine, l.frequency.clone(), config("test/frequency-bad", init))
            .err()
            .map(|e| e.to_string())
    };
    let unknown = start(&[("wieght", "2")]).expect("an unknown key is refused");
    assert!(unknown.contains("wieght") && unknown.contains("weight"), "{unknown}");
    let not_a_number = start(&[("weight", "heavy")]).expect("a bad value is refused");
    assert!(
        not_a_number.contains("weight") && not_a_number.contains("heavy"),
        "{not_a_number}"
    );
    assert!(start(&[("half-life", "0")])
        .expect("out of range")
        .contains("half-life"));
    assert!(start(&[("weight", "2"), ("half-life", "8")]).is_none());
}

#[test]
fn blocks_of_a_frequently_called_agent_outlive_newer_blocks_of_a_rare_one() {
    let frequency = start(&[]);
    frequency.observe(&busy_and_rare()).unwrap();
    let ranking = frequency.rank(&items());
    assert!(ranking.fallback.is_none(), "{:?}", ranking.fallback);
    assert_eq!(ranking.order, [0, 1], "the orchestrator's older block is kept first");

    // weight = 0 is recency alone: LRU's order.
    let recency = start(&[("weight", "0")]);
    recency.observe(&busy_and_rare()).unwrap();
    assert_eq!(recency.rank(&items()).order, [1, 0]);
}

#[test]
fn the_packed_and_typed_paths_agree_and_predict_names_the_busy_agent() {
    let frequency = start(&[]);
    frequency.observe(&busy_and_rare()).unwrap();
    let many: Vec<Item> = (0..64)
        .map(|i| block_item(i, 1 + (i % 3) as u32, 1000 + i * 7))
        .collect();
    assert_eq!(frequency.score(&many).unwrap(), frequency.score_typed(&many).unwrap());

    let forecasts = frequency.predict(4).unwrap();
    assert_eq!(forecasts[0].kind, ForecastKind::NextAgent);
    assert_eq!(forecasts[0].agent, 1);
    assert!(forecasts[0].probability > forecasts[1].probability);
    let total: f32 = forecasts.iter().map(|f| f.probability).sum();
    assert!(
        (total - 1.0).abs() < 1e-4,
        "two agents: the shares sum to 1, got {total}"
    );
}

#[test]
fn state_survives_a_restore_and_a_hot_swap_from_a_rust_policy() {
    let learned = start(&[]);
    learned.observe(&busy_and_rare()).unwrap();
    let state = learned.snapshot().unwrap();
    assert!(!state.is_empty());

    let fresh = start(&[]);
    assert_eq!(
        fresh.rank(&items()).order,
        [1, 0],
        "nothing learned yet: recency decides"
    );
    fresh.restore(&state).unwrap();
    assert_eq!(fresh.rank(&items()).order, [0, 1]);
    let refused = fresh.restore(b"{\"format\": 99}").unwrap_err().to_string();
    assert!(refused.contains("format"), "{refused}");
    assert_eq!(fresh.rank(&items()).order, [0, 1], "a refused snapshot changes nothing");

    // A slot running the Rust LRU takes the Python policy without a restart.
    let l = loaded();
    let slot = PolicyHandle::start(&l.engine, load(&l.engine, "lru"), config("test/swap", &[])).unwrap();
    slot.swap(l.frequency.clone()).expect("LRU's (empty) state is accepted");
    assert_eq!(slot.info().name, "frequency");
    slot.observe(&busy_and_rare()).unwrap();
    assert_eq!(slot.rank(&items()).order, [0, 1]);
}

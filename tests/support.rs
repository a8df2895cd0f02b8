//! Shared set-up for the cross-crate tests: real components from the build's components folder
//! (`<target>/components/`, built by `cargo xtask build-policies`, which `cargo xtask test` runs
//! first; `AGENTRT_COMPONENTS_DIR` overrides) and an engine per test.
//!
//! ## Modules in detail
//!
//! Cross-crate tests and benchmarks against real components (`layers.rs`: no circle of modules in
//! any crate, no upward use between host/serve's layers) (`examples/host_phase`: one measured phase
//! of the host alone, for a profiler); `tests/guests/*` are test-fixture components (`probe`:
//! misbehaves on cue, or from `init` with `fault=…`; `other-world`).

use std::path::PathBuf;
use std::sync::Arc;

use agentrt_runtime::types::{AgentRegistered, Event, Item, ItemKind};
use agentrt_runtime::{
    ComponentLookup, ComponentSource, EmbeddedSet, EngineOptions, PolicyComponent, PolicyEngine, PolicyHandle,
    PoolingOptions, SlotConfig,
};

/// The probe fixture's cues (see tests/guests/probe).
pub const PROBE_LOOP_KEY: u64 = 0xdead_1007;
pub const PROBE_GROW_TOOL: u64 = 0x6120_3000;
pub const PROBE_PANIC_HORIZON: u32 = 666;
pub const PROBE_TRAP_AGENT: &str = "probe-trap";
pub const PROBE_LOG_FLOOD_AGENT: &str = "probe-log-flood";
pub const PROBE_LOG_FLOOD_LINES: u64 = 1000;
pub const PROBE_SICK_AGENT: &str = "probe-sick";
pub const PROBE_SNAPSHOT_LOOP_AGENT: &str = "probe-snapshot-loop";
pub const PROBE_ACT_FLOOD_AGENT: &str = "probe-act-flood";
pub const PROBE_LONG_STRING_AGENT: &str = "probe-long-string";
pub const PROBE_PREDICT_FLOOD_AGENT: &str = "probe-predict-flood";
pub const PROBE_SNAPSHOT_FLOOD_AGENT: &str = "probe-snapshot-flood";
pub const PROBE_FLOOD_LEN: usize = 100_000;
pub const PROBE_LONG_STRING_BYTES: usize = 1 << 20;
pub const PROBE_SNAPSHOT_FLOOD_BYTES: usize = 20 << 20;

/// Path of a built component; fails with the places searched and the command to run when it is
/// missing.
pub fn component_path(name: &str) -> PathBuf {
    match ComponentLookup::from_environment(EmbeddedSet::NONE).find(name) {
        Ok(ComponentSource::File(path)) => path,
        Ok(other) => panic!("{name}: expected a file, found {other}"),
        Err(missing) => panic!("{missing}"),
    }
}

pub fn component_bytes(name: &str) -> Vec<u8> {
    std::fs::read(component_path(name)).expect("reading component")
}

/// An engine with a small pool and its own artifact cache in a temporary directory.
pub fn engine() -> (PolicyEngine, tempfile::TempDir) {
    let cache = tempfile::tempdir().expect("temp dir");
    let engine = PolicyEngine::new(EngineOptions {
        pooling: Some(PoolingOptions {
            max_instances: 16,
            ..PoolingOptions::default()
        }),
        cache_dir: Some(cache.path().to_path_buf()),
        seed: Some(7),
        ..EngineOptions::default()
    })
    .expect("engine");
    (engine, cache)
}

pub fn load(engine: &PolicyEngine, name: &str) -> Arc<PolicyComponent> {
    Arc::new(
        engine
            .load_file(&component_path(name))
            .unwrap_or_else(|e| panic!("loading {name}: {e}")),
    )
}

/// Start `name` in a slot with `init` config.
pub fn start(engine: &PolicyEngine, name: &str, init: &[(&str, &str)]) -> PolicyHandle {
    // A generous deadline: these tests check behaviour, not limits, and a loaded 2-core machine
    // can deschedule a thread for longer than the 20 ms default (limits have their own tests).
    let limits = agentrt_runtime::SandboxLimits {
        call_deadline: std::time::Duration::from_secs(2),
        ..agentrt_runtime::SandboxLimits::default()
    };
    let config = SlotConfig::new(format!("test/{name}"))
        .with_init(init.iter().copied())
        .with_limits(limits);
    PolicyHandle::start(engine, load(engine, name), config).unwrap_or_else(|e| panic!("starting {name}: {e}"))
}

pub fn register(agent: u32, name: &str, anchor_hash: u64) -> Event {
    Event::AgentRegistered(AgentRegistered {
        agent,
        name: name.to_string(),
        anchor_hash,
        anchor_tokens: 100,
    })
}

/// A 16-token KV block of `agent`'s request in `session`, at token `position` of its prompt (keyed
/// by agent and position).
pub fn session_block(agent: u32, session: u64, position: u32, last_access: u64) -> Item {
    Item {
        kind: ItemKind::KvBlock,
        key: u64::from(agent) << 32 | u64::from(position),
        agent,
        session,
        last_access,
        tokens: 16,
        position,
        tier: agentrt_runtime::types::Tier::Gpu,
    }
}

pub fn block_item(key: u64, agent: u32, last_access: u64) -> Item {
    Item {
        kind: ItemKind::KvBlock,
        key,
        agent,
        session: 0,
        last_access,
        tokens: 16,
        position: 0,
        tier: agentrt_runtime::types::Tier::Gpu,
    }
}

/// A small deterministic PRNG (xorshift64*), so tests need no extra crate and never flake.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// Where a test's log output goes (a `tracing` writer), to read back what was written.
#[derive(Clone, Default)]
pub struct CapturedLog(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl CapturedLog {
    pub fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

impl std::io::Write for CapturedLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `session-end` of `session` as the proxy infers most ends: idle for its window.
pub fn session_end(session: u64) -> Event {
    Event::SessionEnd(agentrt_runtime::types::SessionEnd {
        session,
        reason: agentrt_runtime::types::EndReason::Idle,
        at_us: 0,
    })
}

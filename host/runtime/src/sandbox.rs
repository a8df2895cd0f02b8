//! The sandbox around one policy instance: its limits, and the only capabilities it gets.
//!
//! A policy imports `agentrt:policy/host` and nothing else — there is no WASI in the linker, so a
//! component that asks for a filesystem, sockets, environment or a wall clock fails to load.
//! Within a call, memory is capped by [`GuestLimiter`] and CPU by the engine's epoch deadline.

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::ResourceLimiter;

use crate::bindings::agentrt::policy::{host, types};
use crate::policy_log::PolicyLog;

/// Per-instance limits, set per tenant.
#[derive(Debug, Clone)]
pub struct SandboxLimits {
    /// Largest linear memory an instance may grow to.
    pub memory_bytes: usize,
    /// Longest a single call may run before it is interrupted (with `CpuBound::EpochDeadline`).
    pub call_deadline: Duration,
    /// Fuel a single call may burn (with `CpuBound::Fuel`; ≈ Wasm instructions).
    pub call_fuel: u64,
    /// Sustained `host.log` lines per second the slot may write; more are dropped and counted
    /// (see [`crate::policy_log`]).
    pub log_lines_per_second: u32,
    /// Lines the slot may write at once before the rate applies.
    pub log_burst: u32,
}

impl Default for SandboxLimits {
    fn default() -> Self {
        Self {
            // CacheSage needs well under 1 MiB; 64 MiB leaves room for policies in Python or JS.
            memory_bytes: 64 << 20,
            // Generous next to a score call's microseconds, small next to a scheduler step.
            call_deadline: Duration::from_millis(20),
            // ~10–20 ms of guest code on this machine's cores.
            call_fuel: 50_000_000,
            // A policy logs when something is wrong; a line per call is a bug, not a diagnosis.
            log_lines_per_second: 20,
            log_burst: 100,
        }
    }
}

/// Enforces [`SandboxLimits::memory_bytes`] and remembers that it did, so the host can report an
/// out-of-memory distinctly from other traps.
pub struct GuestLimiter {
    memory_cap: usize,
    pub(crate) hit_memory_cap: bool,
    /// Current size of the instance's largest memory, for metrics.
    pub(crate) memory_in_use: usize,
}

impl ResourceLimiter for GuestLimiter {
    fn memory_growing(&mut self, _current: usize, desired: usize, _max: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.memory_cap {
            self.hit_memory_cap = true;
            // An error (rather than `Ok(false)`) traps at once: a Rust guest would otherwise
            // abort inside its allocator with a less useful message.
            return Err(wasmtime::Error::msg(format!(
                "memory cap of {} bytes reached (asked for {desired})",
                self.memory_cap
            )));
        }
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _max: Option<usize>) -> wasmtime::Result<bool> {
        // Tables hold function references; a policy has no reason for more than a few thousand.
        Ok(desired <= 100_000)
    }

    fn instances(&self) -> usize {
        // A Rust component has a handful of core instances; leave room for other toolchains.
        64
    }
    fn tables(&self) -> usize {
        64
    }
    fn memories(&self) -> usize {
        16
    }
}

/// The store's data: what the host imports need, and the limiter.
pub struct GuestState {
    pub(crate) limiter: GuestLimiter,
    /// The slot's log: tags, escapes, truncates and rate-limits the policy's lines.
    log: Arc<PolicyLog>,
    seed: u64,
    clock_origin: Instant,
}

impl GuestState {
    pub(crate) fn new(limits: &SandboxLimits, log: Arc<PolicyLog>, seed: u64, clock_origin: Instant) -> Self {
        Self {
            limiter: GuestLimiter {
                memory_cap: limits.memory_bytes,
                hit_memory_cap: false,
                memory_in_use: 0,
            },
            log,
            seed,
            clock_origin,
        }
    }
}

impl types::Host for GuestState {}

impl host::Host for GuestState {
    fn now_us(&mut self) -> u64 {
        self.clock_origin.elapsed().as_micros() as u64
    }

    fn log(&mut self, level: types::LogLevel, message: String) {
        self.log.write(level, &message);
    }

    fn random_seed(&mut self) -> u64 {
        self.seed
    }
}

//! The sandbox around one policy instance: its limits, and the only capabilities it gets.
//!
//! A policy imports `agentrt:policy/host` and nothing else — there is no WASI in the linker, so a
//! component that asks for a filesystem, sockets, environment or a wall clock fails to load.
//! Within a call, memory is capped by [`GuestLimiter`] and CPU by the engine's epoch deadline,
//! judged by the call's own CPU time ([`crate::call_clock`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::ResourceLimiter;

use crate::bindings::agentrt::policy::{host, types};
use crate::call_clock::{CallClock, CallKind};
use crate::policy_log::PolicyLog;

/// The default cap on an instance's memories and tables together: 128 MiB.
pub const DEFAULT_MEMORY_BYTES: usize = 128 << 20;

/// Per-instance limits, set per tenant.
#[derive(Debug, Clone)]
pub struct SandboxLimits {
    /// Most bytes an instance's linear memories and tables may hold, all of them together.
    pub memory_bytes: usize,
    /// Most CPU time a single call may use before it is interrupted (with
    /// `CpuBound::EpochDeadline`; time the thread waits for a core is not charged).
    pub call_deadline: Duration,
    /// Fuel a single call may burn (with `CpuBound::Fuel`; ≈ Wasm instructions).
    pub call_fuel: u64,
    /// Sustained `host.log` lines per second the slot may write; more are dropped and counted
    /// (see [`crate::policy_log`]).
    pub log_lines_per_second: u32,
    /// Lines the slot may write at once before the rate applies.
    pub log_burst: u32,
}

impl SandboxLimits {
    /// The default limits with the memory cap and call deadline of the `--policy-memory-mib` and
    /// `--policy-deadline-ms` flags (every command that runs policies has them); the error names
    /// the flag that is out of range.
    pub fn from_flags(memory_mib: u64, deadline_ms: u64) -> Result<Self, String> {
        if memory_mib == 0 {
            return Err("--policy-memory-mib must be at least 1".into());
        }
        if deadline_ms == 0 {
            return Err("--policy-deadline-ms must be at least 1".into());
        }
        let memory_bytes = usize::try_from(memory_mib)
            .ok()
            .and_then(|mib| mib.checked_mul(1 << 20))
            .ok_or("--policy-memory-mib is too large")?;
        Ok(Self {
            memory_bytes,
            call_deadline: Duration::from_millis(deadline_ms),
            ..Self::default()
        })
    }
}

impl Default for SandboxLimits {
    fn default() -> Self {
        Self {
            // CacheSage needs well under 1 MiB; a JavaScript policy (StarlingMonkey) settles near
            // 65 MiB. 128 MiB fits every supported language with room, and sits under the
            // instance pool's 256 MiB per memory.
            memory_bytes: DEFAULT_MEMORY_BYTES,
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

/// Enforces [`SandboxLimits::memory_bytes`] on the *sum* of an instance's memories and tables,
/// and remembers that it did, so the host can report an out-of-memory distinctly from other traps.
///
/// A component holds several core modules, each possibly with its own memory and tables
/// (componentize-py's CPython, its libraries, adapters). A cap per memory would let a component
/// with 16 memories hold 16 caps' worth (measured: 436 MB under a 64 MiB cap), so every growth —
/// the initial allocation of each memory and table included, which wasmtime reports as a growth
/// from 0 — is counted against one budget for the whole Store.
pub struct GuestLimiter {
    memory_cap: usize,
    pub(crate) hit_memory_cap: bool,
    /// Bytes of all memories plus [`TABLE_ELEMENT_BYTES`] per table element, now.
    pub(crate) memory_in_use: usize,
}

/// What one table element is counted as: a function reference is a pointer on the host, and the
/// pooling allocator reserves about this much per element.
pub const TABLE_ELEMENT_BYTES: usize = 8;

impl GuestLimiter {
    pub(crate) fn new(memory_cap: usize) -> Self {
        Self {
            memory_cap,
            hit_memory_cap: false,
            memory_in_use: 0,
        }
    }

    /// Grow the Store's total by `added` bytes, or refuse (and remember) if that passes the cap.
    fn grow(&mut self, added: usize, what: &str) -> wasmtime::Result<bool> {
        let total = self.memory_in_use.saturating_add(added);
        if total > self.memory_cap {
            self.hit_memory_cap = true;
            // An error (rather than `Ok(false)`) traps at once: a Rust guest would otherwise
            // abort inside its allocator with a less useful message.
            return Err(wasmtime::Error::msg(format!(
                "memory cap of {} bytes reached: {what} would bring the instance's memories and tables to {total}",
                self.memory_cap
            )));
        }
        self.memory_in_use = total;
        Ok(true)
    }
}

impl ResourceLimiter for GuestLimiter {
    fn memory_growing(&mut self, current: usize, desired: usize, _max: Option<usize>) -> wasmtime::Result<bool> {
        self.grow(desired.saturating_sub(current), "a memory growing")
    }

    fn memory_grow_failed(&mut self, _error: wasmtime::Error) -> wasmtime::Result<()> {
        // The growth we counted did not happen; the next growth re-counts from `current`, so a
        // slight over-count is all this costs. Nothing to undo precisely without the amount.
        Ok(())
    }

    fn table_growing(&mut self, current: usize, desired: usize, _max: Option<usize>) -> wasmtime::Result<bool> {
        // Tables hold function references; a policy has no reason for more than a few thousand.
        if desired > 100_000 {
            return Ok(false);
        }
        self.grow(
            desired.saturating_sub(current).saturating_mul(TABLE_ELEMENT_BYTES),
            "a table growing",
        )
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
    /// The running call's clock, which the epoch deadline consults (see [`crate::call_clock`]).
    pub(crate) call_clock: CallClock,
}

impl GuestState {
    pub(crate) fn new(limits: &SandboxLimits, log: Arc<PolicyLog>, seed: u64, clock_origin: Instant) -> Self {
        Self {
            limiter: GuestLimiter::new(limits.memory_bytes),
            log,
            seed,
            clock_origin,
            call_clock: CallClock::start(limits.call_deadline, CallKind::StartUp),
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

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    #[test]
    fn the_cap_holds_for_the_sum_of_several_memories() {
        let mut limiter = GuestLimiter::new(64 * MIB);
        // Four core modules, each instantiating its own memory of 10 MiB (growth from 0).
        for _ in 0..4 {
            assert!(limiter.memory_growing(0, 10 * MIB, None).unwrap());
        }
        assert_eq!(limiter.memory_in_use, 40 * MIB);
        // One of them grows to 30 MiB: 60 MiB in all, still under.
        assert!(limiter.memory_growing(10 * MIB, 30 * MIB, None).unwrap());
        assert_eq!(limiter.memory_in_use, 60 * MIB);
        // A fifth memory of 10 MiB would be within a per-memory cap, not within the instance's.
        let err = limiter.memory_growing(0, 10 * MIB, None).unwrap_err();
        assert!(err.to_string().contains("memory cap"), "{err}");
        assert!(limiter.hit_memory_cap);
        assert_eq!(limiter.memory_in_use, 60 * MIB, "a refused growth is not counted");
    }

    /// A core module with `count` memories of `pages` 64 KiB pages each (multi-memory), written
    /// out in the binary format (the workspace has no WAT parser).
    fn module_with_memories(count: u8, pages: u16) -> Vec<u8> {
        let mut leb = Vec::new();
        let mut v = pages;
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                leb.push(byte);
                break;
            }
            leb.push(byte | 0x80);
        }
        let mut section = vec![count];
        for _ in 0..count {
            section.push(0x00); // limits: min only
            section.extend_from_slice(&leb);
        }
        let mut module = b"\0asm\x01\0\0\0".to_vec();
        module.push(5); // memory section
        module.push(section.len() as u8);
        module.extend_from_slice(&section);
        module
    }

    /// Through wasmtime itself: every memory's initial allocation is counted against one budget.
    #[test]
    fn an_instance_with_several_memories_is_capped_on_their_sum() {
        let engine = wasmtime::Engine::default();
        let instantiate = |memories: u8| {
            let module = wasmtime::Module::new(&engine, module_with_memories(memories, 480)).unwrap(); // 30 MiB each
            let mut store = wasmtime::Store::new(&engine, GuestLimiter::new(64 * MIB));
            store.limiter(|l| l);
            let result = wasmtime::Instance::new(&mut store, &module, &[]).map(|_| ());
            (result, store.data().memory_in_use, store.data().hit_memory_cap)
        };
        let (ok, in_use, hit) = instantiate(2);
        ok.unwrap();
        assert_eq!((in_use, hit), (60 * MIB, false));
        // Three memories of 30 MiB: each is under a 64 MiB cap, together they are not.
        let (err, _, hit) = instantiate(3);
        let err = err.unwrap_err();
        assert!(hit && format!("{err:#}").contains("memory cap"), "{err:#}");
    }

    #[test]
    fn tables_count_against_the_same_budget() {
        let mut limiter = GuestLimiter::new(MIB);
        assert!(limiter.memory_growing(0, MIB - 800, None).unwrap());
        assert!(limiter.table_growing(0, 100, None).unwrap());
        assert_eq!(limiter.memory_in_use, MIB);
        assert!(limiter.table_growing(100, 101, None).is_err());
        assert!(!limiter.table_growing(0, 100_001, None).unwrap());
    }
}

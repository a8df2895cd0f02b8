//! The wasmtime engine every policy runs on: configuration, the linker with the host's imports, the
//! epoch ticker that enforces call deadlines ([`crate::epoch_ticker`]: it ticks only while a call
//! is in flight), and the compiled-artifact cache.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::component::{HasSelf, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::artifact_cache::ArtifactCache;
use crate::bindings::Policy;
use crate::component::{CodeSources, PolicyComponent};
use crate::component_file::{read_component_file, DEFAULT_MAX_COMPONENT_BYTES};
use crate::epoch_ticker::EpochTicker;
use crate::error::LoadError;
use crate::file_digest::{DigestMemo, FileStamp, Remembered};
use crate::loaded_components::LoadedComponents;
use crate::sandbox::GuestState;

/// How the engine is set up. The defaults suit a serving host.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Pre-allocate instance slots (pooling allocator): instantiation drops from ~18 µs to ~6–12 µs.
    /// `None` uses on-demand allocation.
    pub pooling: Option<PoolingOptions>,
    /// Where compiled artifacts are kept; `None` disables the cache.
    pub cache_dir: Option<PathBuf>,
    /// Granularity of call deadlines. Deadlines are enforced by epoch interruption: a thread bumps
    /// the engine's epoch every tick while a policy call is in flight (it sleeps otherwise), and
    /// generated code checks it at loop headers and calls.
    pub epoch_tick: Duration,
    /// How a call's CPU is bounded: a CPU-time deadline (epochs, the default) or an instruction
    /// budget (fuel). See docs/policy-host.md for the measurements behind the default.
    pub cpu_bound: CpuBound,
    /// Seed for `random-seed`: fixed for reproducible runs, `None` to draw one per engine.
    pub seed: Option<u64>,
    /// Largest component accepted, from a file or as bytes
    /// ([`crate::component_file::DEFAULT_MAX_COMPONENT_BYTES`] by default).
    pub max_component_bytes: u64,
    /// Told when a compile (an artifact-cache miss) runs long; `None` by default: a library
    /// prints nothing, the `agentrt` command says what it is waiting for.
    pub slow_compile: Option<SlowCompileNotice>,
    /// Compiled code kept in memory by digest after its last slot stops, so that loading the same
    /// component again (a reload, a swap back, another tenant) is a lookup instead of a ~0.7 ms
    /// deserialize; least recently used first out; 0 keeps none. 64 MiB by default: dozens of
    /// Rust policies, a few Python or JavaScript ones.
    pub keep_compiled_bytes: usize,
    /// Write `/tmp/perf-PID.map` as components are compiled or loaded, so that `perf report`
    /// names the guest's functions (by name where the component kept its name section) instead
    /// of showing bare addresses. For profiling a policy; by default on when `$AGENTRT_PERF_MAP`
    /// is set (to anything but `0`), like the cache folder's `$AGENTRT_CACHE_DIR`.
    pub perf_map: bool,
}

/// What to do when compiling a component takes longer than [`Self::after`]: a cold artifact cache
/// costs seconds for a Python component and most of a minute for a JavaScript one, with nothing
/// else to show for it.
#[derive(Clone)]
pub struct SlowCompileNotice {
    /// How long a compile runs before [`Self::notify`] is called.
    pub after: Duration,
    /// Called once, from another thread, with the component's name and size in bytes, while the
    /// compile still runs.
    pub notify: Arc<CompileNotify>,
}

/// What [`SlowCompileNotice::notify`] is: the component's name and its size in bytes.
pub type CompileNotify = dyn Fn(&str, usize) + Send + Sync;

impl SlowCompileNotice {
    /// One line on stderr after a second: `compiling NAME (SIZE; first use, cached afterwards)…`.
    pub fn stderr() -> Self {
        Self {
            after: Duration::from_secs(1),
            notify: Arc::new(|name, bytes| {
                eprintln!(
                    "compiling {name} ({:.1} MB; first use, cached afterwards)…",
                    bytes as f64 / 1e6
                )
            }),
        }
    }

    /// Watch a compile that starts now; the notice fires unless the guard is dropped first.
    pub(crate) fn watch(&self, name: &str, bytes: usize) -> SlowCompileGuard {
        let (done, wait) = std::sync::mpsc::channel::<()>();
        let (after, notify, name) = (self.after, self.notify.clone(), name.to_string());
        let spawned = std::thread::Builder::new()
            .name("agentrt-compile-notice".into())
            .spawn(move || {
                if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = wait.recv_timeout(after) {
                    notify(&name, bytes);
                }
            });
        if let Err(e) = spawned {
            tracing::debug!(error = %e, "no thread for the slow-compile notice; compiling without it");
        }
        SlowCompileGuard { _done: done }
    }
}

impl std::fmt::Debug for SlowCompileNotice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlowCompileNotice")
            .field("after", &self.after)
            .finish_non_exhaustive()
    }
}

/// Ends a [`SlowCompileNotice::watch`] when dropped (the watcher sees its channel close).
pub(crate) struct SlowCompileGuard {
    _done: std::sync::mpsc::Sender<()>,
}

/// Sizes of the pooling allocator.
#[derive(Debug, Clone)]
pub struct PoolingOptions {
    /// Instance slots reserved up front: the most policy instances alive at once.
    pub max_instances: u32,
    /// Largest linear memory any instance may have (per-tenant caps sit under this).
    pub max_memory_bytes: usize,
    /// Bytes of each slot's memory kept resident between uses, so reuse does not page-fault. Only
    /// the pages an instance dirtied are zeroed on release where the kernel can say which
    /// (PAGEMAP_SCAN); elsewhere all of it is, with memset, on every release.
    pub keep_resident_bytes: usize,
    /// Core (module) instances reserved per policy instance. A Rust policy needs 1–2; a Python
    /// one built by componentize-py instantiates ~38 (CPython, its libraries, the WASI stubs).
    /// Slots are address space reserved up front, not memory in use.
    pub core_instances_per_instance: u32,
}

impl Default for PoolingOptions {
    fn default() -> Self {
        Self {
            max_instances: 128,
            max_memory_bytes: 256 << 20,
            keep_resident_bytes: 1 << 20,
            core_instances_per_instance: 48,
        }
    }
}

/// The CPU guard on every policy call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuBound {
    /// Interrupt a call that uses more than [`crate::SandboxLimits::call_deadline`] of its
    /// thread's CPU time (time spent descheduled is not charged; see [`crate::call_clock`]), or
    /// that spends [`crate::call_clock::WALL_BACKSTOP`] deadlines on the clock. Cheap: a load and
    /// compare at loop headers, and a look at the thread's CPU clock per call.
    EpochDeadline,
    /// Trap a call that executes more than [`crate::SandboxLimits::call_fuel`] units (≈ Wasm
    /// instructions). Deterministic, machine-independent, and dearer on every loop iteration.
    Fuel,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            pooling: Some(PoolingOptions::default()),
            cache_dir: default_cache_dir(),
            epoch_tick: Duration::from_millis(1),
            cpu_bound: CpuBound::EpochDeadline,
            seed: None,
            max_component_bytes: DEFAULT_MAX_COMPONENT_BYTES,
            slow_compile: None,
            keep_compiled_bytes: DEFAULT_KEEP_COMPILED_BYTES,
            perf_map: std::env::var_os("AGENTRT_PERF_MAP").is_some_and(|v| v != "0"),
        }
    }
}

/// [`EngineOptions::keep_compiled_bytes`]'s default.
pub const DEFAULT_KEEP_COMPILED_BYTES: usize = 64 << 20;

impl EngineOptions {
    /// These options with an instance pool whose memories can hold `memory_cap` bytes (a slot's
    /// [`crate::SandboxLimits::memory_bytes`]): a cap over the pool's size would be unreachable.
    pub fn fitting_memory_cap(mut self, memory_cap: usize) -> Self {
        if let Some(pool) = &mut self.pooling {
            pool.max_memory_bytes = pool.max_memory_bytes.max(memory_cap);
        }
        self
    }
}

/// `$AGENTRT_CACHE_DIR`, else `$XDG_CACHE_HOME/agentrt/artifacts`, else `~/.cache/agentrt/artifacts`.
pub fn default_cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("AGENTRT_CACHE_DIR") {
        return Some(PathBuf::from(dir));
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return Some(PathBuf::from(dir).join("agentrt").join("artifacts"));
    }
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache").join("agentrt").join("artifacts"))
}

/// Shared by every policy of a host. Cheap to clone.
#[derive(Clone)]
pub struct PolicyEngine {
    inner: Arc<EngineInner>,
}

struct EngineInner {
    engine: Engine,
    linker: Linker<GuestState>,
    cache: Option<ArtifactCache>,
    /// Compiled components by digest ([`EngineOptions::keep_compiled_bytes`]).
    loaded: LoadedComponents,
    /// Digests of component files loaded before, by path and stamp.
    digests: DigestMemo,
    options: EngineOptions,
    clock_origin: Instant,
    next_seed: AtomicU64,
    /// `None` under [`CpuBound::Fuel`].
    ticker: Option<Arc<EpochTicker>>,
}

impl Drop for EngineInner {
    fn drop(&mut self) {
        if let Some(ticker) = &self.ticker {
            ticker.stop();
        }
    }
}

impl PolicyEngine {
    /// A wasmtime engine configured by `options`, with the host imports linked and, for
    /// [`CpuBound::EpochDeadline`], the epoch ticker started (it stops when the last clone of the
    /// engine is dropped). Fails when wasmtime refuses the configuration or the artifact cache's
    /// folder cannot be created.
    pub fn new(options: EngineOptions) -> anyhow::Result<Self> {
        let mut config = Config::new();
        match options.cpu_bound {
            CpuBound::EpochDeadline => {
                config.epoch_interruption(true);
            }
            CpuBound::Fuel => {
                config.consume_fuel(true);
            }
        }
        if options.perf_map {
            config.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
        if let Some(pooling) = &options.pooling {
            let mut pool = PoolingAllocationConfig::default();
            pool.total_component_instances(pooling.max_instances)
                .total_core_instances(pooling.max_instances * pooling.core_instances_per_instance)
                .total_memories(pooling.max_instances * 2)
                .total_tables(pooling.max_instances * 2)
                .max_memory_size(pooling.max_memory_bytes)
                .linear_memory_keep_resident(pooling.keep_resident_bytes)
                .table_keep_resident(64 << 10)
                // Reset only the pages an instance dirtied (Linux ≥ 6.7's PAGEMAP_SCAN), instead
                // of zeroing all of `keep_resident_bytes` with memset on every release: a slot
                // start went from ~100 µs to ~35 µs on a loaded 2-core machine
                // (docs/performance.md). Older kernels fall back to the memset.
                .pagemap_scan(wasmtime::Enabled::Auto);
            config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        }
        let engine = Engine::new(&config).map_err(|e| anyhow::anyhow!("configuring wasmtime: {e:#}"))?;

        let mut linker = Linker::new(&engine);
        Policy::add_to_linker::<GuestState, HasSelf<GuestState>>(&mut linker, |state| state)
            .map_err(|e| anyhow::anyhow!("linking host imports: {e:#}"))?;
        // The same imports under the older lines' names, for components built against them.
        crate::bindings::v0_4::Policy::add_to_linker::<GuestState, HasSelf<GuestState>>(&mut linker, |state| state)
            .map_err(|e| anyhow::anyhow!("linking the 0.4.0 host imports: {e:#}"))?;
        crate::bindings::v0_3::Policy::add_to_linker::<GuestState, HasSelf<GuestState>>(&mut linker, |state| state)
            .map_err(|e| anyhow::anyhow!("linking the 0.3.0 host imports: {e:#}"))?;
        crate::bindings::v0_2::Policy::add_to_linker::<GuestState, HasSelf<GuestState>>(&mut linker, |state| state)
            .map_err(|e| anyhow::anyhow!("linking the 0.2.0 host imports: {e:#}"))?;

        let cache = match &options.cache_dir {
            Some(dir) => Some(
                ArtifactCache::new(&engine, dir.clone())
                    .map_err(|e| anyhow::anyhow!("artifact cache at {}: {e}", dir.display()))?,
            ),
            None => None,
        };

        let ticker = (options.cpu_bound == CpuBound::EpochDeadline)
            .then(|| EpochTicker::spawn(engine.clone(), options.epoch_tick));

        let seed = options.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
        Ok(Self {
            inner: Arc::new(EngineInner {
                engine,
                linker,
                cache,
                loaded: LoadedComponents::new(options.keep_compiled_bytes),
                digests: DigestMemo::new(crate::file_digest::SETTLE),
                options,
                clock_origin: Instant::now(),
                next_seed: AtomicU64::new(seed),
                ticker,
            }),
        })
    }

    /// Load, compile (or fetch from the cache) and validate a component file, read under
    /// [`EngineOptions::max_component_bytes`]. A file loaded before and unchanged since is
    /// neither read nor hashed again: its digest is remembered ([`crate::file_digest`]).
    pub fn load_file(&self, path: &Path) -> Result<PolicyComponent, LoadError> {
        let name = path.display().to_string();
        let stamp = FileStamp::of(path);
        if let Some(known) = stamp.as_ref().and_then(|stamp| self.inner.digests.get(path, stamp)) {
            let found = PolicyComponent::load_known(&self.code_sources(), &name, &known.digest, known.size);
            if let Some(loaded) = found {
                return loaded;
            }
        }
        let read_at = std::time::SystemTime::now();
        let bytes = read_component_file(path, self.inner.options.max_component_bytes)?;
        let component = self.load_bytes(&name, &bytes)?;
        if let Some(stamp) = stamp {
            let known = Remembered {
                digest: component.digest().to_string(),
                size: bytes.len(),
            };
            self.inner.digests.put(path, stamp, read_at, known);
        }
        Ok(component)
    }

    /// Load, compile (or fetch from the cache) and validate a component from bytes; `name` is
    /// used in messages.
    pub fn load_bytes(&self, name: &str, bytes: &[u8]) -> Result<PolicyComponent, LoadError> {
        let limit = self.inner.options.max_component_bytes;
        if bytes.len() as u64 > limit {
            return Err(LoadError::new(
                name,
                format!("larger than the {limit}-byte limit on components; not loaded"),
            ));
        }
        let _span = tracing::debug_span!("policy.load", name, bytes = bytes.len()).entered();
        PolicyComponent::load(&self.code_sources(), name, bytes)
    }

    fn code_sources(&self) -> CodeSources<'_> {
        CodeSources {
            engine: &self.inner.engine,
            linker: &self.inner.linker,
            in_memory: &self.inner.loaded,
            artifacts: self.inner.cache.as_ref(),
            slow_compile: self.inner.options.slow_compile.as_ref(),
        }
    }

    /// The underlying wasmtime engine, for reading a component's types
    /// ([`PolicyComponent::world`]).
    pub fn wasmtime(&self) -> &Engine {
        &self.inner.engine
    }

    /// The options the engine was built with.
    pub fn options(&self) -> &EngineOptions {
        &self.inner.options
    }

    /// The on-disk cache of compiled components; `None` without [`EngineOptions::cache_dir`].
    pub fn artifact_cache(&self) -> Option<&ArtifactCache> {
        self.inner.cache.as_ref()
    }

    pub(crate) fn clock_origin(&self) -> Instant {
        self.inner.clock_origin
    }

    /// A distinct seed per instance, derived from the engine's seed (splitmix64 steps).
    pub(crate) fn next_seed(&self) -> u64 {
        let x = self.inner.next_seed.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
        let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// How many times the epoch ticker has advanced the epoch since the engine started (0 under
    /// [`CpuBound::Fuel`]). It ticks only while a policy call is in flight, so on an idle host
    /// this stays still.
    pub fn epoch_ticks(&self) -> u64 {
        self.inner.ticker.as_ref().map_or(0, |t| t.ticks())
    }

    /// The epoch ticker, to be woken around every entry into guest code.
    pub(crate) fn ticker(&self) -> Option<&Arc<EpochTicker>> {
        self.inner.ticker.as_ref()
    }

    /// Epoch ticks that make up `deadline` (at least 1).
    pub(crate) fn deadline_ticks(&self, deadline: Duration) -> u64 {
        ticks_in(deadline, self.inner.options.epoch_tick)
    }
}

/// Epoch ticks of length `tick` that make up `span` (at least 1).
pub(crate) fn ticks_in(span: Duration, tick: Duration) -> u64 {
    (span.as_nanos().div_ceil(tick.as_nanos().max(1)) as u64).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    fn counting(after: Duration) -> (SlowCompileNotice, Arc<AtomicUsize>) {
        let fired = Arc::new(AtomicUsize::new(0));
        let seen = fired.clone();
        let notice = SlowCompileNotice {
            after,
            notify: Arc::new(move |name, bytes| {
                assert_eq!((name, bytes), ("big.wasm", 12_000_000));
                seen.fetch_add(1, Ordering::SeqCst);
            }),
        };
        (notice, fired)
    }

    #[test]
    fn a_slow_compile_is_announced_once_and_a_quick_one_not_at_all() {
        let (notice, fired) = counting(Duration::from_millis(20));
        let slow = notice.watch("big.wasm", 12_000_000);
        std::thread::sleep(Duration::from_millis(300));
        drop(slow);
        assert_eq!(fired.load(Ordering::SeqCst), 1);

        let (notice, fired) = counting(Duration::from_secs(5));
        drop(notice.watch("big.wasm", 12_000_000));
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(fired.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn the_pool_grows_to_fit_a_larger_memory_cap_and_never_shrinks() {
        let pool = |o: EngineOptions| o.pooling.unwrap().max_memory_bytes;
        let default = pool(EngineOptions::default());
        assert!(
            default >= crate::DEFAULT_MEMORY_BYTES,
            "the default cap fits the default pool"
        );
        assert_eq!(pool(EngineOptions::default().fitting_memory_cap(1 << 20)), default);
        assert_eq!(pool(EngineOptions::default().fitting_memory_cap(1 << 30)), 1 << 30);
    }
}

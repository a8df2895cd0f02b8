//! The kit's way into a policy: slots started through the real host ([`PolicyHandle`], the
//! sandbox, limits and containment `serve` uses), every call timed and the instance's memory read
//! after it; and the memory of which primitive already ran out of its fuel, so that the checks
//! after it do not each pay for it again.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentrt_runtime::types::{Event, Forecast, Item, SideEffect};
use agentrt_runtime::{
    EngineOptions, PolicyComponent, PolicyEngine, PolicyError, PolicyHandle, SlotConfig, SlowCompileNotice,
};
use agentrt_sim::policy_limits::replay_engine_options;

use super::inputs::TYPICAL_BATCH;

/// The seed every engine of the kit gives its first instance, so that instances of different
/// engines draw the same `random-seed` (see [`Host::twins`]).
const SEED: u64 = 0x5eed;

/// The component under test, loaded once, and what the kit measured of it.
pub struct Host {
    engine: PolicyEngine,
    component: Arc<PolicyComponent>,
    /// The component's bytes, for the twins' engines.
    bytes: Vec<u8>,
    options: EngineOptions,
    config: SlotConfig,
    measures: RefCell<Measures>,
    /// Exports that failed on input no larger than a typical batch, and how: a later failure of
    /// the same export is that failure again, not the later property's.
    failed: RefCell<BTreeMap<&'static str, String>>,
    /// Those of them that ran out of their fuel: not called again.
    hung: RefCell<Vec<&'static str>>,
}

/// Durations and memory of successful calls, by export.
#[derive(Default)]
pub struct Measures {
    pub calls: BTreeMap<&'static str, Vec<Duration>>,
    /// Bytes of the instance's memories and tables after a call of this export, at most.
    pub peak_memory: BTreeMap<&'static str, u64>,
}

/// Why a call gave no answer.
pub enum CallError {
    /// The export's first failure.
    Policy(PolicyError),
    /// The export failed before, and did again.
    FailedBefore { export: &'static str, how: String },
    /// Not made: this export already ran out of its fuel.
    Hung(&'static str),
}

impl Host {
    /// Load `file` into an engine configured like the simulator's (calls bounded by fuel, its
    /// instance pool fitting `config`'s memory cap). `config` is every slot's: limits, `init`; no
    /// breaker, so every call the kit makes is made.
    pub fn load(file: &Path, config: SlotConfig) -> anyhow::Result<Self> {
        let options = EngineOptions {
            seed: Some(SEED),
            slow_compile: Some(SlowCompileNotice::stderr()),
            ..replay_engine_options(8, config.limits.memory_bytes)
        };
        let engine = PolicyEngine::new(options.clone())?;
        let bytes = agentrt_runtime::read_component_file(file, options.max_component_bytes)?;
        let component = Arc::new(engine.load_bytes(&file.display().to_string(), &bytes)?);
        Ok(Self {
            engine,
            component,
            bytes,
            options,
            config,
            measures: RefCell::default(),
            failed: RefCell::default(),
            hung: RefCell::default(),
        })
    }

    pub fn component(&self) -> &PolicyComponent {
        &self.component
    }

    pub fn config(&self) -> &SlotConfig {
        &self.config
    }

    pub fn measures(&self) -> std::cell::Ref<'_, Measures> {
        self.measures.borrow()
    }

    /// A fresh slot with the kit's configuration.
    pub fn fresh(&self) -> Result<Slot<'_>, PolicyError> {
        self.fresh_with(self.config.clone())
    }

    /// A fresh slot with another configuration (another `init`).
    pub fn fresh_with(&self, config: SlotConfig) -> Result<Slot<'_>, PolicyError> {
        Ok(Slot {
            handle: PolicyHandle::start(&self.engine, self.component.clone(), config)?,
            host: self,
        })
    }

    /// `n` fresh slots, each the first instance of an engine of its own seeded alike: their
    /// `random-seed`s are equal, so a policy may use it and still be deterministic.
    pub fn twins(&self, n: usize) -> anyhow::Result<Vec<Slot<'_>>> {
        let mut slots = Vec::with_capacity(n);
        for _ in 0..n {
            // The same options, so the artifact the kit's own load compiled is found in the cache.
            let engine = PolicyEngine::new(self.options.clone())?;
            let component = Arc::new(engine.load_bytes(self.component.name(), &self.bytes)?);
            slots.push(Slot {
                handle: PolicyHandle::start(&engine, component, self.config.clone())?,
                host: self,
            });
        }
        Ok(slots)
    }
}

/// One running slot of the component under test.
pub struct Slot<'h> {
    handle: PolicyHandle,
    host: &'h Host,
}

impl Slot<'_> {
    fn call<R>(
        &self,
        export: &'static str,
        items: usize,
        f: impl FnOnce(&PolicyHandle) -> Result<R, PolicyError>,
    ) -> Result<R, CallError> {
        if self.host.hung.borrow().contains(&export) {
            return Err(CallError::Hung(export));
        }
        let started = Instant::now();
        let result = f(&self.handle);
        let elapsed = started.elapsed();
        match &result {
            Ok(_) => {
                let mut m = self.host.measures.borrow_mut();
                m.calls.entry(export).or_default().push(elapsed);
                let memory = self.handle.metrics().memory_bytes();
                let peak = m.peak_memory.entry(export).or_default();
                *peak = (*peak).max(memory);
            }
            // An error is an answer of `init` and `restore`, not a failure.
            Err(PolicyError::Rejected { .. }) => {}
            Err(e) => {
                if let Some(how) = self.host.failed.borrow().get(export) {
                    return Err(CallError::FailedBefore {
                        export,
                        how: how.clone(),
                    });
                }
                // A huge batch may fail where ordinary ones do not: that is its own property's.
                if items <= TYPICAL_BATCH {
                    self.host.failed.borrow_mut().insert(export, crate::describe::error(e));
                    if matches!(e, PolicyError::FuelExhausted { .. }) {
                        self.host.hung.borrow_mut().push(export);
                    }
                }
            }
        }
        result.map_err(CallError::Policy)
    }

    pub fn info_name(&self) -> (String, String, String) {
        let info = self.handle.info();
        (info.name, info.version, info.description)
    }

    pub fn observe(&self, events: &[Event]) -> Result<(), CallError> {
        self.call("observe", events.len(), |h| h.observe(events))
    }

    pub fn observe_blocks(&self, packed: &[u64]) -> Result<(), CallError> {
        self.call("observe-blocks", packed.len() / 3, |h| h.observe_blocks(packed))
    }

    /// Through `score-packed`, the export the host ranks with.
    pub fn score(&self, items: &[Item]) -> Result<Vec<f32>, CallError> {
        self.call("score-packed", items.len(), |h| h.score(items))
    }

    /// Through the typed `score`.
    pub fn score_typed(&self, items: &[Item]) -> Result<Vec<f32>, CallError> {
        self.call("score", items.len(), |h| h.score_typed(items))
    }

    pub fn predict(&self, horizon: u32) -> Result<Vec<Forecast>, CallError> {
        self.call("predict", 0, |h| h.predict(horizon))
    }

    pub fn act(&self) -> Result<Vec<SideEffect>, CallError> {
        self.call("act", 0, |h| h.act())
    }

    pub fn snapshot(&self) -> Result<Vec<u8>, CallError> {
        self.call("snapshot", 0, |h| h.snapshot())
    }

    pub fn restore(&self, state: &[u8]) -> Result<(), CallError> {
        self.call("restore", 0, |h| h.restore(state))
    }
}

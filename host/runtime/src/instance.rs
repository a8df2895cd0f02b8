//! One live policy instance: a wasmtime `Store` with its limits and the typed export handles.
//! Every call sets the CPU deadline first and turns a failure into a typed [`PolicyError`].
//! After any error the instance must be dropped: a trapped component cannot be entered again.

use std::sync::Arc;

use wasmtime::{Store, Trap};

use crate::bindings::exports::agentrt::policy::guest::Guest;
use crate::bindings::Policy;
use crate::component::PolicyComponent;
use crate::engine::CpuBound;
use crate::error::{PolicyError, Primitive};
use crate::policy_log::PolicyLog;
use crate::sandbox::{GuestState, SandboxLimits};
use crate::types::{Event, Forecast, Item, PolicyInfo, SideEffect};
use crate::PolicyEngine;

/// Give the next call its CPU allowance: a fresh deadline, or a fresh tank of fuel.
fn arm_cpu_bound(store: &mut Store<GuestState>, bound: CpuBound, deadline_ticks: u64, fuel: u64) {
    match bound {
        CpuBound::EpochDeadline => store.set_epoch_deadline(deadline_ticks),
        CpuBound::Fuel => store.set_fuel(fuel).expect("fuel is enabled in this engine"),
    }
}

pub(crate) struct PolicyInstance {
    store: Store<GuestState>,
    bindings: Policy,
    deadline_ticks: u64,
    cpu_bound: CpuBound,
    limits: SandboxLimits,
    label: Arc<str>,
}

impl PolicyInstance {
    /// Instantiate `component` and run `init(config)`.
    pub(crate) fn start(
        engine: &PolicyEngine,
        component: &PolicyComponent,
        limits: &SandboxLimits,
        label: Arc<str>,
        log: Arc<PolicyLog>,
        config: &[(String, String)],
    ) -> Result<Self, PolicyError> {
        let state = GuestState::new(limits, log, engine.next_seed(), engine.clock_origin());
        let mut store = Store::new(engine.wasmtime(), state);
        store.limiter(|state| &mut state.limiter);
        let cpu_bound = engine.options().cpu_bound;
        arm_cpu_bound(
            &mut store,
            cpu_bound,
            engine.deadline_ticks(limits.call_deadline),
            limits.call_fuel,
        );
        let bindings = component
            .pre()
            .instantiate(&mut store)
            .map_err(|e| PolicyError::Unavailable {
                policy: label.to_string(),
                message: format!("instantiation failed: {e:#}"),
            })?;
        let mut instance = Self {
            store,
            bindings,
            deadline_ticks: engine.deadline_ticks(limits.call_deadline),
            cpu_bound,
            limits: limits.clone(),
            label,
        };
        instance.init(config)?;
        Ok(instance)
    }

    /// Run one export under the deadline and classify a failure.
    fn call<R>(
        &mut self,
        primitive: Primitive,
        f: impl FnOnce(&Guest, &mut Store<GuestState>) -> wasmtime::Result<R>,
    ) -> Result<R, PolicyError> {
        arm_cpu_bound(
            &mut self.store,
            self.cpu_bound,
            self.deadline_ticks,
            self.limits.call_fuel,
        );
        let guest = self.bindings.agentrt_policy_guest();
        f(guest, &mut self.store).map_err(|e| self.classify(primitive, e))
    }

    fn classify(&self, primitive: Primitive, error: wasmtime::Error) -> PolicyError {
        let policy = self.label.to_string();
        if self.store.data().limiter.hit_memory_cap {
            return PolicyError::OutOfMemory {
                policy,
                primitive,
                cap_bytes: self.limits.memory_bytes,
            };
        }
        // The trap code may sit under context (e.g. a wasm backtrace): look down the chain.
        let trap = error
            .downcast_ref::<Trap>()
            .or_else(|| error.chain().find_map(|e| e.downcast_ref::<Trap>()));
        match trap {
            Some(Trap::Interrupt) => {
                return PolicyError::DeadlineExceeded {
                    policy,
                    primitive,
                    deadline: self.limits.call_deadline,
                }
            }
            Some(Trap::OutOfFuel) => {
                return PolicyError::FuelExhausted {
                    policy,
                    primitive,
                    fuel: self.limits.call_fuel,
                }
            }
            _ => {}
        }
        PolicyError::Trap {
            policy,
            primitive,
            message: format!("{error:#}"),
        }
    }

    fn rejected(&self, primitive: Primitive, message: String) -> PolicyError {
        PolicyError::Rejected {
            policy: self.label.to_string(),
            primitive,
            message,
        }
    }

    pub(crate) fn info(&mut self) -> Result<PolicyInfo, PolicyError> {
        self.call(Primitive::Info, |g, s| g.call_info(s))
    }

    fn init(&mut self, config: &[(String, String)]) -> Result<(), PolicyError> {
        self.call(Primitive::Init, |g, s| g.call_init(s, config))?
            .map_err(|m| self.rejected(Primitive::Init, m))
    }

    pub(crate) fn observe(&mut self, events: &[Event]) -> Result<(), PolicyError> {
        self.call(Primitive::Observe, |g, s| g.call_observe(s, events))
    }

    pub(crate) fn observe_blocks(&mut self, packed: &[u64]) -> Result<(), PolicyError> {
        self.call(Primitive::ObserveBlocks, |g, s| g.call_observe_blocks(s, packed))
    }

    /// Score through `score-packed` (one copy across the boundary) or, with `typed`, through
    /// `score` (a per-field lowering; kept for comparison and for checking they agree).
    pub(crate) fn score(&mut self, items: &[Item], typed: bool) -> Result<Vec<f32>, PolicyError> {
        let scores = if typed {
            self.call(Primitive::Score, |g, s| g.call_score(s, items))?
        } else {
            let mut words = Vec::with_capacity(items.len() * agentrt_sdk::packed::ITEM_WORDS);
            for i in items {
                words.extend_from_slice(&agentrt_sdk::packed::item_words(
                    i.kind as u8,
                    i.key,
                    i.agent,
                    i.session,
                    i.last_access,
                    i.tokens,
                    i.position,
                ));
            }
            self.call(Primitive::Score, |g, s| g.call_score_packed(s, &words))?
        };
        if scores.len() != items.len() {
            return Err(PolicyError::BadOutput {
                policy: self.label.to_string(),
                primitive: Primitive::Score,
                message: format!("{} scores for {} items", scores.len(), items.len()),
            });
        }
        Ok(scores)
    }

    pub(crate) fn predict(&mut self, horizon: u32) -> Result<Vec<Forecast>, PolicyError> {
        self.call(Primitive::Predict, |g, s| g.call_predict(s, horizon))
    }

    pub(crate) fn act(&mut self) -> Result<Vec<SideEffect>, PolicyError> {
        self.call(Primitive::Act, |g, s| g.call_act(s))
    }

    pub(crate) fn snapshot(&mut self) -> Result<Vec<u8>, PolicyError> {
        self.call(Primitive::Snapshot, |g, s| g.call_snapshot(s))
    }

    pub(crate) fn restore(&mut self, state: &[u8]) -> Result<(), PolicyError> {
        self.call(Primitive::Restore, |g, s| g.call_restore(s, state))?
            .map_err(|m| self.rejected(Primitive::Restore, m))
    }

    /// Bytes of linear memory the instance holds now.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.store.data().limiter.memory_in_use
    }
}

//! One live policy instance: a wasmtime `Store` with its limits and the typed export handles.
//! Every call sets the CPU deadline first and turns a failure into a typed [`PolicyError`].
//! The deadline is the call's own CPU time ([`crate::call_clock`]): the epoch wakes the host
//! at the deadline, and a call that was only kept waiting for a core runs on.
//! After any error the instance must be dropped: a trapped component cannot be entered again.
//!
//! `score-packed`, `act`, `predict` and `snapshot` are called through [`crate::results`]'s bounded
//! types, so an oversize result is refused before it is copied; and the deadline covers the whole call,
//! copying the result included.

use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::TypedFunc;
use wasmtime::{Store, Trap, UpdateDeadline};

use crate::call_clock::{CallClock, CallKind, Overrun, Standing};
use crate::compat;
use crate::component::PolicyComponent;
use crate::engine::{ticks_in, CpuBound};
use crate::epoch_ticker::EpochTicker;
use crate::error::{PolicyError, Primitive};
use crate::policy_log::PolicyLog;
use crate::results::{
    BoundedList, Oversize, SideEffectResult, MAX_FORECASTS, MAX_SCORES, MAX_SIDE_EFFECTS, MAX_SNAPSHOT_BYTES,
};
use crate::sandbox::{GuestState, SandboxLimits};
use crate::types::{Event, Forecast, Item, PolicyInfo, SideEffect};
use crate::PolicyEngine;

/// Give the next call of `kind` its CPU allowance: a fresh deadline on a fresh call clock, or a
/// fresh tank of fuel.
fn arm_cpu_bound(
    store: &mut Store<GuestState>,
    bound: CpuBound,
    kind: CallKind,
    limits: &SandboxLimits,
    deadline_ticks: u64,
) {
    match bound {
        CpuBound::EpochDeadline => {
            store.data_mut().call_clock = CallClock::start(limits.call_deadline, kind);
            store.set_epoch_deadline(deadline_ticks);
        }
        CpuBound::Fuel => store
            .set_fuel(limits.call_fuel)
            .expect("fuel is enabled in this engine"),
    }
}

/// At the epoch deadline: trap a call that has used its CPU allowance; give one that was kept
/// waiting the ticks its remaining CPU time makes up.
fn on_epoch_deadline(store: &mut Store<GuestState>, epoch_tick: Duration) {
    store.epoch_deadline_callback(move |ctx| match ctx.data().call_clock.standing() {
        Standing::Spent(_) => Ok(UpdateDeadline::Interrupt),
        Standing::Left(left) => Ok(UpdateDeadline::Continue(ticks_in(left, epoch_tick))),
    });
}

type ScorePackedFunc = TypedFunc<(Vec<u64>,), (BoundedList<f32, MAX_SCORES>,)>;
type ActFunc = TypedFunc<(), (BoundedList<SideEffectResult, MAX_SIDE_EFFECTS>,)>;
type PredictFunc = TypedFunc<(u32,), (BoundedList<Forecast, MAX_FORECASTS>,)>;
type SnapshotFunc = TypedFunc<(), (BoundedList<u8, MAX_SNAPSHOT_BYTES>,)>;

/// The generated bindings of the contract line the component was built against.
enum Bindings {
    V0_5(crate::bindings::Policy),
    V0_4(crate::bindings::v0_4::Policy),
    V0_3(crate::bindings::v0_3::Policy),
    V0_2(crate::bindings::v0_2::Policy),
}

/// The exports whose results are bounded before they are copied.
struct BoundedExports {
    score_packed: ScorePackedFunc,
    act: ActFunc,
    predict: PredictFunc,
    snapshot: SnapshotFunc,
}

pub(crate) struct PolicyInstance {
    store: Store<GuestState>,
    bindings: Bindings,
    bounded: BoundedExports,
    deadline_ticks: u64,
    cpu_bound: CpuBound,
    limits: SandboxLimits,
    label: Arc<str>,
    /// Woken for every call: it sleeps while no guest code runs.
    ticker: Option<Arc<EpochTicker>>,
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
        if cpu_bound == CpuBound::EpochDeadline {
            on_epoch_deadline(&mut store, engine.options().epoch_tick);
        }
        let deadline_ticks = engine.deadline_ticks(limits.call_deadline);
        arm_cpu_bound(&mut store, cpu_bound, CallKind::StartUp, limits, deadline_ticks);
        let unavailable = |e: wasmtime::Error| {
            let (policy, message) = (label.to_string(), format!("{e:#}"));
            if e.downcast_ref::<wasmtime::PoolConcurrencyLimitError>().is_some() {
                PolicyError::PoolFull { policy, message }
            } else {
                PolicyError::Unavailable {
                    policy,
                    message: format!("instantiation failed: {message}"),
                }
            }
        };
        let ticker = engine.ticker().cloned();
        // Instantiation runs the component's start functions: guest code, under the deadline.
        let entry = ticker.as_ref().map(EpochTicker::enter);
        let instance = component.pre().instantiate(&mut store).map_err(unavailable)?;
        let bindings = match component.contract_line() {
            compat::ContractLine::V0_5 => {
                Bindings::V0_5(crate::bindings::Policy::new(&mut store, &instance).map_err(unavailable)?)
            }
            compat::ContractLine::V0_4 => {
                Bindings::V0_4(crate::bindings::v0_4::Policy::new(&mut store, &instance).map_err(unavailable)?)
            }
            compat::ContractLine::V0_3 => {
                Bindings::V0_3(crate::bindings::v0_3::Policy::new(&mut store, &instance).map_err(unavailable)?)
            }
            compat::ContractLine::V0_2 => {
                Bindings::V0_2(crate::bindings::v0_2::Policy::new(&mut store, &instance).map_err(unavailable)?)
            }
        };
        let exports = component.guest_exports();
        let bounded = BoundedExports {
            score_packed: instance
                .get_typed_func(&mut store, exports.score_packed)
                .map_err(unavailable)?,
            act: instance.get_typed_func(&mut store, exports.act).map_err(unavailable)?,
            predict: instance
                .get_typed_func(&mut store, exports.predict)
                .map_err(unavailable)?,
            snapshot: instance
                .get_typed_func(&mut store, exports.snapshot)
                .map_err(unavailable)?,
        };
        drop(entry);
        let mut instance = Self {
            store,
            bindings,
            bounded,
            deadline_ticks,
            cpu_bound,
            limits: limits.clone(),
            label,
            ticker,
        };
        instance.init(config)?;
        Ok(instance)
    }

    /// Run one export under the deadline and classify a failure.
    fn call<R>(
        &mut self,
        primitive: Primitive,
        f: impl FnOnce(&Bindings, &BoundedExports, &mut Store<GuestState>) -> wasmtime::Result<R>,
    ) -> Result<R, PolicyError> {
        let entry = self.ticker.as_ref().map(EpochTicker::enter);
        let kind = if primitive.starts_an_instance() {
            CallKind::StartUp
        } else {
            CallKind::Steady
        };
        arm_cpu_bound(&mut self.store, self.cpu_bound, kind, &self.limits, self.deadline_ticks);
        let result = f(&self.bindings, &self.bounded, &mut self.store);
        drop(entry);
        let result = result.map_err(|e| self.classify(primitive, e))?;
        // The epoch interrupts guest code only; the host's copying of the result counts too.
        if self.cpu_bound == CpuBound::EpochDeadline {
            if let Standing::Spent(overrun) = self.store.data().call_clock.standing() {
                return Err(self.deadline_exceeded(primitive, overrun));
            }
        }
        Ok(result)
    }

    fn deadline_exceeded(&self, primitive: Primitive, overrun: Overrun) -> PolicyError {
        PolicyError::DeadlineExceeded {
            policy: self.label.to_string(),
            primitive,
            deadline: self.limits.call_deadline,
            overrun,
        }
    }

    fn classify(&self, primitive: Primitive, error: wasmtime::Error) -> PolicyError {
        let policy = self.label.to_string();
        if let Some(o) = error.chain().find_map(|e| e.downcast_ref::<Oversize>()) {
            return PolicyError::ResultTooLarge {
                policy,
                primitive,
                what: o.what,
                len: o.len,
                max: o.max,
            };
        }
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
                // Interrupted only once spent, and time only runs on: the clock still says how.
                let overrun = match self.store.data().call_clock.standing() {
                    Standing::Spent(overrun) => overrun,
                    Standing::Left(_) => Overrun::Cpu,
                };
                return self.deadline_exceeded(primitive, overrun);
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
        self.call(Primitive::Info, |g, _, s| match g {
            Bindings::V0_5(p) => p.agentrt_policy_guest().call_info(s),
            Bindings::V0_4(p) => p.agentrt_policy_guest().call_info(s).map(compat::info_from_v0_4),
            Bindings::V0_3(p) => p.agentrt_policy_guest().call_info(s).map(compat::info_from_v0_3),
            Bindings::V0_2(p) => p.agentrt_policy_guest().call_info(s).map(compat::info_from_v0_2),
        })
    }

    fn init(&mut self, config: &[(String, String)]) -> Result<(), PolicyError> {
        self.call(Primitive::Init, |g, _, s| match g {
            Bindings::V0_5(p) => p.agentrt_policy_guest().call_init(s, config),
            Bindings::V0_4(p) => p.agentrt_policy_guest().call_init(s, config),
            Bindings::V0_3(p) => p.agentrt_policy_guest().call_init(s, config),
            Bindings::V0_2(p) => p.agentrt_policy_guest().call_init(s, config),
        })?
        .map_err(|m| self.rejected(Primitive::Init, m))
    }

    /// Events to the guest: to a 0.5 or 0.4 guest `agent-registered` typed and every run of other
    /// events between registrations packed (`observe-packed`: one copy across the boundary instead
    /// of a lowering per field), in order — a 0.4 guest without the events it has no words for;
    /// to older guests typed, in their line's words.
    pub(crate) fn observe(&mut self, events: &[Event]) -> Result<(), PolicyError> {
        self.call(Primitive::Observe, |g, _, s| match g {
            Bindings::V0_4(p) => {
                let guest = p.agentrt_policy_guest();
                let mut words = Vec::with_capacity(events.len() * 6);
                for event in events.iter().filter(|e| compat::heard_by_v0_4(e)) {
                    if crate::packed::encode_event(event, &mut words) {
                        continue;
                    }
                    if !words.is_empty() {
                        guest.call_observe_packed(&mut *s, &words)?;
                        words.clear();
                    }
                    let typed: Vec<_> = compat::event_v0_4(event).into_iter().collect();
                    guest.call_observe(&mut *s, &typed)?;
                }
                if words.is_empty() {
                    return Ok(());
                }
                guest.call_observe_packed(s, &words)
            }
            Bindings::V0_5(p) => {
                let guest = p.agentrt_policy_guest();
                let mut words = Vec::with_capacity(events.len() * 6);
                let mut rest = events;
                while let Some(split) = rest.iter().position(|e| !crate::packed::encode_event(e, &mut words)) {
                    if !words.is_empty() {
                        guest.call_observe_packed(&mut *s, &words)?;
                        words.clear();
                    }
                    guest.call_observe(&mut *s, &rest[split..=split])?;
                    rest = &rest[split + 1..];
                }
                if words.is_empty() {
                    return Ok(());
                }
                guest.call_observe_packed(s, &words)
            }
            Bindings::V0_3(p) => {
                let events: Vec<_> = events.iter().filter_map(compat::event_v0_3).collect();
                if events.is_empty() {
                    return Ok(());
                }
                p.agentrt_policy_guest().call_observe(s, &events)
            }
            Bindings::V0_2(p) => {
                let events: Vec<_> = events
                    .iter()
                    .filter_map(compat::event_v0_3)
                    .filter_map(compat::event_v0_2)
                    .collect();
                if events.is_empty() {
                    return Ok(());
                }
                p.agentrt_policy_guest().call_observe(s, &events)
            }
        })
    }

    pub(crate) fn observe_blocks(&mut self, packed: &[u64]) -> Result<(), PolicyError> {
        self.call(Primitive::ObserveBlocks, |g, _, s| match g {
            Bindings::V0_5(p) => p.agentrt_policy_guest().call_observe_blocks(s, packed),
            Bindings::V0_4(p) => p.agentrt_policy_guest().call_observe_blocks(s, packed),
            Bindings::V0_3(p) => p.agentrt_policy_guest().call_observe_blocks(s, packed),
            Bindings::V0_2(p) => {
                let packed = compat::blocks_v0_2(packed);
                if packed.is_empty() {
                    return Ok(());
                }
                p.agentrt_policy_guest().call_observe_blocks(s, &packed)
            }
        })
    }

    /// Score through `score-packed` (one copy across the boundary; its result bounded before it
    /// is copied) or, with `typed`, through `score` (a per-field lowering; kept for comparison
    /// and for checking they agree; a guest's copy of at most its memory cap).
    pub(crate) fn score(&mut self, items: &[Item], typed: bool) -> Result<Vec<f32>, PolicyError> {
        let scores = if typed {
            self.call(Primitive::Score, |g, _, s| match g {
                Bindings::V0_5(p) => p.agentrt_policy_guest().call_score(s, items),
                Bindings::V0_4(p) => {
                    let items: Vec<_> = items.iter().map(compat::item_v0_4).collect();
                    p.agentrt_policy_guest().call_score(s, &items)
                }
                Bindings::V0_3(p) => {
                    let items: Vec<_> = items.iter().map(compat::item_v0_3).collect();
                    p.agentrt_policy_guest().call_score(s, &items)
                }
                Bindings::V0_2(p) => {
                    let items: Vec<_> = items.iter().map(compat::item_v0_2).collect();
                    p.agentrt_policy_guest().call_score(s, &items)
                }
            })?
        } else {
            let mut words = Vec::with_capacity(items.len() * agentrt_sdk::packed::ITEM_WORDS);
            for i in items {
                words.extend_from_slice(&agentrt_sdk::packed::item_words(
                    i.kind as u8,
                    i.tier as u8,
                    i.key,
                    i.agent,
                    i.session,
                    i.last_access,
                    i.tokens,
                    i.position,
                ));
            }
            let (scores,) = self.call(Primitive::Score, |_, b, s| b.score_packed.call(s, (words,)))?;
            scores.0
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
        self.call(Primitive::Predict, |_, b, s| b.predict.call(s, (horizon,)))
            .map(|(forecasts,)| forecasts.0)
    }

    pub(crate) fn act(&mut self) -> Result<Vec<SideEffect>, PolicyError> {
        self.call(Primitive::Act, |_, b, s| b.act.call(s, ()))
            .map(|(effects,)| effects.0.into_iter().map(SideEffect::from).collect())
    }

    pub(crate) fn snapshot(&mut self) -> Result<Vec<u8>, PolicyError> {
        self.call(Primitive::Snapshot, |_, b, s| b.snapshot.call(s, ()))
            .map(|(state,)| state.0)
    }

    pub(crate) fn restore(&mut self, state: &[u8]) -> Result<(), PolicyError> {
        self.call(Primitive::Restore, |g, _, s| match g {
            Bindings::V0_5(p) => p.agentrt_policy_guest().call_restore(s, state),
            Bindings::V0_4(p) => p.agentrt_policy_guest().call_restore(s, state),
            Bindings::V0_3(p) => p.agentrt_policy_guest().call_restore(s, state),
            Bindings::V0_2(p) => p.agentrt_policy_guest().call_restore(s, state),
        })?
        .map_err(|m| self.rejected(Primitive::Restore, m))
    }

    /// Bytes of all the instance's linear memories and tables now.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.store.data().limiter.memory_in_use
    }
}

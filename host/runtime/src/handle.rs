//! [`PolicyHandle`]: the typed, thread-safe way the rest of the host calls a policy.
//!
//! A handle owns one slot's live instance. It serialises calls (an instance is single-threaded),
//! contains failures (a trapped, timed-out or out-of-memory instance is discarded and the next call
//! gets a fresh one, restored from the last checkpoint), falls back to LRU order when a ranking is
//! needed anyway, and hot-swaps to a new component version carrying the learned state over.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::component::PolicyComponent;
use crate::error::{PolicyError, Primitive};
use crate::instance::PolicyInstance;
use crate::metrics::PolicyMetrics;
use crate::policy_log::PolicyLog;
use crate::sandbox::SandboxLimits;
use crate::types::{Event, Forecast, Item, PolicyInfo, SideEffect};
use crate::PolicyEngine;

/// How one slot runs its policy.
#[derive(Debug, Clone)]
pub struct SlotConfig {
    /// Names the slot in logs, errors and metrics (e.g. `tenant-a/kv-cache`).
    pub label: String,
    pub limits: SandboxLimits,
    /// Passed to the policy's `init`.
    pub init: Vec<(String, String)>,
    /// Take a snapshot at most this often (checked after `observe`), so that a restart after a
    /// failure loses at most this much learning. `None`: only on [`PolicyHandle::checkpoint`].
    pub checkpoint_every: Option<Duration>,
}

impl SlotConfig {
    pub fn new(label: impl Into<String>) -> Self {
        Self {
            label: label.into(),
            limits: SandboxLimits::default(),
            init: Vec::new(),
            checkpoint_every: Some(Duration::from_secs(1)),
        }
    }

    pub fn with_init<'a>(mut self, pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        self.init = pairs.into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        self
    }

    pub fn with_limits(mut self, limits: SandboxLimits) -> Self {
        self.limits = limits;
        self
    }
}

/// A ranking of candidates from "keep most" to "evict first".
#[derive(Debug)]
pub struct Ranking {
    /// Indices into the items that were ranked.
    pub order: Vec<usize>,
    /// Set when the policy failed and the order is LRU's instead.
    pub fallback: Option<PolicyError>,
}

/// What a hot swap did.
#[derive(Debug, Clone)]
pub struct SwapReport {
    /// Bytes of state carried from the old instance into the new one.
    pub state_bytes: usize,
    /// Time callers were held while the swap ran.
    pub paused: Duration,
    pub from: String,
    pub to: String,
}

struct Live {
    component: Arc<PolicyComponent>,
    /// `None` after a failure until the next call re-creates it.
    instance: Option<PolicyInstance>,
    checkpoint: Option<Vec<u8>>,
    last_checkpoint: Instant,
    info: PolicyInfo,
}

/// A running policy slot. `Send + Sync`; calls take microseconds and are bounded by the slot's
/// deadline, so calling from async code (tokio) is fine.
pub struct PolicyHandle {
    engine: PolicyEngine,
    config: SlotConfig,
    label: Arc<str>,
    live: Mutex<Live>,
    metrics: PolicyMetrics,
    /// Kept across restarts and swaps: a failing policy does not get a fresh log budget.
    log: Arc<PolicyLog>,
}

impl PolicyHandle {
    /// Start `component` in a new slot. Fails if it cannot be instantiated or rejects its config.
    pub fn start(
        engine: &PolicyEngine,
        component: Arc<PolicyComponent>,
        config: SlotConfig,
    ) -> Result<Self, PolicyError> {
        let label: Arc<str> = Arc::from(config.label.as_str());
        let metrics = PolicyMetrics::default();
        let log = Arc::new(PolicyLog::new(
            label.clone(),
            &config.limits,
            metrics.log_lines_dropped_counter(),
        ));
        let mut instance = PolicyInstance::start(
            engine,
            &component,
            &config.limits,
            label.clone(),
            log.clone(),
            &config.init,
        )?;
        let info = instance.info()?;
        metrics.set_memory_bytes(instance.memory_bytes());
        Ok(Self {
            engine: engine.clone(),
            label,
            live: Mutex::new(Live {
                component,
                instance: Some(instance),
                checkpoint: None,
                last_checkpoint: Instant::now(),
                info,
            }),
            config,
            metrics,
            log,
        })
    }

    pub fn label(&self) -> &str {
        &self.label
    }

    pub fn metrics(&self) -> &PolicyMetrics {
        &self.metrics
    }

    /// What the running policy says about itself.
    pub fn info(&self) -> PolicyInfo {
        self.lock().info.clone()
    }

    /// The component running now.
    pub fn component(&self) -> Arc<PolicyComponent> {
        self.lock().component.clone()
    }

    fn lock(&self) -> MutexGuard<'_, Live> {
        // A panic while holding the lock leaves `Live` consistent (every field is replaced
        // whole), so a poisoned lock is safe to keep using.
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Run `f` on the live instance (re-creating it if needed); on failure discard the instance.
    fn with_instance<R>(
        &self,
        primitive: Primitive,
        items: usize,
        f: impl FnOnce(&mut PolicyInstance) -> Result<R, PolicyError>,
    ) -> Result<R, PolicyError> {
        let mut live = self.lock();
        let started = Instant::now();
        let result = self.ensure_instance(&mut live).and_then(f);
        self.metrics.record_call(primitive, items, started.elapsed());
        if let Err(e) = &result {
            self.metrics.record_error(e);
            tracing::warn!(policy = %self.label, error = %e, "policy call failed; instance discarded");
            // A trapped instance cannot be entered again; any error leaves state we cannot trust.
            live.instance = None;
        }
        result
    }

    fn ensure_instance<'a>(&self, live: &'a mut Live) -> Result<&'a mut PolicyInstance, PolicyError> {
        if live.instance.is_none() {
            let mut fresh = self.fresh_instance(&live.component)?;
            if let Some(state) = &live.checkpoint {
                if let Err(e) = fresh.restore(state) {
                    // The checkpoint itself may be what breaks the policy: start clean instead.
                    tracing::warn!(policy = %self.label, error = %e, "checkpoint not restorable; starting from scratch");
                    live.checkpoint = None;
                    fresh = self.fresh_instance(&live.component)?;
                }
            }
            self.metrics.record_restart();
            live.instance = Some(fresh);
        }
        Ok(live.instance.as_mut().expect("instance was just ensured"))
    }

    fn fresh_instance(&self, component: &PolicyComponent) -> Result<PolicyInstance, PolicyError> {
        PolicyInstance::start(
            &self.engine,
            component,
            &self.config.limits,
            self.label.clone(),
            self.log.clone(),
            &self.config.init,
        )
    }

    /// Deliver events, oldest first.
    pub fn observe(&self, events: &[Event]) -> Result<(), PolicyError> {
        let _span = tracing::trace_span!("policy.observe", policy = %self.label, events = events.len()).entered();
        self.with_instance(Primitive::Observe, events.len(), |i| i.observe(events))?;
        self.maybe_checkpoint();
        Ok(())
    }

    /// Deliver KV-block events in the packed form (see `agentrt_sdk::packed`).
    pub fn observe_blocks(&self, packed: &[u64]) -> Result<(), PolicyError> {
        let _span = tracing::trace_span!("policy.observe_blocks", policy = %self.label, words = packed.len()).entered();
        self.with_instance(Primitive::ObserveBlocks, packed.len() / 3, |i| i.observe_blocks(packed))
    }

    /// One priority per item (higher = keep). Items cross the boundary packed (`score-packed`).
    pub fn score(&self, items: &[Item]) -> Result<Vec<f32>, PolicyError> {
        let _span = tracing::trace_span!("policy.score", policy = %self.label, items = items.len()).entered();
        self.with_instance(Primitive::Score, items.len(), |i| i.score(items, false))
    }

    /// [`Self::score`] through the typed `score` export (`list<item>`): slower, kept to measure
    /// the difference and to check that a policy's two exports agree.
    pub fn score_typed(&self, items: &[Item]) -> Result<Vec<f32>, PolicyError> {
        let _span = tracing::trace_span!("policy.score_typed", policy = %self.label, items = items.len()).entered();
        self.with_instance(Primitive::Score, items.len(), |i| i.score(items, true))
    }

    /// Rank `items` from "keep most" to "evict first" by the policy's scores, ties by recency. If
    /// the policy fails, the order is LRU's and [`Ranking::fallback`] says why: a caller that
    /// needs an answer always gets one.
    pub fn rank(&self, items: &[Item]) -> Ranking {
        match self.score(items) {
            Ok(scores) => Ranking {
                order: keep_order(items, &scores),
                fallback: None,
            },
            Err(e) => {
                self.metrics.record_fallback();
                Ranking {
                    order: lru_order(items),
                    fallback: Some(e),
                }
            }
        }
    }

    pub fn predict(&self, horizon: u32) -> Result<Vec<Forecast>, PolicyError> {
        let _span = tracing::debug_span!("policy.predict", policy = %self.label, horizon).entered();
        self.with_instance(Primitive::Predict, 0, |i| i.predict(horizon))
    }

    pub fn act(&self) -> Result<Vec<SideEffect>, PolicyError> {
        let _span = tracing::debug_span!("policy.act", policy = %self.label).entered();
        self.with_instance(Primitive::Act, 0, |i| i.act())
    }

    pub fn snapshot(&self) -> Result<Vec<u8>, PolicyError> {
        let _span = tracing::debug_span!("policy.snapshot", policy = %self.label).entered();
        self.with_instance(Primitive::Snapshot, 0, |i| i.snapshot())
    }

    /// Replace the policy's state with `state` (a snapshot, possibly from another instance).
    pub fn restore(&self, state: &[u8]) -> Result<(), PolicyError> {
        let _span = tracing::debug_span!("policy.restore", policy = %self.label, bytes = state.len()).entered();
        self.with_instance(Primitive::Restore, 0, |i| i.restore(state))?;
        let mut live = self.lock();
        live.checkpoint = Some(state.to_vec());
        live.last_checkpoint = Instant::now();
        Ok(())
    }

    /// Snapshot now and keep it as the state a restart resumes from. Returns its size.
    pub fn checkpoint(&self) -> Result<usize, PolicyError> {
        let state = self.snapshot()?;
        let size = state.len();
        let mut live = self.lock();
        live.checkpoint = Some(state);
        live.last_checkpoint = Instant::now();
        if let Some(instance) = &live.instance {
            self.metrics.set_memory_bytes(instance.memory_bytes());
        }
        Ok(size)
    }

    fn maybe_checkpoint(&self) {
        let Some(every) = self.config.checkpoint_every else {
            return;
        };
        if self.lock().last_checkpoint.elapsed() < every {
            return;
        }
        if let Err(e) = self.checkpoint() {
            tracing::warn!(policy = %self.label, error = %e, "periodic checkpoint failed");
        }
    }

    /// Hot swap: run `next` in this slot from now on, handing it the current state.
    ///
    /// Callers are held (not failed) for the duration; events sent meanwhile wait and reach the
    /// new instance. If the new component cannot start or refuses the state, the old one keeps
    /// running and the error is returned.
    pub fn swap(&self, next: Arc<PolicyComponent>) -> Result<SwapReport, PolicyError> {
        self.swap_inner(next, true)
    }

    /// Hot swap to a policy that starts from scratch (e.g. a different policy, which could not
    /// read this one's state).
    pub fn swap_fresh(&self, next: Arc<PolicyComponent>) -> Result<SwapReport, PolicyError> {
        self.swap_inner(next, false)
    }

    fn swap_inner(&self, next: Arc<PolicyComponent>, carry_state: bool) -> Result<SwapReport, PolicyError> {
        let _span = tracing::info_span!("policy.swap", policy = %self.label, to = next.name(), carry_state).entered();
        let mut live = self.lock();
        let paused_at = Instant::now();
        let state = if !carry_state {
            None
        } else {
            match live.instance.as_mut().map(|i| i.snapshot()) {
                Some(Ok(state)) => Some(state),
                // No live instance, or it failed to snapshot: the last checkpoint is the best we have.
                _ => live.checkpoint.clone(),
            }
        };
        let mut fresh = self.fresh_instance(&next)?;
        if let Some(state) = &state {
            fresh.restore(state)?;
        }
        let info = fresh.info()?;
        let old = live.instance.replace(fresh);
        let from = std::mem::replace(&mut live.component, next.clone()).name().to_string();
        live.info = info;
        live.checkpoint = state.clone();
        live.last_checkpoint = Instant::now();
        let paused = paused_at.elapsed();
        drop(live);
        // Dropping a Store costs ~0.2 ms; do it after callers are released.
        drop(old);
        self.metrics.record_swap();
        Ok(SwapReport {
            state_bytes: state.map_or(0, |s| s.len()),
            paused,
            from,
            to: next.name().to_string(),
        })
    }
}

/// The host's ranking rule on a policy's scores (shared with the SDK's harness).
pub fn keep_order(items: &[Item], scores: &[f32]) -> Vec<usize> {
    agentrt_sdk::ranking::keep_order(scores, |i| items[i].last_access)
}

/// LRU order: the ranking rule with every score equal.
pub fn lru_order(items: &[Item]) -> Vec<usize> {
    agentrt_sdk::ranking::keep_order(&vec![0.0; items.len()], |i| items[i].last_access)
}

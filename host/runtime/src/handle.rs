//! [`PolicyHandle`]: the typed, thread-safe way the rest of the host calls a policy.
//!
//! A handle owns one slot's live instance. It serialises calls (an instance is single-threaded),
//! contains failures (a trapped, timed-out or out-of-memory instance is discarded and the next call
//! gets a fresh one, restored from the last checkpoint and the [`crate::journal`] of what it
//! observed since), stops calling a policy that keeps failing ([`crate::breaker`]), falls back to
//! LRU order when a ranking is needed anyway, and hot-swaps to a new component version carrying
//! the learned state over — rolling back when the new version keeps failing right after.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::breaker::{Admission, Backoff, BreakerConfig, CircuitBreaker, Transition};
use crate::component::PolicyComponent;
use crate::error::{PolicyError, Primitive};
use crate::instance::PolicyInstance;
use crate::journal::{Entry, Journal};
use crate::metrics::PolicyMetrics;
use crate::policy_log::PolicyLog;
use crate::sandbox::SandboxLimits;
use crate::types::{Event, Forecast, Item, PolicyInfo, SideEffect};
use crate::PolicyEngine;

// Hot swaps and their rollback: how a slot changes component, and goes back.
mod swap;
use swap::Previous;
pub use swap::SwapReport;

/// How one slot runs its policy.
#[derive(Debug, Clone)]
pub struct SlotConfig {
    /// Names the slot in logs, errors and metrics (e.g. `tenant-a/kv-cache`).
    pub label: String,
    /// The sandbox each instance of the slot runs in: memory cap, CPU per call, log rate.
    pub limits: SandboxLimits,
    /// Passed to the policy's `init`.
    pub init: Vec<(String, String)>,
    /// Take a snapshot at most this often (checked after `observe`), so that a restart after a
    /// failure loses at most this much learning. `None`: only on [`PolicyHandle::checkpoint`].
    pub checkpoint_every: Option<Duration>,
    /// When repeated failures suspend the slot, and for how long.
    pub breaker: BreakerConfig,
    /// A swap whose new component opens the breaker within this long of the swap is rolled back
    /// to the previous component and the state it had. `Duration::ZERO` disables rollback.
    pub rollback_window: Duration,
}

/// After a failed checkpoint, the next is not tried for this long, doubling up to
/// [`CHECKPOINT_RETRY_MAX`]: a policy whose `snapshot` fails would otherwise lose its instance on
/// every periodic checkpoint. Until then the journal keeps what a restart needs.
pub const CHECKPOINT_RETRY_FIRST: Duration = Duration::from_secs(10);
/// The longest pause between checkpoint attempts after repeated failures (see
/// [`CHECKPOINT_RETRY_FIRST`]).
pub const CHECKPOINT_RETRY_MAX: Duration = Duration::from_secs(600);

impl SlotConfig {
    /// The slot `label` with the default sandbox and breaker, no `init` pairs, a checkpoint at
    /// most every second and a one-minute rollback window.
    pub fn new(label: impl Into<String>) -> Self {
        Self {
            label: label.into(),
            limits: SandboxLimits::default(),
            init: Vec::new(),
            checkpoint_every: Some(Duration::from_secs(1)),
            breaker: BreakerConfig::default(),
            rollback_window: Duration::from_secs(60),
        }
    }

    /// The same slot with `pairs` as its `init` configuration (replacing any set before).
    pub fn with_init<'a>(mut self, pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        self.init = pairs.into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        self
    }

    /// The same slot under `limits`.
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

struct Live {
    component: Arc<PolicyComponent>,
    /// `None` after a failure until the next call re-creates it.
    instance: Option<PolicyInstance>,
    checkpoint: Option<Vec<u8>>,
    last_checkpoint: Instant,
    /// Inputs observed since `checkpoint`, replayed on a restart.
    journal: Journal,
    /// Checkpoints are not tried before this after one failed.
    checkpoint_paused_until: Option<Instant>,
    checkpoint_backoff: Backoff,
    breaker: CircuitBreaker,
    previous: Option<Previous>,
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
            config.limits.log_lines_per_second,
            config.limits.log_burst,
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
                journal: Journal::default(),
                checkpoint_paused_until: None,
                checkpoint_backoff: Backoff::new(CHECKPOINT_RETRY_FIRST, CHECKPOINT_RETRY_MAX),
                breaker: CircuitBreaker::new(&config.breaker),
                previous: None,
                info,
            }),
            config,
            metrics,
            log,
        })
    }

    /// The slot's label, as [`SlotConfig::label`] gave it.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The slot's counters: calls and time per primitive, failures, fallbacks, swaps.
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

    /// Run `f` on the live instance (re-creating it if needed), unless the breaker is open; on
    /// failure discard the instance and tell the breaker.
    fn call<R>(
        &self,
        live: &mut Live,
        primitive: Primitive,
        items: usize,
        f: impl FnOnce(&mut PolicyInstance) -> Result<R, PolicyError>,
    ) -> Result<R, PolicyError> {
        self.call_counted(live, primitive, items, Counts::TowardBreaker, f)
    }

    fn call_counted<R>(
        &self,
        live: &mut Live,
        primitive: Primitive,
        items: usize,
        counts: Counts,
        f: impl FnOnce(&mut PolicyInstance) -> Result<R, PolicyError>,
    ) -> Result<R, PolicyError> {
        if let Admission::Refuse { retry_in } = live.breaker.admit(Instant::now()) {
            self.metrics.record_skipped();
            return Err(PolicyError::CircuitOpen {
                policy: self.label.to_string(),
                primitive,
                retry_in,
            });
        }
        let started = Instant::now();
        let result = self.ensure_instance(live).and_then(f);
        self.metrics.record_call(primitive, items, started.elapsed());
        match &result {
            Ok(_) => {
                if let Some(instance) = &live.instance {
                    self.metrics.set_memory_bytes(instance.memory_bytes());
                }
                if live.breaker.record_success(primitive) == Transition::Closed {
                    self.metrics.set_circuit_open(false);
                    tracing::info!(policy = %self.label, "policy answered its trial call; circuit closed");
                }
            }
            Err(e) => self.on_failure(live, primitive, counts, e),
        }
        result
    }

    fn on_failure(&self, live: &mut Live, primitive: Primitive, counts: Counts, error: &PolicyError) {
        self.metrics.record_error(error);
        // A trapped instance cannot be entered again; any error leaves state we cannot trust.
        live.instance = None;
        let transition = match counts {
            Counts::TowardBreaker => live.breaker.record_failure(primitive, Instant::now()),
            Counts::NotTowardBreaker => Transition::None,
        };
        match transition {
            Transition::None | Transition::Closed => {
                tracing::warn!(policy = %self.label, error = %error, "policy call failed; instance discarded")
            }
            Transition::Opened {
                after_failures,
                backoff,
            } => {
                if self.roll_back(live, error) {
                    return;
                }
                self.metrics.set_circuit_open(true);
                // The one line for the whole outage: calls are skipped silently from here on.
                tracing::warn!(
                    policy = %self.label,
                    error = %error,
                    failures = after_failures,
                    retry_in = ?backoff,
                    "policy keeps failing; circuit open: its calls are skipped (rank answers in LRU order, act does nothing) until a trial call succeeds"
                );
            }
            Transition::Reopened { backoff } => {
                tracing::debug!(policy = %self.label, error = %error, retry_in = ?backoff, "trial call failed; circuit stays open")
            }
        }
    }

    fn ensure_instance<'a>(&self, live: &'a mut Live) -> Result<&'a mut PolicyInstance, PolicyError> {
        if live.instance.is_none() {
            let fresh = self.resume(&live.component, &mut live.checkpoint, &mut live.journal)?;
            self.metrics.record_restart();
            live.instance = Some(fresh);
        }
        Ok(live.instance.as_mut().expect("instance was just ensured"))
    }

    /// A fresh instance of `component` in the state `checkpoint` + `journal`. A checkpoint that
    /// does not restore is dropped with its journal (it may be what breaks the policy: start
    /// clean rather than crash-loop); a journal that does not replay is dropped and the instance
    /// resumes from the checkpoint alone.
    fn resume(
        &self,
        component: &PolicyComponent,
        checkpoint: &mut Option<Vec<u8>>,
        journal: &mut Journal,
    ) -> Result<PolicyInstance, PolicyError> {
        let mut fresh = self.fresh_instance(component)?;
        if let Some(state) = checkpoint.as_deref() {
            if let Err(e) = fresh.restore(state) {
                tracing::warn!(policy = %self.label, error = %e, "checkpoint not restorable; starting from scratch");
                *checkpoint = None;
                journal.clear();
                return self.fresh_instance(component);
            }
        }
        for entry in journal.entries() {
            let replayed = match entry {
                Entry::Events(events) => fresh.observe(events),
                Entry::Blocks(packed) => fresh.observe_blocks(packed),
            };
            if let Err(e) = replayed {
                tracing::warn!(policy = %self.label, error = %e, "replaying since the checkpoint failed; resuming from the checkpoint alone");
                journal.clear();
                // The journal is empty now: this recursion replays nothing.
                return self.resume(component, checkpoint, journal);
            }
        }
        Ok(fresh)
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
        let mut live = self.lock();
        self.call(&mut live, Primitive::Observe, events.len(), |i| i.observe(events))?;
        live.journal.record_events(events);
        self.maybe_checkpoint(&mut live);
        Ok(())
    }

    /// Deliver KV-block events in the packed form (see `agentrt_sdk::packed`).
    pub fn observe_blocks(&self, packed: &[u64]) -> Result<(), PolicyError> {
        let _span = tracing::trace_span!("policy.observe_blocks", policy = %self.label, words = packed.len()).entered();
        let mut live = self.lock();
        self.call(&mut live, Primitive::ObserveBlocks, packed.len() / 3, |i| {
            i.observe_blocks(packed)
        })?;
        live.journal.record_blocks(packed);
        Ok(())
    }

    /// One priority per item (higher = keep). Items cross the boundary packed (`score-packed`).
    ///
    /// A component of the 0.2 line knows one tier: its host-tier items score 0 without a call —
    /// the host pool's own recency order, every block stored — and only the GPU tier's reach it.
    /// A component older than 0.5 knows no `session` items: they score 0 likewise (the host's
    /// own order decides).
    pub fn score(&self, items: &[Item]) -> Result<Vec<f32>, PolicyError> {
        let _span = tracing::trace_span!("policy.score", policy = %self.label, items = items.len()).entered();
        self.score_known(items, false)
    }

    /// [`Self::score`] through the typed `score` export (`list<item>`): slower, kept to measure
    /// the difference and to check that a policy's two exports agree (the same items reach both).
    pub fn score_typed(&self, items: &[Item]) -> Result<Vec<f32>, PolicyError> {
        let _span = tracing::trace_span!("policy.score_typed", policy = %self.label, items = items.len()).entered();
        self.score_known(items, true)
    }

    /// The items the component's contract line has words for go to it (packed, or typed when
    /// `typed`); the others score 0.
    fn score_known(&self, items: &[Item], typed: bool) -> Result<Vec<f32>, PolicyError> {
        let mut live = self.lock();
        let line = live.component.contract_line();
        let unknown = |i: &Item| {
            (i.tier == crate::types::Tier::Host && !line.knows_tiers())
                || (i.kind == crate::types::ItemKind::Session && !line.knows_admission())
        };
        if !items.iter().any(unknown) {
            return self.call(&mut live, Primitive::Score, items.len(), |i| i.score(items, typed));
        }
        let known: Vec<Item> = items.iter().filter(|i| !unknown(i)).cloned().collect();
        let mut known_scores = if known.is_empty() {
            Vec::new()
        } else {
            self.call(&mut live, Primitive::Score, known.len(), |i| i.score(&known, typed))?
        }
        .into_iter();
        Ok(items
            .iter()
            .map(|i| {
                if unknown(i) {
                    0.0
                } else {
                    known_scores.next().unwrap_or(0.0)
                }
            })
            .collect())
    }

    /// Rank `items` from "keep most" to "evict first" by the policy's scores, ties by recency. If
    /// the policy fails (or its breaker is open), the order is LRU's and [`Ranking::fallback`]
    /// says why: a caller that needs an answer always gets one.
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

    /// What the policy expects within the next `horizon` steps (1 = the next step): which agent
    /// runs next, which tool it calls, which session ends, each with a probability.
    pub fn predict(&self, horizon: u32) -> Result<Vec<Forecast>, PolicyError> {
        let _span = tracing::debug_span!("policy.predict", policy = %self.label, horizon).entered();
        self.call(&mut self.lock(), Primitive::Predict, 0, |i| i.predict(horizon))
    }

    /// Side effects to carry out. While the breaker is open this is `Err(CircuitOpen)`: no side
    /// effects.
    pub fn act(&self) -> Result<Vec<SideEffect>, PolicyError> {
        let _span = tracing::debug_span!("policy.act", policy = %self.label).entered();
        self.call(&mut self.lock(), Primitive::Act, 0, |i| i.act())
    }

    /// The policy's learned state, serialised, without making it the checkpoint (that is
    /// [`Self::checkpoint`]): for copying state to another slot or inspecting it.
    pub fn snapshot(&self) -> Result<Vec<u8>, PolicyError> {
        let _span = tracing::debug_span!("policy.snapshot", policy = %self.label).entered();
        self.call(&mut self.lock(), Primitive::Snapshot, 0, |i| i.snapshot())
    }

    /// Replace the policy's state with `state` (a snapshot, possibly from another instance).
    pub fn restore(&self, state: &[u8]) -> Result<(), PolicyError> {
        let _span = tracing::debug_span!("policy.restore", policy = %self.label, bytes = state.len()).entered();
        let mut live = self.lock();
        self.call(&mut live, Primitive::Restore, 0, |i| i.restore(state))?;
        live.checkpoint = Some(state.to_vec());
        live.last_checkpoint = Instant::now();
        live.journal.clear();
        Ok(())
    }

    /// Snapshot now and keep it as the state a restart resumes from. Returns its size. On failure
    /// the previous checkpoint (and the journal since) stays what a restart resumes from.
    pub fn checkpoint(&self) -> Result<usize, PolicyError> {
        self.checkpoint_locked(&mut self.lock(), Counts::TowardBreaker)
    }

    /// Under one hold of the lock, so no event lands between the snapshot and clearing the journal.
    fn checkpoint_locked(&self, live: &mut Live, counts: Counts) -> Result<usize, PolicyError> {
        live.last_checkpoint = Instant::now();
        match self.call_counted(live, Primitive::Snapshot, 0, counts, |i| i.snapshot()) {
            Ok(state) => {
                let size = state.len();
                live.checkpoint = Some(state);
                live.journal.clear();
                live.checkpoint_paused_until = None;
                live.checkpoint_backoff.reset();
                Ok(size)
            }
            Err(e) => {
                if !e.is_circuit_open() {
                    self.metrics.record_checkpoint_failure();
                    let pause = live.checkpoint_backoff.step();
                    live.checkpoint_paused_until = Some(Instant::now() + pause);
                }
                Err(e)
            }
        }
    }

    fn maybe_checkpoint(&self, live: &mut Live) {
        let Some(every) = self.config.checkpoint_every else {
            return;
        };
        if live.last_checkpoint.elapsed() < every
            || live.checkpoint_paused_until.is_some_and(|until| Instant::now() < until)
        {
            return;
        }
        // A policy that serves but cannot snapshot is not suspended for it: the checkpoint
        // backoff already keeps its failures rare, and the journal covers the gap.
        if let Err(e) = self.checkpoint_locked(live, Counts::NotTowardBreaker) {
            if !e.is_circuit_open() {
                tracing::warn!(policy = %self.label, error = %e, "periodic checkpoint failed; keeping the previous one and pausing checkpoints");
            }
        }
    }
}

/// Whether a failed call counts toward opening the slot's breaker.
#[derive(Clone, Copy)]
enum Counts {
    TowardBreaker,
    /// Periodic checkpoints: the host's own housekeeping, not a call anyone waits on.
    NotTowardBreaker,
}

/// The host's ranking rule on a policy's scores (shared with the SDK's harness).
pub fn keep_order(items: &[Item], scores: &[f32]) -> Vec<usize> {
    agentrt_sdk::ranking::keep_order(scores, |i| items[i].last_access)
}

/// LRU order: the ranking rule with every score equal.
pub fn lru_order(items: &[Item]) -> Vec<usize> {
    agentrt_sdk::ranking::keep_order(&vec![0.0; items.len()], |i| items[i].last_access)
}

//! Hot swaps of a [`PolicyHandle`]'s component, and the rollback to the component before when
//! the new one keeps failing within the slot's [rollback window](super::SlotConfig::rollback_window).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Live, PolicyHandle};
use crate::component::PolicyComponent;
use crate::error::PolicyError;
use crate::journal::Journal;
use crate::types::PolicyInfo;

/// What a hot swap did.
#[derive(Debug, Clone)]
pub struct SwapReport {
    /// Bytes of state carried from the old instance into the new one.
    pub state_bytes: usize,
    /// Time callers were held while the swap ran.
    pub paused: Duration,
    /// The name of the component that ran before ([`PolicyComponent::name`]).
    pub from: String,
    /// The name of the component that runs now.
    pub to: String,
}

/// The component a swap replaced, kept for the slot's
/// [rollback window](super::SlotConfig::rollback_window).
pub(super) struct Previous {
    component: Arc<PolicyComponent>,
    state: Option<Vec<u8>>,
    info: PolicyInfo,
    swapped_at: Instant,
}

impl PolicyHandle {
    /// Hot swap: run `next` in this slot from now on, handing it the current state.
    ///
    /// Callers are held (not failed) for the duration; events sent meanwhile wait and reach the
    /// new instance. If the new component cannot start or refuses the state, the old one keeps
    /// running and the error is returned. If it starts but then keeps failing (opens the breaker)
    /// within the slot's [rollback window](super::SlotConfig::rollback_window), the slot goes back
    /// to the old one.
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
        // The old component's state: carried over, and kept for a rollback.
        let old_state = match live.instance.as_mut().map(|i| i.snapshot()) {
            Some(Ok(state)) => Some(state),
            // No live instance, or it failed to snapshot: the last checkpoint is the best we have.
            other => {
                if matches!(other, Some(Err(_))) {
                    live.instance = None;
                }
                live.checkpoint.clone()
            }
        };
        let state = if carry_state { old_state.clone() } else { None };
        let mut fresh = self.fresh_instance(&next)?;
        if let Some(state) = &state {
            fresh.restore(state)?;
        }
        let info = fresh.info()?;
        let old = live.instance.replace(fresh);
        let old_component = std::mem::replace(&mut live.component, next.clone());
        let old_info = std::mem::replace(&mut live.info, info);
        let from = old_component.name().to_string();
        live.previous = Some(Previous {
            component: old_component,
            state: old_state,
            info: old_info,
            swapped_at: Instant::now(),
        });
        live.checkpoint = state.clone();
        live.last_checkpoint = Instant::now();
        live.journal.clear();
        live.checkpoint_paused_until = None;
        live.checkpoint_backoff.reset();
        live.breaker.reset();
        self.metrics.set_circuit_open(false);
        let paused = paused_at.elapsed();
        drop(live);
        // Dropping a Store costs ~0.2 ms; do it after callers are released.
        drop(old);
        self.metrics.record_swap(paused);
        Ok(SwapReport {
            state_bytes: state.map_or(0, |s| s.len()),
            paused,
            from,
            to: next.name().to_string(),
        })
    }

    /// If the component that keeps failing was swapped in moments ago, go back to the one before,
    /// with the state it had. Returns whether it did.
    pub(super) fn roll_back(&self, live: &mut Live, error: &PolicyError) -> bool {
        let window = self.config.rollback_window;
        let Some(previous) = live.previous.take_if(|p| p.swapped_at.elapsed() <= window) else {
            return false;
        };
        let mut state = previous.state;
        let instance = match self.resume(&previous.component, &mut state, &mut Journal::default()) {
            Ok(instance) => instance,
            Err(e) => {
                tracing::warn!(policy = %self.label, error = %e, "rollback failed: the previous component does not start");
                return false;
            }
        };
        let failed = std::mem::replace(&mut live.component, previous.component);
        tracing::warn!(
            policy = %self.label,
            error = %error,
            failed = failed.name(),
            restored = live.component.name(),
            "swapped-in component keeps failing; rolled back to the previous one and its state"
        );
        live.instance = Some(instance);
        live.info = previous.info;
        live.checkpoint = state;
        live.last_checkpoint = Instant::now();
        live.journal.clear();
        live.breaker.reset();
        self.metrics.record_rollback();
        true
    }
}

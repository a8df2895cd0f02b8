//! Carrying out what a tenant's policies answer, off the critical path: after each request
//! arrives and finishes, every slot of the tenant is asked to `act()` (on its worker; a slot whose
//! `act` is already queued behind the request's events answers with that call), the answers are
//! merged ([`merge_side_effects`]: `deny` wins, one warm-up per anchor, the first slot's
//! priority), and each effect is carried out — a priority or a denial recorded on the tenant, a
//! warm-up sent, a pin handed to the engine adapter.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use agentrt_runtime::merge_side_effects;
use agentrt_runtime::types::SideEffect;
use tracing::Instrument as _;

use crate::metrics::ProxyMetrics;
use crate::names::{DEFAULT_TENANT, KV_SLOT};
use crate::policy::warmup::Warmups;
use crate::tenant::Tenant;

/// What carries out side effects: the warm-ups, and the engine's pins when the vLLM eviction
/// service runs.
pub struct Effects {
    warmups: Arc<Warmups>,
    pins: Option<Arc<agentrt_eviction::PinTable>>,
    metrics: Arc<ProxyMetrics>,
}

impl Effects {
    /// Effects carried out by `warmups` and, when the vLLM eviction service runs, `pins`; failed
    /// `act` calls and denied sessions are counted in `metrics`.
    pub fn new(
        warmups: Arc<Warmups>,
        pins: Option<Arc<agentrt_eviction::PinTable>>,
        metrics: Arc<ProxyMetrics>,
    ) -> Self {
        Self { warmups, pins, metrics }
    }

    /// Ask each of `tenant`'s slots for side effects and carry out their merge, in the
    /// background.
    pub fn carry_out(self: &Arc<Self>, tenant: Arc<Tenant>) {
        let slots = std::iter::once((KV_SLOT, &tenant.worker))
            .chain(tenant.extra_slots.iter().map(|s| (s.name.as_str(), &s.worker)));
        let answers: Vec<_> = slots
            .filter_map(|(slot, worker)| worker.act().map(|answer| (slot.to_string(), answer)))
            .collect();
        if answers.is_empty() {
            return;
        }
        let effects = self.clone();
        let carried_out = async move {
            let mut per_slot = Vec::with_capacity(answers.len());
            for (slot, answer) in answers {
                match answer.await {
                    // The worker is gone: the tenant's policy is shutting down.
                    Err(_) => {}
                    Ok(Ok(effects)) => per_slot.push(effects),
                    Ok(Err(e)) => {
                        effects.metrics.policy_errors.fetch_add(1, Relaxed);
                        // A suspended policy was reported once when its circuit opened.
                        if !e.is_circuit_open() {
                            tracing::warn!(tenant = %tenant.name, slot, error = %e, "policy act failed");
                        }
                    }
                }
            }
            for effect in merge_side_effects(per_slot) {
                effects.apply(&tenant, effect).await;
            }
        };
        // In the request's span: the warm-ups it leads to are that trace's.
        tokio::spawn(carried_out.instrument(tracing::Span::current()));
    }

    async fn apply(&self, tenant: &Arc<Tenant>, effect: SideEffect) {
        match effect {
            SideEffect::SetPriority(p) => tenant.verdicts.set_priority(p.session, p.priority),
            SideEffect::Deny(deny) => {
                tracing::info!(tenant = %tenant.name, session = deny.session, reason = %deny.reason, "session denied by policy");
                self.metrics.sessions_denied.fetch_add(1, Relaxed);
                tenant.verdicts.deny(deny.session, deny.reason);
            }
            SideEffect::WarmPrefix(warm) => self.warmups.warm(tenant, warm).await,
            // Pins protect blocks inside the engine, whose eviction only the engine tenant's
            // policy ranks: the eviction service applies them.
            SideEffect::Pin(pin) if tenant.name == DEFAULT_TENANT => {
                if let Some(pins) = &self.pins {
                    pins.pin(&pin);
                }
            }
            SideEffect::Unpin(pin) if tenant.name == DEFAULT_TENANT => {
                if let Some(pins) = &self.pins {
                    pins.unpin(&pin);
                }
            }
            other => {
                tracing::debug!(tenant = %tenant.name, effect = ?other, "side effect not carried out by the proxy")
            }
        }
    }
}

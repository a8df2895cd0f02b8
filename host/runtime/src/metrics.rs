//! Counters for one policy slot, and the families `/metrics` shows of every slot's.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use agentrt_exposition::{Exposition, Family, Figure, Kind};

use crate::error::{PolicyError, Primitive};

/// Kinds of failed calls. A call refused by an open breaker was not made: it is counted in
/// `calls_skipped`, not here.
const ERROR_KINDS: [&str; 9] = [
    "trap",
    "deadline",
    "fuel",
    "oom",
    "rejected",
    "bad_output",
    "too_large",
    "unavailable",
    "pool_full",
];

/// Calls, time and failures of one policy slot. All counters only grow.
#[derive(Debug, Default)]
pub struct PolicyMetrics {
    calls: [AtomicU64; Primitive::ALL.len()],
    nanos: [AtomicU64; Primitive::ALL.len()],
    /// Items the calls carried (events for observe, items for score).
    items: [AtomicU64; Primitive::ALL.len()],
    errors: [AtomicU64; ERROR_KINDS.len()],
    fallbacks: AtomicU64,
    restarts: AtomicU64,
    swaps: AtomicU64,
    /// How long the last swap held callers, and all swaps together (nanoseconds).
    last_swap_pause_nanos: AtomicU64,
    swap_pause_nanos: AtomicU64,
    memory_bytes: AtomicU64,
    /// Calls not made because the breaker was open.
    calls_skipped: AtomicU64,
    /// 1 while the breaker is open (or half-open), else 0.
    circuit_open: AtomicU64,
    circuit_opens: AtomicU64,
    checkpoint_failures: AtomicU64,
    rollbacks: AtomicU64,
    /// `host.log` lines over the slot's rate limit (counted by [`crate::policy_log::PolicyLog`]).
    log_lines_dropped: Arc<AtomicU64>,
}

fn index(p: Primitive) -> usize {
    Primitive::ALL
        .iter()
        .position(|q| *q == p)
        .expect("every primitive is in ALL")
}

impl PolicyMetrics {
    pub(crate) fn record_call(&self, p: Primitive, items: usize, elapsed: Duration) {
        let i = index(p);
        self.calls[i].fetch_add(1, Relaxed);
        self.items[i].fetch_add(items as u64, Relaxed);
        self.nanos[i].fetch_add(elapsed.as_nanos() as u64, Relaxed);
    }
    pub(crate) fn record_error(&self, e: &PolicyError) {
        if let Some(i) = ERROR_KINDS.iter().position(|k| *k == e.kind()) {
            self.errors[i].fetch_add(1, Relaxed);
        }
    }
    pub(crate) fn record_skipped(&self) {
        self.calls_skipped.fetch_add(1, Relaxed);
    }
    pub(crate) fn set_circuit_open(&self, open: bool) {
        if open && self.circuit_open.swap(1, Relaxed) == 0 {
            self.circuit_opens.fetch_add(1, Relaxed);
        } else if !open {
            self.circuit_open.store(0, Relaxed);
        }
    }
    pub(crate) fn record_checkpoint_failure(&self) {
        self.checkpoint_failures.fetch_add(1, Relaxed);
    }
    pub(crate) fn record_rollback(&self) {
        self.rollbacks.fetch_add(1, Relaxed);
    }
    pub(crate) fn record_fallback(&self) {
        self.fallbacks.fetch_add(1, Relaxed);
    }
    pub(crate) fn record_restart(&self) {
        self.restarts.fetch_add(1, Relaxed);
    }
    pub(crate) fn record_swap(&self, paused: Duration) {
        let nanos = paused.as_nanos() as u64;
        self.last_swap_pause_nanos.store(nanos, Relaxed);
        self.swap_pause_nanos.fetch_add(nanos, Relaxed);
        self.swaps.fetch_add(1, Relaxed);
    }
    pub(crate) fn set_memory_bytes(&self, bytes: usize) {
        self.memory_bytes.store(bytes as u64, Relaxed);
    }

    /// Calls of `p` made, failed ones included (not those an open breaker refused).
    pub fn calls(&self, p: Primitive) -> u64 {
        self.calls[index(p)].load(Relaxed)
    }
    /// Failed calls of one kind ([`PolicyError::kind`]); 0 for a kind that is not counted.
    pub fn errors(&self, kind: &str) -> u64 {
        ERROR_KINDS
            .iter()
            .position(|k| *k == kind)
            .map_or(0, |i| self.errors[i].load(Relaxed))
    }
    /// Rankings answered in LRU order because the policy failed or was suspended
    /// ([`crate::PolicyHandle::rank`]).
    pub fn fallbacks(&self) -> u64 {
        self.fallbacks.load(Relaxed)
    }
    /// Instances created after the first (after a failure).
    pub fn restarts(&self) -> u64 {
        self.restarts.load(Relaxed)
    }
    /// Hot swaps done (rollbacks not included).
    pub fn swaps(&self) -> u64 {
        self.swaps.load(Relaxed)
    }
    /// How long the last hot swap held the slot's callers; `None` before the first swap.
    pub fn last_swap_pause(&self) -> Option<Duration> {
        (self.swaps() > 0).then(|| Duration::from_nanos(self.last_swap_pause_nanos.load(Relaxed)))
    }
    /// How long all hot swaps together held the slot's callers (divided by [`Self::swaps`]: the
    /// mean pause).
    pub fn swap_pause_total(&self) -> Duration {
        Duration::from_nanos(self.swap_pause_nanos.load(Relaxed))
    }
    /// Failed calls of each kind (`trap`, `deadline`, …), every kind listed.
    pub fn errors_by_kind(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        ERROR_KINDS
            .iter()
            .zip(&self.errors)
            .map(|(kind, count)| (*kind, count.load(Relaxed)))
    }
    /// Calls refused without calling the policy because its breaker was open.
    pub fn calls_skipped(&self) -> u64 {
        self.calls_skipped.load(Relaxed)
    }
    /// True while the breaker is open or half-open (waiting on a trial call).
    pub fn circuit_open(&self) -> bool {
        self.circuit_open.load(Relaxed) != 0
    }
    /// Times the breaker opened (from closed).
    pub fn circuit_opens(&self) -> u64 {
        self.circuit_opens.load(Relaxed)
    }
    /// Periodic or explicit checkpoints that failed (the previous checkpoint was kept).
    pub fn checkpoint_failures(&self) -> u64 {
        self.checkpoint_failures.load(Relaxed)
    }
    /// Swaps undone because the new component kept failing right after it.
    pub fn rollbacks(&self) -> u64 {
        self.rollbacks.load(Relaxed)
    }
    /// Bytes of all the live instance's memories (and tables), as the limiter counts them.
    pub fn memory_bytes(&self) -> u64 {
        self.memory_bytes.load(Relaxed)
    }
    /// `host.log` lines dropped for going over the slot's rate limit.
    pub fn log_lines_dropped(&self) -> u64 {
        self.log_lines_dropped.load(Relaxed)
    }
    pub(crate) fn log_lines_dropped_counter(&self) -> Arc<AtomicU64> {
        self.log_lines_dropped.clone()
    }
}

/// A slot's series are labelled with its tenant and its name.
pub type SlotLabels<'a> = [(&'static str, &'a str); 2];

/// Every family of the slots' series, each with one series per slot (and per primitive or error
/// kind): calls, items and time only for primitives called at least once.
pub fn report_slots(out: &mut Exposition<'_>, slots: &[(SlotLabels<'_>, &PolicyMetrics)]) -> fmt::Result {
    let called = |read: fn(&PolicyMetrics, usize) -> Figure| {
        slots.iter().flat_map(move |(labels, m)| {
            Primitive::ALL
                .iter()
                .enumerate()
                .filter(|(i, _)| m.calls[*i].load(Relaxed) > 0)
                .map(move |(i, p)| {
                    let [tenant, slot] = *labels;
                    ([tenant, slot, ("primitive", p.name())], read(m, i))
                })
        })
    };
    out.counters(
        "agentrt_policy_calls_total",
        "Calls into a policy, by primitive.",
        called(|m, i| m.calls[i].load(Relaxed).into()),
    )?;
    out.counters(
        "agentrt_policy_items_total",
        "Events or items carried by those calls.",
        called(|m, i| m.items[i].load(Relaxed).into()),
    )?;
    out.counters(
        "agentrt_policy_call_seconds_total",
        "Time spent inside policy calls.",
        called(|m, i| (m.nanos[i].load(Relaxed) as f64 / 1e9).into()),
    )?;
    let errors = slots.iter().flat_map(|(labels, m)| {
        let [tenant, slot] = *labels;
        m.errors_by_kind()
            .map(move |(kind, n)| ([tenant, slot, ("kind", kind)], n))
    });
    out.counters("agentrt_policy_errors_total", "Failed policy calls, by kind.", errors)?;
    out.table(&SLOT_FAMILIES, slots)
}

/// The slot's series with no label of their own.
const SLOT_FAMILIES: [Family<PolicyMetrics>; 12] = [
    Family {
        name: "agentrt_policy_fallbacks_total",
        kind: Kind::Counter,
        help: "Rankings that fell back to LRU because the policy failed.",
        read: |m| m.fallbacks().into(),
    },
    Family {
        name: "agentrt_policy_restarts_total",
        kind: Kind::Counter,
        help: "Instances re-created after a failure.",
        read: |m| m.restarts().into(),
    },
    Family {
        name: "agentrt_policy_swaps_total",
        kind: Kind::Counter,
        help: "Hot swaps completed.",
        read: |m| m.swaps().into(),
    },
    Family {
        name: "agentrt_policy_last_swap_pause_seconds",
        kind: Kind::Gauge,
        help: "How long the last hot swap held the slot's callers (0 before the first).",
        read: |m| m.last_swap_pause().unwrap_or_default().as_secs_f64().into(),
    },
    Family {
        name: "agentrt_policy_swap_pause_seconds_total",
        kind: Kind::Counter,
        help: "How long all hot swaps together held the slot's callers.",
        read: |m| m.swap_pause_total().as_secs_f64().into(),
    },
    Family {
        name: "agentrt_policy_log_lines_dropped_total",
        kind: Kind::Counter,
        help: "Policy log lines dropped over the slot's rate limit.",
        read: |m| m.log_lines_dropped().into(),
    },
    Family {
        name: "agentrt_policy_memory_bytes",
        kind: Kind::Gauge,
        help: "Linear memories and tables of the live instance, summed.",
        read: |m| m.memory_bytes().into(),
    },
    Family {
        name: "agentrt_policy_calls_skipped_total",
        kind: Kind::Counter,
        help: "Calls not made because the slot's circuit breaker was open.",
        read: |m| m.calls_skipped().into(),
    },
    Family {
        name: "agentrt_policy_circuit_open",
        kind: Kind::Gauge,
        help: "1 while the slot's circuit breaker is open after repeated failures.",
        read: |m| u64::from(m.circuit_open()).into(),
    },
    Family {
        name: "agentrt_policy_circuit_opens_total",
        kind: Kind::Counter,
        help: "Times the slot's circuit breaker opened.",
        read: |m| m.circuit_opens().into(),
    },
    Family {
        name: "agentrt_policy_checkpoint_failures_total",
        kind: Kind::Counter,
        help: "Checkpoints that failed; the previous one was kept.",
        read: |m| m.checkpoint_failures().into(),
    },
    Family {
        name: "agentrt_policy_rollbacks_total",
        kind: Kind::Counter,
        help: "Swaps rolled back because the new component kept failing.",
        read: |m| m.rollbacks().into(),
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swap_pauses_are_kept_as_the_last_one_and_a_total() {
        let metrics = PolicyMetrics::default();
        assert_eq!(metrics.last_swap_pause(), None, "no swap yet");
        metrics.record_swap(Duration::from_micros(300));
        metrics.record_swap(Duration::from_micros(120));
        assert_eq!(metrics.swaps(), 2);
        assert_eq!(metrics.last_swap_pause(), Some(Duration::from_micros(120)));
        assert_eq!(metrics.swap_pause_total(), Duration::from_micros(420));
        struct OneSlot(PolicyMetrics);
        impl agentrt_exposition::Report for OneSlot {
            fn report(&self, out: &mut Exposition<'_>) -> fmt::Result {
                report_slots(out, &[([("tenant", "a"), ("slot", "kv")], &self.0)])
            }
        }
        let out = agentrt_exposition::render_one(Arc::new(OneSlot(metrics)));
        assert!(
            out.contains("agentrt_policy_last_swap_pause_seconds{tenant=\"a\",slot=\"kv\"} 0.00012\n"),
            "{out}"
        );
        assert!(
            out.contains("agentrt_policy_swap_pause_seconds_total{tenant=\"a\",slot=\"kv\"} 0.00042\n"),
            "{out}"
        );
        assert!(
            !out.contains("primitive="),
            "no primitive was called, so no per-primitive series: {out}"
        );
    }

    #[test]
    fn errors_by_kind_lists_every_kind() {
        let metrics = PolicyMetrics::default();
        metrics.record_error(&PolicyError::OutOfMemory {
            policy: "a/kv".into(),
            primitive: Primitive::Observe,
            cap_bytes: 1 << 20,
        });
        let kinds: Vec<_> = metrics.errors_by_kind().collect();
        assert_eq!(kinds.len(), ERROR_KINDS.len());
        assert!(kinds.contains(&("oom", 1)) && kinds.contains(&("trap", 0)), "{kinds:?}");
    }
}

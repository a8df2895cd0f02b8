//! Counters for one policy slot, rendered in the Prometheus text format.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use crate::error::{PolicyError, Primitive};

const ERROR_KINDS: [&str; 7] = [
    "trap",
    "deadline",
    "fuel",
    "oom",
    "rejected",
    "bad_output",
    "unavailable",
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
    memory_bytes: AtomicU64,
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
        let i = ERROR_KINDS
            .iter()
            .position(|k| *k == e.kind())
            .expect("every error kind is listed");
        self.errors[i].fetch_add(1, Relaxed);
    }
    pub(crate) fn record_fallback(&self) {
        self.fallbacks.fetch_add(1, Relaxed);
    }
    pub(crate) fn record_restart(&self) {
        self.restarts.fetch_add(1, Relaxed);
    }
    pub(crate) fn record_swap(&self) {
        self.swaps.fetch_add(1, Relaxed);
    }
    pub(crate) fn set_memory_bytes(&self, bytes: usize) {
        self.memory_bytes.store(bytes as u64, Relaxed);
    }

    pub fn calls(&self, p: Primitive) -> u64 {
        self.calls[index(p)].load(Relaxed)
    }
    pub fn errors(&self, kind: &str) -> u64 {
        ERROR_KINDS
            .iter()
            .position(|k| *k == kind)
            .map_or(0, |i| self.errors[i].load(Relaxed))
    }
    pub fn fallbacks(&self) -> u64 {
        self.fallbacks.load(Relaxed)
    }
    /// Instances created after the first (after a failure).
    pub fn restarts(&self) -> u64 {
        self.restarts.load(Relaxed)
    }
    pub fn swaps(&self) -> u64 {
        self.swaps.load(Relaxed)
    }
    pub fn log_lines_dropped(&self) -> u64 {
        self.log_lines_dropped.load(Relaxed)
    }
    pub(crate) fn log_lines_dropped_counter(&self) -> Arc<AtomicU64> {
        self.log_lines_dropped.clone()
    }

    /// Append this slot's series to `out`; `labels` is e.g. `tenant="a",slot="kv"`.
    pub fn render_prometheus(&self, labels: &str, out: &mut String) {
        for (i, p) in Primitive::ALL.iter().enumerate() {
            let calls = self.calls[i].load(Relaxed);
            if calls == 0 {
                continue;
            }
            let _ = writeln!(out, "agentrt_policy_calls_total{{{labels},primitive=\"{p}\"}} {calls}");
            let _ = writeln!(
                out,
                "agentrt_policy_items_total{{{labels},primitive=\"{p}\"}} {}",
                self.items[i].load(Relaxed)
            );
            let secs = self.nanos[i].load(Relaxed) as f64 / 1e9;
            let _ = writeln!(
                out,
                "agentrt_policy_call_seconds_total{{{labels},primitive=\"{p}\"}} {secs}"
            );
        }
        for (i, kind) in ERROR_KINDS.iter().enumerate() {
            let _ = writeln!(
                out,
                "agentrt_policy_errors_total{{{labels},kind=\"{kind}\"}} {}",
                self.errors[i].load(Relaxed)
            );
        }
        let _ = writeln!(out, "agentrt_policy_fallbacks_total{{{labels}}} {}", self.fallbacks());
        let _ = writeln!(out, "agentrt_policy_restarts_total{{{labels}}} {}", self.restarts());
        let _ = writeln!(out, "agentrt_policy_swaps_total{{{labels}}} {}", self.swaps());
        let _ = writeln!(
            out,
            "agentrt_policy_log_lines_dropped_total{{{labels}}} {}",
            self.log_lines_dropped()
        );
        let _ = writeln!(
            out,
            "agentrt_policy_memory_bytes{{{labels}}} {}",
            self.memory_bytes.load(Relaxed)
        );
    }
}

/// `# HELP`/`# TYPE` lines for the series above, written once per exposition.
pub fn prometheus_header(out: &mut String) {
    for (name, kind, help) in [
        (
            "agentrt_policy_calls_total",
            "counter",
            "Calls into a policy, by primitive.",
        ),
        (
            "agentrt_policy_items_total",
            "counter",
            "Events or items carried by those calls.",
        ),
        (
            "agentrt_policy_call_seconds_total",
            "counter",
            "Time spent inside policy calls.",
        ),
        (
            "agentrt_policy_errors_total",
            "counter",
            "Failed policy calls, by kind.",
        ),
        (
            "agentrt_policy_fallbacks_total",
            "counter",
            "Rankings that fell back to LRU because the policy failed.",
        ),
        (
            "agentrt_policy_restarts_total",
            "counter",
            "Instances re-created after a failure.",
        ),
        ("agentrt_policy_swaps_total", "counter", "Hot swaps completed."),
        (
            "agentrt_policy_log_lines_dropped_total",
            "counter",
            "Policy log lines dropped over the slot's rate limit.",
        ),
        (
            "agentrt_policy_memory_bytes",
            "gauge",
            "Linear memory of the live instance.",
        ),
    ] {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }
}

//! What `/metrics` shows of replica routing: the router's decisions and failures, agentrt's hints,
//! each replica's requests in flight and, when they run, each replica's plugin's counters
//! ([`crate::engine::plugin_metrics`]).

use std::sync::atomic::Ordering::Relaxed;

use super::ReplicaRouting;
use crate::prometheus::{render_counters, Report};

impl Report for ReplicaRouting {
    /// Prometheus text of the routing counters and each replica's requests in flight.
    fn render(&self, out: &mut String) {
        use std::fmt::Write;
        let c = &self.router.counters;
        render_counters(
            out,
            &[
                (
                    "agentrt_router_routed_total",
                    "Requests placed by the router.",
                    &c.by_router,
                ),
                (
                    "agentrt_router_fallback_total",
                    "Requests placed by session-sticky hashing (no router, or it failed or was slow).",
                    &c.by_fallback,
                ),
                (
                    "agentrt_router_errors_total",
                    "Router calls that failed.",
                    &c.router_errors,
                ),
                (
                    "agentrt_router_deadlines_total",
                    "Router calls past the deadline.",
                    &c.router_deadlines,
                ),
                (
                    "agentrt_router_lifecycle_errors_total",
                    "Booking updates (prefill complete, release) the router did not take.",
                    &c.lifecycle_errors,
                ),
                (
                    "agentrt_router_hinted_total",
                    "Placements given an affinity hint (the replica that last got the agent's anchor).",
                    &self.counts.hinted,
                ),
                (
                    "agentrt_router_tokenize_failed_total",
                    "Requests routed without token ids (the replica's /tokenize did not answer).",
                    &self.counts.tokenize_failed,
                ),
                (
                    "agentrt_replica_failures_total",
                    "Requests a replica failed (no connection or no answer in time); it is left out for 5 s.",
                    &self.counts.replica_failures,
                ),
                (
                    "agentrt_router_anchor_evictions_total",
                    "Agents' anchors evicted from a replica (the block starting their prompt), as its plugin reported; that replica is no longer hinted for them.",
                    &self.counts.anchor_evictions,
                ),
                (
                    "agentrt_replica_retried_total",
                    "Requests placed again because their replica refused the connection (nothing was sent).",
                    &self.counts.retried,
                ),
                (
                    "agentrt_router_warmups_placed_total",
                    "Warm-ups sent where the router expects the agent's next call.",
                    &self.counts.warmups_placed,
                ),
            ],
        );
        let _ = writeln!(
            out,
            "# HELP agentrt_replica_in_flight Requests in flight per replica.\n# TYPE agentrt_replica_in_flight gauge"
        );
        for replica in self.replicas.all() {
            let _ = writeln!(
                out,
                "agentrt_replica_in_flight{{replica=\"{}\"}} {}",
                replica.name,
                self.in_flight[&replica.id].load(Relaxed)
            );
        }
        let engines = self.engine_metrics.lock().unwrap_or_else(|p| p.into_inner());
        if engines.is_empty() {
            return;
        }
        let counts: Vec<(Option<&str>, agentrt_eviction::EvictionCounts)> = engines
            .iter()
            .map(|(name, m)| (Some(name.as_str()), m.counts()))
            .collect();
        crate::engine::plugin_metrics::render_plugin_series(out, "agentrt_replica", &counts);
    }
}

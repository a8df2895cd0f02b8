//! What `/metrics` shows of replica routing: the router's decisions and failures, agentrt's placement hints,
//! each replica's requests in flight and, when they run, each replica's plugin's counters
//! ([`crate::engine::plugin_metrics`]).

use std::fmt;
use std::sync::atomic::Ordering::Relaxed;

use agentrt_exposition::{Exposition, Family, Kind, Report, NO_LABELS};

use super::ReplicaRouting;

impl Report for ReplicaRouting {
    /// The routing counters, each replica's requests in flight and its plugin's series.
    fn report(&self, out: &mut Exposition<'_>) -> fmt::Result {
        out.table(&ROUTING_COUNTERS, &[(NO_LABELS, self)])?;
        out.gauges(
            "agentrt_replica_in_flight",
            "Requests in flight per replica.",
            self.replicas.all().iter().map(|replica| {
                (
                    [("replica", replica.name.as_str())],
                    self.in_flight[&replica.id].load(Relaxed),
                )
            }),
        )?;
        let engines = self.engine_metrics.lock().unwrap_or_else(|p| p.into_inner());
        if engines.is_empty() {
            return Ok(());
        }
        let counts: Vec<(Option<&str>, agentrt_eviction::EvictionCounts)> = engines
            .iter()
            .map(|(name, m)| (Some(name.as_str()), m.counts()))
            .collect();
        crate::engine::plugin_metrics::report_plugin_series(out, "agentrt_replica", &counts)
    }
}

/// The router's decisions and failures, and agentrt's placement hints and retries.
const ROUTING_COUNTERS: [Family<ReplicaRouting>; 11] = [
    Family {
        name: "agentrt_router_routed_total",
        kind: Kind::Counter,
        help: "Requests placed by the router.",
        read: |r| r.router.counters.by_router.load(Relaxed).into(),
    },
    Family {
        name: "agentrt_router_fallback_total",
        kind: Kind::Counter,
        help: "Requests placed by session-sticky hashing (no router, or it failed or was slow).",
        read: |r| r.router.counters.by_fallback.load(Relaxed).into(),
    },
    Family {
        name: "agentrt_router_errors_total",
        kind: Kind::Counter,
        help: "Router calls that failed.",
        read: |r| r.router.counters.router_errors.load(Relaxed).into(),
    },
    Family {
        name: "agentrt_router_deadlines_total",
        kind: Kind::Counter,
        help: "Router calls past the deadline.",
        read: |r| r.router.counters.router_deadlines.load(Relaxed).into(),
    },
    Family {
        name: "agentrt_router_lifecycle_errors_total",
        kind: Kind::Counter,
        help: "Booking updates (prefill complete, release) the router did not take.",
        read: |r| r.router.counters.lifecycle_errors.load(Relaxed).into(),
    },
    Family {
        name: "agentrt_router_hinted_total",
        kind: Kind::Counter,
        help: "Placements given an affinity hint (the replica that last got the agent's anchor).",
        read: |r| r.counts.hinted.load(Relaxed).into(),
    },
    Family {
        name: "agentrt_router_tokenize_failed_total",
        kind: Kind::Counter,
        help: "Requests routed without token ids (the replica's /tokenize did not answer).",
        read: |r| r.counts.tokenize_failed.load(Relaxed).into(),
    },
    Family {
        name: "agentrt_replica_failures_total",
        kind: Kind::Counter,
        help: "Requests a replica failed (no connection or no answer in time); it is left out for 5 s.",
        read: |r| r.counts.replica_failures.load(Relaxed).into(),
    },
    Family {
        name: "agentrt_router_anchor_evictions_total",
        kind: Kind::Counter,
        help: "Agents' anchors evicted from a replica (the block starting their prompt), as its plugin reported; that replica is no longer hinted for them.",
        read: |r| r.counts.anchor_evictions.load(Relaxed).into(),
    },
    Family {
        name: "agentrt_replica_retried_total",
        kind: Kind::Counter,
        help: "Requests placed again because their replica refused the connection (nothing was sent).",
        read: |r| r.counts.retried.load(Relaxed).into(),
    },
    Family {
        name: "agentrt_router_warmups_placed_total",
        kind: Kind::Counter,
        help: "Warm-ups sent where the router expects the agent's next call.",
        read: |r| r.counts.warmups_placed.load(Relaxed).into(),
    },
];

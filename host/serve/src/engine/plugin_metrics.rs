//! The eviction path on `/metrics`: whether the engine's plugin is connected, the rankings it
//! asked for, those it gave up waiting for, and those the policy could not answer — one set of
//! series for one engine (`agentrt_engine_*`, `--eviction-socket`) and per replica
//! (`agentrt_replica_*{replica}`, `--replica-eviction-socket`).

use std::fmt;
use std::sync::Arc;

use agentrt_eviction::{EvictionCounts, EvictionMetrics};
use agentrt_exposition::{Exposition, Kind, Report};

type Pick = fn(&EvictionCounts) -> u64;

/// (name after the prefix, type, help, value) of each series.
const SERIES: [(&str, Kind, &str, Pick); 8] = [
    (
        "plugin_connected",
        Kind::Gauge,
        "Engine plugin connections open now (one per engine process with the agentrt plugin); 0: no plugin asks which KV blocks to evict, so no policy ranks them.",
        |c| c.open_connections,
    ),
    (
        "plugin_connections_total",
        Kind::Counter,
        "Engine plugin connections accepted on the eviction socket.",
        |c| c.connections,
    ),
    (
        "plugin_connections_refused_total",
        Kind::Counter,
        "Connections to the eviction socket closed as soon as they were accepted: past --eviction-max-connections.",
        |c| c.refused_connections,
    ),
    (
        "plugin_malformed_total",
        Kind::Counter,
        "Frames on the eviction socket that could not be decoded (each closed its connection), and agent ids used before their AGENT frame.",
        |c| c.malformed,
    ),
    (
        "block_events_total",
        Kind::Counter,
        "Block events (stored, touched, removed) the plugin reported to the policy.",
        |c| c.block_events,
    ),
    (
        "rank_requests_total",
        Kind::Counter,
        "Eviction rankings the plugin asked for, each answered by the policy (or in LRU order when it failed).",
        |c| c.rank_requests,
    ),
    (
        "rank_missed_total",
        Kind::Counter,
        "Rankings the plugin stopped waiting for (answered after its deadline, AGENTRT_EVICTION_DEADLINE_MS): the engine used its own order.",
        |c| c.plugin_missed,
    ),
    (
        "rank_fallbacks_total",
        Kind::Counter,
        "Rankings answered in LRU order because the policy failed.",
        |c| c.policy_fallbacks,
    ),
];

/// The series of `rows` under `prefix`: each row's `replica` label when it has one.
pub fn report_plugin_series(
    out: &mut Exposition<'_>,
    prefix: &str,
    rows: &[(Option<&str>, EvictionCounts)],
) -> fmt::Result {
    for (suffix, kind, help, pick) in SERIES {
        let series = rows.iter().map(|(replica, counts)| {
            let labels: Vec<(&str, &str)> = replica.iter().map(|r| ("replica", *r)).collect();
            (labels, pick(counts))
        });
        out.family(kind, &format!("{prefix}_{suffix}"), help, series)?;
    }
    Ok(())
}

/// One engine's eviction socket (`--eviction-socket`), as `agentrt_engine_*`.
pub struct EngineEvictionReport(pub Arc<EvictionMetrics>);

impl Report for EngineEvictionReport {
    fn report(&self, out: &mut Exposition<'_>) -> fmt::Result {
        report_plugin_series(out, "agentrt_engine", &[(None, self.0.counts())])
    }
}

//! The eviction path on `/metrics`: whether the engine's plugin is connected, the rankings it
//! asked for, those it gave up waiting for, and those the policy could not answer — one set of
//! series for one engine (`agentrt_engine_*`, `--eviction-socket`) and per replica
//! (`agentrt_replica_*{replica}`, `--replica-eviction-socket`).

use std::fmt::Write;
use std::sync::Arc;

use agentrt_eviction::{EvictionCounts, EvictionMetrics};

use crate::prometheus::Report;

type Pick = fn(&EvictionCounts) -> u64;

/// (name after the prefix, type, help, value) of each series.
const SERIES: [(&str, &str, &str, Pick); 8] = [
    (
        "plugin_connected",
        "gauge",
        "Engine plugin connections open now (one per engine process with the agentrt plugin); 0: no plugin asks which KV blocks to evict, so no policy ranks them.",
        |c| c.open_connections,
    ),
    (
        "plugin_connections_total",
        "counter",
        "Engine plugin connections accepted on the eviction socket.",
        |c| c.connections,
    ),
    (
        "plugin_connections_refused_total",
        "counter",
        "Connections to the eviction socket closed as soon as they were accepted: past --eviction-max-connections.",
        |c| c.refused_connections,
    ),
    (
        "plugin_malformed_total",
        "counter",
        "Frames on the eviction socket that could not be decoded (each closed its connection), and agent ids used before their AGENT frame.",
        |c| c.malformed,
    ),
    (
        "block_events_total",
        "counter",
        "Block events (stored, touched, removed) the plugin reported to the policy.",
        |c| c.block_events,
    ),
    (
        "rank_requests_total",
        "counter",
        "Eviction rankings the plugin asked for, each answered by the policy (or in LRU order when it failed).",
        |c| c.rank_requests,
    ),
    (
        "rank_missed_total",
        "counter",
        "Rankings the plugin stopped waiting for (answered after its deadline, AGENTRT_EVICTION_DEADLINE_MS): the engine used its own order.",
        |c| c.plugin_missed,
    ),
    (
        "rank_fallbacks_total",
        "counter",
        "Rankings answered in LRU order because the policy failed.",
        |c| c.policy_fallbacks,
    ),
];

/// The series of `rows` under `prefix`: each row's `replica` label when it has one.
pub fn render_plugin_series(out: &mut String, prefix: &str, rows: &[(Option<&str>, EvictionCounts)]) {
    for (suffix, kind, help, pick) in SERIES {
        let name = format!("{prefix}_{suffix}");
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (replica, counts) in rows {
            match replica {
                Some(replica) => {
                    let _ = writeln!(out, "{name}{{replica=\"{replica}\"}} {}", pick(counts));
                }
                None => {
                    let _ = writeln!(out, "{name} {}", pick(counts));
                }
            }
        }
    }
}

/// One engine's eviction socket (`--eviction-socket`), as `agentrt_engine_*`.
pub struct EngineEvictionReport(pub Arc<EvictionMetrics>);

impl Report for EngineEvictionReport {
    fn render(&self, out: &mut String) {
        render_plugin_series(out, "agentrt_engine", &[(None, self.0.counts())]);
    }
}

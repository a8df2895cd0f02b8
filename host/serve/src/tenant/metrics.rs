//! What `/metrics` shows per tenant (labelled `tenant="…"`): its policy worker's queue and what
//! it dropped, its quotas and what they refused, its prefix-cache hits, the sizes of the tables
//! its clients fill; and, apart, every policy slot's own series from the registry.

use std::fmt;
use std::sync::Arc;

use agentrt_exposition::{Exposition, Family, Kind, Report};

use crate::tenant::{Tenant, Tenants};

/// The tenants' series, for the tenants started so far.
pub struct TenantsReport(pub Arc<Tenants>);

impl Report for TenantsReport {
    fn report(&self, out: &mut Exposition<'_>) -> fmt::Result {
        let tenants = self.0.list();
        let rows: Vec<_> = tenants.iter().map(|t| ([("tenant", t.name.as_str())], &**t)).collect();
        out.table(&TENANT_FAMILIES, &rows)
    }
}

/// Every policy slot's series (calls, errors by kind, fallbacks, restarts, swaps, memory).
pub struct RegistryReport(pub Arc<Tenants>);

impl Report for RegistryReport {
    fn report(&self, out: &mut Exposition<'_>) -> fmt::Result {
        self.0.registry().report(out)
    }
}

/// Each tenant's series: its policy worker ([`crate::tenant::worker`]: the queue and what it
/// dropped), its quotas and what they refused, its prefix-cache hits, and the sizes of the tables
/// its clients fill ([`crate::table`]).
const TENANT_FAMILIES: [Family<Tenant>; 18] = [
    Family {
        name: "agentrt_policy_queue_jobs",
        kind: Kind::Gauge,
        help: "Policy calls waiting in the tenant's queue or running.",
        read: |t| t.worker.stats().queued().into(),
    },
    Family {
        name: "agentrt_policy_events_observed_total",
        kind: Kind::Counter,
        help: "Events the tenant's policy was given.",
        read: |t| t.worker.stats().observed().into(),
    },
    Family {
        name: "agentrt_policy_observe_calls_total",
        kind: Kind::Counter,
        help: "observe calls those events took: events queued while the policy was busy go in one call.",
        read: |t| t.worker.stats().observe_calls().into(),
    },
    Family {
        name: "agentrt_policy_events_dropped_total",
        kind: Kind::Counter,
        help: "Events dropped because the tenant's policy queue was full (--policy-queue-jobs).",
        read: |t| t.worker.stats().dropped().into(),
    },
    Family {
        name: "agentrt_policy_observe_failures_total",
        kind: Kind::Counter,
        help: "observe calls the tenant's policy failed (requests continued).",
        read: |t| t.worker.stats().failed().into(),
    },
    Family {
        name: "agentrt_policy_throttled_total",
        kind: Kind::Counter,
        help: "Events dropped and act calls skipped because the tenant's policy spent its time budget (--policy-cpu-ms-per-s).",
        read: |t| t.worker.stats().throttled().into(),
    },
    Family {
        name: "agentrt_tenant_in_flight",
        kind: Kind::Gauge,
        help: "The tenant's requests in flight (--tenant-max-in-flight).",
        read: |t| t.in_flight().into(),
    },
    Family {
        name: "agentrt_tenant_refused_total",
        kind: Kind::Counter,
        help: "The tenant's requests refused with 429: over its max_in_flight quota.",
        read: |t| t.refused().into(),
    },
    Family {
        name: "agentrt_tenant_max_in_flight",
        kind: Kind::Gauge,
        help: "The tenant's in-flight quota now (0 = none; a reload may change it).",
        read: |t| t.quotas.get().max_in_flight.into(),
    },
    Family {
        name: "agentrt_tenant_warmup_tokens_total",
        kind: Kind::Counter,
        help: "Prompt tokens of the tenant's warm-ups, as the upstream counted them (estimated when it did not say).",
        read: |t| t.warmups.tokens().into(),
    },
    Family {
        name: "agentrt_tenant_warmup_tokens_per_second_quota",
        kind: Kind::Gauge,
        help: "The tenant's warm-up quota in prompt tokens per second (0 = none).",
        read: |t| t.quotas.get().warmup_tokens_per_s.into(),
    },
    Family {
        name: "agentrt_tenant_warmups_throttled_total",
        kind: Kind::Counter,
        help: "The tenant's warm-ups skipped because it had spent its warm-up tokens for the second.",
        read: |t| t.warmups.throttled().into(),
    },
    Family {
        name: "agentrt_tenant_prompt_tokens_total",
        kind: Kind::Counter,
        help: "Prompt tokens of the tenant's finished requests (as the upstream counted them).",
        read: |t| t.prompt_tokens().into(),
    },
    Family {
        name: "agentrt_tenant_cached_tokens_total",
        kind: Kind::Counter,
        help: "Of those, tokens the engine had cached: the tenant's prefix-cache hits.",
        read: |t| t.cached_tokens().into(),
    },
    Family {
        name: "agentrt_tenant_agents",
        kind: Kind::Gauge,
        help: "Agents the tenant's table holds (--max-agents).",
        read: |t| (t.agents.agents() as u64).into(),
    },
    Family {
        name: "agentrt_tenant_live_sessions",
        kind: Kind::Gauge,
        help: "Live sessions the tenant's table holds (--max-sessions).",
        read: |t| (t.agents.live_sessions() as u64).into(),
    },
    Family {
        name: "agentrt_tenant_anchor_bytes",
        kind: Kind::Gauge,
        help: "Bytes of anchors kept for the tenant's warm-ups (--max-anchor-mib).",
        read: |t| (t.agents.anchors().1 as u64).into(),
    },
    Family {
        name: "agentrt_tenant_prompt_shapes",
        kind: Kind::Gauge,
        help: "Prompt shapes the tenant's table holds (--max-shapes).",
        read: |t| (t.continuations.len() as u64).into(),
    },
];

//! What `/metrics` shows per tenant (labelled `tenant="…"`): its policy worker's queue and what
//! it dropped, its quotas and what they refused, its prefix-cache hits, the sizes of the tables
//! its clients fill; and, apart, every policy slot's own series from the registry.

use std::fmt::Write;
use std::sync::Arc;

use crate::prometheus::Report;
use crate::tenant::{Tenant, Tenants};

/// The tenants' series, for the tenants started so far.
pub struct TenantsReport(pub Arc<Tenants>);

impl Report for TenantsReport {
    fn render(&self, out: &mut String) {
        render_tenants(&self.0.list(), out);
    }
}

/// Every policy slot's series (calls, errors by kind, fallbacks, restarts, swaps, memory).
pub struct RegistryReport(pub Arc<Tenants>);

impl Report for RegistryReport {
    fn render(&self, out: &mut String) {
        out.push_str(&self.0.registry().render_prometheus());
    }
}

/// Each tenant's series: its policy worker ([`crate::tenant::worker`]: the queue and what it
/// dropped) and the sizes of the tables its clients fill ([`crate::table`]).
fn render_tenants(tenants: &[Arc<Tenant>], out: &mut String) {
    type Read = fn(&Tenant) -> u64;
    let series: [(&str, &str, &str, Read); 17] = [
        (
            "agentrt_policy_queue_jobs",
            "gauge",
            "Policy calls waiting in the tenant's queue or running.",
            |t| t.worker.stats().queued(),
        ),
        (
            "agentrt_policy_events_observed_total",
            "counter",
            "Events the tenant's policy was given.",
            |t| t.worker.stats().observed(),
        ),
        (
            "agentrt_policy_events_dropped_total",
            "counter",
            "Events dropped because the tenant's policy queue was full (--policy-queue-jobs).",
            |t| t.worker.stats().dropped(),
        ),
        (
            "agentrt_policy_observe_failures_total",
            "counter",
            "observe calls the tenant's policy failed (requests continued).",
            |t| t.worker.stats().failed(),
        ),
        (
            "agentrt_policy_throttled_total",
            "counter",
            "Events dropped and act calls skipped because the tenant's policy spent its time budget (--policy-cpu-ms-per-s).",
            |t| t.worker.stats().throttled(),
        ),
        (
            "agentrt_tenant_in_flight",
            "gauge",
            "The tenant's requests in flight (--tenant-max-in-flight).",
            |t| t.in_flight(),
        ),
        (
            "agentrt_tenant_refused_total",
            "counter",
            "The tenant's requests refused with 429: over its max_in_flight quota.",
            |t| t.refused(),
        ),
        (
            "agentrt_tenant_max_in_flight",
            "gauge",
            "The tenant's in-flight quota now (0 = none; a reload may change it).",
            |t| t.quotas.get().max_in_flight,
        ),
        (
            "agentrt_tenant_warmup_tokens_total",
            "counter",
            "Prompt tokens of the tenant's warm-ups, as the upstream counted them (estimated when it did not say).",
            |t| t.warmups.tokens(),
        ),
        (
            "agentrt_tenant_warmup_tokens_per_second_quota",
            "gauge",
            "The tenant's warm-up quota in prompt tokens per second (0 = none).",
            |t| t.quotas.get().warmup_tokens_per_s,
        ),
        (
            "agentrt_tenant_warmups_throttled_total",
            "counter",
            "The tenant's warm-ups skipped because it had spent its warm-up tokens for the second.",
            |t| t.warmups.throttled(),
        ),
        (
            "agentrt_tenant_prompt_tokens_total",
            "counter",
            "Prompt tokens of the tenant's finished requests (as the upstream counted them).",
            |t| t.prompt_tokens(),
        ),
        (
            "agentrt_tenant_cached_tokens_total",
            "counter",
            "Of those, tokens the engine had cached: the tenant's prefix-cache hits.",
            |t| t.cached_tokens(),
        ),
        (
            "agentrt_tenant_agents",
            "gauge",
            "Agents the tenant's table holds (--max-agents).",
            |t| t.agents.agents() as u64,
        ),
        (
            "agentrt_tenant_live_sessions",
            "gauge",
            "Live sessions the tenant's table holds (--max-sessions).",
            |t| t.agents.live_sessions() as u64,
        ),
        (
            "agentrt_tenant_anchor_bytes",
            "gauge",
            "Bytes of anchors kept for the tenant's warm-ups (--max-anchor-mib).",
            |t| t.agents.anchors().1 as u64,
        ),
        (
            "agentrt_tenant_prompt_shapes",
            "gauge",
            "Prompt shapes the tenant's table holds (--max-shapes).",
            |t| t.continuations.len() as u64,
        ),
    ];
    for (name, kind, help, read) in series {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for tenant in tenants {
            // Tenant names are letters, digits, `-`, `_` and `.`: nothing to escape.
            let _ = writeln!(out, "{name}{{tenant=\"{}\"}} {}", tenant.name, read(tenant));
        }
    }
}

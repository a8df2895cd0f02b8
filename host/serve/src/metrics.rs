//! The proxy's own counters, in the Prometheus text format next to every policy slot's.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Upper bounds (µs) of the proxy-overhead histogram: time from receiving a request to sending it
/// upstream — what the proxy adds.
const OVERHEAD_BUCKETS_US: [u64; 8] = [50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000];

/// Why the proxy refused a request it had authenticated, as `/metrics` labels it
/// (`agentrt_proxy_refused_total{reason}`); each names the flag or rule in docs/security.md. (The
/// admission queue counts its own refusals: `agentrt_proxy_admission_*`.)
pub const REFUSAL_REASONS: [&str; 7] = [
    // --max-json-elements, --max-request-items, --max-request-tools
    "json_elements",
    "request_items",
    "request_tools",
    // an engine-control field a client may not set (--client-engine-field), or agentrt's own
    // vllm_xargs tags
    "engine_field",
    // a sampling number out of its range (max_tokens, temperature, …)
    "sampling_field",
    // a previous_response_id that is not one of the tenant's responses
    "foreign_response",
    // the request's API key was revoked while it was in flight
    "revoked",
];

/// One counter per [`REFUSAL_REASONS`] entry.
#[derive(Default)]
pub struct Refusals([AtomicU64; REFUSAL_REASONS.len()]);

impl Refusals {
    /// Count a refusal for `reason`, one of [`REFUSAL_REASONS`].
    pub fn count(&self, reason: &str) {
        let i = REFUSAL_REASONS
            .iter()
            .position(|r| *r == reason)
            .unwrap_or_else(|| panic!("{reason:?} is not one of REFUSAL_REASONS"));
        self.0[i].fetch_add(1, Relaxed);
    }

    pub fn get(&self, reason: &str) -> u64 {
        REFUSAL_REASONS
            .iter()
            .position(|r| *r == reason)
            .map_or(0, |i| self.0[i].load(Relaxed))
    }

    fn render(&self, out: &mut String) {
        let name = "agentrt_proxy_refused_total";
        let _ = writeln!(
            out,
            "# HELP {name} Authenticated requests refused before going upstream, by reason (docs/security.md).\n# TYPE {name} counter"
        );
        for (reason, n) in REFUSAL_REASONS.iter().zip(&self.0) {
            let _ = writeln!(out, "{name}{{reason=\"{reason}\"}} {}", n.load(Relaxed));
        }
    }
}

#[derive(Default)]
pub struct ProxyMetrics {
    /// Requests refused by reason ([`REFUSAL_REASONS`]).
    pub refused: Refusals,
    /// Reloads of `--config` installed, and refused (nothing changed).
    pub reloads_applied: AtomicU64,
    pub reloads_refused: AtomicU64,

    pub requests: AtomicU64,
    pub requests_failed: AtomicU64,
    pub upstream_errors: AtomicU64,
    pub upstream_timeouts: AtomicU64,
    pub bad_requests: AtomicU64,
    pub streams_cancelled: AtomicU64,
    pub in_flight: AtomicU64,
    pub warmups_sent: AtomicU64,
    pub warmups_skipped: AtomicU64,
    pub warmups_failed: AtomicU64,
    /// Sessions (or whole tenants: session 0) a policy's `deny` refused from then on.
    pub sessions_denied: AtomicU64,
    /// Requests refused because a policy denied their session.
    pub denied_requests: AtomicU64,
    /// Requests sent with the public cache salt: their anchor is marked public.
    pub public_anchor_requests: AtomicU64,
    pub policy_errors: AtomicU64,
    pub anchors_tokenized: AtomicU64,
    pub anchors_estimated: AtomicU64,
    pub sessions_ended: AtomicU64,
    overhead_buckets: [AtomicU64; OVERHEAD_BUCKETS_US.len()],
    overhead_count: AtomicU64,
    overhead_sum_us: AtomicU64,
}

impl ProxyMetrics {
    pub fn observe_overhead(&self, d: Duration) {
        let us = d.as_micros() as u64;
        for (i, bound) in OVERHEAD_BUCKETS_US.iter().enumerate() {
            if us <= *bound {
                self.overhead_buckets[i].fetch_add(1, Relaxed);
            }
        }
        self.overhead_count.fetch_add(1, Relaxed);
        self.overhead_sum_us.fetch_add(us, Relaxed);
    }

    /// The proxy's series; `unauthenticated`: no API key is in force now.
    pub fn render(&self, out: &mut String, unauthenticated: bool) {
        let counters = [
            ("agentrt_proxy_requests_total", "Requests received.", &self.requests),
            (
                "agentrt_proxy_requests_failed_total",
                "Requests answered with an error status.",
                &self.requests_failed,
            ),
            (
                "agentrt_proxy_upstream_errors_total",
                "Upstream unreachable or failed mid-response.",
                &self.upstream_errors,
            ),
            (
                "agentrt_proxy_upstream_timeouts_total",
                "Upstream failures that were a connect, first-byte or idle timeout.",
                &self.upstream_timeouts,
            ),
            (
                "agentrt_proxy_bad_requests_total",
                "Requests refused as malformed.",
                &self.bad_requests,
            ),
            (
                "agentrt_proxy_streams_cancelled_total",
                "Streams the client left before the end.",
                &self.streams_cancelled,
            ),
            (
                "agentrt_proxy_warmups_sent_total",
                "Warm-up requests sent upstream.",
                &self.warmups_sent,
            ),
            (
                "agentrt_proxy_warmups_skipped_total",
                "Warm-ups dropped (load, rate, unknown anchor).",
                &self.warmups_skipped,
            ),
            (
                "agentrt_proxy_warmups_failed_total",
                "Warm-ups the upstream failed (never retried).",
                &self.warmups_failed,
            ),
            (
                "agentrt_proxy_sessions_denied_total",
                "Sessions a policy's deny refused from then on (session 0: a whole tenant).",
                &self.sessions_denied,
            ),
            (
                "agentrt_proxy_denied_requests_total",
                "Requests refused with 403 because a policy denied their session.",
                &self.denied_requests,
            ),
            (
                "agentrt_proxy_public_anchor_requests_total",
                "Requests whose anchor is marked public: sent with the cache salt every tenant shares.",
                &self.public_anchor_requests,
            ),
            (
                "agentrt_proxy_policy_errors_total",
                "Policy act calls that failed (their side effects were skipped).",
                &self.policy_errors,
            ),
            (
                "agentrt_proxy_anchors_tokenized_total",
                "New agents whose anchor size the upstream counted in tokens.",
                &self.anchors_tokenized,
            ),
            (
                "agentrt_proxy_sessions_ended_total",
                "Sessions reported ended to their policy: silent for --session-idle-ms, or forgotten from a full session table (--max-sessions).",
                &self.sessions_ended,
            ),
            (
                "agentrt_proxy_anchors_estimated_total",
                "New agents whose anchor size is a byte estimate (the upstream did not count it).",
                &self.anchors_estimated,
            ),
        ];
        render_counters(out, &counters);
        self.refused.render(out);
        let reloads = "agentrt_proxy_reloads_total";
        let _ = writeln!(
            out,
            "# HELP {reloads} Reloads of --config (SIGHUP or POST /admin/reload), installed or refused.\n# TYPE {reloads} counter\n\
             {reloads}{{result=\"applied\"}} {}\n{reloads}{{result=\"refused\"}} {}",
            self.reloads_applied.load(Relaxed),
            self.reloads_refused.load(Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP agentrt_proxy_unauthenticated 1 while no API key is in force: every request is served as tenant `default`, unsalted.\n\
             # TYPE agentrt_proxy_unauthenticated gauge\nagentrt_proxy_unauthenticated {}",
            u8::from(unauthenticated)
        );
        let _ = writeln!(
            out,
            "# HELP agentrt_proxy_in_flight Requests being served.\n# TYPE agentrt_proxy_in_flight gauge\nagentrt_proxy_in_flight {}",
            self.in_flight.load(Relaxed)
        );
        let name = "agentrt_proxy_overhead_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Time from request received to request sent upstream.\n# TYPE {name} histogram"
        );
        for (i, bound) in OVERHEAD_BUCKETS_US.iter().enumerate() {
            let le = *bound as f64 / 1e6;
            let _ = writeln!(
                out,
                "{name}_bucket{{le=\"{le}\"}} {}",
                self.overhead_buckets[i].load(Relaxed)
            );
        }
        let count = self.overhead_count.load(Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let _ = writeln!(out, "{name}_sum {}", self.overhead_sum_us.load(Relaxed) as f64 / 1e6);
        let _ = writeln!(out, "{name}_count {count}");
    }
}

/// Prometheus text for `(name, help, value)` counters.
pub(crate) fn render_counters(out: &mut String, counters: &[(&str, &str, &AtomicU64)]) {
    for (name, help, value) in counters {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
            value.load(Relaxed)
        );
    }
}

/// The accept loop's counters ([`crate::front::connections`]).
#[derive(Default)]
pub struct ConnectionMetrics {
    pub open: AtomicU64,
    pub accepted: AtomicU64,
    pub refused: AtomicU64,
    pub header_timeouts: AtomicU64,
}

impl ConnectionMetrics {
    pub fn render(&self, out: &mut String) {
        let counters = [
            (
                "agentrt_proxy_connections_accepted_total",
                "Connections accepted.",
                &self.accepted,
            ),
            (
                "agentrt_proxy_connections_refused_total",
                "Connections closed at once: --max-connections were open.",
                &self.refused,
            ),
            (
                "agentrt_proxy_header_timeouts_total",
                "Connections closed for sending no complete request headers within --header-read-timeout-ms.",
                &self.header_timeouts,
            ),
        ];
        render_counters(out, &counters);
        let _ = writeln!(
            out,
            "# HELP agentrt_proxy_connections_open Client connections open.\n# TYPE agentrt_proxy_connections_open gauge\nagentrt_proxy_connections_open {}",
            self.open.load(Relaxed)
        );
    }
}

/// Each tenant's series: its policy worker ([`crate::tenant::worker`]: the queue and what it
/// dropped) and the sizes of the tables its clients fill ([`crate::table`]).
pub fn render_tenants(tenants: &[std::sync::Arc<crate::tenant::Tenant>], out: &mut String) {
    type Read = fn(&crate::tenant::Tenant) -> u64;
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
            |t| t.warmup_tokens(),
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
            |t| t.warmups_throttled(),
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

/// Each tenant's part of the engine's cache under `--share`: blocks held, its guarantee and
/// limit, its blocks the engine evicted, and the evictions its requests caused.
pub fn render_engine_cache(cache: &agentrt_vllm::SharedCache, out: &mut String) {
    let tenants = cache.tenants();
    type Read = fn(&agentrt_vllm::TenantCache, &agentrt_runtime::Share) -> u64;
    let series: [(&str, &str, &str, Read); 5] = [
        (
            "agentrt_tenant_cache_blocks",
            "gauge",
            "Blocks the tenant holds in the engine's KV cache.",
            |c, _| c.blocks,
        ),
        (
            "agentrt_tenant_cache_guarantee_blocks",
            "gauge",
            "The tenant's guaranteed share of the cache (--share).",
            |_, s| s.min_blocks,
        ),
        (
            "agentrt_tenant_cache_limit_blocks",
            "gauge",
            "The tenant's limit (--share; 18446744073709551615 = none).",
            |_, s| s.max_blocks,
        ),
        (
            "agentrt_tenant_cache_evictions_total",
            "counter",
            "The tenant's blocks the engine evicted.",
            |c, _| c.evicted,
        ),
        (
            "agentrt_tenant_cache_evictions_caused_total",
            "counter",
            "Blocks (any tenant's) the engine evicted to make room for the tenant's requests.",
            |c, _| c.caused,
        ),
    ];
    for (name, kind, help, read) in series {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (tenant, figures, share) in &tenants {
            let _ = writeln!(out, "{name}{{tenant=\"{tenant}\"}} {}", read(figures, share));
        }
    }
}

//! The proxy's own counters, and `/metrics`: the Prometheus text of a list of reports — the
//! proxy's, the accept loop's, the tenants', the engine cache's, the replicas', the admission
//! queue's, every policy slot's and the MCP gateway's, in that order.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::auth::MetricsToken;
use crate::prometheus::{render_counters, Report};

/// What the `/metrics` route needs: its token (none: open) and the reports, in order.
#[derive(Clone)]
pub struct MetricsState {
    token: MetricsToken,
    reports: Arc<[Arc<dyn Report>]>,
}

impl MetricsState {
    /// `/metrics` under `token` (`--metrics-token`; `None` leaves it open — it names every
    /// tenant), rendering `reports` in order.
    pub fn new(token: Option<String>, reports: Vec<Arc<dyn Report>>) -> Self {
        Self {
            token: MetricsToken::new(token),
            reports: reports.into(),
        }
    }
}

/// The `/metrics` route.
pub fn routes<S: Clone + Send + Sync + 'static>(state: MetricsState) -> Router<S> {
    Router::new().route("/metrics", get(metrics)).with_state(state)
}

async fn metrics(State(state): State<MetricsState>, headers: HeaderMap) -> Response {
    if let Err(e) = state.token.check(&headers) {
        return e.into_response();
    }
    let mut out = String::new();
    for report in state.reports.iter() {
        report.render(&mut out);
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}

/// Upper bounds (µs) of the proxy-overhead histogram: time from receiving a request to sending it
/// upstream — what the proxy adds.
const OVERHEAD_BUCKETS_US: [u64; 8] = [50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000];

/// Why the proxy refused a request it had authenticated, as `/metrics` labels it
/// (`agentrt_proxy_refused_total{reason}`); each names the flag or rule in docs/security.md. (The
/// admission queue counts its own refusals: `agentrt_proxy_admission_*`.)
pub const REFUSAL_REASONS: [&str; 8] = [
    // --max-json-elements, --max-json-depth, --max-request-items, --max-request-tools
    "json_elements",
    "json_depth",
    "request_items",
    "request_tools",
    // an engine-control field a client may not set (--client-engine-field), agentrt's own tags
    // (in vllm_xargs or custom_params), or SGLang's session_params
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

    /// Refusals counted for `reason` so far; 0 for a reason not in [`REFUSAL_REASONS`].
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

/// The proxy's own counters, shown on `/metrics` as `agentrt_proxy_*`.
#[derive(Default)]
pub struct ProxyMetrics {
    /// Requests refused by reason ([`REFUSAL_REASONS`]).
    pub refused: Refusals,
    /// Reloads of `--config` (SIGHUP or `POST /admin/reload`) installed.
    pub reloads_applied: AtomicU64,
    /// Reloads of `--config` refused: the file did not parse or validate, nothing changed.
    pub reloads_refused: AtomicU64,

    /// Agent-call and completion requests received.
    pub requests: AtomicU64,
    /// Requests answered with an error status.
    pub requests_failed: AtomicU64,
    /// Upstream unreachable or failed mid-response.
    pub upstream_errors: AtomicU64,
    /// Upstream failures that were a connect, first-byte or idle timeout (also counted in
    /// `upstream_errors`).
    pub upstream_timeouts: AtomicU64,
    /// Requests refused as malformed.
    pub bad_requests: AtomicU64,
    /// Streams the client left before the end.
    pub streams_cancelled: AtomicU64,
    /// Requests being served now (a gauge): told to the policies as arrived, not yet finished.
    pub in_flight: AtomicU64,
    /// Warm-up requests sent upstream.
    pub warmups_sent: AtomicU64,
    /// Warm-ups dropped before going upstream (engine busy, rate or quota, unknown anchor).
    pub warmups_skipped: AtomicU64,
    /// Warm-ups the upstream failed (never retried).
    pub warmups_failed: AtomicU64,
    /// Sessions (or whole tenants: session 0) a policy's `deny` refused from then on.
    pub sessions_denied: AtomicU64,
    /// Requests refused because a policy denied their session.
    pub denied_requests: AtomicU64,
    /// Requests sent with the public cache salt: their anchor is marked public.
    pub public_anchor_requests: AtomicU64,
    /// Policy `act` calls that failed (their side effects were skipped).
    pub policy_errors: AtomicU64,
    /// New agents whose anchor size the upstream's `/tokenize` counted in tokens.
    pub anchors_tokenized: AtomicU64,
    /// New agents whose anchor size is a byte estimate (the upstream did not count it).
    pub anchors_estimated: AtomicU64,
    /// Sessions reported ended to their policy: silent for `--session-idle-ms`, or forgotten
    /// from a full session table (`--max-sessions`).
    pub sessions_ended: AtomicU64,
    overhead_buckets: [AtomicU64; OVERHEAD_BUCKETS_US.len()],
    overhead_count: AtomicU64,
    overhead_sum_us: AtomicU64,
}

impl ProxyMetrics {
    /// Add `d` to the overhead histogram (`agentrt_proxy_overhead_seconds`): the time from a
    /// request's body being read to its sending upstream, less its wait in the admission queue.
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

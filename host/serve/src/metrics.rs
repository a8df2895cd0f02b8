//! The proxy's own counters, and `/metrics`: the Prometheus text of a list of reports — the
//! proxy's, the accept loop's, the tenants', the engine cache's, the replicas', the admission
//! queue's, every policy slot's and the MCP gateway's, in that order.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use agentrt_exposition::{Exposition, Family, HistogramFigures, Kind, Report, Reports};

use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::auth::MetricsToken;

/// What the `/metrics` route needs: its token (none: open) and the reports, in order.
#[derive(Clone)]
pub struct MetricsState {
    token: MetricsToken,
    reports: Reports,
}

impl MetricsState {
    /// `/metrics` under `token` (`--metrics-token`; `None` leaves it open — it names every
    /// tenant), rendering `reports` in order.
    pub fn new(token: Option<String>, reports: Vec<Arc<dyn Report>>) -> Self {
        Self {
            token: MetricsToken::new(token),
            reports: Reports::new(reports),
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
    let text = state.reports.render();
    ([(header::CONTENT_TYPE, agentrt_exposition::CONTENT_TYPE)], text).into_response()
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

    fn report(&self, out: &mut Exposition<'_>) -> fmt::Result {
        out.counters(
            "agentrt_proxy_refused_total",
            "Authenticated requests refused before going upstream, by reason (docs/security.md).",
            REFUSAL_REASONS
                .iter()
                .zip(&self.0)
                .map(|(reason, n)| ([("reason", *reason)], n.load(Relaxed))),
        )
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
        // Each observation in its one bucket (the first bound at or above it): the exposition
        // writes the buckets cumulative. Past the last bound it is only in the count and sum.
        if let Some(i) = OVERHEAD_BUCKETS_US.iter().position(|bound| us <= *bound) {
            self.overhead_buckets[i].fetch_add(1, Relaxed);
        }
        self.overhead_count.fetch_add(1, Relaxed);
        self.overhead_sum_us.fetch_add(us, Relaxed);
    }

    /// The proxy's series; `unauthenticated`: no API key is in force now.
    pub fn report(&self, out: &mut Exposition<'_>, unauthenticated: bool) -> fmt::Result {
        out.table(&PROXY_COUNTERS, &[(agentrt_exposition::NO_LABELS, self)])?;
        self.refused.report(out)?;
        out.counters(
            "agentrt_proxy_reloads_total",
            "Reloads of --config (SIGHUP or POST /admin/reload), installed or refused.",
            [
                ([("result", "applied")], self.reloads_applied.load(Relaxed)),
                ([("result", "refused")], self.reloads_refused.load(Relaxed)),
            ],
        )?;
        out.gauge(
            "agentrt_proxy_unauthenticated",
            "1 while no API key is in force: every request is served as tenant `default`, unsalted.",
            u64::from(unauthenticated),
        )?;
        out.gauge(
            "agentrt_proxy_in_flight",
            "Requests being served.",
            self.in_flight.load(Relaxed),
        )?;
        let buckets: Vec<(f64, u64)> = OVERHEAD_BUCKETS_US
            .iter()
            .zip(&self.overhead_buckets)
            .map(|(bound, n)| (*bound as f64 / 1e6, n.load(Relaxed)))
            .collect();
        out.histogram(
            "agentrt_proxy_overhead_seconds",
            "Time from request received to request sent upstream.",
            &HistogramFigures {
                buckets: &buckets,
                sum: self.overhead_sum_us.load(Relaxed) as f64 / 1e6,
                count: self.overhead_count.load(Relaxed),
            },
        )
    }
}

/// The proxy's unlabelled counters.
const PROXY_COUNTERS: [Family<ProxyMetrics>; 16] = [
    Family {
        name: "agentrt_proxy_requests_total",
        kind: Kind::Counter,
        help: "Requests received.",
        read: |m| m.requests.load(Relaxed).into(),
    },
    Family {
        name: "agentrt_proxy_requests_failed_total",
        kind: Kind::Counter,
        help: "Requests answered with an error status.",
        read: |m| m.requests_failed.load(Relaxed).into(),
    },
    Family {
        name: "agentrt_proxy_upstream_errors_total",
        kind: Kind::Counter,
        help: "Upstream unreachable or failed mid-response.",
        read: |m| m.upstream_errors.load(Relaxed).into(),
    },
    Family {
        name: "agentrt_proxy_upstream_timeouts_total",
        kind: Kind::Counter,
        help: "Upstream failures that were a connect, first-byte or idle timeout.",
        read: |m| m.upstream_timeouts.load(Relaxed).into(),
    },
    Family {
        name: "agentrt_proxy_bad_requests_total",
        kind: Kind::Counter,
        help: "Requests refused as malformed.",
        read: |m| m.bad_requests.load(Relaxed).into(),
    },
    Family {
        name: "agentrt_proxy_streams_cancelled_total",
        kind: Kind::Counter,
        help: "Streams the client left before the end.",
        read: |m| m.streams_cancelled.load(Relaxed).into(),
    },
    Family {
        name: "agentrt_proxy_warmups_sent_total",
        kind: Kind::Counter,
        help: "Warm-up requests sent upstream.",
        read: |m| m.warmups_sent.load(Relaxed).into(),
    },
    Family {
        name: "agentrt_proxy_warmups_skipped_total",
        kind: Kind::Counter,
        help: "Warm-ups dropped (load, rate, unknown anchor).",
        read: |m| m.warmups_skipped.load(Relaxed).into(),
    },
    Family {
        name: "agentrt_proxy_warmups_failed_total",
        kind: Kind::Counter,
        help: "Warm-ups the upstream failed (never retried).",
        read: |m| m.warmups_failed.load(Relaxed).into(),
    },
    Family {
        name: "agentrt_proxy_sessions_denied_total",
        kind: Kind::Counter,
        help: "Sessions a policy's deny refused from then on (session 0: a whole tenant).",
        read: |m| m.sessions_denied.load(Relaxed).into(),
    },
    Family {
        name: "agentrt_proxy_denied_requests_total",
        kind: Kind::Counter,
        help: "Requests refused with 403 because a policy denied their session.",
        read: |m| m.denied_requests.load(Relaxed).into(),
    },
    Family {
        name: "agentrt_proxy_public_anchor_requests_total",
        kind: Kind::Counter,
        help: "Requests whose anchor is marked public: sent with the cache salt every tenant shares.",
        read: |m| m.public_anchor_requests.load(Relaxed).into(),
    },
    Family {
        name: "agentrt_proxy_policy_errors_total",
        kind: Kind::Counter,
        help: "Policy act calls that failed (their side effects were skipped).",
        read: |m| m.policy_errors.load(Relaxed).into(),
    },
    Family {
        name: "agentrt_proxy_anchors_tokenized_total",
        kind: Kind::Counter,
        help: "New agents whose anchor size the upstream counted in tokens.",
        read: |m| m.anchors_tokenized.load(Relaxed).into(),
    },
    Family {
        name: "agentrt_proxy_sessions_ended_total",
        kind: Kind::Counter,
        help: "Sessions reported ended to their policy: silent for --session-idle-ms, or forgotten from a full session table (--max-sessions).",
        read: |m| m.sessions_ended.load(Relaxed).into(),
    },
    Family {
        name: "agentrt_proxy_anchors_estimated_total",
        kind: Kind::Counter,
        help: "New agents whose anchor size is a byte estimate (the upstream did not count it).",
        read: |m| m.anchors_estimated.load(Relaxed).into(),
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    /// The overhead histogram on `/metrics`: buckets cumulative over their bounds in seconds, an
    /// observation past the last bound only in `+Inf`, the sum in seconds.
    #[test]
    fn overhead_is_exposed_as_a_cumulative_histogram_in_seconds() {
        struct Proxy(ProxyMetrics);
        impl Report for Proxy {
            fn report(&self, out: &mut Exposition<'_>) -> fmt::Result {
                self.0.report(out, false)
            }
        }
        let metrics = ProxyMetrics::default();
        for us in [30, 150, 20_000] {
            metrics.observe_overhead(Duration::from_micros(us));
        }
        let text = agentrt_exposition::render_one(Arc::new(Proxy(metrics)));
        let bucket = |le: &str| {
            let prefix = format!("agentrt_proxy_overhead_seconds_bucket{{le=\"{le}\"}} ");
            text.lines()
                .find_map(|l| l.strip_prefix(&prefix))
                .unwrap_or_else(|| panic!("no bucket le={le} in {text}"))
                .to_string()
        };
        assert_eq!(bucket("5e-05"), "1");
        assert_eq!(bucket("0.0002"), "2");
        assert_eq!(bucket("0.01"), "2");
        assert_eq!(bucket("+Inf"), "3");
        assert!(text.contains("agentrt_proxy_overhead_seconds_count 3\n"), "{text}");
        assert!(text.contains("agentrt_proxy_overhead_seconds_sum 0.02018\n"), "{text}");
    }
}

//! What the agent-call routes share: [`ProxyState`] (one field per capability), the body
//! options, and the answers every step gives the same way — a refusal counted by reason, an
//! upstream failure counted, a request whose key was revoked while it was in flight.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::engine_fields::ClientEngineFields;
use crate::clock::Clock;
use crate::engine::admission::AdmissionQueue;
use crate::engine::kind::EngineKind;
use crate::engine::replicas::ReplicaRouting;
use crate::engine::tokenize::Tokenizer;
use crate::engine::upstream::Upstream;
use crate::engine::upstream_router::UpstreamRouter;
use crate::engine::working_set::SessionAdmission;
use crate::front::body::BodyReading;
use crate::front::error::ApiError;
use crate::hints::Hints;
use crate::metrics::ProxyMetrics;
use crate::policy::effects::Effects;
use crate::policy::feed::PolicyFeed;
use crate::tenant::cache_salt::CacheSalts;
use crate::tenant::Tenants;

/// How request bodies are amended on their way upstream.
pub struct BodyOptions {
    /// Add agentrt's tags (agent, session, warm-up flag: in the engine's own field, see
    /// [`EngineKind`]) and `cache_salt`. Off for upstreams that reject unknown fields
    /// (`--no-engine-tags`).
    pub engine_tags: bool,
    /// The engine behind the upstream (`--engine`): which fields carry the tags.
    pub engine: EngineKind,
    /// Send policies' `set-priority` demotions as the request's `priority` (vLLM started with
    /// `--scheduling-policy priority`; it refuses a non-zero priority otherwise).
    pub engine_priorities: bool,
    /// Each tenant's `cache_salt`.
    pub cache_salts: CacheSalts,
    /// Engine-control fields clients may set (`--client-engine-field`; none by default).
    pub client_engine_fields: ClientEngineFields,
    /// The router `--upstream` is, if one (`--upstream-router`): what it reads of a session.
    pub upstream_router: UpstreamRouter,
}

/// What the agent-call routes need, one field per capability. Cheap to clone.
#[derive(Clone)]
pub struct ProxyState {
    /// Every tenant: who a request belongs to, and that tenant's policies and tables.
    pub tenants: Arc<Tenants>,
    /// The upstream requests go to (unless `replicas` place them), under its limits.
    pub upstream: Upstream,
    /// The upstream's `/tokenize`, for new agents' anchor sizes.
    pub tokenizer: Tokenizer,
    /// How bodies are amended on their way upstream.
    pub body: Arc<BodyOptions>,
    /// At most N requests upstream, the rest waiting (`--upstream-max-in-flight`).
    pub admission: Option<Arc<AdmissionQueue>>,
    /// Whole sessions held back while the live ones' contexts overflow the engine's KV cache
    /// (`--session-admission working-set`).
    pub working_set: Option<Arc<SessionAdmission>>,
    /// Several replicas behind a router (`--replica`), else every request goes to `upstream`.
    pub replicas: Option<Arc<ReplicaRouting>>,
    /// Where each request's arrival and finish events go: the tenant's policies.
    pub feed: PolicyFeed,
    /// What carries out the tenant's policies' side effects after each arrival and finish.
    pub effects: Arc<Effects>,
    /// What the frameworks say of their sessions' lives, and what responses say of tool waits.
    pub hints: Arc<Hints>,
    /// The proxy's own counters (`/metrics`).
    pub metrics: Arc<ProxyMetrics>,
    /// The clock the policies' events are stamped with.
    pub clock: Clock,
    /// Request ids for the policies' events, from 1.
    pub request_ids: Arc<AtomicU64>,
    /// How request bodies are read: their deadline and the budgets they share.
    pub reading: Arc<BodyReading>,
}

impl ProxyState {
    /// Count `error` as a refusal for `reason` (one of [`crate::metrics::REFUSAL_REASONS`]) and
    /// hand it back.
    pub(super) fn refused(&self, reason: &str, error: ApiError) -> ApiError {
        self.metrics.refused.count(reason);
        error
    }

    /// Count an upstream failure (and, apart, the timeouts among them). A request cut by its
    /// key's revocation is not one.
    pub(super) fn upstream_failed(&self, error: &ApiError) {
        if error.status == StatusCode::UNAUTHORIZED {
            return;
        }
        self.metrics.upstream_errors.fetch_add(1, Relaxed);
        if error.status == StatusCode::GATEWAY_TIMEOUT {
            self.metrics.upstream_timeouts.fetch_add(1, Relaxed);
        }
    }

    /// Give `body` its tenant's `cache_salt` (when the engine tags are on), or the public one
    /// when its anchor is public; returns the salt.
    pub(super) fn salt(&self, body: &mut Value, tenant: &str, anchor_hash: Option<u64>) -> Option<String> {
        if !self.body.engine_tags {
            return None;
        }
        let public = anchor_hash.is_some_and(|h| self.tenants.settings().public_anchors.contains(&h));
        if public {
            self.metrics.public_anchor_requests.fetch_add(1, Relaxed);
        }
        self.body.cache_salts.apply(body, tenant, public)
    }
}

/// Count an answered error and give its response.
pub(super) fn failed(state: &ProxyState, e: ApiError) -> Response {
    state.metrics.requests_failed.fetch_add(1, Relaxed);
    e.into_response()
}

/// `work`'s answer, unless the request's key is revoked first: then a 401 saying so.
pub(super) async fn unless_revoked<T>(
    state: &ProxyState,
    revoked: &CancellationToken,
    work: impl std::future::Future<Output = Result<T, ApiError>>,
) -> Result<T, ApiError> {
    tokio::select! {
        biased;
        () = revoked.cancelled() => Err(revoked_error(state)),
        done = work => done,
    }
}

/// The 401 of a request whose key was revoked while it was in flight, counted.
pub(super) fn revoked_error(state: &ProxyState) -> ApiError {
    state.refused("revoked", ApiError::unauthorized(crate::auth::REVOKED))
}

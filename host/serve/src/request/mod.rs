//! One agent call, step by step: the OpenAI-compatible routes — chat completions, Responses,
//! Messages, completions, models — and what they share. A request is admitted from its headers
//! ([`crate::tenant::authenticate`]), its body read under `--max-body-bytes` and prepared once
//! ([`prepare`]), sent on ([`forward`]: the policies told, admission, replica, upstream), relayed
//! ([`relay`]) and its end reported ([`finish`]). Policy calls never fail a request: a failing
//! policy is logged, counted and bypassed.

pub mod engine_fields;
mod finish;
mod forward;
mod prepare;
mod relay;
pub mod sampling_fields;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::Value;

use self::engine_fields::ClientEngineFields;
use self::forward::forward;
use self::prepare::{parse_body, prepare_agent_call, prepare_completion};
use crate::clock::Clock;
use crate::engine::admission::AdmissionQueue;
use crate::engine::replicas::ReplicaRouting;
use crate::engine::tokenize::Tokenizer;
use crate::engine::upstream::{self, Upstream};
use crate::front::error::ApiError;
use crate::front::limits::{closing_connection, read_body};
use crate::identity::agent_api::AgentApi;
use crate::metrics::ProxyMetrics;
use crate::policy::effects::Effects;
use crate::policy::feed::PolicyFeed;
use crate::tenant::authenticate::{admit, tenant_of, Admitted};
use crate::tenant::cache_salt::CacheSalts;
use crate::tenant::Tenants;

/// How request bodies are amended on their way upstream.
pub struct BodyOptions {
    /// Add `vllm_xargs` (agent, session, warm-up flag) and `cache_salt`. Off for upstreams that
    /// reject unknown fields (`--no-vllm-xargs`).
    pub vllm_xargs: bool,
    /// Send policies' `set-priority` demotions as the request's `priority` (vLLM started with
    /// `--scheduling-policy priority`; it refuses a non-zero priority otherwise).
    pub engine_priorities: bool,
    /// Each tenant's `cache_salt`.
    pub cache_salts: CacheSalts,
    /// Engine-control fields clients may set (`--client-engine-field`; none by default).
    pub client_engine_fields: ClientEngineFields,
}

/// What the agent-call routes need, one field per capability. Cheap to clone.
#[derive(Clone)]
pub struct ProxyState {
    pub tenants: Arc<Tenants>,
    pub upstream: Upstream,
    /// The upstream's `/tokenize`, for new agents' anchor sizes.
    pub tokenizer: Tokenizer,
    pub body: Arc<BodyOptions>,
    /// At most N requests upstream, the rest waiting (`--upstream-max-in-flight`).
    pub admission: Option<Arc<AdmissionQueue>>,
    /// Several replicas behind a router (`--replica`), else every request goes to `upstream`.
    pub replicas: Option<Arc<ReplicaRouting>>,
    pub feed: PolicyFeed,
    pub effects: Arc<Effects>,
    pub metrics: Arc<ProxyMetrics>,
    pub clock: Clock,
    /// Request ids for the policies' events, from 1.
    pub request_ids: Arc<AtomicU64>,
}

impl ProxyState {
    /// Count `error` as a refusal for `reason` (one of [`crate::metrics::REFUSAL_REASONS`]) and
    /// hand it back.
    fn refused(&self, reason: &str, error: ApiError) -> ApiError {
        self.metrics.refused.count(reason);
        error
    }

    /// Count an upstream failure (and, apart, the timeouts among them). A request cut by its
    /// key's revocation is not one.
    fn upstream_failed(&self, error: &ApiError) {
        if error.status == StatusCode::UNAUTHORIZED {
            return;
        }
        self.metrics.upstream_errors.fetch_add(1, Relaxed);
        if error.status == StatusCode::GATEWAY_TIMEOUT {
            self.metrics.upstream_timeouts.fetch_add(1, Relaxed);
        }
    }

    /// Give `body` its tenant's `cache_salt` (when vLLM's extensions are on), or the public one
    /// when its anchor is public; returns the salt.
    fn salt(&self, body: &mut Value, tenant: &str, anchor_hash: Option<u64>) -> Option<String> {
        if !self.body.vllm_xargs {
            return None;
        }
        let public = anchor_hash.is_some_and(|h| self.tenants.settings().public_anchors.contains(&h));
        if public {
            self.metrics.public_anchor_requests.fetch_add(1, Relaxed);
        }
        self.body.cache_salts.apply(body, tenant, public)
    }
}

/// The agent-call routes and `/v1/models`.
pub fn routes<S: Clone + Send + Sync + 'static>(state: ProxyState) -> Router<S> {
    Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/responses", post(responses))
        .route("/v1/messages", post(messages))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(models))
        .with_state(state)
}

/// The caller's tenant and place from the headers, then the body: nothing is read for a
/// stranger, nor for a tenant at its in-flight limit.
async fn admit_then_read(state: &ProxyState, headers: &HeaderMap, body: Body) -> Result<(Admitted, Bytes), ApiError> {
    let admitted = admit(&state.tenants, headers).await?;
    let body = read_body(body, state.upstream.limits().max_body_bytes, "--max-body-bytes").await?;
    Ok((admitted, body))
}

async fn chat_completions(State(state): State<ProxyState>, headers: HeaderMap, body: Body) -> Response {
    agent_call(state, headers, body, AgentApi::ChatCompletions).await
}

async fn responses(State(state): State<ProxyState>, headers: HeaderMap, body: Body) -> Response {
    agent_call(state, headers, body, AgentApi::Responses).await
}

async fn messages(State(state): State<ProxyState>, headers: HeaderMap, body: Body) -> Response {
    agent_call(state, headers, body, AgentApi::Messages).await
}

/// A call in one of the APIs with agent identity: chat completions, Responses, Messages.
async fn agent_call(state: ProxyState, headers: HeaderMap, body: Body, api: AgentApi) -> Response {
    state.metrics.requests.fetch_add(1, Relaxed);
    let shape = api.error_shape();
    let (admitted, body) = match admit_then_read(&state, &headers, body).await {
        Ok(read) => read,
        Err(e) => return closing_connection(failed(&state, e.shaped(shape))),
    };
    let Admitted { tenant, permit } = admitted;
    // The proxy's overhead counts from here: the client's upload time is not the proxy's.
    let received = Instant::now();
    match prepare_agent_call(&state, tenant, &headers, body, api).await {
        Ok(prepared) => forward(state, api.path(), api, prepared, permit, received).await,
        Err(e) => failed(&state, e.shaped(shape)),
    }
}

async fn completions(State(state): State<ProxyState>, headers: HeaderMap, body: Body) -> Response {
    state.metrics.requests.fetch_add(1, Relaxed);
    let (admitted, body) = match admit_then_read(&state, &headers, body).await {
        Ok(read) => read,
        Err(e) => return closing_connection(failed(&state, e)),
    };
    let Admitted { tenant, permit } = admitted;
    // The proxy's overhead counts from here: the client's upload time is not the proxy's.
    let received = Instant::now();
    let prepared = match parse_body(&state, &tenant, body).await {
        Ok(json) => prepare_completion(&state, tenant, &headers, json),
        Err(e) => Err(e),
    };
    match prepared {
        // Plain completions report usage in chat completions' words.
        Ok(prepared) => {
            forward(
                state,
                "/v1/completions",
                AgentApi::ChatCompletions,
                prepared,
                permit,
                received,
            )
            .await
        }
        Err(e) => failed(&state, e),
    }
}

fn failed(state: &ProxyState, e: ApiError) -> Response {
    state.metrics.requests_failed.fetch_add(1, Relaxed);
    e.into_response()
}

async fn models(State(state): State<ProxyState>, headers: HeaderMap) -> Response {
    if let Err(e) = tenant_of(&state.tenants, &headers).await {
        return e.into_response();
    }
    let request = state.upstream.get("/v1/models");
    let limits = state.upstream.limits();
    let answered = match upstream::send(request, state.upstream.base(), limits).await {
        Ok(reply) => {
            let status = StatusCode::from_u16(reply.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
            upstream::read_reply(reply, limits).await.map(|bytes| (status, bytes))
        }
        Err(e) => Err(e),
    };
    match answered {
        Ok((status, bytes)) => (status, [(header::CONTENT_TYPE, "application/json")], bytes).into_response(),
        Err(e) => {
            state.upstream_failed(&e);
            e.into_response()
        }
    }
}

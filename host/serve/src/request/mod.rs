//! One agent call, step by step: the OpenAI-compatible routes — chat completions, Responses,
//! Messages, completions, models — and what they share. A request is admitted from its headers
//! ([`crate::tenant::admit`]), its body read under `--max-body-bytes` and prepared once
//! (`prepare`), sent on (`forward`: the policies told, admission, replica, upstream), relayed
//! (`relay`) and its end reported (`finish`). Policy calls never fail a request: a failing
//! policy is logged, counted and bypassed.

pub mod engine_fields;
mod finish;
mod forward;
mod prepare;
mod relay;
pub mod sampling_fields;
mod state;
mod stream_usage;

pub use state::{BodyOptions, ProxyState};

use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use axum::body::{Body, Bytes, HttpBody as _};
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use tracing::Instrument as _;

use self::forward::forward;
use self::prepare::{parse_body, prepare_agent_call, prepare_completion};
use crate::engine::admission::ReadingHold;
use crate::engine::upstream;
use crate::front::error::ApiError;
use crate::front::limits::{closing_connection, read_body};
use crate::hints::parse::{request_hints, RequestHints};
use crate::hints::route::invalid_hint;
use crate::identity::agent_api::AgentApi;
use crate::telemetry;
use crate::tenant::admit::{admit, tenant_of, Admitted};
use state::failed;

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

/// A request admitted and its body read: the tenant and its place, the body, and while the
/// admission queue is full the body's bytes held against its caps (dropped once the body is
/// parsed, just before the request joins the line).
struct Received {
    admitted: Admitted,
    body: Bytes,
    reading: Option<ReadingHold>,
}

/// The caller's tenant and place from the headers, then the body: nothing is read for a
/// stranger, nor for a tenant at its in-flight limit, nor past the admission queue's byte caps.
async fn admit_then_read(state: &ProxyState, headers: &HeaderMap, body: Body) -> Result<Received, ApiError> {
    let admitted = admit(&state.tenants, headers).await?;
    let limit = state.upstream.limits().max_body_bytes;
    let reading = match &state.admission {
        // Its length when the client said it, else the most a body may be.
        Some(queue) => {
            let expected = body.size_hint().exact().map_or(limit, |n| (n as usize).min(limit));
            queue.hold_reading(&admitted.tenant.name, expected)?
        }
        None => None,
    };
    let body = read_body(body, limit, "--max-body-bytes").await?;
    Ok(Received {
        admitted,
        body,
        reading,
    })
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

/// The span of one client request (OpenTelemetry's server span): the child of the client's
/// `traceparent` when export is on. Who is calling is recorded as it becomes known; the status
/// when the answer's head is ready ([`finished`]).
fn request_span(path: &str, headers: &HeaderMap) -> tracing::Span {
    let span = tracing::info_span!(
        "request",
        otel.name = %format_args!("POST {path}"),
        otel.kind = "server",
        http.request.method = "POST",
        http.route = path,
        tenant = tracing::field::Empty,
        agent = tracing::field::Empty,
        session = tracing::field::Empty,
        request_id = tracing::field::Empty,
        http.response.status_code = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    telemetry::propagation::adopt_client_parent(&span, headers);
    span
}

/// `response` after its status is recorded on the current (request) span: a 5xx marks the span
/// failed, as OpenTelemetry's HTTP conventions ask of a server.
fn finished(response: Response) -> Response {
    // Integers as i64: the OpenTelemetry layer records an unsigned value as its text.
    let span = tracing::Span::current();
    let status = response.status();
    span.record("http.response.status_code", i64::from(status.as_u16()));
    if status.is_server_error() {
        span.record("otel.status_code", "ERROR");
    }
    response
}

/// A call in one of the APIs with agent identity: chat completions, Responses, Messages.
async fn agent_call(state: ProxyState, headers: HeaderMap, body: Body, api: AgentApi) -> Response {
    let call = Call::Agent(api);
    let span = request_span(call.path(), &headers);
    call_traced(state, headers, body, call).instrument(span).await
}

async fn completions(State(state): State<ProxyState>, headers: HeaderMap, body: Body) -> Response {
    let span = request_span(Call::Completion.path(), &headers);
    call_traced(state, headers, body, Call::Completion)
        .instrument(span)
        .await
}

/// What a model route takes: a call in an agent API, or a plain completion (no agent API: its
/// errors keep the default shape and its usage is read in chat completions' words).
#[derive(Clone, Copy)]
enum Call {
    Agent(AgentApi),
    Completion,
}

impl Call {
    fn path(self) -> &'static str {
        match self {
            Call::Agent(api) => api.path(),
            Call::Completion => "/v1/completions",
        }
    }

    /// The API whose usage, response ids and errors the reply is read in.
    fn api(self) -> AgentApi {
        match self {
            Call::Agent(api) => api,
            Call::Completion => AgentApi::ChatCompletions,
        }
    }

    /// `e` in the shape the client's API expects.
    fn shaped(self, e: ApiError) -> ApiError {
        match self {
            Call::Agent(api) => e.shaped(api.error_shape()),
            Call::Completion => e,
        }
    }
}

/// One model call, whatever the route: a place in the tenant's quota before the body is read,
/// the lifecycle hints of its headers, agent and session identified, then [`forward`].
async fn call_traced(state: ProxyState, headers: HeaderMap, body: Body, call: Call) -> Response {
    state.metrics.requests.fetch_add(1, Relaxed);
    let Received {
        admitted,
        body,
        reading,
    } = match admit_then_read(&state, &headers, body).await {
        Ok(read) => read,
        Err(e) => return finished(closing_connection(failed(&state, call.shaped(e)))),
    };
    let Admitted { tenant, permit } = admitted;
    tracing::Span::current().record("tenant", tenant.name.as_str());
    let lifecycle = match hints_of(&state, &tenant, &headers) {
        Ok(lifecycle) => lifecycle,
        Err(e) => return finished(failed(&state, call.shaped(e))),
    };
    // The proxy's overhead counts from here: the client's upload time is not the proxy's.
    let received = Instant::now();
    let identity = tracing::info_span!("identity", tenant = %tenant.name, agent = tracing::field::Empty, session = tracing::field::Empty);
    let prepared = async {
        match call {
            Call::Agent(api) => prepare_agent_call(&state, tenant, &headers, body, api).await,
            Call::Completion => match parse_body(&state, &tenant, body).await {
                Ok(json) => prepare_completion(&state, tenant, &headers, json),
                Err(e) => Err(e),
            },
        }
    }
    .instrument(identity)
    .await;
    drop(reading);
    finished(match prepared {
        Ok(prepared) => forward(state, call.path(), call.api(), prepared, (permit, lifecycle), received).await,
        Err(e) => failed(&state, call.shaped(e)),
    })
}

/// The lifecycle hints of a request's headers (`x-agentrt-session-end`, `x-agentrt-next-agent`);
/// a value they do not accept is a 400 of type `invalid_hint`, counted for the tenant.
fn hints_of(state: &ProxyState, tenant: &crate::tenant::Tenant, headers: &HeaderMap) -> Result<RequestHints, ApiError> {
    request_hints(headers).map_err(|message| {
        state.hints.refused(tenant, "malformed");
        state.metrics.bad_requests.fetch_add(1, Relaxed);
        invalid_hint(message)
    })
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

//! One agent call, step by step: the OpenAI-compatible routes — chat completions, Responses,
//! Messages, completions, models — and what they share. A request's head is read once (`head`:
//! its tenant and place in the quota, [`crate::tenant::admit`]; its identity and hint headers),
//! its body read under `--max-body-bytes`, to its deadline and within
//! the reading budgets ([`crate::front::body`]), and prepared once
//! (`prepare`), sent on (`forward`: the policies told, admission, replica, upstream), relayed
//! (`relay`) and its end reported (`finish`). Policy calls never fail a request: a failing
//! policy is logged, counted and bypassed.

pub mod engine_fields;
mod finish;
mod forward;
mod head;
mod held_stream;
mod prepare;
mod relay;
pub mod sampling_fields;
mod state;
mod stream_usage;

pub use state::{BodyOptions, ProxyState};

use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use agentrt_guards::body_read::BodyHold;
use axum::body::{Body, Bytes, HttpBody as _};
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use tracing::Instrument as _;

use self::forward::forward;
use self::head::RequestHead;
use self::prepare::{parse_body, prepare_agent_call, prepare_completion};
use crate::engine::admission::ReadingHold;
use crate::engine::upstream;
use crate::front::error::ApiError;
use crate::front::limits::closing_connection;
use crate::identity::agent_api::AgentApi;
use crate::telemetry;
use crate::tenant::admit::tenant_of;
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

/// A request's body read: its bytes, held against the bodies' budgets — the proxy's reading
/// budget, and while the admission queue is full its caps — until the body is parsed, just
/// before the request joins the line.
struct Received {
    body: Bytes,
    reading: (BodyHold, Option<ReadingHold>),
}

/// The body of `tenant`'s admitted request: nothing is read past the admission queue's byte
/// caps, and the body is read to its deadline within the reading budgets ([`crate::front::body`]).
async fn read_admitted(state: &ProxyState, tenant: &str, body: Body) -> Result<Received, ApiError> {
    let limit = state.upstream.limits().max_body_bytes;
    let queued = match &state.admission {
        // Its length when the client said it, else the most a body may be.
        Some(queue) => {
            let expected = body.size_hint().exact().map_or(limit, |n| (n as usize).min(limit));
            queue.hold_reading(tenant, expected)?
        }
        None => None,
    };
    let mut hold = state.reading.budget.hold(tenant);
    let body = state.reading.read(body, limit, "--max-body-bytes", &mut hold).await?;
    Ok(Received {
        body,
        reading: (hold, queued),
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

/// One model call, whatever the route: its head read once ([`RequestHead`]: the tenant and a
/// place in its quota, the identity headers, the hint headers checked — nothing is read for a
/// stranger, a tenant at its in-flight limit or a malformed hint), then the body, agent and
/// session identified, then [`forward`].
async fn call_traced(state: ProxyState, headers: HeaderMap, body: Body, call: Call) -> Response {
    state.metrics.requests.fetch_add(1, Relaxed);
    let refused = |e: ApiError| finished(closing_connection(failed(&state, call.shaped(e))));
    let head = match RequestHead::read(&state, &headers).await {
        Ok(head) => head,
        Err(e) => return refused(e),
    };
    drop(headers);
    let tenant = head.tenant.clone();
    tracing::Span::current().record("tenant", tenant.name.as_str());
    let Received { body, reading } = match read_admitted(&state, &tenant.name, body).await {
        Ok(read) => read,
        Err(e) => return refused(e),
    };
    // The proxy's overhead counts from here: the client's upload time is not the proxy's.
    let received = Instant::now();
    let identity = tracing::info_span!("identity", tenant = %tenant.name, agent = tracing::field::Empty, session = tracing::field::Empty);
    let prepared = async {
        match call {
            Call::Agent(api) => prepare_agent_call(&state, tenant, &head.identity, body, api).await,
            Call::Completion => match parse_body(&state, &tenant, body).await {
                Ok(json) => prepare_completion(&state, tenant, &head.identity, json),
                Err(e) => Err(e),
            },
        }
    }
    .instrument(identity)
    .await;
    drop(reading);
    finished(match prepared {
        Ok(mut prepared) => {
            let said = head.hints.with_body(std::mem::take(&mut prepared.hints));
            let hints = state.hints.within_rate(&prepared.tenant, said);
            forward(state, call.path(), call.api(), prepared, (head.permit, hints), received).await
        }
        Err(e) => failed(&state, call.shaped(e)),
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

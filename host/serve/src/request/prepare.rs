//! Preparing one agent call: parse the body once within its budget, check what a client may not
//! set, read who is calling, salt it, record the agent, its anchor and the session, and amend the
//! body (agentrt's tags in the engine's own fields, a demotion as `priority`) for the engine.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use axum::body::Bytes;
use serde_json::{json, Value};

use agentrt_runtime::types::{Continuation, Event};

use super::sampling_fields;
use super::state::ProxyState;
use crate::engine::replicas::RouteInput;
use crate::front::error::ApiError;
use crate::hints::dialects::{take_body_hints, BodyHints};
use crate::hints::parse::RequestHints;
use crate::hints::route::invalid_hint;
use crate::identity::agent_api::AgentApi;
use crate::identity::{identify_chat, identify_completion, names_session, Anchor, Identity, IdentityHeaders};
use crate::tenant::continuation::PromptShape;
use crate::tenant::Tenant;

/// Parse a request body within its budget ([`crate::front::request_budget`]): its JSON elements and
/// depth are measured before anything is allocated, and a large one is parsed on a blocking thread, one at a
/// time per tenant. `body` is dropped here: only the amended copy goes on.
pub(super) async fn parse_body(state: &ProxyState, tenant: &Tenant, body: Bytes) -> Result<Value, ApiError> {
    state.upstream.limits().budget.check_shape(&body).map_err(|e| {
        let error = match e.too_large {
            true => ApiError::payload_too_large(e.message),
            false => ApiError::bad_request(e.message),
        };
        state.refused(e.reason, error)
    })?;
    let parsed = if body.len() >= crate::front::request_budget::HEAVY_BODY_BYTES {
        let _turn = tenant.heavy_parse().await;
        tokio::task::spawn_blocking(move || serde_json::from_slice::<Value>(&body))
            .await
            .map_err(|e| ApiError::internal(format!("parsing the request body did not finish: {e}")))?
    } else {
        serde_json::from_slice::<Value>(&body)
    };
    let value = parsed.map_err(|e| {
        state.metrics.bad_requests.fetch_add(1, Relaxed);
        ApiError::bad_request(format!(
            "request body is not valid JSON: {e} (line {}, column {})",
            e.line(),
            e.column()
        ))
    })?;
    if !value.is_object() {
        state.metrics.bad_requests.fetch_add(1, Relaxed);
        return Err(ApiError::bad_request("request body must be a JSON object"));
    }
    Ok(value)
}

/// What every route checks of a parsed body before reading it further: no engine-control field
/// a client may not set ([`crate::request::engine_fields`]), sampling numbers in range
/// ([`crate::request::sampling_fields`]).
fn check_fields(state: &ProxyState, json: &mut Value, fields: sampling_fields::Fields) -> Result<(), ApiError> {
    let object = json.as_object_mut().expect("parse_body checked it is an object");
    state
        .body
        .client_engine_fields
        .check(object)
        .map_err(|m| state.refused("engine_field", ApiError::bad_request(m)))?;
    if state.body.engine_tags {
        state
            .body
            .engine
            .check_client_fields(object)
            .map_err(|m| state.refused("engine_field", ApiError::bad_request(m)))?;
    }
    sampling_fields::check(object, fields)
        .map_err(|bad| state.refused("sampling_field", ApiError::bad_request(bad.message).about(bad.field)))
}

/// The body's hint dialects, taken out of it ([`crate::hints::dialects`]); a malformed one is a 400
/// of type `invalid_hint` naming the field, counted for the tenant.
fn take_dialects(state: &ProxyState, tenant: &Tenant, json: &mut Value) -> Result<BodyHints, ApiError> {
    let object = json.as_object_mut().expect("parse_body checked it is an object");
    take_body_hints(object).map_err(|message| {
        state.hints.refused(tenant, "malformed");
        state.metrics.bad_requests.fetch_add(1, Relaxed);
        invalid_hint(message)
    })
}

/// `identity` in the session a dialect names, when the request (`body`, as identity read it)
/// names none itself.
fn in_dialect_session(identity: &mut Identity, headers: &IdentityHeaders, body: &Value, dialect: &mut BodyHints) {
    if let Some(key) = dialect.session_key.take() {
        if !names_session(headers, body) {
            identity.name_session(key);
        }
    }
}

/// A Responses call may continue only a response of its own tenant: the engine keeps one store
/// for every tenant, so another tenant's id would hand over that conversation. An id that is not
/// the tenant's gets the same 404 as an id nobody has.
fn check_previous_response(state: &ProxyState, tenant: &Tenant, json: &Value) -> Result<(), ApiError> {
    let Some(previous) = json.get("previous_response_id").filter(|v| !v.is_null()) else {
        return Ok(());
    };
    let Some(id) = previous.as_str() else {
        return Err(ApiError::bad_request("`previous_response_id` must be a string").about("previous_response_id"));
    };
    if tenant.responses.owns(id) {
        return Ok(());
    }
    Err(state.refused(
        "foreign_response",
        ApiError::not_found(format!("Response with id '{id}' not found.")).about("previous_response_id"),
    ))
}

/// A request ready to go upstream: whose it is, who sent it, and the amended body.
pub(super) struct Prepared {
    pub tenant: Arc<Tenant>,
    pub body: Vec<u8>,
    pub identity: Identity,
    pub agent: u32,
    /// The `agent-registered` event to send first, when the agent is new to this tenant.
    pub registration: Option<Event>,
    /// How the prompt continues the agent's previous one in the session.
    pub continues: Option<Continuation>,
    /// Sessions this one pushed out of the tenant's full session table: reported ended first.
    pub ended: Vec<u64>,
    /// What the router needs to place it, when there are several replicas.
    pub route: Option<RouteInput>,
    /// The proxy asked for the streamed usage the client did not: its usage chunk is dropped.
    pub strip_usage: bool,
    /// The client asked for a stream (`"stream": true`).
    pub streams: bool,
    /// The lifecycle hints its body's dialects said (applied with its headers' when it ends).
    pub hints: RequestHints,
}

/// A plain completion (`/v1/completions`), parsed.
pub(super) fn prepare_completion(
    state: &ProxyState,
    tenant: Arc<Tenant>,
    headers: &IdentityHeaders,
    mut json: Value,
) -> Result<Prepared, ApiError> {
    check_fields(state, &mut json, sampling_fields::Fields::Completions)?;
    let mut dialect = take_dialects(state, &tenant, &mut json)?;
    state.salt(&mut json, &tenant.name, None);
    let mut identity = identify_completion(headers, &json).map_err(|m| {
        state.metrics.bad_requests.fetch_add(1, Relaxed);
        ApiError::bad_request(m)
    })?;
    in_dialect_session(&mut identity, headers, &json, &mut dialect);
    identity.scope_to_tenant(&tenant.name);
    refuse_denied(state, &tenant, &identity)?;
    let (agent, registration) = tenant.agents.intern(&identity);
    let prompt = json.get("prompt").map(Value::to_string).unwrap_or_default();
    let shape = PromptShape::of_text(&prompt);
    let prepared = prepare(
        state,
        AgentApi::ChatCompletions,
        tenant,
        json,
        identity,
        agent,
        registration,
        shape,
    );
    Ok(Prepared {
        hints: dialect.hints,
        ..prepared
    })
}

/// A call of one of the agent APIs.
pub(super) async fn prepare_agent_call(
    state: &ProxyState,
    tenant: Arc<Tenant>,
    headers: &IdentityHeaders,
    body: Bytes,
    api: AgentApi,
) -> Result<Prepared, ApiError> {
    let mut json = parse_body(state, &tenant, body).await?;
    let bad_request = |m: String| {
        state.metrics.bad_requests.fetch_add(1, Relaxed);
        ApiError::bad_request(m)
    };
    state
        .upstream
        .limits()
        .budget
        .check_items(&json, api.conversation_field())
        .map_err(|e| state.refused(e.reason, ApiError::bad_request(e.message)))?;
    if api == AgentApi::Responses {
        check_previous_response(state, &tenant, &json)?;
    }
    // Identity, anchor and prompt shape are read from the request as chat messages; the body
    // goes upstream in its own API.
    let view = api.chat_view(&json).map_err(bad_request)?;
    check_fields(state, &mut json, sampling_fields::Fields::Agent(api))?;
    let mut dialect = take_dialects(state, &tenant, &mut json)?;
    let (mut identity, mut anchor) = identify_chat(headers, &view).map_err(bad_request)?;
    in_dialect_session(&mut identity, headers, &view, &mut dialect);
    anchor.api = api;
    anchor.fields = api.anchor_fields(&json);
    anchor.cache_salt = state.salt(&mut json, &tenant.name, Some(identity.anchor_hash));
    identity.scope_to_tenant(&tenant.name);
    refuse_denied(state, &tenant, &identity)?;
    let (agent, mut registration) = tenant.agents.intern(&identity);
    if let Some(Event::AgentRegistered(new_agent)) = registration.as_mut() {
        if state.body.engine_tags && state.body.engine.tokenizes_chat() {
            if let Some(tokens) = anchor_tokens_upstream(state, &anchor).await {
                new_agent.anchor_tokens = tokens;
            }
        }
    }
    tenant.agents.record_anchor(identity.anchor_hash, agent, anchor);
    let shape = PromptShape::of_chat(&view);
    let prepared = prepare(state, api, tenant, json, identity, agent, registration, shape);
    Ok(Prepared {
        hints: dialect.hints,
        ..prepared
    })
}

/// 403 for a session one of the tenant's policies denied (a guard's budget or loop rule): the
/// message is the policy's reason. Nothing goes upstream and no policy hears of the request.
fn refuse_denied(state: &ProxyState, tenant: &Tenant, identity: &Identity) -> Result<(), ApiError> {
    match tenant.verdicts.denial(identity.session) {
        None => Ok(()),
        Some(reason) => {
            state.metrics.denied_requests.fetch_add(1, Relaxed);
            Err(ApiError::forbidden(format!(
                "session {:?} denied by tenant {}'s policy: {reason}",
                identity.session_key, tenant.name
            )))
        }
    }
}

/// The largest priority the proxy sends the engine (a demotion by this much or more is this much).
pub const MAX_ENGINE_PRIORITY: u32 = 1_000_000;

/// Record the session and the prompt's shape, and amend the body: the part every route shares.
#[allow(clippy::too_many_arguments)]
fn prepare(
    state: &ProxyState,
    api: AgentApi,
    tenant: Arc<Tenant>,
    mut json: Value,
    identity: Identity,
    agent: u32,
    registration: Option<Event>,
    shape: PromptShape,
) -> Prepared {
    // On the identity span (current here): who is calling, never what they asked.
    tracing::Span::current()
        .record("agent", identity.agent_name.as_str())
        .record("session", identity.session);
    let ended = tenant.agents.record_session(identity.session).forgotten;
    let continues = tenant.continuations.observe(identity.session, agent, shape);
    if state.body.engine_priorities && api.has_priority() {
        // The engine's priority scheduling (vLLM serves lower values first, SGLang higher: the
        // sign is the engine kind's). A policy may only demote its own tenant's sessions (a
        // promotion is not an engine's to give): never ahead of another tenant's requests, which
        // go at 0.
        let demotion = tenant.verdicts.priority(identity.session).min(0).unsigned_abs();
        if demotion > 0 {
            json["priority"] = json!(state.body.engine.demotion_priority(demotion.min(MAX_ENGINE_PRIORITY)));
        }
    }
    let route = state
        .replicas
        .as_ref()
        .map(|_| RouteInput::of_body(&json).with_session(identity.session));
    // Chat completions and completions stream usage only when asked; the other APIs always do.
    let strip_usage = api == AgentApi::ChatCompletions && super::stream_usage::ask_for_usage(&mut json);
    let streams = json.get("stream").and_then(Value::as_bool) == Some(true);
    let body = json_with(state, &mut json, agent, &identity);
    Prepared {
        tenant,
        body,
        identity,
        agent,
        registration,
        continues,
        ended,
        route,
        strip_usage,
        streams,
        hints: RequestHints::default(),
    }
}

/// The exact size in tokens of a new agent's anchor, counted once by the upstream (vLLM's
/// `/tokenize`, which renders the system messages and tools through the model's chat template
/// exactly as they open every prompt of the agent). Policies tell anchor blocks from session
/// content by it (`position < anchor-tokens`), and the byte estimate (bytes / 4) is far off for
/// tool schemas and for small tokenizers. `None` — the estimate stays — when the upstream cannot
/// answer in time, e.g. it is not vLLM.
async fn anchor_tokens_upstream(state: &ProxyState, anchor: &Anchor) -> Option<u32> {
    if anchor.messages.is_empty() && anchor.tools.is_none() {
        return None;
    }
    // `/tokenize` renders chat messages and chat-completion tools; another API's tool schema
    // would be refused, so its anchor keeps the byte estimate.
    if anchor.api != AgentApi::ChatCompletions && anchor.tools.is_some() {
        return None;
    }
    let mut body = json!({"model": anchor.model, "messages": anchor.messages, "add_generation_prompt": false});
    if let Some(tools) = &anchor.tools {
        body["tools"] = tools.clone();
    }
    let counted = state.tokenizer.count(&body).await;
    if counted.is_some() {
        state.metrics.anchors_tokenized.fetch_add(1, Relaxed);
    } else {
        state.metrics.anchors_estimated.fetch_add(1, Relaxed);
        tracing::debug!(model = %anchor.model, "the upstream did not count the anchor's tokens; keeping the byte estimate");
    }
    counted
}

fn json_with(state: &ProxyState, json: &mut Value, agent: u32, identity: &Identity) -> Vec<u8> {
    if state.body.engine_tags {
        state
            .body
            .engine
            .tag_request(json, agent, identity.session, state.body.upstream_router);
    }
    serde_json::to_vec(json).expect("values serialize")
}

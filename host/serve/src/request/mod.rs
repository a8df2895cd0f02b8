//! The OpenAI-compatible routes: identify the caller, tell the tenant's policy, forward upstream,
//! pass the answer back as it comes, and tell the policy how it went.
//!
//! A request is authenticated from its headers before its body is read, and the body is read
//! under `--max-body-bytes` (see [`crate::front::limits`]). It is read once, parsed once, amended
//! (`vllm_xargs` with the agent, session and warm-up flag, which vLLM hands to the engine as
//! `SamplingParams.extra_args`) and serialized once.
//! Responses stream through chunk by chunk; upstream errors come back with their own status and
//! body. Policy calls never fail a request: a failing policy is logged, counted and bypassed.

pub mod engine_fields;
pub mod sampling_fields;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use agentrt_runtime::types::{Continuation, Event, Item, ItemKind, RequestArrival, RequestFinish};

use crate::engine::admission::Applicant;
use crate::front::error::ApiError;
use crate::front::limits::{closing_connection, read_body, Limits};
use crate::identity::agent_api::{AgentApi, Usage};
use crate::identity::{identify_chat, identify_completion, Anchor, Identity};
use crate::metrics::{ConnectionMetrics, ProxyMetrics};
use crate::tenant::cache_salt::CacheSalts;
use crate::tenant::continuation::PromptShape;

use crate::engine::upstream;
use crate::names::ADMISSION_SLOT;
use crate::policy::warmup::{WarmupOptions, Warmups};
use crate::tenant::{Tenant, TenantPermit, Tenants};

/// How the proxy runs.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Base URL of the upstream, e.g. `http://127.0.0.1:8000`.
    pub upstream: String,
    /// Add `vllm_xargs` (agent, session, warm-up flag) to forwarded bodies. Off for upstreams that
    /// reject unknown fields.
    pub vllm_xargs: bool,
    /// Sent upstream as `Authorization: Bearer …` (clients' keys are agentrt's, never forwarded).
    pub upstream_api_key: Option<String>,
    /// Bearer token `/metrics` requires; `None` leaves it open (it names every tenant).
    pub metrics_token: Option<String>,
    /// Key of the tenants' cache salts ([`crate::tenant::cache_salt`]); `None`: random per process.
    pub cache_salt_secret: Option<String>,
    /// Send policies' `set-priority` demotions as the request's `priority` (vLLM started with
    /// `--scheduling-policy priority`; vLLM refuses a non-zero priority otherwise).
    pub engine_priorities: bool,
    pub warmup: WarmupOptions,
    pub limits: Limits,
    /// Engine-control fields clients may set (`--client-engine-field`; none by default).
    pub client_engine_fields: crate::request::engine_fields::ClientEngineFields,
}

/// Everything a handler needs.
pub struct AppState {
    pub options: ServeOptions,
    pub client: reqwest::Client,
    pub tenants: Tenants,
    pub metrics: ProxyMetrics,
    /// Counted by the accept loop ([`crate::front::connections::serve`]), shown on `/metrics`.
    pub connections: Arc<ConnectionMetrics>,
    pub warmups: Warmups,
    /// Each tenant's `cache_salt` (with `vllm_xargs` on: vLLM's extensions).
    pub cache_salts: CacheSalts,
    /// The engine's cache divided among tenants, when `--share` is given (for `/metrics`).
    pub engine_cache: Option<Arc<agentrt_vllm::SharedCache>>,
    /// Where `pin`/`unpin` side effects go when the vLLM eviction service runs.
    pub engine_pins: Option<Arc<agentrt_vllm::PinTable>>,
    /// Re-reads the config file (`--config`) on SIGHUP and `POST /admin/reload`.
    pub reloader: Option<crate::tenant::reload::Reloader>,
    /// Several replicas behind a router (`--replica`), else every request goes to `upstream`.
    pub replicas: Option<Arc<crate::engine::replicas::ReplicaRouting>>,
    /// The MCP gateway at `/mcp/SERVER` (`--mcp-server`), set by [`crate::mcp::mount`].
    pub mcp: std::sync::OnceLock<Arc<agentrt_mcp::Gateway>>,
    /// At most N requests upstream, the rest waiting in priority order (`--upstream-max-in-flight`).
    pub admission: Option<Arc<crate::engine::admission::AdmissionQueue>>,
    clock: Instant,
    next_request_id: AtomicU64,
}

impl AppState {
    pub fn new(options: ServeOptions, tenants: Tenants) -> Self {
        let client = reqwest::Client::builder()
            .connect_timeout(options.limits.upstream_connect_timeout)
            .build()
            .expect("a plain HTTP client builds");
        let warmups = Warmups::new(options.warmup.clone());
        let cache_salts = CacheSalts::new(options.cache_salt_secret.as_deref());
        Self {
            cache_salts,
            options,
            client,
            tenants,
            metrics: ProxyMetrics::default(),
            connections: Arc::default(),
            warmups,
            engine_pins: None,
            engine_cache: None,
            reloader: None,
            replicas: None,
            mcp: std::sync::OnceLock::new(),
            admission: None,
            clock: Instant::now(),
            next_request_id: AtomicU64::new(1),
        }
    }

    pub fn now_us(&self) -> u64 {
        self.clock.elapsed().as_micros() as u64
    }

    pub fn upstream_url(&self, path: &str) -> String {
        format!("{}{path}", self.options.upstream.trim_end_matches('/'))
    }

    pub fn upstream_request(&self, path: &str) -> reqwest::RequestBuilder {
        self.upstream_request_to(&self.options.upstream, path)
    }

    /// A POST of JSON to `path` on the upstream at `base` (one of several replicas).
    pub fn upstream_request_to(&self, base: &str, path: &str) -> reqwest::RequestBuilder {
        let builder = self
            .client
            .post(format!("{}{path}", base.trim_end_matches('/')))
            .header(header::CONTENT_TYPE, "application/json");
        match &self.options.upstream_api_key {
            Some(key) => builder.bearer_auth(key),
            None => builder,
        }
    }

    /// Report the sessions with no request for `idle` as ended (`session-end`) to their tenant's
    /// policy — CacheSage learns "the session ends here" from it and stops valuing the session's
    /// blocks. Returns how many ended. `agentrt serve` calls it periodically (`--session-idle-ms`).
    pub fn end_idle_sessions(&self, idle: std::time::Duration) -> usize {
        let now = Instant::now();
        let mut ended = 0;
        for tenant in self.tenants.list() {
            let sessions = tenant.agents.expire_sessions(idle, now);
            if sessions.is_empty() {
                continue;
            }
            ended += sessions.len();
            let events: Vec<Event> = sessions.into_iter().map(Event::SessionEnd).collect();
            self.tell_policy(&tenant, events);
        }
        self.metrics.sessions_ended.fetch_add(ended as u64, Relaxed);
        ended
    }

    /// Count `error` as a refusal for `reason` (one of [`crate::metrics::REFUSAL_REASONS`]) and
    /// hand it back.
    pub fn refused(&self, reason: &str, error: ApiError) -> ApiError {
        self.metrics.refused.count(reason);
        error
    }

    /// Count an upstream failure (and, apart, the timeouts among them). A request cut by its
    /// key's revocation is not one.
    pub fn upstream_failed(&self, error: &ApiError) {
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
    pub fn salt(&self, body: &mut Value, tenant: &str, anchor_hash: Option<u64>) -> Option<String> {
        if !self.options.vllm_xargs {
            return None;
        }
        let public = anchor_hash.is_some_and(|h| self.tenants.settings().public_anchors.contains(&h));
        if public {
            self.metrics.public_anchor_requests.fetch_add(1, Relaxed);
        }
        self.cache_salts.apply(body, tenant, public)
    }

    /// Queue events for a tenant's policy. Never waits: the tenant's worker makes the call, and
    /// drops (and counts) what its full queue cannot hold.
    pub fn tell_policy(&self, tenant: &Tenant, events: Vec<Event>) {
        if let Some(replicas) = &self.replicas {
            // An ended session's replica is no longer a hint (idle ends, and table overflow).
            replicas.sessions_ended(events.iter().filter_map(|e| match e {
                Event::SessionEnd(session) => Some(*session),
                _ => None,
            }));
        }
        tenant.observe(events);
    }
}

/// Serve `state`'s routes on `listener` through the accept loop (its connection cap and header
/// timeout, [`crate::front::connections`]) until `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let app = router(state.clone());
    crate::front::connections::serve(
        listener,
        app,
        &state.options.limits,
        state.connections.clone(),
        shutdown,
    )
    .await
}

pub fn router(state: Arc<AppState>) -> Router {
    let mcp = state.mcp.get().map(agentrt_mcp::routes::router);
    let proxy = Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/responses", post(responses))
        .route("/v1/messages", post(messages))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(models))
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .merge(crate::admin::routes())
        .with_state(state);
    match mcp {
        Some(mcp) => proxy.merge(mcp),
        None => proxy,
    }
}

/// Parse a request body within its budget ([`crate::front::request_budget`]): its JSON elements are
/// counted before anything is allocated, and a large one is parsed on a blocking thread, one at a
/// time per tenant. `body` is dropped here: only the amended copy goes on.
async fn parse_body(state: &AppState, tenant: &Tenant, body: Bytes) -> Result<Value, ApiError> {
    state
        .options
        .limits
        .budget
        .check_elements(&body)
        .map_err(|e| state.refused(e.reason, ApiError::payload_too_large(e.message)))?;
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
fn check_fields(state: &AppState, json: &mut Value, fields: sampling_fields::Fields) -> Result<(), ApiError> {
    let object = json.as_object_mut().expect("parse_body checked it is an object");
    state
        .options
        .client_engine_fields
        .check(object)
        .map_err(|m| state.refused("engine_field", ApiError::bad_request(m)))?;
    sampling_fields::check(object, fields)
        .map_err(|bad| state.refused("sampling_field", ApiError::bad_request(bad.message).about(bad.field)))
}

/// A Responses call may continue only a response of its own tenant: the engine keeps one store
/// for every tenant, so another tenant's id would hand over that conversation. An id that is not
/// the tenant's gets the same 404 as an id nobody has.
fn check_previous_response(state: &AppState, tenant: &Tenant, json: &Value) -> Result<(), ApiError> {
    let Some(previous) = json.get("previous_response_id").filter(|v| !v.is_null()) else {
        return Ok(());
    };
    let Some(id) = previous.as_str() else {
        return Err(ApiError::bad_request("`previous_response_id` must be a string").about("previous_response_id"));
    };
    if tenant.owns_response(id) {
        return Ok(());
    }
    Err(state.refused(
        "foreign_response",
        ApiError::not_found(format!("Response with id '{id}' not found.")).about("previous_response_id"),
    ))
}

/// Put agentrt's identity into `vllm_xargs`, keeping whatever the client put there. The session
/// goes as the same 64-bit id the policy sees in request events, so that the vLLM plugin's block
/// tags and the proxy's events name sessions alike.
fn add_xargs(body: &mut Value, agent: u32, session: u64, warmup: bool) {
    let xargs = body
        .as_object_mut()
        .expect("checked object")
        .entry("vllm_xargs")
        .or_insert_with(|| json!({}));
    if let Some(map) = xargs.as_object_mut() {
        map.insert("agentrt_agent".into(), json!(agent));
        map.insert("agentrt_session".into(), json!(session));
        map.insert("agentrt_warmup".into(), json!(warmup));
    }
}

/// A request ready to go upstream: whose it is, who sent it, and the amended body.
struct Prepared {
    tenant: Arc<Tenant>,
    body: Vec<u8>,
    identity: Identity,
    agent: u32,
    /// The `agent-registered` event to send first, when the agent is new to this tenant.
    registration: Option<Event>,
    /// How the prompt continues the agent's previous one in the session.
    continues: Option<Continuation>,
    /// Sessions this one pushed out of the tenant's full session table: reported ended first.
    ended: Vec<u64>,
    /// What the router needs to place it, when there are several replicas.
    route: Option<crate::engine::replicas::RouteInput>,
}

/// The caller's tenant, from the headers alone, and the revocation of the key it used. A new
/// tenant's policy starts on a blocking thread: instantiating it must not hold an async worker
/// other tenants' requests need.
async fn tenant_of(state: &Arc<AppState>, headers: &HeaderMap) -> Result<(Arc<Tenant>, CancellationToken), ApiError> {
    let caller = state.tenants.authenticate(headers)?;
    if let Some(tenant) = state.tenants.get(&caller.tenant) {
        return Ok((tenant, caller.revoked));
    }
    let starting = state.clone();
    let name = caller.tenant;
    let tenant = tokio::task::spawn_blocking(move || starting.tenants.get_or_start(&name))
        .await
        .map_err(|e| ApiError::internal(format!("starting the tenant's policy did not finish: {e}")))??;
    Ok((tenant, caller.revoked))
}

/// `work`'s answer, unless the request's key is revoked first: then a 401 saying so.
async fn unless_revoked<T>(
    state: &AppState,
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
fn revoked_error(state: &AppState) -> ApiError {
    state.refused("revoked", ApiError::unauthorized(crate::tenant::REVOKED))
}

/// The caller's tenant from the headers, then the body: nothing is read for a stranger, nor for
/// a tenant at its in-flight limit.
async fn authenticate_then_read(
    state: &Arc<AppState>,
    headers: &HeaderMap,
    body: Body,
) -> Result<(Arc<Tenant>, TenantPermit, Bytes), ApiError> {
    let (tenant, revoked) = tenant_of(state, headers).await?;
    let permit = tenant.admit_as(revoked)?;
    let body = read_body(body, state.options.limits.max_body_bytes, "--max-body-bytes").await?;
    Ok((tenant, permit, body))
}

async fn chat_completions(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    agent_call(state, headers, body, AgentApi::ChatCompletions).await
}

async fn responses(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    agent_call(state, headers, body, AgentApi::Responses).await
}

async fn messages(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    agent_call(state, headers, body, AgentApi::Messages).await
}

/// A call in one of the APIs with agent identity: chat completions, Responses, Messages.
async fn agent_call(state: Arc<AppState>, headers: HeaderMap, body: Body, api: AgentApi) -> Response {
    state.metrics.requests.fetch_add(1, Relaxed);
    let shape = api.error_shape();
    let (tenant, permit, body) = match authenticate_then_read(&state, &headers, body).await {
        Ok(read) => read,
        Err(e) => return closing_connection(failed(&state, e.shaped(shape))),
    };
    // The proxy's overhead counts from here: the client's upload time is not the proxy's.
    let received = Instant::now();
    match prepare_agent_call(&state, tenant, &headers, body, api).await {
        Ok(prepared) => forward(state, api.path(), api, prepared, permit, received).await,
        Err(e) => failed(&state, e.shaped(shape)),
    }
}

async fn completions(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    state.metrics.requests.fetch_add(1, Relaxed);
    let (tenant, permit, body) = match authenticate_then_read(&state, &headers, body).await {
        Ok(read) => read,
        Err(e) => return closing_connection(failed(&state, e)),
    };
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

fn prepare_completion(
    state: &AppState,
    tenant: Arc<Tenant>,
    headers: &HeaderMap,
    mut json: Value,
) -> Result<Prepared, ApiError> {
    check_fields(state, &mut json, sampling_fields::Fields::Completions)?;
    state.salt(&mut json, &tenant.name, None);
    let mut identity = identify_completion(headers, &json).map_err(|m| {
        state.metrics.bad_requests.fetch_add(1, Relaxed);
        ApiError::bad_request(m)
    })?;
    identity.scope_to_tenant(&tenant.name);
    refuse_denied(state, &tenant, &identity)?;
    let (agent, registration) = tenant.agents.intern(&identity);
    let prompt = json.get("prompt").map(Value::to_string).unwrap_or_default();
    let shape = PromptShape::of_text(&prompt);
    Ok(prepare(
        state,
        AgentApi::ChatCompletions,
        tenant,
        json,
        identity,
        agent,
        registration,
        shape,
    ))
}

async fn prepare_agent_call(
    state: &AppState,
    tenant: Arc<Tenant>,
    headers: &HeaderMap,
    body: Bytes,
    api: AgentApi,
) -> Result<Prepared, ApiError> {
    let mut json = parse_body(state, &tenant, body).await?;
    let bad_request = |m: String| {
        state.metrics.bad_requests.fetch_add(1, Relaxed);
        ApiError::bad_request(m)
    };
    state
        .options
        .limits
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
    let (mut identity, mut anchor) = identify_chat(headers, &view).map_err(bad_request)?;
    anchor.api = api;
    anchor.fields = api.anchor_fields(&json);
    anchor.cache_salt = state.salt(&mut json, &tenant.name, Some(identity.anchor_hash));
    identity.scope_to_tenant(&tenant.name);
    refuse_denied(state, &tenant, &identity)?;
    let (agent, mut registration) = tenant.agents.intern(&identity);
    if let Some(Event::AgentRegistered(new_agent)) = registration.as_mut() {
        if state.options.vllm_xargs {
            if let Some(tokens) = anchor_tokens_upstream(state, &anchor).await {
                new_agent.anchor_tokens = tokens;
            }
        }
    }
    tenant.agents.record_anchor(identity.anchor_hash, agent, anchor);
    let shape = PromptShape::of_chat(&view);
    Ok(prepare(state, api, tenant, json, identity, agent, registration, shape))
}

/// 403 for a session one of the tenant's policies denied (a guard's budget or loop rule): the
/// message is the policy's reason. Nothing goes upstream and no policy hears of the request.
fn refuse_denied(state: &AppState, tenant: &Tenant, identity: &Identity) -> Result<(), ApiError> {
    match tenant.denial(identity.session) {
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

/// The largest priority the proxy sends vLLM (a demotion by this much or more is this much).
pub const MAX_ENGINE_PRIORITY: u32 = 1_000_000;

/// Record the session and the prompt's shape, and amend the body: the part every route shares.
#[allow(clippy::too_many_arguments)]
fn prepare(
    state: &AppState,
    api: AgentApi,
    tenant: Arc<Tenant>,
    mut json: Value,
    identity: Identity,
    agent: u32,
    registration: Option<Event>,
    shape: PromptShape,
) -> Prepared {
    let ended = tenant.agents.record_session(identity.session).forgotten;
    let continues = tenant.continuations.observe(identity.session, agent, shape);
    if state.options.engine_priorities && api.has_priority() {
        // vLLM's priority scheduling: lower is served earlier. A policy may only demote its own
        // tenant's sessions (a positive priority is not an engine's to give): never ahead of
        // another tenant's requests, which go at 0.
        let demotion = tenant.priority(identity.session).min(0).unsigned_abs();
        if demotion > 0 {
            json["priority"] = json!(demotion.min(MAX_ENGINE_PRIORITY));
        }
    }
    let route = state
        .replicas
        .as_ref()
        .map(|_| crate::engine::replicas::RouteInput::of_body(&json).with_session(identity.session));
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
    }
}

/// How long a new agent's first request waits for the upstream to count its anchor's tokens.
const TOKENIZE_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(500);

/// The exact size in tokens of a new agent's anchor, counted once by the upstream (vLLM's
/// `/tokenize`, which renders the system messages and tools through the model's chat template
/// exactly as they open every prompt of the agent). Policies tell anchor blocks from session
/// content by it (`position < anchor-tokens`), and the byte estimate (bytes / 4) is far off for
/// tool schemas and for small tokenizers. `None` — the estimate stays — when the upstream cannot
/// answer in time, e.g. it is not vLLM.
async fn anchor_tokens_upstream(state: &AppState, anchor: &Anchor) -> Option<u32> {
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
    let request = state
        .upstream_request("/tokenize")
        .timeout(TOKENIZE_TIMEOUT)
        .body(serde_json::to_vec(&body).expect("values serialize"));
    let counted = async {
        let response = request.send().await.ok()?;
        if !response.status().is_success() {
            return None;
        }
        let answer: Value = serde_json::from_slice(&response.bytes().await.ok()?).ok()?;
        answer.get("count")?.as_u64().and_then(|n| u32::try_from(n).ok())
    }
    .await;
    if counted.is_some() {
        state.metrics.anchors_tokenized.fetch_add(1, Relaxed);
    } else {
        state.metrics.anchors_estimated.fetch_add(1, Relaxed);
        tracing::debug!(model = %anchor.model, "the upstream did not count the anchor's tokens; keeping the byte estimate");
    }
    counted
}

fn json_with(state: &AppState, json: &mut Value, agent: u32, identity: &Identity) -> Vec<u8> {
    if state.options.vllm_xargs {
        add_xargs(json, agent, identity.session, false);
    }
    serde_json::to_vec(json).expect("values serialize")
}

fn failed(state: &AppState, e: ApiError) -> Response {
    state.metrics.requests_failed.fetch_add(1, Relaxed);
    e.into_response()
}

/// Reports a request's end to its policy exactly once: when the response completed, or — if the
/// handler or the response stream is dropped first (the client went away) — as failed.
struct FinishGuard {
    state: Arc<AppState>,
    tenant: Arc<Tenant>,
    /// The request counts against its tenant's in-flight limit until the guard goes (and ends
    /// early if its key is revoked).
    permit: TenantPermit,
    /// Its place on a replica (several replicas), released when the guard goes.
    lease: Option<crate::engine::replicas::Lease>,
    /// Its place in `--upstream-max-in-flight`, given on when the guard goes.
    _admission: Option<crate::engine::admission::AdmissionPermit>,
    template: RequestFinish,
    done: bool,
}

impl FinishGuard {
    fn finish(mut self, ok: bool, usage: Option<Usage>) {
        self.report(ok, usage);
    }

    fn report(&mut self, ok: bool, usage: Option<Usage>) {
        if self.done {
            return;
        }
        self.done = true;
        let mut finish = self.template;
        finish.ok = ok;
        finish.at_us = self.state.now_us();
        if let Some(usage) = usage {
            if let Some(n) = usage.prompt_tokens {
                finish.prompt_tokens = n;
            }
            finish.output_tokens = usage.output_tokens.unwrap_or(0);
            finish.cached_tokens = usage.cached_tokens.unwrap_or(0);
            self.tenant.record_usage(finish.prompt_tokens, finish.cached_tokens);
        }
        let mut events = vec![Event::RequestFinish(finish)];
        // A long request keeps its session alive: idleness counts from the last answer too.
        let ended = self.tenant.agents.record_session(finish.session).forgotten;
        self.state.metrics.sessions_ended.fetch_add(ended.len() as u64, Relaxed);
        events.extend(ended.into_iter().map(Event::SessionEnd));
        self.state.tell_policy(&self.tenant, events);
        // In flight until its end has reached the policy: a caller that sees 0 sees every finish.
        self.state.metrics.in_flight.fetch_sub(1, Relaxed);
        self.state.warmups.kick(self.state.clone(), self.tenant.clone());
    }
}

impl Drop for FinishGuard {
    fn drop(&mut self) {
        if !self.done {
            self.state.metrics.streams_cancelled.fetch_add(1, Relaxed);
            self.report(false, None);
        }
    }
}

/// A request that must wait for a place upstream, as its tenant's `admission` slot scores it (a
/// `request` item; higher goes first among the tenant's own waiting requests), with its tenant's
/// admission weight and the bytes of its body. Without the slot, or when it fails, every request
/// of the tenant scores the same: arrival order.
async fn applicant(tenant: &Arc<Tenant>, demotion: u32, waiting: Item, bytes: usize) -> Applicant {
    let unscored = Applicant {
        weight: tenant.quotas.get().admission_weight,
        bytes,
        ..Applicant::unscored(demotion, &tenant.name)
    };
    let Some(slot) = tenant.slot(ADMISSION_SLOT).cloned() else {
        return unscored;
    };
    // A policy call, off the async workers; the request waits for a place anyway.
    let scored = tokio::task::spawn_blocking(move || slot.score(&[waiting])).await;
    let score = match scored {
        Ok(Ok(scores)) => scores.first().copied().unwrap_or(0.0),
        _ => 0.0,
    };
    Applicant { score, ..unscored }
}

async fn forward(
    state: Arc<AppState>,
    path: &str,
    api: AgentApi,
    prepared: Prepared,
    permit: TenantPermit,
    received: Instant,
) -> Response {
    let Prepared {
        tenant,
        body,
        identity,
        agent,
        registration,
        continues,
        ended,
        route,
    } = prepared;
    let request_id = state.next_request_id.fetch_add(1, Relaxed);
    state.metrics.sessions_ended.fetch_add(ended.len() as u64, Relaxed);
    let mut events: Vec<Event> = ended.into_iter().map(Event::SessionEnd).collect();
    events.extend(registration);
    events.push(Event::RequestArrival(RequestArrival {
        request_id,
        agent,
        session: identity.session,
        anchor_hash: identity.anchor_hash,
        prompt_tokens: identity.prompt_tokens,
        continues,
        warmup: false,
        at_us: state.now_us(),
    }));
    state.tell_policy(&tenant, events);
    state.metrics.in_flight.fetch_add(1, Relaxed);
    let mut guard = FinishGuard {
        state: state.clone(),
        tenant: tenant.clone(),
        permit,
        lease: None,
        _admission: None,
        template: RequestFinish {
            request_id,
            agent,
            session: identity.session,
            prompt_tokens: identity.prompt_tokens,
            cached_tokens: 0,
            output_tokens: 0,
            warmup: false,
            ok: false,
            at_us: 0,
        },
        done: false,
    };
    // The policy's next move does not wait for the upstream.
    state.warmups.kick(state.clone(), tenant.clone());
    // A place upstream, least-demoted first (`--upstream-max-in-flight`); the wait is not the
    // proxy's overhead.
    let queued = Instant::now();
    let revoked = guard.permit.revocation();
    if let Some(queue) = &state.admission {
        let admitted = match queue.try_admit() {
            Some(place) => Ok(place),
            None => {
                let waiting = Item {
                    kind: ItemKind::Request,
                    key: request_id,
                    agent,
                    session: identity.session,
                    last_access: request_id,
                    tokens: identity.prompt_tokens,
                    position: 0,
                };
                let demotion = tenant.priority(identity.session).min(0).unsigned_abs();
                let applicant = applicant(&tenant, demotion, waiting, body.len()).await;
                unless_revoked(&state, &revoked, queue.admit(applicant)).await
            }
        };
        match admitted {
            Ok(place) => guard._admission = Some(place),
            Err(e) => {
                guard.finish(false, None);
                return failed(&state, e.shaped(api.error_shape()));
            }
        }
    }
    let queue_wait = queued.elapsed();

    let mut route = route;
    let mut lease = match (&state.replicas, route.as_mut()) {
        (Some(replicas), Some(input)) => Some(replicas.place(&state, agent, input).await),
        _ => None,
    };
    let body = Bytes::from(body);
    state
        .metrics
        .observe_overhead(received.elapsed().saturating_sub(queue_wait));
    let mut sent = send_unless_revoked(&state, &revoked, lease.as_ref(), path, &body).await;
    // A replica that refused the connection got nothing: the request is placed once more.
    if let (Err((_, true)), Some(replicas), Some(input)) = (&sent, &state.replicas, route.as_mut()) {
        if let Some(refused) = lease.take_if(|_| replicas.replicas().len() > 1) {
            lease = Some(replicas.retry(&state, agent, input, refused).await);
            sent = send_unless_revoked(&state, &revoked, lease.as_ref(), path, &body).await;
        }
    }
    let reply = match sent.map_err(|(e, _)| e) {
        Ok(response) => {
            guard.lease = lease.map(|mut lease| {
                lease.prefill_complete();
                lease
            });
            response
        }
        Err(e) => {
            state.upstream_failed(&e);
            // A revoked key is no fault of the replica's.
            let cut_by_revocation = e.status == StatusCode::UNAUTHORIZED;
            if let (Some(lease), false) = (&lease, cut_by_revocation) {
                lease.failed();
            }
            guard.finish(false, None);
            return failed(&state, e.shaped(api.error_shape()));
        }
    };
    let status = StatusCode::from_u16(reply.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let content_type = reply
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    if !status.is_success() {
        state.metrics.requests_failed.fetch_add(1, Relaxed);
    }
    let is_stream = content_type
        .as_deref()
        .is_some_and(|c| c.starts_with("text/event-stream"));
    let mut response = if is_stream {
        Response::new(Body::from_stream(relay_stream(reply, guard, status.is_success(), api)))
    } else {
        match unless_revoked(&state, &revoked, upstream::read_reply(reply, &state.options.limits)).await {
            Ok(bytes) => {
                let reply = serde_json::from_slice::<Value>(&bytes).ok();
                let usage = reply.as_ref().and_then(|v| api.usage(v));
                if let Some(id) = reply.as_ref().and_then(|v| api.response_id(v)) {
                    tenant.record_response(id);
                }
                guard.finish(status.is_success(), usage);
                Response::new(Body::from(bytes))
            }
            Err(e) => {
                state.upstream_failed(&e);
                guard.finish(false, None);
                return failed(&state, e.shaped(api.error_shape()));
            }
        }
    };
    *response.status_mut() = status;
    if let Some(ct) = content_type.and_then(|c| HeaderValue::from_str(&c).ok()) {
        response.headers_mut().insert(header::CONTENT_TYPE, ct);
    }
    response
}

/// [`send_to`], unless the request's key is revoked first (a 401; nothing more is sent).
async fn send_unless_revoked(
    state: &AppState,
    revoked: &CancellationToken,
    lease: Option<&crate::engine::replicas::Lease>,
    path: &str,
    body: &Bytes,
) -> Result<reqwest::Response, (ApiError, bool)> {
    tokio::select! {
        biased;
        () = revoked.cancelled() => Err((revoked_error(state), false)),
        sent = send_to(state, lease, path, body) => sent,
    }
}

/// Send the request's `body` to its replica (`lease`), else the upstream; on failure, whether the
/// connection was refused (nothing sent).
async fn send_to(
    state: &AppState,
    lease: Option<&crate::engine::replicas::Lease>,
    path: &str,
    body: &Bytes,
) -> Result<reqwest::Response, (ApiError, bool)> {
    let base = lease.map_or(state.options.upstream.as_str(), |l| l.url());
    let request = state.upstream_request_to(base, path).body(body.clone());
    upstream::send_checked(request, base, &state.options.limits).await
}

/// Pass an SSE stream through chunk by chunk, noticing the usage chunk (when the client asked for
/// one) and the end. If the upstream fails or falls silent (`--upstream-idle-timeout-ms`)
/// mid-stream the client gets an SSE error event, so it never mistakes a cut stream for a
/// complete one.
fn relay_stream(
    reply: reqwest::Response,
    guard: FinishGuard,
    ok_status: bool,
    api: AgentApi,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> {
    let state = guard.state.clone();
    let revoked = guard.permit.revocation();
    let mut guard = Some(guard);
    let mut usage: Option<Usage> = None;
    let mut chunks = Box::pin(reply.bytes_stream());
    async_stream(move |yield_| async move {
        let limits = &state.options.limits;
        loop {
            let next = tokio::select! {
                biased;
                // A revoked key's stream ends here, saying why; the upstream's rest is dropped.
                () = revoked.cancelled() => Some(Err(revoked_error(&state))),
                next = upstream::next_chunk(&mut chunks, limits, "mid-stream") => next,
            };
            let Some(chunk) = next else { break };
            match chunk {
                Ok(bytes) => {
                    // Streams report usage in pieces (the Messages API: input first, output last).
                    if let Some(u) = api.usage_in_chunk(&bytes) {
                        usage = Some(usage.unwrap_or_default().updated(u));
                    }
                    if let (Some(id), Some(g)) = (api.response_id_in_chunk(&bytes), &guard) {
                        g.tenant.record_response(&id);
                    }
                    if !yield_(Ok(bytes)).await {
                        return; // client gone: dropping the guard reports it
                    }
                }
                Err(e) => {
                    state.upstream_failed(&e);
                    let e = e.shaped(api.error_shape());
                    let _ = yield_(Ok(Bytes::from(format!("data: {}\n\n", e.body())))).await;
                    if let Some(g) = guard.take() {
                        g.finish(false, None);
                    }
                    return;
                }
            }
        }
        if let Some(g) = guard.take() {
            g.finish(ok_status, usage);
        }
    })
}

/// A minimal generator-style stream over a channel: the producer future sends items and learns
/// when the consumer is gone, so no upstream bytes are pulled for a client that left.
fn async_stream<F, Fut>(producer: F) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>>
where
    F: FnOnce(Box<dyn Fn(Result<Bytes, std::io::Error>) -> SendFuture + Send>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(8);
    let send = Box::new(move |item| {
        let tx = tx.clone();
        Box::pin(async move { tx.send(item).await.is_ok() }) as SendFuture
    });
    tokio::spawn(producer(send));
    futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) })
}

type SendFuture = std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send>>;

async fn models(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if let Err(e) = tenant_of(&state, &headers).await {
        return e.into_response();
    }
    let mut request = state.client.get(state.upstream_url("/v1/models"));
    if let Some(key) = &state.options.upstream_api_key {
        request = request.bearer_auth(key);
    }
    let limits = &state.options.limits;
    let answered = match upstream::send(request, &state.options.upstream, limits).await {
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

async fn metrics(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if let Some(token) = &state.options.metrics_token {
        if let Err(e) = crate::front::auth::require_bearer(&headers, token, "metrics token") {
            return e.into_response();
        }
    }
    let mut out = String::new();
    state.metrics.render(&mut out, state.tenants.settings().keys.is_empty());
    state.connections.render(&mut out);
    crate::metrics::render_tenants(&state.tenants.list(), &mut out);
    if let Some(cache) = &state.engine_cache {
        crate::metrics::render_engine_cache(cache, &mut out);
    }
    if let Some(replicas) = &state.replicas {
        replicas.render(&mut out);
    }
    if let Some(queue) = &state.admission {
        queue.render(&mut out);
    }
    out.push_str(&state.tenants.registry().render_prometheus());
    if let Some(gateway) = state.mcp.get() {
        gateway.render_prometheus(&mut out);
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}

//! The admin API: install or hot-swap a tenant's policy, read a tenant's stats and forecasts,
//! list tenants. Every route requires `Authorization: Bearer <token>`: the operator's
//! (`--admin-token`) for every route, a tenant's (`--tenant-admin`) for that tenant's routes only
//! ([`crate::auth`]); without any token the API is disabled. The token is checked before a
//! byte of the body is read, and an upload is read under `--max-upload-bytes` (64 MiB by default),
//! to its deadline and within the proxy's reading budget ([`crate::front::body`]), at most
//! `--max-uploads-per-tenant` at once per tenant ([`uploads`]).
//!
//! - `PUT /admin/tenants/{tenant}/policy[?fresh=true][&slot=NAME]` — body: a policy component
//!   (`.wasm`), or the name of one `--policy` would find (`ttl`; [`policy_body`]), for slot NAME
//!   (`kv` when absent; another slot must be one `--slot` gives, else 404).
//!   A new tenant starts with it (another slot's upload: with the defaults, then swapped); an
//!   existing one hot-swaps to it, carrying learned state over
//!   (`fresh=true`: start the new policy from scratch, e.g. a different policy). A component that
//!   does not load, start or accept the state leaves the running policy in place (for a new
//!   tenant: no tenant) and answers 400; no free policy instance (the pool is full) answers 503.
//! - `GET /admin/tenants/{tenant}/stats` — the tenant's policy (name, version), its slot's
//!   counters (calls, errors by kind, fallbacks, restarts, circuit, swaps and their pauses), its
//!   policy worker's queue and its tables' sizes, and its lifecycle hints (`hints`: open tool
//!   waits, the median return time per agent and tool). 404 for a tenant that has not started.
//! - `GET /admin/tenants/{tenant}/predict[?horizon=N]` — the policy's `predict(N)` (1–64 steps,
//!   default 1; 400 otherwise) as JSON forecasts. 404 for a tenant that has not started; 503 when
//!   the policy fails to answer (it is contained like any failed call).
//! - `GET /admin/tenants` (operator only) — tenants, their policies, agents (count and names) and
//!   distinct sessions seen.
//! - `POST /admin/reload` (operator only) — read the config file again ([`crate::tenant::reload`]): 200
//!   with the tenants and shares now in force, 400 naming what is wrong (nothing changed), 409
//!   without `--config`.
//!
//! docs/admin-api.md shows every route with a `curl` example.

mod policy_body;
pub mod uploads;

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde_json::json;

use crate::auth::AdminTarget;
use crate::front::body::BodyReading;
use crate::front::error::ApiError;
use crate::front::limits::closing_connection;
use crate::names::{validate_tenant_name, KV_SLOT};
use crate::tenant::reload::Reloads;
use crate::tenant::report as tenant_report;
use crate::tenant::Tenant;
use crate::tenant::Tenants;
use agentrt_runtime::types::PolicyInfo;
use agentrt_runtime::{ComponentLookup, PolicyComponent, PolicyError, Primitive, RegistryError, SwapReport};

/// What the admin routes need: the tenants, the reloader of `--config` (when there is one), and
/// the upload limit.
#[derive(Clone)]
pub struct AdminState {
    /// Every tenant, whose policies, stats and forecasts the routes act on; its settings hold
    /// the admin tokens.
    pub tenants: Arc<Tenants>,
    /// What `POST /admin/reload` runs; `None` without `--config` (the route answers 409).
    pub reloads: Option<Arc<Reloads>>,
    /// `--max-upload-bytes`.
    pub max_upload_bytes: usize,
    /// Uploads in progress per tenant (`--max-uploads-per-tenant`).
    pub uploads: Arc<uploads::Uploads>,
    /// How request bodies are read.
    pub reading: Arc<BodyReading>,
    /// Where a policy named in an upload's body is found (`--policy`'s lookup); `None`: names
    /// are refused, only a component's bytes are taken.
    pub components: Option<Arc<ComponentLookup>>,
    /// Every tenant's hints: the tool return times its stats show.
    pub hints: Arc<crate::hints::Hints>,
}

/// The admin API's routes.
pub fn routes<S: Clone + Send + Sync + 'static>(state: AdminState) -> Router<S> {
    Router::new()
        .route("/admin/tenants/{tenant}/policy", put(put_policy))
        .route("/admin/tenants/{tenant}/stats", get(tenant_stats))
        .route("/admin/tenants/{tenant}/predict", get(tenant_predict))
        .route("/admin/tenants", get(list_tenants))
        .route("/admin/reload", post(reload))
        .with_state(state)
}

fn authorize(state: &AdminState, headers: &HeaderMap, target: AdminTarget<'_>) -> Result<(), ApiError> {
    state.tenants.settings().admin.authorize(headers, target).map(|_| ())
}

async fn put_policy(
    State(state): State<AdminState>,
    Path(tenant): Path<String>,
    Query(query): Query<SwapQuery>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let checked = authorize(&state, &headers, AdminTarget::Tenant(&tenant))
        .and_then(|()| validate_tenant_name(&tenant).map_err(ApiError::bad_request))
        .and_then(|()| state.uploads.take(&tenant));
    // Held until the upload is answered.
    let _place = match checked {
        Ok(place) => place,
        Err(e) => return closing_connection(e.into_response()),
    };
    let slot = query.slot.clone().unwrap_or_else(|| KV_SLOT.to_string());
    match receive_upload(&state, &tenant, &slot, body).await {
        Ok(component) => install(state, tenant, slot, component, !query.fresh).await,
        Err(refused) => refused,
    }
}

/// The uploaded component for `slot`: the body read under `--max-upload-bytes` and the reading
/// budget, the slot checked, the component loaded.
async fn receive_upload(
    state: &AdminState,
    tenant: &str,
    slot: &str,
    body: Body,
) -> Result<Arc<PolicyComponent>, Response> {
    let mut hold = state.reading.budget.hold_untenanted();
    let limit = state.max_upload_bytes;
    let body = match state.reading.read(body, limit, "--max-upload-bytes", &mut hold).await {
        Ok(body) => body,
        Err(e) => return Err(closing_connection(e.into_response())),
    };
    if !state.tenants.slot_names().contains(&slot) {
        return Err(ApiError::not_found(format!(
            "no policy slot {slot:?}: the tenants' slots are {:?} (--slot adds one)",
            state.tenants.slot_names()
        ))
        .into_response());
    }
    load_upload(state, tenant, body)
        .await
        .map_err(IntoResponse::into_response)
}

/// Puts `component` in `tenant`'s `slot`: a new tenant starts with it; a running one swaps it in,
/// its state restored unless `keep_state` is false.
async fn install(
    state: AdminState,
    tenant: String,
    slot: String,
    component: Arc<PolicyComponent>,
    keep_state: bool,
) -> Response {
    // A new tenant starts with the upload itself: if it does not start, no tenant is left behind
    // (not one running the default policy, as a start-then-swap would leave).
    // Another slot's upload swaps into a tenant started with the defaults.
    let starting = (state.clone(), tenant.clone(), component.clone(), slot == KV_SLOT);
    let started = tokio::task::spawn_blocking(move || {
        let (state, tenant, component, kv) = starting;
        if kv {
            state.tenants.get_or_start_with(&tenant, component)
        } else {
            state.tenants.get_or_start(&tenant).map(|t| (t, false))
        }
    })
    .await;
    let (live, created) = match started {
        Ok(Ok(started)) => started,
        Ok(Err(e)) => return e.into_response(),
        Err(e) => return ApiError::internal(format!("starting tenant {tenant} did not finish: {e}")).into_response(),
    };
    if created {
        return installed(&tenant, &slot, Some(live.policy.info()), None);
    }
    // A swap waits for the slot's current call (up to its deadline) and restores state into the
    // new instance: work for a blocking thread, not an async worker.
    let swapping = (state.clone(), slot.clone());
    let swapped = tokio::task::spawn_blocking(move || {
        let (state, slot) = swapping;
        state
            .tenants
            .registry()
            .swap(&tenant, &slot, component, keep_state)
            .map(|report| (tenant, report))
    })
    .await;
    let info = live.slot(&slot).map(|policy| policy.info());
    match swapped {
        Ok(Ok((tenant, report))) => installed(&tenant, &slot, info, Some(&report)),
        Ok(Err(e)) => swap_refused(&e).into_response(),
        Err(e) => {
            ApiError::internal(format!("swap did not finish, the previous policy keeps running: {e}")).into_response()
        }
    }
}

/// The component an upload's body is or names ([`policy_body`]), loaded on a blocking thread.
async fn load_upload(
    state: &AdminState,
    tenant: &str,
    body: axum::body::Bytes,
) -> Result<Arc<PolicyComponent>, ApiError> {
    let engine = state.tenants.registry().engine().clone();
    let name = format!("admin upload for {tenant}");
    let lookup = state.components.clone();
    let loaded = tokio::task::spawn_blocking(move || match policy_body::read(&body)? {
        policy_body::PolicyBody::Component(bytes) => engine.load_bytes(&name, bytes).map_err(|e| e.to_string()),
        policy_body::PolicyBody::Name(named) => policy_body::load_named(&engine, lookup.as_deref(), named),
    })
    .await;
    match loaded {
        Ok(Ok(component)) => Ok(Arc::new(component)),
        Ok(Err(e)) => Err(ApiError::bad_request(e)),
        Err(e) => Err(ApiError::bad_request(format!("loading failed: {e}"))),
    }
}

/// The answer to an installed policy: a new tenant's (`swap` `None`) or a swap's.
fn installed(tenant: &str, slot: &str, info: Option<PolicyInfo>, swap: Option<&SwapReport>) -> Response {
    Json(json!({
        "tenant": tenant,
        "slot": slot,
        "policy": info.as_ref().map(|i| i.name.clone()),
        "version": info.as_ref().map(|i| i.version.clone()),
        "created": swap.is_none(),
        "state_bytes_carried": swap.map_or(0, |r| r.state_bytes),
        "paused_us": swap.map_or(0, |r| r.paused.as_micros() as u64),
    }))
    .into_response()
}

/// The error of a swap that did not happen; the old policy keeps running. One whose new policy
/// could not take the old one's state says how to start it from scratch.
fn swap_refused(e: &RegistryError) -> ApiError {
    if let RegistryError::Policy(PolicyError::PoolFull { .. }) = e {
        return ApiError::unavailable(format!(
            "swap refused, the previous policy keeps running: no instance is free for the new one: {e}"
        ));
    }
    let fresh = if failed_restoring(e) {
        "; the new policy could not take the running one's learned state (a different policy reads it \
         differently): add ?fresh=true to start it from scratch"
    } else {
        ""
    };
    ApiError::bad_request(format!("swap refused, the previous policy keeps running: {e}{fresh}"))
}

/// Whether a swap failed in the new policy's `restore` of the old one's state.
fn failed_restoring(e: &RegistryError) -> bool {
    let RegistryError::Policy(e) = e else { return false };
    let primitive = match e {
        PolicyError::Trap { primitive, .. }
        | PolicyError::DeadlineExceeded { primitive, .. }
        | PolicyError::FuelExhausted { primitive, .. }
        | PolicyError::OutOfMemory { primitive, .. }
        | PolicyError::Rejected { primitive, .. }
        | PolicyError::BadOutput { primitive, .. }
        | PolicyError::ResultTooLarge { primitive, .. }
        | PolicyError::CircuitOpen { primitive, .. } => primitive,
        PolicyError::Unavailable { .. } | PolicyError::PoolFull { .. } => return false,
    };
    *primitive == Primitive::Restore
}

#[derive(serde::Deserialize)]
struct SwapQuery {
    #[serde(default)]
    fresh: bool,
    /// The slot to install or swap; `kv` when absent.
    slot: Option<String>,
}

/// The started tenant `name`, for one of its routes, once the caller may act on it.
fn started_tenant(state: &AdminState, headers: &HeaderMap, name: &str) -> Result<Arc<Tenant>, ApiError> {
    authorize(state, headers, AdminTarget::Tenant(name))?;
    state.tenants.get(name).ok_or_else(|| {
        ApiError::not_found(format!(
            "no tenant {name:?} has started (a tenant starts with its first request or a policy upload)"
        ))
    })
}

async fn tenant_stats(State(state): State<AdminState>, Path(tenant): Path<String>, headers: HeaderMap) -> Response {
    let tenant = match started_tenant(&state, &headers, &tenant) {
        Ok(tenant) => tenant,
        Err(e) => return e.into_response(),
    };
    let hints = state.hints.stats(&tenant);
    // Reading the policy's name waits for its current call.
    match tokio::task::spawn_blocking(move || tenant_report::stats(&tenant)).await {
        Ok(mut stats) => {
            stats["hints"] = hints;
            Json(stats).into_response()
        }
        Err(e) => ApiError::internal(format!("reading the tenant's stats did not finish: {e}")).into_response(),
    }
}

async fn tenant_predict(
    State(state): State<AdminState>,
    Path(tenant): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let checked = started_tenant(&state, &headers, &tenant)
        .and_then(|tenant| Ok((tenant, tenant_report::horizon(&query).map_err(ApiError::bad_request)?)));
    let (tenant, horizon) = match checked {
        Ok(checked) => checked,
        Err(e) => return e.into_response(),
    };
    // A policy call: on a blocking thread, never on an async worker other requests need.
    let predicted = tokio::task::spawn_blocking(move || {
        tenant
            .policy
            .predict(horizon)
            .map(|forecasts| tenant_report::forecasts(&tenant, horizon, &forecasts))
    })
    .await;
    match predicted {
        Ok(Ok(forecasts)) => Json(forecasts).into_response(),
        Ok(Err(e)) => ApiError::unavailable(format!("the tenant's policy did not answer predict: {e}")).into_response(),
        Err(e) => ApiError::internal(format!("predict did not finish: {e}")).into_response(),
    }
}

async fn list_tenants(State(state): State<AdminState>, headers: HeaderMap) -> Response {
    if let Err(e) = authorize(&state, &headers, AdminTarget::AllTenants) {
        return e.into_response();
    }
    let tenants: Vec<_> = state
        .tenants
        .list()
        .iter()
        .map(|t| {
            let info = t.policy.info();
            json!({
                "tenant": t.name,
                "policy": info.name,
                "version": info.version,
                "agents": t.agents.agents(),
                "agent_names": t.agents.agent_names(),
                "sessions": t.agents.sessions(),
                "live_sessions": t.agents.live_sessions(),
                "prompt_shapes": t.continuations.len(),
            })
        })
        .collect();
    Json(json!({ "tenants": tenants })).into_response()
}

async fn reload(State(state): State<AdminState>, headers: HeaderMap) -> Response {
    if let Err(e) = authorize(&state, &headers, AdminTarget::AllTenants) {
        return e.into_response();
    }
    let Some(reloads) = &state.reloads else {
        return ApiError::conflict("there is no config file to reload: start `agentrt serve` with --config FILE")
            .into_response();
    };
    match reloads.reload_off_workers().await {
        Ok(done) => {
            tracing::info!("settings reloaded (admin API): {}", done.summary());
            Json(done).into_response()
        }
        Err(e) => {
            tracing::warn!(error = %e, "reload refused (admin API); the previous settings stay");
            ApiError::bad_request(format!("reload refused, nothing changed: {e}")).into_response()
        }
    }
}

//! The admin API: install or hot-swap a tenant's policy, list tenants. Every route requires
//! `Authorization: Bearer <admin token>`; without a configured token the API is disabled. The
//! token is checked before a byte of the body is read, and an upload is read under
//! `--max-upload-bytes` (64 MiB by default).
//!
//! - `PUT /admin/tenants/{tenant}/policy[?fresh=true]` — body: a policy component (`.wasm`). A new
//!   tenant starts with it; an existing one hot-swaps to it, carrying learned state over
//!   (`fresh=true`: start the new policy from scratch, e.g. a different policy). A component that
//!   does not load, start or accept the state leaves the running policy in place (for a new
//!   tenant: no tenant) and answers 400; no free policy instance (the pool is full) answers 503.
//! - `GET /admin/tenants` — tenants, their policies, agents (count and names) and distinct sessions
//!   seen.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use axum::{Json, Router};
use serde_json::json;

use crate::auth::require_bearer;
use crate::error::ApiError;
use crate::limits::{closing_connection, read_body};
use crate::proxy::AppState;
use crate::tenants::{validate_tenant_name, KV_SLOT};
use agentrt_runtime::{PolicyError, RegistryError};

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/admin/tenants/{tenant}/policy", put(put_policy))
        .route("/admin/tenants", get(list_tenants))
}

fn authorize(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(expected) = &state.options.admin_token else {
        return Err(ApiError::forbidden(
            "the admin API is disabled: start `agentrt serve` with --admin-token",
        ));
    };
    require_bearer(headers, expected, "admin token")
}

async fn put_policy(
    State(state): State<Arc<AppState>>,
    Path(tenant): Path<String>,
    Query(query): Query<SwapQuery>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let checked =
        authorize(&state, &headers).and_then(|()| validate_tenant_name(&tenant).map_err(ApiError::bad_request));
    let read = match checked {
        Ok(()) => read_body(body, state.options.limits.max_upload_bytes, "--max-upload-bytes").await,
        Err(e) => Err(e),
    };
    let body = match read {
        Ok(body) => body,
        Err(e) => return closing_connection(e.into_response()),
    };
    let engine = state.tenants.registry().engine().clone();
    let name = format!("admin upload for {tenant}");
    let component = match tokio::task::spawn_blocking(move || engine.load_bytes(&name, &body)).await {
        Ok(Ok(c)) => Arc::new(c),
        Ok(Err(e)) => return ApiError::bad_request(e.to_string()).into_response(),
        Err(e) => return ApiError::bad_request(format!("loading failed: {e}")).into_response(),
    };
    // A new tenant starts with the upload itself: if it does not start, no tenant is left behind
    // (not one running the default policy, as a start-then-swap would leave).
    let starting = (state.clone(), tenant.clone(), component.clone());
    let started = tokio::task::spawn_blocking(move || {
        let (state, tenant, component) = starting;
        state.tenants.get_or_start_with(&tenant, component)
    })
    .await;
    let (live, created) = match started {
        Ok(Ok(started)) => started,
        Ok(Err(e)) => return e.into_response(),
        Err(e) => return ApiError::internal(format!("starting tenant {tenant} did not finish: {e}")).into_response(),
    };
    if created {
        let info = live.policy.info();
        return Json(json!({
            "tenant": tenant,
            "policy": info.name,
            "version": info.version,
            "created": true,
            "state_bytes_carried": 0,
            "paused_us": 0,
        }))
        .into_response();
    }
    // A swap waits for the slot's current call (up to its deadline) and restores state into the
    // new instance: work for a blocking thread, not an async worker.
    let swapping = state.clone();
    let keep_state = !query.fresh;
    let swapped = tokio::task::spawn_blocking(move || {
        swapping
            .tenants
            .registry()
            .swap(&tenant, KV_SLOT, component, keep_state)
            .map(|report| (tenant, report))
    })
    .await;
    match swapped {
        Ok(Ok((tenant, report))) => Json(json!({
            "tenant": tenant,
            "policy": live.policy.info().name,
            "version": live.policy.info().version,
            "created": false,
            "state_bytes_carried": report.state_bytes,
            "paused_us": report.paused.as_micros() as u64,
        }))
        .into_response(),
        Ok(Err(e @ RegistryError::Policy(PolicyError::PoolFull { .. }))) => ApiError::unavailable(format!(
            "swap refused, the previous policy keeps running: no instance is free for the new one: {e}"
        ))
        .into_response(),
        Ok(Err(e)) => {
            ApiError::bad_request(format!("swap refused, the previous policy keeps running: {e}")).into_response()
        }
        Err(e) => {
            ApiError::internal(format!("swap did not finish, the previous policy keeps running: {e}")).into_response()
        }
    }
}

#[derive(serde::Deserialize)]
struct SwapQuery {
    #[serde(default)]
    fresh: bool,
}

async fn list_tenants(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if let Err(e) = authorize(&state, &headers) {
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

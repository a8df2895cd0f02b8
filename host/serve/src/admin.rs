//! The admin API: install or hot-swap a tenant's policy, list tenants. Every route requires
//! `Authorization: Bearer <admin token>`; without a configured token the API is disabled.
//!
//! - `PUT /admin/tenants/{tenant}/policy[?fresh=true]` — body: a policy component (`.wasm`). Starts
//!   the tenant if new, then hot-swaps its policy, carrying learned state over (`fresh=true`: start
//!   the new policy from scratch, e.g. a different policy). A component that does not load, start
//!   or accept the state leaves the running policy in place and answers 400.
//! - `GET /admin/tenants` — tenants, their policies, agents (count and names) and distinct sessions
//!   seen.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use axum::{Json, Router};
use serde_json::json;

use crate::error::ApiError;
use crate::proxy::AppState;
use crate::tenants::{bearer, KV_SLOT};

/// Policy components can be large (a Python policy is ~18 MB).
const MAX_COMPONENT_BYTES: usize = 64 << 20;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/admin/tenants/{tenant}/policy", put(put_policy))
        .route("/admin/tenants", get(list_tenants))
        .layer(DefaultBodyLimit::max(MAX_COMPONENT_BYTES))
}

fn authorize(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(expected) = &state.options.admin_token else {
        return Err(ApiError::forbidden(
            "the admin API is disabled: start `agentrt serve` with --admin-token",
        ));
    };
    let given =
        bearer(headers).ok_or_else(|| ApiError::unauthorized("missing `Authorization: Bearer <admin token>`"))?;
    if !constant_time_eq(given.as_bytes(), expected.as_bytes()) {
        return Err(ApiError::unauthorized("wrong admin token"));
    }
    Ok(())
}

/// Compare without an early exit, so response time does not reveal how much of a guess matched.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn put_policy(
    State(state): State<Arc<AppState>>,
    Path(tenant): Path<String>,
    Query(query): Query<SwapQuery>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(e) = authorize(&state, &headers) {
        return e.into_response();
    }
    let engine = state.tenants.registry().engine().clone();
    let name = format!("admin upload for {tenant}");
    let component = match tokio::task::spawn_blocking(move || engine.load_bytes(&name, &body)).await {
        Ok(Ok(c)) => Arc::new(c),
        Ok(Err(e)) => return ApiError::bad_request(e.to_string()).into_response(),
        Err(e) => return ApiError::bad_request(format!("loading failed: {e}")).into_response(),
    };
    let live = match state.tenants.get_or_start(&tenant) {
        Ok(t) => t,
        Err(e) => return e.into_response(),
    };
    match state
        .tenants
        .registry()
        .swap(&live.name, KV_SLOT, component, !query.fresh)
    {
        Ok(report) => Json(json!({
            "tenant": tenant,
            "policy": live.policy.info().name,
            "version": live.policy.info().version,
            "state_bytes_carried": report.state_bytes,
            "paused_us": report.paused.as_micros() as u64,
        }))
        .into_response(),
        Err(e) => {
            ApiError::bad_request(format!("swap refused, the previous policy keeps running: {e}")).into_response()
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
            })
        })
        .collect();
    Json(json!({ "tenants": tenants })).into_response()
}

#[cfg(test)]
mod tests {
    use super::constant_time_eq;

    #[test]
    fn token_comparison() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
    }
}

//! `POST /v1/agentrt/hints`: the caller's tenant from its API key (as for the model routes), a
//! body of at most 16 KiB read only then, every hint checked before any is applied, the tenant's
//! rate taken for the whole call, and `{"accepted": N, "duplicates": D}`.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::json;

use super::parse::{parse_body, MAX_HINTS_BODY_BYTES};
use super::Hints;
use crate::front::error::ApiError;
use crate::front::limits::{closing_connection, read_body};
use crate::tenant::admit::tenant_of;
use crate::tenant::Tenants;

/// The `type` of every refused hint call's error.
pub const INVALID_HINT: &str = "invalid_hint";

/// What the route needs.
#[derive(Clone)]
pub struct HintsState {
    /// Who the caller is.
    pub tenants: Arc<Tenants>,
    /// Every tenant's hints.
    pub hints: Arc<Hints>,
}

/// The hints route.
pub fn routes<S: Clone + Send + Sync + 'static>(state: HintsState) -> Router<S> {
    Router::new()
        .route("/v1/agentrt/hints", post(post_hints))
        .with_state(state)
}

/// A 400 of type `invalid_hint` saying what is wrong.
pub fn invalid_hint(message: impl Into<String>) -> ApiError {
    ApiError {
        kind: INVALID_HINT,
        ..ApiError::bad_request(message)
    }
}

async fn post_hints(State(state): State<HintsState>, headers: HeaderMap, body: Body) -> Response {
    let tenant = match tenant_of(&state.tenants, &headers).await {
        Ok(tenant) => tenant,
        Err(e) => return closing_connection(e.into_response()),
    };
    let body = match read_body(body, MAX_HINTS_BODY_BYTES, "limit on a hint call's body (16 KiB)").await {
        Ok(body) => body,
        Err(e) => {
            state.hints.refused(&tenant, "too_large");
            return closing_connection(
                ApiError {
                    kind: INVALID_HINT,
                    ..e
                }
                .into_response(),
            );
        }
    };
    let hints = match parse_body(&body) {
        Ok(hints) => hints,
        Err(refusal) => {
            state.hints.refused(&tenant, refusal.reason);
            return invalid_hint(refusal.message).into_response();
        }
    };
    if let Err(wait) = state.hints.take(&tenant, hints.len()) {
        state.hints.refused(&tenant, "rate");
        return over_rate(hints.len(), state.hints.burst(), wait);
    }
    let applied = state.hints.apply(&tenant, &hints);
    (
        StatusCode::OK,
        Json(json!({"accepted": applied.accepted, "duplicates": applied.duplicates})),
    )
        .into_response()
}

/// 429 with `Retry-After` (whole seconds, at least 1): the tenant's hint rate is spent.
fn over_rate(n: usize, burst: f64, wait: Option<std::time::Duration>) -> Response {
    let message = match wait {
        Some(_) => format!(
            "the tenant's hint rate is spent (--hint-rate, a burst of {burst:.0}); nothing of this call was applied, \
             send it again after Retry-After"
        ),
        None => format!(
            "a call of {n} hints is over the tenant's burst of {burst:.0} (twice --hint-rate); send fewer per call"
        ),
    };
    let seconds = wait.map_or(1, |w| w.as_secs_f64().ceil().max(1.0) as u64);
    let mut response = ApiError::too_many_requests(message).into_response();
    if let Ok(value) = HeaderValue::from_str(&seconds.to_string()) {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}

//! `POST /v1/agentrt/hints` (and ThunderAgent's `POST /programs/release`, a closing in its words):
//! the caller's tenant and a place in its in-flight quota from its API
//! key (as for the model routes: a call holds its place until it is answered), a body of at most
//! 16 KiB read only then — to its deadline, within the reading budgets ([`crate::front::body`]) —
//! every hint checked before any is applied, the tenant's rate taken for the whole call (a call
//! of no hints costs one), and `{"accepted": N, "duplicates": D}`.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::json;

use super::dialects::parse_release;
use super::parse::{parse_body, Hint, Refusal, MAX_HINTS_BODY_BYTES};
use super::Hints;
use crate::front::body::BodyReading;
use crate::front::error::ApiError;
use crate::front::limits::closing_connection;
use crate::tenant::admit::admit;
use crate::tenant::{Tenant, TenantPermit, Tenants};

/// The `type` of every refused hint call's error.
pub const INVALID_HINT: &str = "invalid_hint";

/// What the route needs.
#[derive(Clone)]
pub struct HintsState {
    /// Who the caller is.
    pub tenants: Arc<Tenants>,
    /// Every tenant's hints.
    pub hints: Arc<Hints>,
    /// How request bodies are read.
    pub reading: Arc<BodyReading>,
}

/// The hints route.
pub fn routes<S: Clone + Send + Sync + 'static>(state: HintsState) -> Router<S> {
    Router::new()
        .route("/v1/agentrt/hints", post(post_hints))
        .route("/programs/release", post(release_program))
        .with_state(state)
}

/// A 400 of type `invalid_hint` saying what is wrong.
pub fn invalid_hint(message: impl Into<String>) -> ApiError {
    ApiError {
        kind: INVALID_HINT,
        ..ApiError::bad_request(message)
    }
}

/// A checked call: its tenant, its place in the tenant's quota (held until the answer: a call
/// reading a body that never ends holds one) and its hints.
struct Call {
    tenant: Arc<Tenant>,
    _place: TenantPermit,
    hints: Vec<Hint>,
}

/// Admit a hint call, read its body and check it whole with `parse`; the refusal's answer when any
/// of it fails.
async fn checked_call(
    state: &HintsState,
    headers: &HeaderMap,
    body: Body,
    parse: impl FnOnce(&[u8]) -> Result<Vec<Hint>, Refusal>,
) -> Result<Call, Response> {
    let (tenant, place) = match admit(&state.tenants, headers).await {
        Ok(admitted) => (admitted.tenant, admitted.permit),
        Err(e) => return Err(closing_connection(e.into_response())),
    };
    let mut hold = state.reading.budget.hold(&tenant.name);
    let flag = "limit on a hint call's body (16 KiB)";
    let body = match state.reading.read(body, MAX_HINTS_BODY_BYTES, flag, &mut hold).await {
        Ok(body) => body,
        Err(e) => {
            let reason = match e.status {
                StatusCode::PAYLOAD_TOO_LARGE => "too_large",
                StatusCode::REQUEST_TIMEOUT => "timeout",
                _ => "budget",
            };
            state.hints.refused(&tenant, reason);
            return Err(closing_connection(
                ApiError {
                    kind: INVALID_HINT,
                    ..e
                }
                .into_response(),
            ));
        }
    };
    let hints = parse(&body).map_err(|refusal| {
        state.hints.refused(&tenant, refusal.reason);
        invalid_hint(refusal.message).into_response()
    })?;
    if let Err(wait) = state.hints.take(&tenant, hints.len()) {
        state.hints.refused(&tenant, "rate");
        return Err(over_rate(hints.len(), state.hints.burst(), wait));
    }
    Ok(Call {
        tenant,
        _place: place,
        hints,
    })
}

async fn post_hints(State(state): State<HintsState>, headers: HeaderMap, body: Body) -> Response {
    let call = match checked_call(&state, &headers, body, parse_body).await {
        Ok(call) => call,
        Err(refused) => return refused,
    };
    let applied = state.hints.apply(&call.tenant, &call.hints);
    (
        StatusCode::OK,
        Json(json!({"accepted": applied.accepted, "duplicates": applied.duplicates})),
    )
        .into_response()
}

/// ThunderAgent's release: `{"program_id": P}` closes the caller's tenant's session `P` (a
/// request's `program_id` names its session); `released` is false when it was closed already.
async fn release_program(State(state): State<HintsState>, headers: HeaderMap, body: Body) -> Response {
    let parse = |body: &[u8]| parse_release(body).map(|hint| vec![hint]);
    let call = match checked_call(&state, &headers, body, parse).await {
        Ok(call) => call,
        Err(refused) => return refused,
    };
    let applied = state.hints.apply(&call.tenant, &call.hints);
    let program_id = call.hints[0].session();
    (
        StatusCode::OK,
        Json(json!({"program_id": program_id, "released": applied.duplicates == 0})),
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

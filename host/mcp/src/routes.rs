//! The gateway's HTTP routes: `/mcp/SERVER` for each configured server (MCP Streamable HTTP),
//! behind a guard that settles, in this order, before rmcp sees the request:
//!
//! 1. the tenant, from `Authorization: Bearer <tenant API key>` alone, before a byte of the body
//!    is read, exactly as the proxy does (401 otherwise);
//! 2. that an `Mcp-Session-Id` is the caller's own — opened by the same tenant with the same key —
//!    on every method (`POST`, `GET`, `DELETE`); any other id gets rmcp's own answer to an
//!    unknown id, byte for byte, so another tenant's live session cannot be told from none;
//! 3. for a `POST`, the body (under `--max-body-bytes`, to its deadline and within the proxy's
//!    reading budgets, [`agentrt_guards::body_read`]; held against them until rmcp has it): one the server would not receive as
//!    written ([`crate::exact_json`]) is answered with a JSON-RPC error naming the place; an
//!    `initialize` past the tenant's `--mcp-max-sessions` is refused with 429 before a session is
//!    made, and one within it carries its reserved place to rmcp's session manager.
//!
//! Every refusal is counted by reason. A path naming no configured server is 404 with the list
//! of those that are.

use std::sync::Arc;

use agentrt_guards::body_read::{self, BodyError, Exhausted};
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::{from_fn_with_state, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};

use crate::agent_server::UpstreamHandle;
use crate::caller::AuthenticatedTenant;
use crate::exact_json::{self, Inexact};
use crate::gateway::Gateway;
use crate::metrics::Refused;
use crate::session_manager::{with_reservation, BoundSessions};
use crate::sessions::{Owner, SessionCapReached};

const SESSION_HEADER: &str = "mcp-session-id";
/// rmcp's answer to an unknown session id (`StreamableHttpService::handle_post`, `handle_get`),
/// given to every id that is not the caller's.
const SESSION_NOT_FOUND: &str = "Not Found: Session not found";

/// The routes of every configured server, ready to merge into the proxy's router.
pub fn router(gateway: &Arc<Gateway>) -> Router {
    let mut router = Router::new();
    for spec in &gateway.options.servers {
        let upstream = UpstreamHandle {
            gateway: gateway.clone(),
            server: Arc::new(spec.clone()),
        };
        let mut config =
            StreamableHttpServerConfig::default().with_max_request_body_bytes(gateway.options.max_body_bytes);
        config = if gateway.options.allowed_hosts.is_empty() {
            config.disable_allowed_hosts()
        } else {
            config.with_allowed_hosts(gateway.options.allowed_hosts.clone())
        };
        let sessions = BoundSessions::new(gateway.sessions.clone(), gateway.options.session_idle);
        let service = StreamableHttpService::new(move || Ok(upstream.clone()), Arc::new(sessions), config);
        router = router.route_service(&format!("/mcp/{}", spec.name), service);
    }
    let configured: Arc<str> = gateway
        .options
        .servers
        .iter()
        .map(|s| s.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
        .into();
    router
        .route(
            "/mcp/{server}",
            any(move |Path(server): Path<String>| {
                let configured = configured.clone();
                async move {
                    (
                        StatusCode::NOT_FOUND,
                        format!("no MCP server `{server}` behind this gateway; configured: {configured}"),
                    )
                }
            }),
        )
        .layer(from_fn_with_state(gateway.clone(), guard))
}

/// Settle tenant, session ownership and body, or refuse (see the module's doc).
async fn guard(State(gateway): State<Arc<Gateway>>, request: Request, next: Next) -> Response {
    let tenant = match gateway.tenancy.tenant(request.headers()) {
        Ok(tenant) => tenant,
        Err(refusal) => {
            gateway.metrics.refuse(Refused::Auth);
            return (refusal.status, refusal.message).into_response();
        }
    };
    let owner = Owner::of(tenant.name(), request.headers());
    let has_session = match request.headers().get(SESSION_HEADER) {
        None => false,
        Some(id) => {
            let owned = id.to_str().is_ok_and(|id| gateway.sessions.owned_by(id, &owner));
            if !owned {
                gateway.metrics.refuse(Refused::UnknownSession);
                return session_not_found();
            }
            true
        }
    };
    let (parts, body) = request.into_parts();
    let mut reservation = None;
    let body = if parts.method == Method::POST {
        let limit = gateway.options.max_body_bytes;
        let mut hold = gateway.options.body_budget.hold(tenant.name());
        let bytes = match body_read::read(body, limit, &mut hold, &gateway.options.body_timing).await {
            Ok(bytes) => bytes,
            Err(error) => return body_refused(&gateway, &error),
        };
        let max_depth = gateway.options.max_json_depth;
        if !agentrt_guards::json_shape::within_depth(&bytes, max_depth) {
            gateway.metrics.refuse(Refused::TooDeep);
            return plain(
                StatusCode::BAD_REQUEST,
                format!(
                    "the MCP message nests objects and arrays more than {max_depth} levels deep (the \
                     gateway's --max-json-depth); flatten it"
                ),
            );
        }
        if let Some(scanned) = exact_json::scan(&bytes) {
            if let Some(inexact) = &scanned.inexact {
                gateway.metrics.refuse(Refused::Inexact);
                return inexact_reply(scanned.id, inexact);
            }
            if !has_session && scanned.method.as_deref() == Some("initialize") {
                match gateway.sessions.reserve(owner) {
                    Ok(place) => reservation = Some(place),
                    Err(cap) => {
                        gateway.metrics.refuse(Refused::SessionCap);
                        return too_many_sessions(tenant.name(), &cap);
                    }
                }
            }
        }
        Body::from(bytes)
    } else {
        body
    };
    let mut request = Request::from_parts(parts, body);
    request.extensions_mut().insert(AuthenticatedTenant(tenant));
    match reservation {
        Some(place) => with_reservation(place, next.run(request)).await,
        None => next.run(request).await,
    }
}

/// Exactly what rmcp answers for an id it does not know: no content type, the same text.
fn session_not_found() -> Response {
    let mut response = Response::new(Body::from(SESSION_NOT_FOUND));
    *response.status_mut() = StatusCode::NOT_FOUND;
    response
}

/// A body not read whole: 413 over `--max-body-bytes`, 408 past its deadline, 429 or 503 past
/// the reading budgets (`Retry-After: 1`), 400 for a broken one; the connection closes after it.
fn body_refused(gateway: &Gateway, error: &BodyError) -> Response {
    let (why, status, flags) = match error {
        BodyError::TooLarge { .. } => (Refused::BodyTooLarge, StatusCode::PAYLOAD_TOO_LARGE, "--max-body-bytes"),
        BodyError::Stalled { .. } => (
            Refused::BodyTimeout,
            StatusCode::REQUEST_TIMEOUT,
            "--body-idle-timeout-ms",
        ),
        BodyError::TooSlow { .. } => (
            Refused::BodyTimeout,
            StatusCode::REQUEST_TIMEOUT,
            "--body-min-bytes-per-s",
        ),
        BodyError::OverBudget(Exhausted::Tenant { .. }) => (
            Refused::BodyBudget,
            StatusCode::TOO_MANY_REQUESTS,
            "--max-reading-mib-per-tenant",
        ),
        BodyError::OverBudget(Exhausted::All { .. }) => (
            Refused::BodyBudget,
            StatusCode::SERVICE_UNAVAILABLE,
            "--max-reading-mib",
        ),
        BodyError::Broken(_) => {
            return plain(StatusCode::BAD_REQUEST, "the request body could not be read".into());
        }
    };
    gateway.metrics.refuse(why);
    let message = match error {
        BodyError::TooLarge { limit } => format!("Payload Too Large: request body exceeds {limit} bytes ({flags})"),
        other => format!("{other} (the gateway's {flags})"),
    };
    let mut response = plain(status, message);
    let headers = response.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    if matches!(error, BodyError::OverBudget(_)) {
        headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    response
}

fn plain(status: StatusCode, message: String) -> Response {
    (status, message).into_response()
}

fn too_many_sessions(tenant: &str, cap: &SessionCapReached) -> Response {
    plain(
        StatusCode::TOO_MANY_REQUESTS,
        format!(
            "tenant {tenant} has {} MCP sessions open, its limit (--mcp-max-sessions {}); close one \
             (DELETE with its Mcp-Session-Id) or let an idle one expire (--mcp-session-idle-ms)",
            cap.open, cap.limit
        ),
    )
}

/// A JSON-RPC error for a request the server would not receive as written (`-32602`, invalid
/// params); a notification (no id) gets 400.
fn inexact_reply(id: Option<&str>, inexact: &Inexact) -> Response {
    let message = format!("agentrt MCP gateway: {inexact}");
    let Some(id) = id else {
        return plain(StatusCode::BAD_REQUEST, message);
    };
    let error = serde_json::json!({"code": -32602, "message": message});
    // The id as the client wrote it (well-formed JSON: the scanner read it).
    let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{error}}}"#);
    let mut response = Response::new(Body::from(body));
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

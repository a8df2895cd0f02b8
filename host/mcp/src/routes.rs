//! The gateway's HTTP routes: `/mcp/SERVER` for each configured server (MCP Streamable HTTP),
//! behind authentication that reads only the headers.
//!
//! A request's tenant is settled from `Authorization: Bearer <tenant API key>` before rmcp reads
//! a byte of its body, exactly as the proxy does; a refused request never reaches an MCP handler.
//! A path naming no configured server is 404 with the list of those that are.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::middleware::{from_fn_with_state, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};

use crate::caller::AuthenticatedTenant;
use crate::front::ServerFront;
use crate::gateway::Gateway;

/// The routes of every configured server, ready to merge into the proxy's router.
pub fn router(gateway: &Arc<Gateway>) -> Router {
    let mut router = Router::new();
    for spec in &gateway.options.servers {
        let front = ServerFront {
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
        let service = StreamableHttpService::new(
            move || Ok(front.clone()),
            Arc::new(LocalSessionManager::default()),
            config,
        );
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
        .layer(from_fn_with_state(gateway.clone(), authenticate))
}

/// Settle the tenant from the headers alone, or refuse.
async fn authenticate(State(gateway): State<Arc<Gateway>>, mut request: Request, next: Next) -> Response {
    match gateway.tenancy.tenant(request.headers()) {
        Ok(tenant) => {
            request.extensions_mut().insert(AuthenticatedTenant(tenant));
            next.run(request).await
        }
        Err(refusal) => {
            gateway.metrics.refused.fetch_add(1, Relaxed);
            (refusal.status, refusal.message).into_response()
        }
    }
}

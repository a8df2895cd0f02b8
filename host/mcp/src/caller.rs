//! Who is calling: the tenant (authenticated from the headers before the body was read, by
//! [`crate::routes`]), the agent and the session — the same headers the proxy reads.
//!
//! - Agent: `x-agent-id`, else the MCP client's name from its `initialize` (`clientInfo.name`),
//!   else `mcp-client`. Its handle is the one the proxy gave the same name (0 if the agent has
//!   not called the model yet).
//! - Session: `x-session-id`, else the MCP session (`Mcp-Session-Id`), else `mcp`.
//!
//! A caller holds one of its tenant's places in flight (the proxy's `--tenant-max-in-flight`, the
//! same count as its model calls) from the start of its handler to its end; past the quota the
//! request is answered with a JSON-RPC error before anything is sent to a server.

use std::sync::Arc;

use axum::http::request::Parts;
use axum::http::HeaderMap;
use rmcp::model::ErrorCode;
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};

use crate::metrics::{GatewayMetrics, Refused};
use crate::tenancy::{InFlight, TenantStream};

/// The JSON-RPC error code of a request past its tenant's quota (a server error of the
/// implementation-defined range, -32000 to -32099; `data.reason` says which quota).
pub const OVER_QUOTA: ErrorCode = ErrorCode(-32029);

/// The tenant a request authenticated as: put in the request's extensions by the route layer.
#[derive(Clone)]
pub struct AuthenticatedTenant(pub Arc<dyn TenantStream>);

/// One request's caller.
pub struct Caller {
    /// The tenant the request authenticated as.
    pub tenant: Arc<dyn TenantStream>,
    /// The agent's name, from the first source in the module doc that has one.
    pub agent_name: String,
    /// The handle the proxy gave that name; 0 when the agent has not called the model yet.
    pub agent: u32,
    /// The session's id in the tenant, as the proxy computes it for the same key.
    pub session: u64,
    /// Counted out of the tenant's in-flight requests when the caller is dropped.
    _in_flight: InFlight,
}

impl Caller {
    /// The caller of the request `context` carries, holding one of its tenant's places in flight;
    /// an [`OVER_QUOTA`] error when the tenant has none left (counted in `metrics`), an internal
    /// error when the request did not come through the gateway's routes.
    pub fn of(context: &RequestContext<RoleServer>, metrics: &GatewayMetrics) -> Result<Self, McpError> {
        let parts = context
            .extensions
            .get::<Parts>()
            .ok_or_else(|| McpError::internal_error("agentrt MCP gateway: the request carries no HTTP parts", None))?;
        let tenant = parts
            .extensions
            .get::<AuthenticatedTenant>()
            .ok_or_else(|| McpError::internal_error("agentrt MCP gateway: the request was not authenticated", None))?
            .0
            .clone();
        let client_name = context.peer.peer_info().map(|info| info.client_info.name.clone());
        let agent_name = header(&parts.headers, "x-agent-id")
            .map(str::to_string)
            .or(client_name)
            .unwrap_or_else(|| "mcp-client".to_string());
        let session_key = header(&parts.headers, "x-session-id")
            .or_else(|| header(&parts.headers, "mcp-session-id"))
            .unwrap_or("mcp");
        let in_flight = tenant.admit().map_err(|refusal| {
            metrics.refuse(Refused::InFlight);
            McpError::new(
                OVER_QUOTA,
                format!("agentrt MCP gateway: {}", refusal.message),
                Some(serde_json::json!({"reason": "tenant_in_flight"})),
            )
        })?;
        Ok(Self {
            agent: tenant.agent(&agent_name),
            session: tenant.session(session_key),
            agent_name,
            tenant,
            _in_flight: in_flight,
        })
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)?
        .to_str()
        .ok()
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

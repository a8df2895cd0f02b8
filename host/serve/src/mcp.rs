//! The MCP gateway (crate `agentrt-mcp`) inside `agentrt serve`: the proxy's tenants, as the
//! gateway's narrow [`agentrt_mcp::Tenancy`] interface asks for them.
//!
//! An MCP request authenticates with the tenant API keys the proxy uses; its tool calls go on the
//! tenant's stream (every one of its policy slots observes it), with the agent handles and session
//! ids of the proxy's own requests — so a policy sees an agent's model calls and tool calls, and
//! their latencies, as one sequence. Its requests count against the tenant's in-flight quota
//! (`--tenant-max-in-flight`) beside its model calls.

use std::sync::{Arc, Weak};

use axum::http::{HeaderMap, StatusCode};

/// What [`mount`] takes, for callers that do not depend on `agentrt-mcp` themselves.
pub use agentrt_mcp::GatewayOptions;
use agentrt_mcp::{Gateway, InFlight, Refusal, Tenancy, TenantStream};
use agentrt_runtime::types::Event;
use agentrt_runtime::PolicyRegistry;

use crate::front::error::ApiError;
use crate::identity::tenant_session;
use crate::request::AppState;
use crate::tenant::Tenant;

/// Create the gateway over `state`'s tenants and mount it: `proxy::router` then serves its routes.
pub fn mount(state: &Arc<AppState>, options: GatewayOptions) -> Arc<Gateway> {
    let tenancy = Arc::new(ProxyTenancy {
        // Weak: the gateway lives in the state; a strong reference back would be a cycle.
        state: Arc::downgrade(state),
        registry: state.tenants.shared_registry(),
    });
    let gateway = Gateway::new(options, tenancy);
    if state.mcp.set(gateway.clone()).is_err() {
        tracing::warn!("the MCP gateway was mounted twice; the first one stays");
    }
    state.mcp.get().expect("set above").clone()
}

struct ProxyTenancy {
    state: Weak<AppState>,
    registry: Arc<PolicyRegistry>,
}

fn refusal(e: ApiError) -> Refusal {
    Refusal {
        status: e.status,
        message: e.message,
    }
}

impl Tenancy for ProxyTenancy {
    fn tenant(&self, headers: &HeaderMap) -> Result<Arc<dyn TenantStream>, Refusal> {
        let state = self.state.upgrade().ok_or_else(|| Refusal {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: "agentrt serve is shutting down".into(),
        })?;
        let name = state.tenants.name_for(headers).map_err(refusal)?;
        let tenant = state.tenants.get_or_start(&name).map_err(refusal)?;
        Ok(Arc::new(ProxyTenant {
            tenant,
            state: self.state.clone(),
        }))
    }

    fn registry(&self) -> Arc<PolicyRegistry> {
        self.registry.clone()
    }
}

struct ProxyTenant {
    tenant: Arc<Tenant>,
    state: Weak<AppState>,
}

impl TenantStream for ProxyTenant {
    fn name(&self) -> &str {
        &self.tenant.name
    }

    fn agent(&self, name: &str) -> u32 {
        self.tenant.agents.handle_of(name).unwrap_or(0)
    }

    fn session(&self, session_key: &str) -> u64 {
        tenant_session(&self.tenant.name, session_key)
    }

    fn now_us(&self) -> u64 {
        self.state.upgrade().map_or(0, |s| s.now_us())
    }

    fn observe(&self, events: Vec<Event>) {
        self.tenant.observe(events);
    }

    fn admit(&self) -> Result<InFlight, Refusal> {
        let permit = self.tenant.admit().map_err(refusal)?;
        Ok(Box::new(permit))
    }
}

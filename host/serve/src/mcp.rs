//! The MCP gateway (crate `agentrt-mcp`) inside `agentrt serve`: the proxy's tenants, as the
//! gateway's narrow [`agentrt_mcp::Tenancy`] interface asks for them.
//!
//! An MCP request authenticates with the tenant API keys the proxy uses; its tool calls go on the
//! tenant's stream (every one of its policy slots observes it), with the agent handles and session
//! ids of the proxy's own requests — so a policy sees an agent's model calls and tool calls, and
//! their latencies, as one sequence. Its requests count against the tenant's in-flight quota
//! (`--tenant-max-in-flight`) beside its model calls.

use std::sync::Arc;

use axum::http::HeaderMap;

/// What [`gateway`] takes, for callers that do not depend on `agentrt-mcp` themselves.
pub use agentrt_mcp::GatewayOptions;
use agentrt_mcp::{Gateway, InFlight, Refusal, Tenancy, TenantStream};
use agentrt_runtime::types::Event;
use agentrt_runtime::PolicyRegistry;

use crate::clock::Clock;
use crate::front::error::ApiError;
use crate::identity::tenant_session;
use crate::tenant::{Tenant, Tenants};
use agentrt_exposition::Report;

/// The gateway over `tenants`, its events stamped by `clock`; `app` merges its routes.
pub fn gateway(tenants: Arc<Tenants>, clock: Clock, options: GatewayOptions) -> Arc<Gateway> {
    let registry = tenants.shared_registry();
    Gateway::new(
        options,
        Arc::new(ProxyTenancy {
            tenants,
            clock,
            registry,
        }),
    )
}

/// The gateway's series for `/metrics`.
pub struct McpReport(pub Arc<Gateway>);

impl Report for McpReport {
    fn report(&self, out: &mut agentrt_exposition::Exposition<'_>) -> std::fmt::Result {
        self.0.report(out)
    }
}

struct ProxyTenancy {
    tenants: Arc<Tenants>,
    clock: Clock,
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
        let name = self.tenants.name_for(headers).map_err(refusal)?;
        let tenant = self.tenants.get_or_start(&name).map_err(refusal)?;
        Ok(Arc::new(ProxyTenant {
            tenant,
            clock: self.clock,
        }))
    }

    fn registry(&self) -> Arc<PolicyRegistry> {
        self.registry.clone()
    }

    fn adopt_trace_parent(&self, span: &tracing::Span, headers: &HeaderMap) {
        crate::telemetry::propagation::adopt_client_parent(span, headers);
    }
}

struct ProxyTenant {
    tenant: Arc<Tenant>,
    clock: Clock,
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
        self.clock.now_us()
    }

    fn observe(&self, events: Vec<Event>) {
        self.tenant.observe(events);
    }

    fn admit(&self) -> Result<InFlight, Refusal> {
        let permit = self.tenant.admit().map_err(refusal)?;
        Ok(Box::new(permit))
    }
}

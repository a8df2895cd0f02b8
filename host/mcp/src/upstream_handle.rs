//! One upstream server as the gateway holds it: the caller's tenant's session to the
//! server, every request to it under `--mcp-call-timeout-ms` (past it the request is dropped —
//! rmcp tells the server it was cancelled — and the agent gets a JSON-RPC error naming the server,
//! the method and the limit), and a server's failures counted. [`crate::agent_server`] serves agents
//! through it; [`crate::tool_call`] makes tool calls through it.

use std::future::Future;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use rmcp::model::ErrorCode;
use rmcp::service::{RequestContext, ServiceError};
use rmcp::{ErrorData as McpError, RoleServer};

use crate::caller::Caller;
use crate::gateway::Gateway;
use crate::result_type::ExplicitResultType;
use crate::upstream::{Connection, UpstreamSpec};

/// The JSON-RPC error code of a request the server did not answer in time (the official
/// TypeScript SDK's `RequestTimeout`).
pub const TIMED_OUT: ErrorCode = ErrorCode(-32001);

/// The gateway's handle on one upstream server; [`crate::agent_server`] makes it the MCP server
/// agents see at `/mcp/SERVER`.
#[derive(Clone)]
pub struct UpstreamHandle {
    /// The gateway it belongs to.
    pub gateway: Arc<Gateway>,
    /// The upstream server it forwards to.
    pub server: Arc<UpstreamSpec>,
}

impl UpstreamHandle {
    /// The caller's tenant's live session to the server.
    pub async fn connection(&self, caller: &Caller) -> Result<Arc<Connection>, McpError> {
        self.gateway
            .connections
            .get(caller.tenant.name(), &self.server)
            .await
            .map_err(|e| {
                self.gateway
                    .metrics
                    .of(caller.tenant.name(), &self.server.name)
                    .upstream_errors
                    .fetch_add(1, Relaxed);
                McpError::internal_error(format!("agentrt MCP gateway: {}", self.server.redact(&e)), None)
            })
    }

    /// `send` under the per-call deadline. A failure is [`Self::upstream_failed`]'s; past the
    /// deadline `send` is dropped — the server is told the request was cancelled — and counted.
    pub async fn within_deadline<T>(
        &self,
        caller: &Caller,
        method: &str,
        send: impl Future<Output = Result<T, ServiceError>>,
    ) -> Result<T, McpError> {
        let limit = self.gateway.options.call_timeout;
        match tokio::time::timeout(limit, send).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(error)) => Err(self.upstream_failed(caller, method, error).await),
            Err(_) => {
                self.gateway
                    .metrics
                    .of(caller.tenant.name(), &self.server.name)
                    .timeouts
                    .fetch_add(1, Relaxed);
                Err(McpError::new(
                    TIMED_OUT,
                    format!(
                        "agentrt MCP gateway: {} did not answer {method} within {} ms \
                         (--mcp-call-timeout-ms); the request was cancelled at the server",
                        self.server.describe(),
                        limit.as_millis()
                    ),
                    Some(serde_json::json!({"reason": "upstream_timeout", "timeoutMs": limit.as_millis() as u64})),
                ))
            }
        }
    }

    /// Turn a failed upstream request into the client's error: the server's own JSON-RPC error
    /// unchanged; a transport failure named (server, method) and the session dropped so the next
    /// request reconnects.
    pub async fn upstream_failed(&self, caller: &Caller, method: &str, error: ServiceError) -> McpError {
        if let ServiceError::McpError(error) = error {
            return error;
        }
        self.gateway
            .metrics
            .of(caller.tenant.name(), &self.server.name)
            .upstream_errors
            .fetch_add(1, Relaxed);
        self.gateway
            .connections
            .forget(caller.tenant.name(), &self.server.name)
            .await;
        McpError::internal_error(
            format!(
                "agentrt MCP gateway: {} failed during {method}: {}; the next request reconnects",
                self.server.describe(),
                self.server.redact(&error.to_string())
            ),
            None,
        )
    }

    /// Forward one request (not a tool call) and count it.
    pub(crate) async fn forward<T, F, Fut>(
        &self,
        method: &str,
        context: &RequestContext<RoleServer>,
        send: F,
    ) -> Result<T, McpError>
    where
        T: ExplicitResultType,
        F: FnOnce(Arc<Connection>) -> Fut,
        Fut: Future<Output = Result<T, ServiceError>>,
    {
        let caller = Caller::of(context, &self.gateway.metrics)?;
        let connection = self.connection(&caller).await?;
        self.gateway
            .metrics
            .of(caller.tenant.name(), &self.server.name)
            .forwarded
            .fetch_add(1, Relaxed);
        tokio::select! {
            answer = self.within_deadline(&caller, method, send(connection)) => {
                answer.map(ExplicitResultType::with_explicit_result_type)
            }
            // Dropping the upstream request tells the server it was cancelled.
            () = context.ct.cancelled() => Err(McpError::internal_error(format!("{method} cancelled by the client"), None)),
        }
    }
}

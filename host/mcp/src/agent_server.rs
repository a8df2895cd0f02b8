//! What an agent's MCP client talks to at `/mcp/SERVER`: an MCP server that forwards every request
//! to SERVER over the caller's tenant's session and returns the answer unchanged — tools,
//! resources, prompts, completions — except `tools/call`, which goes through [`crate::tool_call`]
//! (events, memo).
//!
//! Every request to a server runs under `--mcp-call-timeout-ms`: past it the request is dropped
//! (rmcp tells the server it was cancelled) and the agent gets a JSON-RPC error naming the server,
//! the method and the limit. A server that never answers, or keeps a call alive with notifications
//! and never answers, holds that one call, for that long.

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CompleteRequestParams, CompleteResult, GetPromptRequestParams,
    GetPromptResponse, InitializeRequestParams, InitializeResult, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};

use crate::caller::Caller;
pub use crate::upstream_handle::{UpstreamHandle, TIMED_OUT};

impl ServerHandler for UpstreamHandle {
    /// Before the handshake the gateway says only what it can forward.
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::default();
        info.capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_resources()
            .enable_prompts()
            .enable_completions()
            .build();
        info.server_info.name = format!("agentrt-mcp/{}", self.server.name);
        info
    }

    /// The upstream server's own capabilities, info and instructions, under the protocol version
    /// negotiated with the client.
    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        context.peer.set_peer_info(request.clone());
        let mut answer = self.negotiate_initialize(&request)?;
        let caller = Caller::of(&context, &self.gateway.metrics)?;
        let connection = self.connection(&caller).await?;
        if let Some(upstream) = connection.server_info() {
            answer.capabilities = upstream.capabilities.clone();
            if let Some(server_info) = &upstream.server_info {
                answer.server_info = server_info.clone();
            }
            answer.instructions = upstream.instructions.clone();
        }
        Ok(answer)
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let rules = &self.gateway.options.rules;
        let server = self.server.name.clone();
        let first_page = request.as_ref().is_none_or(|r| r.cursor.is_none());
        self.forward("tools/list", &context, |c| async move {
            let listed = c.peer().list_tools(request).await?;
            // What the agent sees is what the memo's rule reads: annotations of this listing.
            if first_page && listed.next_cursor.is_none() {
                c.learn_tools(&server, &listed.tools, rules);
            }
            Ok(listed)
        })
        .await
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        crate::tool_call::call(self, request, context).await
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        self.forward("resources/list", &context, |c| async move {
            c.peer().list_resources(request).await
        })
        .await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        self.forward("resources/templates/list", &context, |c| async move {
            c.peer().list_resource_templates(request).await
        })
        .await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        self.forward("resources/read", &context, |c| async move {
            c.peer().read_resource_once(request).await
        })
        .await
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        self.forward("prompts/list", &context, |c| async move {
            c.peer().list_prompts(request).await
        })
        .await
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        self.forward("prompts/get", &context, |c| async move {
            c.peer().get_prompt_once(request).await
        })
        .await
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        self.forward("completion/complete", &context, |c| async move {
            c.peer().complete(request).await
        })
        .await
    }
}

//! # agentrt-mcp — agentrt as an MCP gateway
//!
//! Agents point their MCP client at `agentrt serve`'s `/mcp/SERVER`; the gateway forwards tools,
//! resources, prompts and completions of the upstream server unchanged, reports every tool call
//! and return to the caller's tenant's event stream (the one its KV policy sees), and answers a
//! call from memory when the tenant's tool-memo policy still keeps a result for exactly those
//! arguments of a tool that has no side effects. Design and figures: `docs/mcp.md`.
//!
//! Module map: [`tenancy`] (the narrow interface to the server the gateway is mounted in) →
//! [`routes`] (HTTP routes: authentication from headers, session ownership and caps, bodies the
//! server would not receive as written) → [`agent_server`] (the MCP server agents see) over
//! [`upstream_handle`] (one upstream server: the tenant's session to it, every request under a
//! deadline) → [`tool_call`] (one call: events, memo, cancellation); [`caller`] (tenant, agent,
//! session of a request, its in-flight permit); [`sessions`] (who opened each agent session, how
//! many each tenant has), [`session_manager`] (rmcp's sessions, bound to them); [`exact_json`]
//! (repeated keys, inexact numbers); [`memory`] (returning a flood's memory to the system); [`upstream`] (servers and each tenant's client sessions to
//! them), [`child_env`] (what a `stdio:` server's environment holds);
//! [`eligibility`] (which tools may be memoized: the host's rule); [`keys`] (tool hashes, result
//! keys over canonical arguments); [`memo`] (a tenant's two memo decisions), [`memo_store`] (its
//! results), [`memo_worker`] (its policy's thread); [`result_type`] (results across protocol versions); [`gateway`] (shared state); [`metrics`];
//! [`args`] (command-line options).

#![warn(missing_docs)]

pub mod agent_server;
pub mod args;
pub mod caller;
pub mod child_env;
pub mod eligibility;
pub mod exact_json;
pub mod gateway;
pub mod keys;
pub mod memo;
pub mod memo_store;
pub mod memo_worker;
pub mod metrics;
pub mod result_type;
pub mod routes;
pub mod session_manager;
pub mod sessions;
pub mod tenancy;
pub mod tool_call;
pub mod upstream;
pub mod upstream_handle;

pub use args::McpArgs;
pub use gateway::{Gateway, GatewayOptions, MemoPolicy, TOOLS_SLOT};
pub use tenancy::{InFlight, Refusal, Tenancy, TenantStream};
pub use tool_call::MEMO_META_KEY;

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
//!
//! ## Modules in detail
//!
//! The MCP gateway (docs/mcp.md), mounted by `serve` at `/mcp/SERVER`: `tenancy` (the narrow
//! interface to the server it is mounted in: tenant from headers, agent handle, session id, clock,
//! the tenant's event queue, a place in its in-flight quota; `host/serve/src/mcp.rs` implements it)
//! → `routes` (one rmcp Streamable HTTP service per server behind a guard: authentication from
//! headers, a session id usable only by its opener, the per-tenant session cap, bodies the server
//! would not receive as written) → `agent_server` (the MCP server agents see: forwards tools,
//! resources, prompts unchanged) over `upstream_handle` (one upstream server as the gateway holds
//! it: the tenant's session to it, every request under the call deadline, its failures counted) →
//! `tool_call` (one call: `tool-call`/`tool-return` events, memo lookup and offer, cancellation);
//! `caller` (tenant, agent, session, its in-flight permit), `sessions` (each agent session's owner
//! — tenant and key — and each tenant's count; reservations), `session_manager` (rmcp's in-memory
//! sessions bound to those owners, released on close or idle expiry), `exact_json` (repeated keys
//! and numbers `serde_json` cannot hold exactly, by JSON Pointer), `upstream` (servers: HTTP or
//! stdio; one client session per tenant and server, replaced when its transport closes; URLs shown
//! without credentials), `child_env` (a stdio server's environment: a minimal base plus what the
//! operator names), `eligibility` (which tools may ever be memoized: read-only or operator-allowed
//! — the host's rule), `keys` (tool hashes, result keys over canonical arguments), `memo` (a
//! tenant's two decisions with its policy), `memo_store`, `memo_worker` (the tenant's `tools` slot
//! on a thread of its own), `metrics`, `args`.

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

//! # agentrt-serve — the OpenAI-compatible front of the runtime layer
//!
//! Frameworks talk to `agentrt serve` as if it were vLLM; it forwards to vLLM (any
//! OpenAI-compatible server works for pass-through) and, on the way, gives each tenant's policies
//! the framework's view of the traffic. The folders are the steps a request walks, in order:
//!
//! 1. [`front`] — the front door, which knows no tenant and no policy: the accept loop
//!    (connection cap, header timeout), the limits, the proxy's own errors and what one request
//!    may cost to read.
//! 2. [`auth`] — every credential, checked from the headers alone: API keys (key → tenant, and
//!    the key's revocation), the operator's and tenant admins' tokens, the metrics token.
//! 3. [`tenant`] — whose request it is ([`tenant::admit`]: the caller's tenant → a place in its
//!    in-flight quota, before a byte of the body is read), and that tenant's share of the proxy:
//!    its settings and their reload, quotas, cache salt, agents and sessions, policy slots and
//!    their workers, verdicts, stored responses.
//! 4. [`identity`] — who is calling, read from the request alone: the agent (header, `user`, or
//!    the anchor's hash) and the session, whatever the API ([`identity::agent_api`]).
//! 5. [`policy`] — telling the tenant's policies ([`policy::feed`]) and carrying out what they
//!    answer ([`policy::effects`], [`policy::warmup`]), off the critical path.
//! 6. [`engine`] — the engine(s) behind the proxy: the admission queue, several replicas behind a
//!    router, the upstream under its timeouts, `/tokenize`, and the engine adapters (the vLLM
//!    plugin's eviction socket, KV events, cache shares).
//!    [`hints`] — what the framework says of a session's life (closed, waiting, handed off), by
//!    header, by `POST /v1/agentrt/hints` or read from responses, told the same way.
//! 7. [`request`] — one agent call, step by step: prepare (parse once, check, identify, salt,
//!    amend), forward (policies told, admission, replica, upstream), relay, finish.
//! 8. [`admin`] — the admin API on its own state; [`mcp`] — the MCP gateway over the tenants;
//!    [`metrics`] — `/metrics` over a list of reports (`agentrt_exposition::Report`: the Prometheus project's client writes the text).
//!
//! [`app`] is the composition root ([`App::build`]: the one place that sees every capability,
//! used by the binary, the tests and the benches); [`cli`] turns `agentrt serve`'s flags into an
//! [`AppConfig`], and [`config_flags`] takes any of them from the config file's `[serve]`
//! table. [`names`], [`clock`], [`table`] and [`telemetry`] (OpenTelemetry export
//! and W3C trace context) are leaves every layer may use. `tests/layers.rs` keeps the order: a
//! module may use only the layers before it.

#![warn(missing_docs)]

pub mod admin;
pub mod app;
pub mod auth;
pub mod cli;
pub mod clock;
pub mod config_flags;
pub mod engine;
pub mod front;
pub mod hints;
pub mod identity;
pub mod mcp;
pub mod metrics;
pub mod names;
pub mod policy;
pub mod request;
pub mod table;
pub mod telemetry;
pub mod tenant;

pub use app::{App, AppConfig};
pub use cli::ServeArgs;

/// `agentrt serve` with `args` until Ctrl-C / SIGTERM ([`cli::run`]), the config file's
/// `[serve]` table checked on every read by the flags' own parsers ([`config_flags`]).
pub fn run(args: ServeArgs, components: &agentrt_runtime::ComponentLookup) -> anyhow::Result<()> {
    cli::run(args, components, config_flags::check_serve_table)
}
pub use front::limits::Limits;

//! # agentrt-serve — the OpenAI-compatible front of the runtime layer
//!
//! Frameworks talk to `agentrt serve` as if it were vLLM; it forwards to vLLM (any
//! OpenAI-compatible server works for pass-through) and, on the way, gives each tenant's policies
//! the framework's view of the traffic. Its modules in layers, lowest first — the order
//! `tests/layers.rs` enforces (a module uses only its own layer and those below) and checks this
//! list against:
//!
//! 1. [`front`] — the front door, which knows no tenant and no policy: the accept loop
//!    (connection cap, header timeout), the limits, the proxy's own errors and what one request
//!    may cost to read.
//! 2. [`auth`] — every credential, checked from the headers alone: API keys (key → tenant, and
//!    the key's revocation), the operator's and tenant admins' tokens, the metrics token.
//! 3. [`metrics`] — the proxy's own counters, and `/metrics` over a list of reports
//!    (`agentrt_exposition::Report`: the Prometheus project's client writes the text).
//! 4. [`identity`] — who is calling, read from the request alone: the agent (header, `user`, or
//!    the anchor's hash) and the session, whatever the API ([`identity::agent_api`]).
//! 5. [`tenant`] — whose request it is ([`tenant::admit`]: the caller's tenant → a place in its
//!    in-flight quota, before a byte of the body is read), and that tenant's share of the proxy:
//!    its settings and their reload, quotas, cache salt, agents and sessions, policy slots and
//!    their workers, verdicts, stored responses, hint state.
//! 6. [`engine`] — the engine(s) behind the proxy: the admission queue, working-set admission
//!    (whole sessions held past the engine's knee), several replicas behind a router, the
//!    upstream under its timeouts, `/tokenize`, and the engine adapters (the vLLM plugin's
//!    eviction socket, KV events, cache shares).
//! 7. [`policy`] — telling the tenant's policies ([`policy::feed`]) and carrying out what they
//!    answer ([`policy::effects`], [`policy::warmup`]), off the critical path.
//! 8. [`hints`] — what the framework says of a session's life (closed, waiting, handed off), by
//!    header, in the field's dialects on a body (vLLM's envelope, Dynamo's `nvext`, ThunderAgent's
//!    `program_id`), by `POST /v1/agentrt/hints` or read from responses, told the same way.
//! 9. [`request`] — one agent call, step by step: its head read once (tenant, identity and hint
//!    headers), prepare (parse once, check, identify, salt, amend), forward (policies told,
//!    working-set admission, the admission queue, replica, upstream), relay, finish.
//! 10. [`admin`], [`mcp`] — the admin API on its own state; the MCP gateway over the tenants.
//!
//! [`app`] is the composition root ([`App::build`]: the one place that sees every capability,
//! used by the binary, the tests and the benches); [`cli`] turns `agentrt serve`'s flags into an
//! [`AppConfig`], and [`config_flags`] takes any of them from the config file's `[serve]`
//! table. [`names`], [`clock`], [`table`] and [`telemetry`] (OpenTelemetry export
//! and W3C trace context) are leaves every layer may use.
//!
//! ## Modules in detail
//!
//! `agentrt serve`, in the order a request walks it: `front/` (accept loop — connection cap, header
//! timeout, each connection's send buffer, the drain on shutdown — limits, the proxy's errors in
//! each API's shape, what one request may cost to read; `head` = the head's total bytes held to
//! `--max-header-bytes`; `body` = every body read to its deadline within the reading budgets, the
//! refusals counted; `in_flight` = the requests in flight, logged when a shutdown cuts them;
//! `tcp_memory` = new model requests shed while the machine's TCP memory is under pressure;
//! `overload` = shed while the workers run late) → `auth/` (every credential, from the headers
//! alone, one interface the other rooms call: `api_keys` = key → tenant and each key's revocation,
//! cut by a reload that removes or moves the key; `admin` = the operator's and tenant admins'
//! tokens and who may call which route; `metrics_token`; `bearer` = reading a token, comparing in
//! constant time) → `tenant/` (`admit`: the caller's tenant → a place in its in-flight quota,
//! before the body; the tenant's settings from flags and `--config` (`config_warnings` = old key
//! spellings, a file others may read), their reload (`reload_changes` = what a reload changed, for
//! the log) and revocation, quotas, cache salt, agents and sessions, `handles` = agent handles
//! unique across tenants (a wrapped counter skips live ones), slots and their workers, verdicts,
//! stored responses, `saved_state` = `--state-dir`: each tenant's snapshots and agents saved at
//! shutdown and restored when it starts; `hint_state` = its lifecycle hints' state, owned by the
//! tenant: `hint_rate` = `--hint-rate`, `return_times` = tool waits ended by the session's next
//! request, gaps per (agent, tool)) → `identity/` (agent and session from the request alone,
//! whatever the agent API) → `policy/` (`feed`: every slot hears the same events; `effects`: the
//! slots' `act` merged and carried out; `warmup`) → `engine/` (`kind`: `--engine vllm|sglang`,
//! which request fields carry agentrt's tags; the admission queue (while it is full, a body about
//! to be read counts against its byte caps: `hold_reading`), replicas behind a router, the upstream
//! under its timeouts (clients' requests through hyper's client with its read buffer capped, so a
//! slow reader's stream holds little) and what a router in front of the replicas reads
//! (`upstream_router`), `/tokenize`, the engine adapters: eviction socket, KV events, cache shares;
//! `plugin_metrics` = the eviction path's series, one engine's or each replica's; `startup_checks`
//! = the start-up lines when no plugin can rank evictions or the upstream does not answer) →
//! `hints/` (lifecycle hints told as `session-end` closed / `session-wait` / `handoff`: `parse` =
//! the headers and `POST /v1/agentrt/hints`'s body, checked whole; `dialects` = vLLM's `kv_hints`,
//! Dynamo's `nvext`, ThunderAgent's `program_id` on a request body; `tool_wait` = the tools a
//! response asks for, streamed or not; `route` (and `POST /programs/release`);
//! [docs/agents.md](agents.md#lifecycle-hints)) → `request/` (one call: `head` = its tenant, quota
//! place, identity and hint headers read once before the body; prepare, forward, relay, finish;
//! `stream_usage` = a streamed call's usage asked for when the client did not, its chunk dropped);
//! beside them `admin/` (`policy_body` = an upload's body as a component or a policy's name;
//! `uploads` = uploads in progress, `--max-uploads-per-tenant`; every route with a curl example in
//! docs/admin-api.md, `tests/api_docs.rs`), `mcp.rs` (the gateway over the tenants), `metrics.rs`
//! (`/metrics` over a list of reports), `telemetry/` (OpenTelemetry: a request's spans over
//! OTLP/HTTP when `OTEL_EXPORTER_OTLP_ENDPOINT` is set; `propagation` = W3C `traceparent` from the
//! client, to the upstream and warm-ups); `app.rs` is the one assembly (`App::build`, used by the
//! binary, tests and benches), `cli.rs` the flags (`cli/limit_flags` = the limit and quota groups:
//! front door, policy sandbox, tables, quotas), `config_flags.rs` any flag from the config file's
//! `[serve]` table (keys = the flags' names; the command line wins; read at start only; checked on
//! every reload through a `ServeTableCheck` the crate root hands `cli`, so `tenant/` never reaches
//! up to it). `tests/layers.rs` keeps the layers. Limits and threat model:
//! [docs/security.md](security.md).

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

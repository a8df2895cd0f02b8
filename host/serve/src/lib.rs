//! # agentrt-serve — the OpenAI-compatible front of the runtime layer
//!
//! Frameworks talk to `agentrt serve` as if it were vLLM; it forwards to vLLM (any
//! OpenAI-compatible server works for pass-through) and, on the way, gives each tenant's policy
//! the framework's view of the traffic:
//!
//! - [`identity`]: who is calling — the agent (`x-agent-id`, the `user` field, or the content hash
//!   of system prompt + tools: the *anchor*) and the session (`x-session-id`, `session_id`, or the
//!   first user message) — interned into handles and announced once per policy;
//! - [`proxy`]: `/v1/chat/completions`, `/v1/responses` (OpenAI Responses API), `/v1/messages`
//!   (Anthropic Messages API), `/v1/completions`, `/v1/models`, streaming passed through chunk by
//!   chunk, upstream errors returned as they came, request events to the policy; [`agent_api`]:
//!   what differs between the three agent APIs (anchor, usage, streamed usage, warm-up body);
//! - [`policy_worker`]: each tenant's policy calls on a thread of its own behind a bounded
//!   queue — a request never waits on a policy, and a slow one delays only its own tenant;
//! - [`tenant_settings`], [`quotas`], [`reload`]: what the operator sets per tenant (keys,
//!   admin tokens, cache shares, quotas) from flags and a TOML file, each tenant's quotas as its
//!   checks read them, and replacing the settings without a restart;
//! - [`cache_salt`]: every named tenant's requests carry a salt of its own, so tenants never
//!   share prefix-cache blocks (nor learn through timing what another tenant sent);
//! - [`warmup`]: the policy's `act()` side effects, off the critical path — a warm-up is a real
//!   upstream request carrying only the anchor and a minimal user message;
//! - [`admin`]: authenticated policy management (install, hot swap) per tenant, and each
//!   tenant's stats and forecasts ([`tenant_report`]); [`admin_auth`]: which admin token may act
//!   on which tenant (the operator's on all, a tenant's on its own);
//! - [`admission`]: at most `--upstream-max-in-flight` requests upstream, the rest waiting in
//!   the proxy least-demoted session first (the slots' `set-priority`), for engines without
//!   priority scheduling;
//! - [`metrics`]: Prometheus counters for the proxy and every policy slot;
//! - [`replicas`]: several upstream replicas behind a KV-aware router (Dynamo's selection
//!   service, session-sticky hashing when it fails), fed agentrt's hints (`agentrt-router`);
//! - [`limits`], [`connections`], [`upstream`]: the front door's limits (connections, header
//!   and upstream timeouts, body and reply sizes), the accept loop that enforces the connection
//!   ones, and waiting on the upstream under the rest; [`auth`]: bearer tokens.

pub mod admin;
pub mod app;
pub mod cli;
pub mod clock;
pub mod engine;
pub mod front;
pub mod identity;
pub mod mcp;
pub mod metrics;
pub mod names;
pub mod policy;
pub mod prometheus;
pub mod request;
pub mod table;
pub mod tenant;

pub use app::{App, AppConfig};
pub use cli::{run, ServeArgs};
pub use front::limits::Limits;

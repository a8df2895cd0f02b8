//! What the gateway needs from the server it is mounted in — the narrow interface between this
//! crate and `agentrt serve`.
//!
//! The gateway never reads the proxy's tables: it asks for a request's tenant (from its headers,
//! before any body is read), and of that tenant only five things — the handle the proxy gave an
//! agent name, a session key's id, the clock its events are stamped with, a way to queue events
//! on the tenant's stream (the one its KV policy observes), and a place among the tenant's
//! requests in flight. Tool calls thus land in the same per-tenant stream as the model calls of
//! the same agents and sessions, and count against the same quota.

use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode};

use agentrt_runtime::types::Event;
use agentrt_runtime::PolicyRegistry;

/// One request counted in the tenant's in-flight quota; counted out when dropped.
pub type InFlight = Box<dyn Send + Sync>;

/// Why a request was refused before it reached an MCP handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The HTTP status to answer with.
    pub status: StatusCode,
    /// Why, for the caller to read.
    pub message: String,
}

/// Who the gateway's callers are.
pub trait Tenancy: Send + Sync + 'static {
    /// The tenant `headers` authenticate (`Authorization: Bearer <tenant API key>`), or why not.
    fn tenant(&self, headers: &HeaderMap) -> Result<Arc<dyn TenantStream>, Refusal>;

    /// The registry the gateway installs each tenant's tool-memo policy in (slot
    /// `TENANT/tools`), beside the tenant's other slots: one pool, one `/metrics` listing. (The
    /// gateway asks that slot to score, which a `--slot` worker does not offer; so it runs the slot
    /// itself — do not also configure a `--slot tools`.)
    fn registry(&self) -> Arc<PolicyRegistry>;

    /// Make `span` (one tool call's) the child of the W3C trace context (`traceparent`) in
    /// `headers`, when the server exports traces; by default nothing, and the call's span is in
    /// whatever trace is current.
    fn adopt_trace_parent(&self, span: &tracing::Span, headers: &HeaderMap) {
        let _ = (span, headers);
    }
}

/// One tenant, as the gateway sees it.
pub trait TenantStream: Send + Sync {
    /// The tenant's name: the label of its metrics and the first part of its slots' labels.
    fn name(&self) -> &str;

    /// The handle the proxy gave agent `name`, or 0 (unknown agent) when the agent has not called
    /// the model yet. The gateway never registers agents itself: a registration carries the
    /// agent's anchor, which only its model calls show.
    fn agent(&self, name: &str) -> u32;

    /// The session id of `session_key` in this tenant, as the proxy computes it for the same
    /// `x-session-id`.
    fn session(&self, session_key: &str) -> u64;

    /// The clock (µs) the tenant's events are stamped with.
    fn now_us(&self) -> u64;

    /// Queue `events` on the tenant's stream; never waits.
    fn observe(&self, events: Vec<Event>);

    /// Count one MCP request in among the tenant's requests in flight (the proxy's
    /// `--tenant-max-in-flight`), or why not: the tenant is at its quota. Held until the request
    /// ends, however it ends.
    fn admit(&self) -> Result<InFlight, Refusal>;
}

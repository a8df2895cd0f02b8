//! The front door's limits: how much a client or an upstream may take of the proxy — connections,
//! time, bytes — so that one of them misbehaving cannot hurt anyone else. Each has a flag of
//! `agentrt serve` (named on each field) and the default below; docs/security.md lists them.

use std::time::Duration;

use agentrt_guards::body_read::BodyTiming;
use axum::http::{header, HeaderValue};
use axum::response::Response;

/// How much of the proxy one client or upstream may take; [`Limits::default`] holds the flags'
/// defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once (`--max-connections`); beyond it new ones are closed at once.
    pub max_connections: usize,
    /// Time a connection has to send a request's complete headers, from being accepted or from
    /// its previous response (`--header-read-timeout-ms`).
    pub header_read_timeout: Duration,
    /// Bytes one connection may buffer of a request's head — request line and headers — and of
    /// a body being read (`--max-header-bytes`, at least 8 KiB: hyper's floor). A head past it
    /// gets 431. With [`Self::max_connections`] it bounds what clients that never finish their
    /// headers hold across connections: 4,096 × 32 KiB = 128 MiB at the defaults.
    pub max_header_bytes: usize,
    /// Largest request body on the OpenAI routes (`--max-body-bytes`).
    pub max_body_bytes: usize,
    /// Largest policy component uploaded through the admin API (`--max-upload-bytes`).
    pub max_upload_bytes: usize,
    /// Time to open a connection to the upstream (`--upstream-connect-timeout-ms`).
    pub upstream_connect_timeout: Duration,
    /// Time from sending a request upstream to its response headers
    /// (`--upstream-first-byte-timeout-ms`). vLLM sends a non-streamed reply's headers only when
    /// the whole completion is generated, so this bounds queueing plus a full generation.
    pub upstream_first_byte_timeout: Duration,
    /// Longest silence between two pieces of an upstream response body
    /// (`--upstream-idle-timeout-ms`).
    pub upstream_idle_timeout: Duration,
    /// Largest non-streamed upstream reply the proxy buffers (`--max-upstream-reply-bytes`).
    /// Streamed replies are relayed chunk by chunk and never buffered whole.
    pub max_upstream_reply_bytes: usize,
    /// What one body may cost to parse and keep: JSON elements, conversation items, tools
    /// (`--max-json-elements`, `--max-request-items`, `--max-request-tools`).
    pub budget: crate::front::request_budget::RequestBudget,
    /// How late the proxy's workers may run before new model requests are shed with 503
    /// (`--shed-lag-ms`; `None`: never shed). [`crate::front::overload`].
    pub shed_lag: Option<Duration>,
    /// How fast a request body must arrive once its request is authenticated
    /// (`--body-idle-timeout-ms`, `--body-min-bytes-per-s`). [`crate::front::body`].
    pub body_timing: BodyTiming,
    /// Bytes of request bodies being read at once, all tenants together (`--max-reading-mib`).
    pub max_reading_bytes: usize,
    /// Bytes of one tenant's request bodies being read at once (`--max-reading-mib-per-tenant`).
    pub max_reading_bytes_per_tenant: usize,
    /// Policy uploads in progress at once for one tenant (`--max-uploads-per-tenant`).
    pub max_uploads_per_tenant: usize,
    /// How long a shutdown (SIGTERM, Ctrl-C) lets requests in flight finish before it cuts them
    /// (`--drain-timeout-ms`). [`crate::front::connections`].
    pub drain_timeout: Duration,
    /// The kernel's buffer on each side of a stream, in bytes (`--socket-buffer-kib`; `None`: the
    /// kernel's own autotuning): a client connection's send buffer
    /// ([`crate::front::connections`]) and an upstream connection's receive buffer
    /// ([`crate::engine::upstream`]), which also keeps the engine's send buffer from growing.
    pub socket_buffer: Option<usize>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            // Well under the usual 65,536-descriptor limit, leaving room for one upstream
            // connection per request in flight and the policy host's files.
            max_connections: 4096,
            header_read_timeout: Duration::from_secs(10),
            // nginx's `large_client_header_buffers` (4 × 8 KiB); hyper's own default (~400 KiB)
            // let 4,000 connections that never finished their headers hold 1.65 GB.
            max_header_bytes: 32 << 10,
            // Long agent contexts are large, but a 128k-token prompt is about 0.5 MB of JSON.
            max_body_bytes: 16 << 20,
            // A policy written in Python carries CPython: about 18 MB.
            max_upload_bytes: 64 << 20,
            upstream_connect_timeout: Duration::from_secs(5),
            upstream_first_byte_timeout: Duration::from_secs(600),
            upstream_idle_timeout: Duration::from_secs(120),
            max_upstream_reply_bytes: 64 << 20,
            budget: crate::front::request_budget::RequestBudget::default(),
            // Well above what a busy proxy that keeps up runs late (a few milliseconds), well
            // below the seconds clients wait before giving up.
            shed_lag: Some(Duration::from_millis(500)),
            body_timing: BodyTiming::default(),
            // Four bodies of the largest size per tenant at once; four tenants' worth in all (a
            // body being read costs its bytes: 256 MiB for every tenant together).
            max_reading_bytes: 256 << 20,
            max_reading_bytes_per_tenant: 64 << 20,
            // A swap replaces the tenant's policy: two at once for one tenant have no use.
            max_uploads_per_tenant: 1,
            // Within Kubernetes' default grace period (terminationGracePeriodSeconds, 30 s), with
            // time left for the exit itself.
            drain_timeout: Duration::from_secs(25),
            // What a stream's events need; the kernel's autotuning grows an unread connection's
            // buffers to 4–6 MiB (tcp_wmem, tcp_rmem), and 5,000 slow readers ran the kernel out
            // of memory.
            socket_buffer: Some(64 << 10),
        }
    }
}

/// Mark an answer given without reading (all of) the request's body as closing its connection.
/// The unread rest of the body is still on the connection, so hyper closes it after the answer;
/// saying so in `Connection: close` keeps a client from sending its next request on it.
pub fn closing_connection(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

//! The front door's limits: how much a client or an upstream may take of the proxy — connections,
//! time, bytes — so that one of them misbehaving cannot hurt anyone else. Each has a flag of
//! `agentrt serve` (named on each field) and the default below; docs/security.md lists them.

use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::http::{header, HeaderValue};
use axum::response::Response;
use futures_util::StreamExt;

use crate::front::error::ApiError;

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
        }
    }
}

/// Read a request body of at most `limit` bytes. A body whose `Content-Length` is over the limit
/// is refused before a byte of it is read; one without a length is read until it passes the
/// limit. Call it only after the request is authenticated: nothing is read for a stranger.
pub async fn read_body(body: Body, limit: usize, flag: &str) -> Result<Bytes, ApiError> {
    let too_large = || {
        ApiError::payload_too_large(format!(
            "request body is larger than {limit} bytes (the proxy's {flag})"
        ))
    };
    if body.size_hint().lower() > limit as u64 {
        return Err(too_large());
    }
    let mut stream = body.into_data_stream();
    let mut read = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| ApiError::bad_request(format!("reading the request body failed: {e}")))?;
        if read.len() + chunk.len() > limit {
            return Err(too_large());
        }
        read.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(read))
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

//! Waiting on the upstream under the limits: every wait has a timeout and every buffered reply a
//! size cap, so an upstream that hangs or floods ends the request with an error naming what ran
//! out (and the flag that sets it) instead of holding the request, and its client, open forever.
//!
//! The connect timeout is the HTTP client's own (set where it is built, [`Upstream::new`]); the
//! rest are here: response headers within the first-byte timeout, each later piece of the body
//! within the idle timeout, a non-streamed reply within its size cap.
//!
//! Clients' requests ([`Upstream::send_bounded`]) go through hyper's client with its read buffer
//! capped at [`UPSTREAM_READ_BUFFER_BYTES`]: while a slow client holds up a stream, what the
//! engine sent meanwhile waits in the kernel, not in a buffer of hyper's that grows to ~400 KiB
//! per connection (its default, which reqwest does not let one set) — and in the kernel only as
//! much as the connection's receive buffer, `--socket-buffer-kib` (its autotuning grew it to
//! 6 MiB, and the engine's send buffer with it). The proxy's own calls (tokenize, warm-ups,
//! start-up checks) keep reqwest.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::http::header;
use futures_util::{Stream, StreamExt};

use crate::front::error::ApiError;
use crate::front::limits::Limits;

/// The upstream (vLLM): the HTTP client, its base URL, the API key agentrt sends it (clients'
/// keys are agentrt's, never forwarded) and the limits every wait on it runs under. Cheap to clone.
#[derive(Clone)]
pub struct Upstream(Arc<Inner>);

/// hyper's read buffer per upstream connection of a client's request: an upstream response head
/// must fit (vLLM's are a few hundred bytes; nginx gives an upstream's head 4–8 KiB), and a stalled stream holds at most this of the
/// engine's reply in the proxy. hyper's floor is 8 KiB.
pub const UPSTREAM_READ_BUFFER_BYTES: usize = 16 << 10;

type BoundedClient =
    hyper_util::client::legacy::Client<hyper_util::client::legacy::connect::HttpConnector, reqwest::Body>;

struct Inner {
    client: reqwest::Client,
    /// Clients' requests: hyper's client with its read buffer capped (the module's doc).
    bounded: BoundedClient,
    base: String,
    api_key: Option<String>,
    limits: Limits,
}

impl Upstream {
    /// The upstream at `base` (e.g. `http://127.0.0.1:8000`), sent `api_key` as a bearer token.
    pub fn new(base: &str, api_key: Option<String>, limits: Limits) -> Self {
        let client = reqwest::Client::builder()
            .connect_timeout(limits.upstream_connect_timeout)
            .build()
            .expect("a plain HTTP client builds");
        let mut connector = hyper_util::client::legacy::connect::HttpConnector::new();
        connector.set_connect_timeout(Some(limits.upstream_connect_timeout));
        connector.set_nodelay(true);
        // A stream stalled by its client leaves the engine's reply in the kernel: at most this
        // much on the proxy's side, and the engine's send buffer grows no further than the
        // window this allows (`--socket-buffer-kib`).
        connector.set_recv_buffer_size(limits.socket_buffer);
        let bounded = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .http1_max_buf_size(UPSTREAM_READ_BUFFER_BYTES)
            .build(connector);
        Self(Arc::new(Inner {
            client,
            bounded,
            base: base.to_string(),
            api_key,
            limits,
        }))
    }

    /// The base URL.
    pub fn base(&self) -> &str {
        &self.0.base
    }

    /// The base URL as logs and spans may show it: without credentials, query or fragment.
    pub fn shown(&self) -> String {
        agentrt_guards::shown_url::shown(&self.0.base)
    }

    /// The limits the proxy runs under (the upstream's timeouts and reply cap among them).
    pub fn limits(&self) -> &Limits {
        &self.0.limits
    }

    /// A POST of JSON to `path` on the upstream.
    pub fn post(&self, path: &str) -> reqwest::RequestBuilder {
        self.post_to(&self.0.base, path)
    }

    /// A POST of JSON to `path` on the server at `base` (one of several replicas).
    pub fn post_to(&self, base: &str, path: &str) -> reqwest::RequestBuilder {
        let builder = self
            .0
            .client
            .post(format!("{}{path}", base.trim_end_matches('/')))
            .header(header::CONTENT_TYPE, "application/json");
        self.authorized(builder)
    }

    /// A GET of `path` on the upstream.
    pub fn get(&self, path: &str) -> reqwest::RequestBuilder {
        let url = format!("{}{path}", self.0.base.trim_end_matches('/'));
        self.authorized(self.0.client.get(url))
    }

    /// A GET of `path` on the upstream, its body read under the reply cap: the body, or why
    /// not (unreachable, a status other than success, a reply too large) as one phrase.
    pub async fn get_body(&self, path: &str) -> Result<Bytes, String> {
        let reply = send(self.get(path), self.base(), self.limits())
            .await
            .map_err(|e| e.message)?;
        if !reply.status().is_success() {
            return Err(format!("GET {path} answered {}", reply.status()));
        }
        read_reply(reply, self.limits()).await.map_err(|e| e.message)
    }

    fn authorized(&self, builder: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.0.api_key {
            Some(key) => builder.bearer_auth(key),
            None => builder,
        }
    }
}

impl Upstream {
    /// Send a client's request (built on [`Self::post_to`]) to `upstream` and wait for the
    /// response headers, as [`send_checked`] does, through the client whose read buffer is
    /// capped ([`UPSTREAM_READ_BUFFER_BYTES`]).
    pub async fn send_bounded(
        &self,
        request: reqwest::RequestBuilder,
        upstream: &str,
    ) -> Result<reqwest::Response, (ApiError, bool)> {
        let limits = &self.0.limits;
        let shown = agentrt_guards::shown_url::shown(upstream);
        let unbuildable = |e: reqwest::Error| {
            let message = format!("upstream {shown}: the request could not be built: {}", e.without_url());
            (ApiError::upstream(message), false)
        };
        let request = request.build().map_err(unbuildable)?;
        let request = axum::http::Request::<reqwest::Body>::try_from(request).map_err(unbuildable)?;
        let waited = limits.upstream_first_byte_timeout;
        match tokio::time::timeout(waited, self.0.bounded.request(request)).await {
            Ok(Ok(response)) => Ok(reqwest::Response::from(response.map(reqwest::Body::wrap))),
            Ok(Err(e)) if e.is_connect() && timed_out(&e) => Err((connect_timeout(&shown, limits), false)),
            Ok(Err(e)) => Err((
                ApiError::upstream(format!("upstream {shown} unreachable: {}", causes(&e))),
                e.is_connect(),
            )),
            Err(_) => Err((first_byte_timeout(&shown, waited), false)),
        }
    }
}

/// Whether an error or one of its causes is a timeout.
fn timed_out(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(e);
    while let Some(e) = cause {
        if e.downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::TimedOut)
        {
            return true;
        }
        cause = e.source();
    }
    false
}

/// An error and its causes on one line (hyper's errors carry no URL to hide).
fn causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(e) = cause {
        text.push_str(": ");
        text.push_str(&e.to_string());
        cause = e.source();
    }
    text
}

fn connect_timeout(upstream: &str, limits: &Limits) -> ApiError {
    ApiError::upstream_timeout(format!(
        "upstream {upstream}: no connection within {} (--upstream-connect-timeout-ms)",
        ms(limits.upstream_connect_timeout)
    ))
}

fn first_byte_timeout(upstream: &str, waited: Duration) -> ApiError {
    ApiError::upstream_timeout(format!(
        "upstream {upstream} sent no response within {} (--upstream-first-byte-timeout-ms)",
        ms(waited)
    ))
}

/// Send a request and wait for the upstream's response headers.
pub async fn send(
    request: reqwest::RequestBuilder,
    upstream: &str,
    limits: &Limits,
) -> Result<reqwest::Response, ApiError> {
    send_checked(request, upstream, limits).await.map_err(|(e, _)| e)
}

/// As [`send`]; a failure says too whether the upstream refused the connection, so that nothing
/// of the request was sent (another replica may take it).
pub async fn send_checked(
    request: reqwest::RequestBuilder,
    upstream: &str,
    limits: &Limits,
) -> Result<reqwest::Response, (ApiError, bool)> {
    let waited = limits.upstream_first_byte_timeout;
    // Clients read these messages: the operator's URL is shown without its credentials, and
    // reqwest's own error without the URL it would quote whole.
    let upstream = agentrt_guards::shown_url::shown(upstream);
    match tokio::time::timeout(waited, request.send()).await {
        Ok(Ok(response)) => Ok(response),
        Ok(Err(e)) if e.is_connect() && e.is_timeout() => Err((connect_timeout(&upstream, limits), false)),
        Ok(Err(e)) => {
            let refused = e.is_connect();
            Err((
                ApiError::upstream(format!("upstream {upstream} unreachable: {}", e.without_url())),
                refused,
            ))
        }
        Err(_) => Err((first_byte_timeout(&upstream, waited), false)),
    }
}

/// The next piece of a response body (`None` at its end), waiting at most the idle timeout.
/// `when` says where in the response a failure happened, for the message ("mid-stream").
pub async fn next_chunk<S>(body: &mut S, limits: &Limits, when: &str) -> Option<Result<Bytes, ApiError>>
where
    S: Stream<Item = reqwest::Result<Bytes>> + Unpin,
{
    match tokio::time::timeout(limits.upstream_idle_timeout, body.next()).await {
        Ok(None) => None,
        Ok(Some(Ok(bytes))) => Some(Ok(bytes)),
        Ok(Some(Err(e))) => Some(Err(ApiError::upstream(format!(
            "upstream failed {when}: {}",
            e.without_url()
        )))),
        Err(_) => Some(Err(ApiError::upstream_timeout(format!(
            "upstream failed {when}: it sent nothing for {} (--upstream-idle-timeout-ms)",
            ms(limits.upstream_idle_timeout)
        )))),
    }
}

/// A whole non-streamed reply, piece by piece under the idle timeout, refused once it passes
/// the size cap (at once when its `Content-Length` says it will).
pub async fn read_reply(response: reqwest::Response, limits: &Limits) -> Result<Bytes, ApiError> {
    let cap = limits.max_upstream_reply_bytes;
    let too_large = || {
        ApiError::upstream(format!(
            "upstream reply is larger than {cap} bytes (--max-upstream-reply-bytes)"
        ))
    };
    if response.content_length().is_some_and(|n| n > cap as u64) {
        return Err(too_large());
    }
    let mut body = response.bytes_stream();
    let mut reply = Vec::new();
    while let Some(chunk) = next_chunk(&mut body, limits, "while answering").await {
        let chunk = chunk?;
        if reply.len() + chunk.len() > cap {
            return Err(too_large());
        }
        reply.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(reply))
}

fn ms(d: Duration) -> String {
    format!("{} ms", d.as_millis())
}

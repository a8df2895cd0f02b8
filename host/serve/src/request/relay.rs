//! Passing a streamed answer through event by event: usage noticed as it passes (the policy hears
//! it at the end; the usage chunk the proxy asked for on the client's behalf is dropped,
//! [`super::stream_usage`]), the stream cut with an SSE error event when the upstream fails, falls
//! silent or the request's key is revoked, and nothing pulled from the upstream for a client that
//! left.

use axum::body::Bytes;
use tracing::Instrument as _;

use super::finish::FinishGuard;
use super::state::revoked_error;
use super::stream_usage::{without_usage_chunk, SseFramer};
use crate::engine::upstream;
use crate::hints::tool_wait::ToolCalls;
use crate::identity::agent_api::{AgentApi, Usage};
use crate::tenant::Tenant;

/// How a streamed answer is relayed.
pub(super) struct RelayOptions {
    /// Whether the upstream answered with a success status.
    pub ok_status: bool,
    /// The API whose events carry the usage.
    pub api: AgentApi,
    /// Drop the usage chunk: the proxy asked for it, the client did not.
    pub strip_usage: bool,
}

/// Pass an SSE stream through as whole events, noticing the usage and the end. If the upstream
/// fails or falls silent (`--upstream-idle-timeout-ms`) mid-stream the client gets an SSE error
/// event, so it never mistakes a cut stream for a complete one.
pub(super) fn relay_stream(
    reply: reqwest::Response,
    guard: FinishGuard,
    options: RelayOptions,
    span: tracing::Span,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> {
    let RelayOptions {
        ok_status,
        api,
        strip_usage,
    } = options;
    let state = guard.state.clone();
    let revoked = guard.permit.revocation();
    let mut guard = Some(guard);
    let mut chunks = Box::pin(reply.bytes_stream());
    let mut events = Events {
        framer: SseFramer::default(),
        api,
        strip_usage,
        usage: None,
        tools: ToolCalls::default(),
    };
    async_stream(span, move |yield_| async move {
        let limits = state.upstream.limits();
        // On the relay's span (current here), as an i64: the OpenTelemetry layer would write an
        // unsigned number as text.
        let mut chunks_relayed = 0i64;
        loop {
            let next = tokio::select! {
                biased;
                // A revoked key's stream ends here, saying why; the upstream's rest is dropped.
                () = revoked.cancelled() => Some(Err(revoked_error(&state))),
                next = upstream::next_chunk(&mut chunks, limits, "mid-stream") => next,
            };
            let Some(chunk) = next else { break };
            match chunk {
                Ok(bytes) => {
                    let Some(bytes) = events.pass(bytes, guard.as_ref().map(|g| &*g.tenant)) else {
                        continue;
                    };
                    chunks_relayed += 1;
                    if !yield_(Ok(bytes)).await {
                        tracing::Span::current().record("chunks", chunks_relayed);
                        return; // client gone: dropping the guard reports it
                    }
                }
                Err(e) => {
                    tracing::Span::current().record("otel.status_code", "ERROR");
                    state.upstream_failed(&e);
                    let e = e.shaped(api.error_shape());
                    let _ = yield_(Ok(Bytes::from(format!("data: {}\n\n", e.body())))).await;
                    if let Some(g) = guard.take() {
                        g.finish(false, None);
                    }
                    return;
                }
            }
        }
        // The end of a stream flushes what is left as it came.
        if let Some(rest) = std::mem::take(&mut events.framer).finish() {
            if !yield_(Ok(rest)).await {
                return;
            }
            chunks_relayed += 1;
        }
        tracing::Span::current().record("chunks", chunks_relayed);
        if let Some(mut g) = guard.take() {
            if ok_status {
                g.lifecycle.tools = std::mem::take(&mut events.tools).finish();
            }
            g.finish(ok_status, events.usage);
        }
    })
}

/// A stream's whole events as they pass: the usage they carry, the stored response they name, and
/// what of them the client gets.
struct Events {
    framer: SseFramer,
    api: AgentApi,
    /// Drop the usage chunk the proxy asked for on the client's behalf.
    strip_usage: bool,
    /// The usage so far (streams report it in pieces: the Messages API input first, output last).
    usage: Option<Usage>,
    /// The tools the reply asks for, read as its events pass (only events that mention a tool
    /// are parsed).
    tools: ToolCalls,
}

impl Events {
    /// The whole events `bytes` completes, as the client gets them; `None`: nothing to send yet.
    fn pass(&mut self, bytes: Bytes, tenant: Option<&Tenant>) -> Option<Bytes> {
        let events = self.framer.push(bytes)?;
        if let Some(u) = self.api.usage_in_chunk(&events) {
            self.usage = Some(self.usage.unwrap_or_default().updated(u));
        }
        if let (Some(id), Some(tenant)) = (self.api.response_id_in_chunk(&events), tenant) {
            tenant.responses.record(&id);
        }
        self.tools.read_events(self.api, &events);
        if self.strip_usage {
            without_usage_chunk(events)
        } else {
            Some(events)
        }
    }
}

/// A minimal generator-style stream over a channel: the producer future sends items and learns
/// when the consumer is gone, so no upstream bytes are pulled for a client that left. The producer
/// runs in `span`.
fn async_stream<F, Fut>(
    span: tracing::Span,
    producer: F,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>>
where
    F: FnOnce(Box<dyn Fn(Result<Bytes, std::io::Error>) -> SendFuture + Send>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(8);
    let send = Box::new(move |item| {
        let tx = tx.clone();
        Box::pin(async move { tx.send(item).await.is_ok() }) as SendFuture
    });
    tokio::spawn(producer(send).instrument(span));
    futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) })
}

type SendFuture = std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send>>;

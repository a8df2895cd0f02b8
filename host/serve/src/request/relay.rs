//! Passing a streamed answer through event by event: usage noticed as it passes (the policy hears
//! it at the end; the usage chunk the proxy asked for on the client's behalf is dropped,
//! [`super::stream_usage`]), the stream cut with an SSE error event when the upstream fails, falls
//! silent or the request's key is revoked, and nothing pulled from the upstream for a client that
//! left.
//!
//! A client that reads slowly holds a bounded amount (docs/security.md): the relay queues at most
//! [`MAX_QUEUED_BYTES`] for it and pulls nothing more from the upstream until the client takes
//! some, and each chunk is copied out of the upstream connection's read buffer as it passes, so a
//! queued chunk of a few hundred bytes never keeps that whole buffer (up to ~400 KiB) alive.

use std::sync::Arc;

use axum::body::Bytes;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
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
                    // A copy of exactly its size: the slice of the read buffer is let go at once.
                    let bytes = Bytes::copy_from_slice(&bytes);
                    let Some(bytes) = events.pass(bytes, guard.as_ref().map(|g| &*g.tenant)) else {
                        continue;
                    };
                    if chunks_relayed == 0 {
                        if let Some(g) = guard.as_mut() {
                            g.first_piece();
                        }
                    }
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
        // The end of a stream flushes what is left (an event without its blank line), read and
        // filtered like every other event.
        if let Some(rest) = events.finish(guard.as_ref().map(|g| &*g.tenant)) {
            if !yield_(Ok(rest)).await {
                return;
            }
            chunks_relayed += 1;
        }
        tracing::Span::current().record("chunks", chunks_relayed);
        if let Some(mut g) = guard.take() {
            if ok_status {
                g.hints.tools = std::mem::take(&mut events.tools).finish();
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
        self.read(events, tenant)
    }

    /// What is left at the stream's end, as the client gets it; `None`: nothing.
    fn finish(&mut self, tenant: Option<&Tenant>) -> Option<Bytes> {
        let rest = std::mem::take(&mut self.framer).finish()?;
        self.read(rest, tenant)
    }

    /// Whole `events`: their usage, response id and tools noticed; what of them the client gets.
    fn read(&mut self, events: Bytes, tenant: Option<&Tenant>) -> Option<Bytes> {
        let usage = self.api.usage_in_chunk(&events);
        if let Some(u) = usage {
            self.usage = Some(self.usage.unwrap_or_default().updated(u));
        }
        if let (Some(id), Some(tenant)) = (self.api.response_id_in_chunk(&events), tenant) {
            tenant.responses.record(&id);
        }
        self.tools.read_events(self.api, &events);
        // Only events that carry usage can hold the usage chunk: the rest pass without a scan.
        if self.strip_usage && usage.is_some() {
            without_usage_chunk(events)
        } else {
            Some(events)
        }
    }
}

/// Bytes a stream's relay holds for its client before it stops pulling from the upstream. An
/// engine's events are a few hundred bytes, so this is slack for dozens; a chunk larger than it
/// still passes, alone.
pub const MAX_QUEUED_BYTES: usize = 16 << 10;

/// A minimal generator-style stream over a channel: the producer future sends items and learns
/// when the consumer is gone, so no upstream bytes are pulled for a client that left. What is
/// queued between them is bounded in bytes ([`MAX_QUEUED_BYTES`]), not in items: a send waits
/// until the client has taken enough. The producer runs in `span`.
fn async_stream<F, Fut>(
    span: tracing::Span,
    producer: F,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>>
where
    F: FnOnce(Box<dyn Fn(Result<Bytes, std::io::Error>) -> SendFuture + Send>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    // Items are bounded by the bytes' permits; the count only keeps empty items from piling up.
    let (tx, rx) = tokio::sync::mpsc::channel::<Queued>(256);
    let room = Arc::new(Semaphore::new(MAX_QUEUED_BYTES));
    let send = Box::new(move |item: Result<Bytes, std::io::Error>| {
        let (tx, room) = (tx.clone(), room.clone());
        Box::pin(async move {
            let size = item.as_ref().map_or(0, Bytes::len).min(MAX_QUEUED_BYTES);
            let Ok(permit) = room.acquire_many_owned(size as u32).await else {
                return false;
            };
            tx.send((item, permit)).await.is_ok()
        }) as SendFuture
    });
    tokio::spawn(producer(send).instrument(span));
    // The permit is dropped as the item is handed on: the bytes are the HTTP server's from then
    // on, which buffers at most `--max-header-bytes` of them per connection.
    futures_util::stream::unfold(
        rx,
        |mut rx| async move { rx.recv().await.map(|(item, _permit)| (item, rx)) },
    )
}

/// An item on its way to the client, with the room it takes in the queue.
type Queued = (Result<Bytes, std::io::Error>, OwnedSemaphorePermit);

type SendFuture = std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send>>;

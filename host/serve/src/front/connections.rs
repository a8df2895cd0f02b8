//! Accepting connections: the proxy's own accept loop, because `axum::serve` has neither a cap on
//! open connections nor a header-read timeout, and without them a client that opens connections
//! and never finishes a request (slowloris) holds a file descriptor each until the process runs
//! out and nobody — `/healthz` included — can connect.
//!
//! - At most [`Limits::max_connections`] are open at once. A connection accepted beyond
//!   that is closed at once: refused, never queued, so the descriptors held stay bounded.
//! - A connection must deliver a request's complete headers within
//!   [`Limits::header_read_timeout`] of being accepted, and of its previous response
//!   (an idle keep-alive connection is closed after the same time); hyper closes it otherwise.
//! - A connection buffers at most [`Limits::max_header_bytes`] of a request head (431 past it),
//!   so connections that never finish their headers hold at most that times the cap above; a
//!   head that arrived whole in one read is held to the same cap by its size ([`crate::front::head`]).
//! - Each connection's kernel send buffer is [`Limits::socket_buffer`]: a client that reads
//!   slowly makes the kernel hold at most that for it (the kernel doubles the figure for its own
//!   bookkeeping), not the 4 MiB its autotuning grows an unread connection's buffer to.
//! - When the open connections fall to half of their peak — a flood is gone — the allocator is
//!   asked to give the freed memory back ([`agentrt_guards::freed_memory`]).
//! - **Shutdown.** When `shutdown` resolves the loop stops accepting, tells every connection to
//!   close after its request in flight, and waits for them for at most
//!   [`Limits::drain_timeout`]; then it logs each request still in flight as cut
//!   ([`crate::front::in_flight`]), closes their connections and returns.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use agentrt_exposition::{Exposition, Report};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

use crate::front::in_flight::{self, InFlight};
use crate::front::limits::Limits;

/// Serve `app` on `listener` under `limits` until `shutdown` resolves, then stop accepting, let
/// requests in flight finish for at most [`Limits::drain_timeout`], cut what is left (logged) and
/// return once every connection has closed.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: &Limits,
    metrics: Arc<ConnectionMetrics>,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let in_flight = Arc::new(InFlight::default());
    let app = app
        .layer(axum::middleware::from_fn_with_state(
            limits.max_header_bytes,
            crate::front::head::cap_head,
        ))
        .layer(axum::middleware::from_fn_with_state(
            in_flight.clone(),
            in_flight::track,
        ));
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    // Connections watch this to start a graceful shutdown (finish the request, then close).
    let (closing_tx, closing_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // EMFILE and the like: back off instead of spinning; the connections that
                    // close meanwhile give descriptors back.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // The finished connections' tasks, let go as new ones come.
        while connections.try_join_next().is_some() {}
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            // Dropping the stream closes it: refused, not queued.
            metrics.refused.fetch_add(1, Relaxed);
            continue;
        };
        metrics.accepted.fetch_add(1, Relaxed);
        let open = metrics.open.fetch_add(1, Relaxed) + 1;
        metrics.peak_open.fetch_max(open, Relaxed);
        if let Some(bytes) = limits.socket_buffer {
            set_send_buffer(&stream, bytes);
        }
        let service = TowerToHyperService::new(app.clone());
        let metrics = metrics.clone();
        let header_read_timeout = limits.header_read_timeout;
        let max_header_bytes = limits.max_header_bytes;
        let mut closing = closing_rx.clone();
        connections.spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(header_read_timeout)
                .max_buf_size(max_header_bytes);
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            let mut connection = std::pin::pin!(connection);
            let result = tokio::select! {
                result = connection.as_mut() => result,
                // The loop sends once, after its last accept: any change means "closing".
                _ = closing.changed() => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(e) = result {
                if e.is_timeout() {
                    metrics.header_timeouts.fetch_add(1, Relaxed);
                }
                tracing::debug!(error = %e, "connection ended with an error");
            }
            metrics.closed();
            drop(slot);
        });
    }
    drop(listener);
    let _ = closing_tx.send(true);
    drain(connections, &slots, limits, &in_flight).await;
    Ok(())
}

/// Wait for the connections to finish their requests in flight, for at most the drain time; then
/// log what is left and cut it.
async fn drain(mut connections: JoinSet<()>, slots: &Semaphore, limits: &Limits, in_flight: &InFlight) {
    let started = std::time::Instant::now();
    let open = limits.max_connections - slots.available_permits();
    tracing::info!(
        connections = open,
        requests = in_flight.len(),
        drain_ms = limits.drain_timeout.as_millis() as u64,
        "shutting down: no new connections; requests in flight may finish within the drain time"
    );
    // Every connection holds a slot until it ends: having them all back means all are closed.
    let all_closed = slots.acquire_many(limits.max_connections as u32);
    if tokio::time::timeout(limits.drain_timeout, all_closed).await.is_ok() {
        tracing::info!(
            drained_ms = started.elapsed().as_millis() as u64,
            "shutdown: every request finished"
        );
        return;
    }
    in_flight.log_cut(started.elapsed());
    connections.abort_all();
    while connections.join_next().await.is_some() {}
}

/// Cap `stream`'s kernel send buffer at `bytes` (SO_SNDBUF; the kernel doubles it for its own
/// bookkeeping). A failure leaves the kernel's autotuning, logged: serving goes on.
fn set_send_buffer(stream: &TcpStream, bytes: usize) {
    if let Err(e) = socket2::SockRef::from(stream).set_send_buffer_size(bytes) {
        tracing::debug!(error = %e, bytes, "could not set a client connection's send buffer");
    }
}

/// The accept loop's counters ([`crate::front::connections`]).
#[derive(Default)]
pub struct ConnectionMetrics {
    /// Client connections open now (a gauge: up on accept, down when the connection ends).
    pub open: AtomicU64,
    /// Connections accepted and served since start.
    pub accepted: AtomicU64,
    /// Connections closed at once because [`Limits::max_connections`] were already open.
    pub refused: AtomicU64,
    /// Connections hyper closed for sending no complete request headers within
    /// [`Limits::header_read_timeout`].
    pub header_timeouts: AtomicU64,
    /// The most connections open since memory was last given back.
    peak_open: AtomicU64,
}

/// Below this many connections at their peak, what they held is not worth a heap walk.
const FLOOD_CONNECTIONS: u64 = 256;

impl ConnectionMetrics {
    /// A connection ended: when the open ones are down to half their peak after a flood, ask
    /// for the memory the flood held to be given back (one trim for a wave of closings).
    fn closed(&self) {
        let open = self.open.fetch_sub(1, Relaxed) - 1;
        let peak = self.peak_open.load(Relaxed);
        if peak >= FLOOD_CONNECTIONS
            && open <= peak / 2
            && self.peak_open.compare_exchange(peak, open, Relaxed, Relaxed).is_ok()
        {
            agentrt_guards::freed_memory::trim_soon();
        }
    }
}

impl Report for ConnectionMetrics {
    fn report(&self, out: &mut Exposition<'_>) -> fmt::Result {
        out.counter(
            "agentrt_proxy_connections_accepted_total",
            "Connections accepted.",
            self.accepted.load(Relaxed),
        )?;
        out.counter(
            "agentrt_proxy_connections_refused_total",
            "Connections closed at once: --max-connections were open.",
            self.refused.load(Relaxed),
        )?;
        out.counter(
            "agentrt_proxy_header_timeouts_total",
            "Connections closed for sending no complete request headers within --header-read-timeout-ms.",
            self.header_timeouts.load(Relaxed),
        )?;
        out.gauge(
            "agentrt_proxy_connections_open",
            "Client connections open.",
            self.open.load(Relaxed),
        )
    }
}

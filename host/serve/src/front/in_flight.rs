//! The requests in flight, as the accept loop's drain sees them: each from the moment its head is
//! read until its answer's last byte is handed on (or its connection goes). When a shutdown's
//! drain time runs out, the requests still here are the ones it cuts, and each is logged — its
//! method, route, age and whether its answer had begun — so an operator can tell what a
//! deploy interrupted.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use http_body::{Frame, SizeHint};

/// Cut requests logged one line each, at most; the rest are counted in the summary.
const MAX_LINES: usize = 100;

/// The requests in flight now.
#[derive(Default)]
pub struct InFlight {
    next: AtomicU64,
    requests: Mutex<HashMap<u64, Entry>>,
}

struct Entry {
    method: Method,
    /// The route's path, never its query (which may carry what a log must not).
    path: String,
    since: Instant,
    /// Its answer's head was given: it is being relayed (a stream, or a body being sent).
    answering: bool,
}

impl InFlight {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Entry>> {
        self.requests.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Requests in flight now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no request is in flight.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    fn begin(self: &Arc<Self>, request: &Request) -> Tracked {
        let id = self.next.fetch_add(1, Relaxed);
        let entry = Entry {
            method: request.method().clone(),
            path: request.uri().path().to_string(),
            since: Instant::now(),
            answering: false,
        };
        self.lock().insert(id, entry);
        Tracked {
            in_flight: self.clone(),
            id,
        }
    }

    /// Log every request still in flight as cut by the shutdown (after `drained` of drain time),
    /// one line each up to [`MAX_LINES`], then a summary; returns how many were cut.
    pub fn log_cut(&self, drained: Duration) -> usize {
        let mut cut: Vec<(Duration, String, bool)> = self
            .lock()
            .values()
            .map(|e| (e.since.elapsed(), format!("{} {}", e.method, e.path), e.answering))
            .collect();
        cut.sort_by_key(|c| std::cmp::Reverse(c.0));
        for (age, request, answering) in cut.iter().take(MAX_LINES) {
            let stage = if *answering {
                "while its answer was being sent"
            } else {
                "before its answer (its body being read, or the upstream awaited)"
            };
            tracing::warn!(
                request = %request,
                age_ms = age.as_millis() as u64,
                "cut at shutdown: the drain time (--drain-timeout-ms) ran out {stage}"
            );
        }
        tracing::warn!(
            cut = cut.len(),
            logged = cut.len().min(MAX_LINES),
            drained_ms = drained.as_millis() as u64,
            "shutdown: the drain time ran out; the requests still in flight were cut"
        );
        cut.len()
    }
}

/// One request's place in [`InFlight`]; dropping it takes the request out.
struct Tracked {
    in_flight: Arc<InFlight>,
    id: u64,
}

impl Tracked {
    fn answering(&self) {
        if let Some(entry) = self.in_flight.lock().get_mut(&self.id) {
            entry.answering = true;
        }
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.in_flight.lock().remove(&self.id);
    }
}

/// The layer on every route: the request is in flight until its answer's body is done.
pub async fn track(State(in_flight): State<Arc<InFlight>>, request: Request, next: Next) -> Response {
    let tracked = in_flight.begin(&request);
    let response = next.run(request).await;
    tracked.answering();
    response.map(|body| {
        Body::new(TrackedBody {
            inner: body,
            _tracked: tracked,
        })
    })
}

/// An answer's body that keeps its request in flight until it is done or dropped.
struct TrackedBody {
    inner: Body,
    _tracked: Tracked,
}

impl http_body::Body for TrackedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

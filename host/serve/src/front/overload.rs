//! Shedding what the proxy cannot serve in time: while its async workers run late — every core
//! busy, requests queued behind one another in its run queues — a new model request is answered
//! 503 with `Retry-After` at once, before its body is read, instead of joining a queue it would
//! leave only at the client's timeout.
//!
//! How late the workers run is measured, not guessed: a probe task asks to wake every
//! [`PROBE_EVERY`] and records how late it woke ([`SchedulingLag`]). An idle or busy-but-keeping-up
//! proxy wakes it within a millisecond or two; a saturated one only once the tasks queued ahead
//! of it have run — the very wait a new request would have. While two probes in a row wake later
//! than `--shed-lag-ms` the proxy sheds; as soon as one wakes on time again, it serves. Two, not
//! one: a process descheduled once (a busy machine's neighbour taking every core for a moment)
//! makes one probe late, and the requests that waited through that moment are not an overload. Health, metrics and the admin API are never
//! shed: an operator must be able to see and act on an overloaded proxy.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use agentrt_exposition::{Exposition, Report};

use crate::front::error::{ApiError, ErrorShape};

/// How often the probe asks to wake: 100 wakes a second cost nothing measurable, and a lag
/// worth shedding for (hundreds of milliseconds) is seen within one period of it starting.
pub const PROBE_EVERY: Duration = Duration::from_millis(10);

/// How late the proxy's async workers run: the latest probe's lateness, and the lesser of the
/// last two (what has lasted).
#[derive(Debug, Default)]
pub struct SchedulingLag {
    latest: AtomicU64,
    sustained: AtomicU64,
}

impl SchedulingLag {
    /// The lag measured by the latest probe.
    pub fn now(&self) -> Duration {
        Duration::from_micros(self.latest.load(Relaxed))
    }

    /// The lag both of the last two probes saw.
    pub fn sustained(&self) -> Duration {
        Duration::from_micros(self.sustained.load(Relaxed))
    }

    fn record(&self, late: Duration) {
        let late = late.as_micros() as u64;
        let previous = self.latest.swap(late, Relaxed);
        self.sustained.store(previous.min(late), Relaxed);
    }

    /// Start probing on the current runtime; the probe ends when the returned lag is dropped.
    pub fn start() -> Arc<Self> {
        let lag = Arc::new(Self::default());
        let weak: Weak<Self> = Arc::downgrade(&lag);
        tokio::spawn(async move {
            loop {
                let asked = Instant::now();
                tokio::time::sleep(PROBE_EVERY).await;
                let late = asked.elapsed().saturating_sub(PROBE_EVERY);
                match weak.upgrade() {
                    Some(lag) => lag.record(late),
                    None => return,
                }
            }
        });
        lag
    }
}

/// The shedding rule: a model request is refused while the lag is over `threshold`.
#[derive(Debug)]
pub struct Overload {
    lag: Arc<SchedulingLag>,
    threshold: Duration,
    shed: AtomicU64,
}

impl Overload {
    /// Shed past `threshold` of lag, measured by `lag`.
    pub fn new(lag: Arc<SchedulingLag>, threshold: Duration) -> Arc<Self> {
        Arc::new(Self {
            lag,
            threshold,
            shed: AtomicU64::new(0),
        })
    }

    /// The lag now, for `/metrics`.
    pub fn lag(&self) -> Duration {
        self.lag.now()
    }

    /// Requests shed so far.
    pub fn shed(&self) -> u64 {
        self.shed.load(Relaxed)
    }

    /// `Ok` to serve a request now; the 503 to answer instead while the proxy runs late.
    pub fn admit(&self) -> Result<(), ApiError> {
        let lag = self.lag.sustained();
        if lag <= self.threshold {
            return Ok(());
        }
        self.shed.fetch_add(1, Relaxed);
        Err(ApiError::unavailable(format!(
            "agentrt serve is overloaded: its workers run {} ms late (over --shed-lag-ms {}); \
             send the request again after Retry-After, or spread the load over more proxies",
            lag.as_millis(),
            self.threshold.as_millis()
        )))
    }
}

/// Requests shed and the lag now.
impl Report for Overload {
    fn report(&self, out: &mut Exposition<'_>) -> std::fmt::Result {
        out.counter(
            "agentrt_proxy_shed_total",
            "Model requests answered 503 at once because the proxy's workers ran later than --shed-lag-ms.",
            self.shed(),
        )?;
        out.gauge(
            "agentrt_proxy_scheduling_lag_seconds",
            "How late the proxy's async workers ran at the latest probe (every 10 ms).",
            self.lag().as_secs_f64(),
        )
    }
}

/// A rule that sheds new model requests while the proxy (or its machine) cannot serve them in
/// time: this module's lag, and the machine's TCP memory ([`crate::front::tcp_memory`]).
pub trait ShedRule: Send + Sync + 'static {
    /// `Ok` to serve a new model request now; the 503 to answer it with instead.
    fn admit(&self) -> Result<(), ApiError>;
}

impl ShedRule for Overload {
    fn admit(&self) -> Result<(), ApiError> {
        Overload::admit(self)
    }
}

/// The layer on the model routes, for any [`ShedRule`]: a shed request is answered before
/// anything else is done with it (no credential checked, no body read), in the error shape of the
/// API it called.
pub async fn shed<R: ShedRule>(State(rule): State<Arc<R>>, request: Request, next: Next) -> Response {
    match rule.admit() {
        Ok(()) => next.run(request).await,
        Err(e) => {
            let shape = if request.uri().path() == "/v1/messages" {
                ErrorShape::Anthropic
            } else {
                ErrorShape::OpenAi
            };
            e.shaped(shape).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocking the runtime's only worker is the overload itself, caused for real: the probe
    /// wakes late by about the block, the rule sheds, and serves again once a probe is on time.
    #[tokio::test(flavor = "current_thread")]
    async fn a_late_runtime_sheds_and_serves_again_once_on_time() {
        let overload = Overload::new(SchedulingLag::start(), Duration::from_millis(100));
        tokio::time::sleep(PROBE_EVERY * 3).await;
        assert!(overload.admit().is_ok(), "on time: lag {:?}", overload.lag());

        // Every task waits while this one holds the only worker; then the timer is read again
        // and the probe, due long ago, runs first (its next is 10 ms away when this wakes).
        let block = || async {
            std::thread::sleep(Duration::from_millis(300));
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        block().await;
        assert!(overload.lag() >= Duration::from_millis(150), "{:?}", overload.lag());
        assert!(overload.admit().is_ok(), "one late probe is a stall, not an overload");
        block().await;
        let refused = overload.admit().expect_err("shed while late");
        assert_eq!(refused.status, axum::http::StatusCode::SERVICE_UNAVAILABLE);
        assert!(refused.message.contains("--shed-lag-ms 100"), "{}", refused.message);
        let response = refused.into_response();
        assert!(response.headers().contains_key(axum::http::header::RETRY_AFTER));
        assert_eq!(overload.shed(), 1);
        assert!(overload.admit().is_err(), "still late: shed");

        tokio::time::sleep(PROBE_EVERY * 3).await;
        assert!(overload.admit().is_ok(), "on time again: lag {:?}", overload.lag());
    }
}

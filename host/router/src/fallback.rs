//! A router under a deadline, with session-sticky hashing behind it. No user request fails
//! because of the router: when it is not configured, unreachable, slower than the deadline, says
//! no, or names a replica agentrt does not know, the request goes where [`SessionSticky`] puts it.
//! After a failure the router is left alone for `retry_after` (requests meanwhile pay no
//! deadline), then asked again. Bookings are completed and released in the background; a lost
//! release costs the router only a stale load figure until its own request expiry.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::replica::ReplicaId;
use crate::router::{Route, RouteRequest, Router, RouterError};
use crate::sticky::SessionSticky;

/// Who placed a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decider {
    /// The router answered in time with an allowed replica.
    Router,
    /// The fallback, and why.
    Fallback(FallbackReason),
}

/// Why the fallback placed a request instead of the router.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FallbackReason {
    /// No router is configured.
    NoRouter,
    /// The router failed within the last `retry_after`.
    RouterResting,
    /// The router did not answer within the deadline.
    Deadline,
    /// The router answered with an error, or with a replica that is not allowed.
    RouterError,
}

/// A placed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routed {
    /// Where it goes, and the booking to complete and release (none from the fallback).
    pub route: Route,
    /// Who chose.
    pub decided_by: Decider,
}

/// Counters for `/metrics`. Each only grows.
#[derive(Debug, Default)]
pub struct RoutingCounters {
    /// Requests the router placed ([`FallbackRouter::route`]; peeks are not counted).
    pub by_router: AtomicU64,
    /// Requests the fallback placed, for any [`FallbackReason`].
    pub by_fallback: AtomicU64,
    /// Routes and peeks the router answered with an error or a replica the request may not use.
    pub router_errors: AtomicU64,
    /// Routes and peeks the router did not answer within the deadline.
    pub router_deadlines: AtomicU64,
    /// Booking updates (prefill complete, release) the router did not take within four
    /// deadlines.
    pub lifecycle_errors: AtomicU64,
}

/// A router asked under a deadline, with [`SessionSticky`] placing whatever it does not: what the
/// proxy asks where a request goes.
pub struct FallbackRouter {
    primary: Option<Arc<dyn Router>>,
    sticky: SessionSticky,
    deadline: Duration,
    retry_after: Duration,
    resting_until: Mutex<Option<Instant>>,
    /// What it has done so far.
    pub counters: RoutingCounters,
}

impl FallbackRouter {
    /// `primary` (none: every request goes to the fallback) asked under `deadline` per call, and
    /// left alone for `retry_after` after it fails; `sticky` places the rest.
    pub fn new(
        primary: Option<Arc<dyn Router>>,
        sticky: SessionSticky,
        deadline: Duration,
        retry_after: Duration,
    ) -> Self {
        Self {
            primary,
            sticky,
            deadline,
            retry_after,
            resting_until: Mutex::new(None),
            counters: RoutingCounters::default(),
        }
    }

    /// Place `request` (and book it, when the router answers).
    pub async fn route(&self, request: &RouteRequest) -> Result<Routed, RouterError> {
        match self.ask(request, |router| router.route(request)).await {
            Ok(route) => {
                self.counters.by_router.fetch_add(1, Relaxed);
                Ok(Routed {
                    route,
                    decided_by: Decider::Router,
                })
            }
            Err(reason) => {
                self.counters.by_fallback.fetch_add(1, Relaxed);
                Ok(Routed {
                    route: Route {
                        replica: self.sticky.choose(request)?,
                        booking: None,
                        cached_tokens: None,
                    },
                    decided_by: Decider::Fallback(reason),
                })
            }
        }
    }

    /// Where `request` would go now (for a warm-up), booking nothing.
    pub async fn peek(&self, request: &RouteRequest) -> Result<(ReplicaId, Decider), RouterError> {
        match self.ask(request, |router| router.peek(request)).await {
            Ok(replica) => Ok((replica, Decider::Router)),
            Err(reason) => Ok((self.sticky.choose(request)?, Decider::Fallback(reason))),
        }
    }

    /// Tell the router the booked request's prompt is processed (in the background).
    pub fn prefill_complete(self: &Arc<Self>, route: &Route) {
        self.lifecycle(route, |router, booking| router.prefill_complete(booking));
    }

    /// Release the booked request (in the background).
    pub fn release(self: &Arc<Self>, route: &Route) {
        self.lifecycle(route, |router, booking| router.release(booking));
    }

    fn lifecycle(
        self: &Arc<Self>,
        route: &Route,
        call: impl for<'a> FnOnce(&'a dyn Router, &'a str) -> crate::router::RouterFuture<'a, ()> + Send + 'static,
    ) {
        let (Some(booking), Some(_)) = (route.booking.clone(), &self.primary) else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let this = self.clone();
        runtime.spawn(async move {
            let router = this.primary.as_deref().expect("checked above");
            let done = tokio::time::timeout(this.deadline * 4, call(router, &booking)).await;
            if !matches!(done, Ok(Ok(()))) {
                this.counters.lifecycle_errors.fetch_add(1, Relaxed);
                tracing::debug!(booking, "the router did not take a booking's update: {done:?}");
            }
        });
    }

    async fn ask<'a, T>(
        &'a self,
        request: &RouteRequest,
        call: impl FnOnce(&'a dyn Router) -> crate::router::RouterFuture<'a, T>,
    ) -> Result<T, FallbackReason>
    where
        T: AnsweredReplica,
    {
        let Some(router) = self.primary.as_deref() else {
            return Err(FallbackReason::NoRouter);
        };
        if self
            .resting_until
            .lock()
            .expect("not poisoned")
            .is_some_and(|until| Instant::now() < until)
        {
            return Err(FallbackReason::RouterResting);
        }
        let answer = tokio::time::timeout(self.deadline, call(router)).await;
        let failure = match answer {
            Ok(Ok(value)) => {
                let allowed = request.hints.allowed.as_ref();
                if allowed.is_none_or(|ids| ids.contains(&value.replica())) {
                    return Ok(value);
                }
                self.counters.router_errors.fetch_add(1, Relaxed);
                tracing::warn!(replica = %value.replica(), "the router chose a replica this request may not use; using the fallback");
                return Err(FallbackReason::RouterError);
            }
            Ok(Err(e)) => {
                self.counters.router_errors.fetch_add(1, Relaxed);
                (FallbackReason::RouterError, e.to_string())
            }
            Err(_) => {
                self.counters.router_deadlines.fetch_add(1, Relaxed);
                (
                    FallbackReason::Deadline,
                    format!("no answer within {:?}", self.deadline),
                )
            }
        };
        let mut resting = self.resting_until.lock().expect("not poisoned");
        if resting.is_none_or(|until| Instant::now() >= until) {
            tracing::warn!(
                "router: {}; routing by session hash for the next {:?}",
                failure.1,
                self.retry_after
            );
        }
        *resting = Some(Instant::now() + self.retry_after);
        Err(failure.0)
    }
}

/// What a router's answer says about where the request goes.
trait AnsweredReplica {
    fn replica(&self) -> ReplicaId;
}

impl AnsweredReplica for Route {
    fn replica(&self) -> ReplicaId {
        self.replica
    }
}

impl AnsweredReplica for ReplicaId {
    fn replica(&self) -> ReplicaId {
        *self
    }
}

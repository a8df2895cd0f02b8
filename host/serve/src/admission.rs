//! The proxy's admission queue, for engines without priority scheduling
//! (`--upstream-max-in-flight N`): at most N requests are in flight upstream at once; later ones
//! wait here, and a freed place goes to the waiting request with the smallest demotion (its
//! session's `set-priority` from the tenant's slots when it arrived: a demoted session waits
//! behind everyone else), ties in arrival order — the order vLLM's priority scheduling uses.
//! Within that order a tenant's own waiting requests are ranked by its `admission` slot, when it
//! has one: the place that falls to the tenant of the first request in line goes to whichever of
//! that tenant's requests (at the same demotion) the slot scored highest as a `request` item, ties
//! to the earliest, and the passed-over request takes the chosen one's place in line. Scores never
//! compare across tenants — a tenant's policy reorders its own requests among the places they hold
//! and cannot move them ahead of another tenant's — and a slot that fails leaves arrival order. A request waits at
//! most `--upstream-max-wait-ms`; past it the client gets a 503 naming the flag, never a hang. A client that leaves while waiting gives up its place in line; one that leaves
//! after being admitted gives its place on.
//!
//! Warm-ups and the proxy's `/tokenize` calls do not take places: they are not user traffic.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::error::ApiError;

/// The largest demotion the queue tells apart (larger ones wait as this one).
const MAX_DEMOTION: u32 = 1_000_000;

/// What `/metrics` shows of the queue.
#[derive(Debug, Default)]
pub struct AdmissionMetrics {
    /// Requests that had to wait, and the sum of their waits (µs).
    pub waited: AtomicU64,
    pub wait_us_sum: AtomicU64,
    /// Requests refused after waiting `--upstream-max-wait-ms`.
    pub timeouts: AtomicU64,
    /// Requests whose client left while they waited.
    pub abandoned: AtomicU64,
    /// Admissions that went to a waiting request ahead of one that arrived earlier (a demotion
    /// at work).
    pub overtakes: AtomicU64,
}

struct Inner {
    in_flight: usize,
    /// Arrival number → the waiting request.
    waiting: BTreeMap<u64, Waiter>,
    next: u64,
}

struct Waiter {
    demotion: u32,
    /// Its place in line among requests of its demotion: its arrival number, or the place of a
    /// request of its tenant that was let through in its stead.
    place: u64,
    wake: oneshot::Sender<()>,
    tenant: Arc<str>,
    score: f32,
}

/// A request asking for a place: its session's demotion (0: not demoted), its tenant, and its
/// tenant's `admission` slot's score for it (higher goes first among the tenant's own; 0 without
/// a slot).
#[derive(Debug, Clone)]
pub struct Applicant {
    pub demotion: u32,
    pub tenant: Arc<str>,
    pub score: f32,
}

impl Applicant {
    /// An applicant of a tenant without an `admission` slot.
    pub fn unscored(demotion: u32, tenant: &str) -> Self {
        Self {
            demotion,
            tenant: tenant.into(),
            score: 0.0,
        }
    }
}

/// At most `max_in_flight` requests upstream; the rest wait in priority order.
pub struct AdmissionQueue {
    max_in_flight: usize,
    max_wait: Duration,
    inner: Mutex<Inner>,
    pub metrics: AdmissionMetrics,
}

/// A place upstream: given on to the next waiting request when dropped.
pub struct AdmissionPermit {
    queue: Arc<AdmissionQueue>,
}

impl Drop for AdmissionPermit {
    fn drop(&mut self) {
        self.queue.release();
    }
}

/// A request in line; leaving the line (a dropped future) gives up the place, or gives it on if
/// it was granted meanwhile.
struct InLine<'a> {
    queue: &'a Arc<AdmissionQueue>,
    key: u64,
    settled: bool,
}

impl Drop for InLine<'_> {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let granted = {
            let mut inner = self.queue.lock();
            inner.waiting.remove(&self.key).is_none()
        };
        if granted {
            // Granted while leaving: the place is ours to give on.
            self.queue.release();
        } else {
            self.queue.metrics.abandoned.fetch_add(1, Relaxed);
        }
    }
}

impl AdmissionQueue {
    pub fn new(max_in_flight: usize, max_wait: Duration) -> Arc<Self> {
        Arc::new(Self {
            max_in_flight: max_in_flight.max(1),
            max_wait,
            inner: Mutex::new(Inner {
                in_flight: 0,
                waiting: BTreeMap::new(),
                next: 0,
            }),
            metrics: AdmissionMetrics::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// (requests in flight, requests waiting) now.
    pub fn depth(&self) -> (usize, usize) {
        let inner = self.lock();
        (inner.in_flight, inner.waiting.len())
    }

    /// A place at once, if one is free: a caller that gets none scores its request, then waits
    /// in line with [`Self::admit`].
    pub fn try_admit(self: &Arc<Self>) -> Option<AdmissionPermit> {
        let mut inner = self.lock();
        (inner.in_flight < self.max_in_flight).then(|| {
            inner.in_flight += 1;
            AdmissionPermit { queue: self.clone() }
        })
    }

    /// A place upstream for `applicant`: at once when one is free, else after every waiting
    /// request with a smaller demotion and every earlier one with the same (of its own tenant,
    /// those its slot scored higher come first); a 503 after `max_wait`.
    pub async fn admit(self: &Arc<Self>, applicant: Applicant) -> Result<AdmissionPermit, ApiError> {
        let (key, mut rx) = {
            let mut inner = self.lock();
            if inner.in_flight < self.max_in_flight {
                inner.in_flight += 1;
                return Ok(AdmissionPermit { queue: self.clone() });
            }
            let key = inner.next;
            inner.next += 1;
            let (wake, rx) = oneshot::channel();
            // A non-finite score is the lowest, as everywhere a policy scores.
            let score = if applicant.score.is_finite() {
                applicant.score
            } else {
                f32::MIN
            };
            inner.waiting.insert(
                key,
                Waiter {
                    demotion: applicant.demotion.min(MAX_DEMOTION),
                    place: key,
                    wake,
                    tenant: applicant.tenant,
                    score,
                },
            );
            (key, rx)
        };
        let started = Instant::now();
        let mut line = InLine {
            queue: self,
            key,
            settled: false,
        };
        // `rx` outlives the wait: a grant sent as the wait runs out is received, not lost.
        let granted = tokio::time::timeout(self.max_wait, &mut rx).await;
        let waited = started.elapsed();
        let admitted = match granted {
            Ok(Ok(())) => true,
            // Out of time (a sender dropped unsent cannot happen: the queue holds it until it
            // sends). Granted between the timeout and this lock: the place is ours, use it.
            Ok(Err(_)) | Err(_) => self.lock().waiting.remove(&key).is_none(),
        };
        line.settled = true;
        self.metrics.waited.fetch_add(1, Relaxed);
        self.metrics.wait_us_sum.fetch_add(waited.as_micros() as u64, Relaxed);
        if admitted {
            Ok(AdmissionPermit { queue: self.clone() })
        } else {
            self.metrics.timeouts.fetch_add(1, Relaxed);
            Err(ApiError::unavailable(format!(
                "the upstream had {} requests in flight (--upstream-max-in-flight) and this one waited {} ms \
                 for a place (--upstream-max-wait-ms); try again later",
                self.max_in_flight,
                self.max_wait.as_millis()
            )))
        }
    }

    /// A place is free: it goes to the tenant of the first request in line, to the request of
    /// that tenant at that demotion its slot scored highest (ties: the earliest), which hands its
    /// own place in line to the first; with nobody waiting it is counted free. (A scan: the line
    /// is as long as the clients waiting.)
    fn release(&self) {
        let mut inner = self.lock();
        loop {
            let Some((first, demotion, tenant)) = inner
                .waiting
                .iter()
                .min_by_key(|(_, w)| (w.demotion, w.place))
                .map(|(&id, w)| (id, w.demotion, w.tenant.clone()))
            else {
                inner.in_flight = inner.in_flight.saturating_sub(1);
                return;
            };
            let chosen = inner
                .waiting
                .iter()
                .filter(|(_, w)| w.demotion == demotion && w.tenant == tenant)
                .max_by(|(_, a), (_, b)| a.score.total_cmp(&b.score).then(b.place.cmp(&a.place)))
                .map(|(&id, _)| id)
                .expect("the first request in line is among them");
            let waiter = inner.waiting.remove(&chosen).expect("chosen from the line");
            if let Some(passed_over) = inner.waiting.get_mut(&first) {
                passed_over.place = waiter.place;
            }
            if waiter.wake.send(()).is_ok() {
                if inner.waiting.keys().any(|&earlier| earlier < chosen) {
                    self.metrics.overtakes.fetch_add(1, Relaxed);
                }
                return;
            }
            // Its receiver is gone: the next one.
        }
    }

    /// The queue's series for `/metrics`.
    pub fn render(&self, out: &mut String) {
        use std::fmt::Write;
        let (in_flight, waiting) = self.depth();
        let m = &self.metrics;
        let _ = write!(
            out,
            "# HELP agentrt_proxy_admission_in_flight Requests upstream holding a place (--upstream-max-in-flight).\n\
             # TYPE agentrt_proxy_admission_in_flight gauge\nagentrt_proxy_admission_in_flight {in_flight}\n\
             # HELP agentrt_proxy_admission_queue_depth Requests waiting in the proxy for a place upstream.\n\
             # TYPE agentrt_proxy_admission_queue_depth gauge\nagentrt_proxy_admission_queue_depth {waiting}\n\
             # HELP agentrt_proxy_admission_waited_total Requests that waited for a place.\n\
             # TYPE agentrt_proxy_admission_waited_total counter\nagentrt_proxy_admission_waited_total {}\n\
             # HELP agentrt_proxy_admission_wait_seconds_total Time requests spent waiting for a place.\n\
             # TYPE agentrt_proxy_admission_wait_seconds_total counter\nagentrt_proxy_admission_wait_seconds_total {:.6}\n\
             # HELP agentrt_proxy_admission_timeouts_total Requests refused after --upstream-max-wait-ms.\n\
             # TYPE agentrt_proxy_admission_timeouts_total counter\nagentrt_proxy_admission_timeouts_total {}\n\
             # HELP agentrt_proxy_admission_abandoned_total Requests whose client left while they waited.\n\
             # TYPE agentrt_proxy_admission_abandoned_total counter\nagentrt_proxy_admission_abandoned_total {}\n\
             # HELP agentrt_proxy_admission_overtakes_total Places given to a request ahead of an earlier one (a demotion at work).\n\
             # TYPE agentrt_proxy_admission_overtakes_total counter\nagentrt_proxy_admission_overtakes_total {}\n",
            m.waited.load(Relaxed),
            m.wait_us_sum.load(Relaxed) as f64 / 1e6,
            m.timeouts.load(Relaxed),
            m.abandoned.load(Relaxed),
            m.overtakes.load(Relaxed),
        );
    }
}

/// The admission queue's flags.
#[derive(clap::Args, Debug, Clone)]
pub struct AdmissionArgs {
    /// At most this many requests in flight upstream at once; later ones wait in the proxy and
    /// are let through least-demoted first (the tenants' slots' `set-priority`), then in arrival
    /// order, a tenant's own reordered by its `admission` slot's scores — for engines without
    /// priority scheduling (docs/policy-slots.md). 0 = no limit.
    #[arg(long, default_value_t = 0)]
    pub upstream_max_in_flight: usize,
    /// How long a request may wait for a place (--upstream-max-in-flight) before it is answered
    /// 503.
    #[arg(long, default_value_t = 30_000)]
    pub upstream_max_wait_ms: u64,
}

impl AdmissionArgs {
    /// The queue the flags ask for, if any. Several replicas (`--replica`) are not limited yet.
    pub fn queue(&self, replicas: bool) -> anyhow::Result<Option<Arc<AdmissionQueue>>> {
        if self.upstream_max_in_flight == 0 {
            return Ok(None);
        }
        anyhow::ensure!(
            !replicas,
            "--upstream-max-in-flight limits one upstream; with --replica it is not supported yet"
        );
        anyhow::ensure!(self.upstream_max_wait_ms > 0, "--upstream-max-wait-ms must be above 0");
        Ok(Some(AdmissionQueue::new(
            self.upstream_max_in_flight,
            Duration::from_millis(self.upstream_max_wait_ms),
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With the one place held, `line` queues one after another (each in line before the next);
    /// then the place is freed: the names in the order they were let through.
    async fn order_let_through(queue: &Arc<AdmissionQueue>, line: Vec<(&'static str, Applicant)>) -> Vec<&'static str> {
        let held = queue.admit(Applicant::unscored(0, "holder")).await.unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for (name, applicant) in line {
            let (q, order) = (queue.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let permit = q.admit(applicant).await.unwrap();
                order.lock().unwrap().push(name);
                drop(permit);
            }));
            while queue.depth().1 < tasks.len() {
                tokio::task::yield_now().await;
            }
        }
        drop(held);
        for t in tasks {
            t.await.unwrap();
        }
        let order = order.lock().unwrap().clone();
        order
    }

    fn scored(demotion: u32, tenant: &str, score: f32) -> Applicant {
        Applicant {
            demotion,
            tenant: tenant.into(),
            score,
        }
    }

    #[tokio::test]
    async fn a_freed_place_goes_to_the_least_demoted_then_the_earliest() {
        let queue = AdmissionQueue::new(1, Duration::from_secs(5));
        let line = vec![
            ("heavy-1", Applicant::unscored(10, "t")),
            ("heavy-2", Applicant::unscored(10, "t")),
            ("light", Applicant::unscored(0, "t")),
        ];
        assert_eq!(order_let_through(&queue, line).await, ["light", "heavy-1", "heavy-2"]);
        assert_eq!(queue.depth(), (0, 0));
        assert_eq!(queue.metrics.overtakes.load(Relaxed), 1, "light went ahead of two");
    }

    #[tokio::test]
    async fn a_request_waits_no_longer_than_the_limit_and_a_leaver_gives_up_its_place() {
        let queue = AdmissionQueue::new(1, Duration::from_millis(50));
        let held = queue.admit(Applicant::unscored(0, "t")).await.unwrap();
        let e = queue
            .admit(Applicant::unscored(0, "t"))
            .await
            .err()
            .expect("no place within 50 ms");
        assert_eq!(e.status, axum::http::StatusCode::SERVICE_UNAVAILABLE);
        assert!(e.message.contains("--upstream-max-wait-ms"), "{}", e.message);
        // A waiter dropped while in line leaves no trace.
        let leaving = tokio::time::timeout(Duration::from_millis(5), queue.admit(Applicant::unscored(0, "t"))).await;
        assert!(leaving.is_err());
        assert_eq!(queue.depth(), (1, 0));
        drop(held);
        assert_eq!(queue.depth(), (0, 0));
        let _again = queue.admit(Applicant::unscored(0, "t")).await.unwrap();
        assert_eq!(queue.metrics.timeouts.load(Relaxed), 1);
        assert_eq!(queue.metrics.abandoned.load(Relaxed), 1);
    }

    #[tokio::test]
    async fn a_tenants_slot_orders_its_own_requests_but_never_another_tenants() {
        let queue = AdmissionQueue::new(1, Duration::from_secs(5));
        // In line: alpha's heavy call, beta's call, alpha's light call (alpha's slot scores the
        // light session higher), a demoted alpha call with the best score of all.
        let line = vec![
            ("alpha-heavy", scored(0, "alpha", -500.0)),
            ("beta", scored(0, "beta", 0.0)),
            ("alpha-light", scored(0, "alpha", -10.0)),
            ("alpha-demoted", scored(10, "alpha", 1e9)),
        ];
        // Alpha's turn (its heavy call was first in line) goes to its light call, and the heavy
        // call takes the light one's place: behind beta, which keeps its own; the demotion still
        // sends the best score last.
        assert_eq!(
            order_let_through(&queue, line).await,
            ["alpha-light", "beta", "alpha-heavy", "alpha-demoted"]
        );
    }
}

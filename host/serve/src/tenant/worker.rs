//! Each tenant's policy runs on a thread of its own, behind a bounded queue.
//!
//! A policy call may take up to its deadline (20 ms by default), and a failing one a restart on
//! top. Made on the proxy's async workers, such calls hold the threads every other tenant's
//! requests need: before this module, bob's p50 went from 2.5 ms to 3.9–18.8 s while alice's
//! policy looped. So a request never calls a policy; it hands the call to its tenant's worker:
//!
//! - `observe` is fire-and-forget. When the queue is full the events are dropped and counted:
//!   the policy learns less, and only this tenant's policy; the request is not delayed. Events
//!   that queued while the policy was busy go to it in one call (up to [`MAX_BATCH_EVENTS`], and
//!   as many as it gets through in about [`BATCH_CALL_BUDGET`]): under load a call — its entry
//!   into the sandbox, its deadline clock, its span — is paid per batch, not per request. Under
//!   steady traffic the thread waits [`GATHER_WAIT`] after waking for the batch to form, so that
//!   it wakes per batch too, not per request.
//! - `act` is asked for at most once at a time per tenant (requests that find one queued or
//!   running do not queue another: its answer covers them) and answered through a one-shot
//!   channel the warm-up task awaits.
//!
//! One thread per tenant keeps each tenant's calls in the order its requests made them, and a
//! slow tenant costs only its own thread — at most `--policy-cpu-ms-per-s` of it: past that budget
//! its events are dropped and its `act` answers nothing (both counted) until the budget refills. `rank`, which the engine needs within milliseconds,
//! does not queue behind these: the eviction service calls the policy directly.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TryRecvError, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use tracing::Span;

use agentrt_runtime::types::{Event, SideEffect};
use agentrt_runtime::{PolicyError, PolicyHandle};

use crate::tenant::quotas::{LiveQuotas, RateBudget};

/// Jobs a tenant's worker holds at most; what comes beyond is dropped and counted.
pub const DEFAULT_QUEUE_JOBS: usize = 1024;

/// Most events one `observe` call carries when queued requests' events are taken together.
pub const MAX_BATCH_EVENTS: usize = 1024;

/// About how long one batched `observe` call may take: a tenth of the default call deadline
/// (20 ms), so a batch never makes a slow policy miss its deadline where single requests would
/// not. The batch's size follows from the policy's measured time per event.
pub const BATCH_CALL_BUDGET: Duration = Duration::from_millis(2);

/// Under steady traffic the worker waits this long after waking for an `observe`, so that the
/// requests arriving meanwhile join its batch. Draining the queue faster than requests fill it,
/// it otherwise woke for nearly every request — at `lru`'s ceiling (~15,000 req/s) a context
/// switch per request was ~12 % of the proxy's CPU, the thread's work itself ~1 %. Events are
/// fire-and-forget, so a policy hears them up to this much later; an `act` already queued is
/// not delayed, and a worker that was idle longer than this (light traffic) does not wait at all.
pub const GATHER_WAIT: Duration = Duration::from_millis(1);

/// A job and the span of the request that queued it: the call's own span is its child, so an
/// exported trace shows the policy calls a request caused, though they run after it on this
/// thread.
enum Job {
    Observe(Vec<Event>, Span),
    Act(oneshot::Sender<Result<Vec<SideEffect>, PolicyError>>, Span),
}

/// What a worker did, for `/metrics`.
#[derive(Debug, Default)]
pub struct WorkerStats {
    /// Jobs waiting or running now.
    queued: AtomicU64,
    /// Events given to the policy.
    observed: AtomicU64,
    /// `observe` calls those events took (fewer than the requests that queued them, under load).
    observe_calls: AtomicU64,
    /// Events dropped because the queue was full.
    dropped: AtomicU64,
    /// `observe` calls the policy failed (its handle logs and contains each).
    failed: AtomicU64,
    /// Events dropped and `act` calls skipped because the tenant's policy spent its time budget.
    throttled: AtomicU64,
}

impl WorkerStats {
    /// Jobs waiting or running now.
    pub fn queued(&self) -> u64 {
        self.queued.load(Relaxed)
    }
    /// Events given to the policy since start.
    pub fn observed(&self) -> u64 {
        self.observed.load(Relaxed)
    }
    /// `observe` calls made since start: each carries the events of one or more jobs.
    pub fn observe_calls(&self) -> u64 {
        self.observe_calls.load(Relaxed)
    }
    /// Events dropped since start because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Relaxed)
    }
    /// `observe` calls the policy failed since start.
    pub fn failed(&self) -> u64 {
        self.failed.load(Relaxed)
    }
    /// Events dropped and `act` calls skipped since start because the tenant's policy had spent
    /// its time budget (`policy_cpu_ms_per_s`).
    pub fn throttled(&self) -> u64 {
        self.throttled.load(Relaxed)
    }
}

/// The thread that makes one tenant's policy calls, and the queue in front of it. Dropping the
/// worker lets its thread finish the queue and exit.
pub struct PolicyWorker {
    jobs: SyncSender<Job>,
    /// An `act` is queued behind every event queued so far: another request need not queue one.
    act_pending: Arc<AtomicBool>,
    stats: Arc<WorkerStats>,
}

impl PolicyWorker {
    /// Start the worker of `tenant`'s `policy`, holding at most `queue_jobs` jobs, within the
    /// tenant's `quotas` (its policy time per second: read before every call, so a reload
    /// changes it at once).
    pub fn spawn(
        tenant: &str,
        policy: Arc<PolicyHandle>,
        queue_jobs: usize,
        quotas: Arc<LiveQuotas>,
    ) -> std::io::Result<Self> {
        Self::spawn_batching(tenant, policy, queue_jobs, quotas, MAX_BATCH_EVENTS)
    }

    /// [`Self::spawn`] with at most `max_batch_events` events per `observe` call (1: one job's
    /// events per call, as before batching — the benchmark's baseline).
    pub fn spawn_batching(
        tenant: &str,
        policy: Arc<PolicyHandle>,
        queue_jobs: usize,
        quotas: Arc<LiveQuotas>,
        max_batch_events: usize,
    ) -> std::io::Result<Self> {
        let (jobs, queue) = sync_channel::<Job>(queue_jobs.max(1));
        let act_pending = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(WorkerStats::default());
        let thread = WorkerThread {
            tenant: tenant.to_string(),
            policy,
            act_pending: act_pending.clone(),
            stats: stats.clone(),
            budget: RateBudget::new(f64::from(quotas.get().policy_cpu_ms_per_s)),
            quotas,
            batch: BatchSize::up_to(max_batch_events),
        };
        std::thread::Builder::new()
            .name(format!("policy-{tenant}"))
            .spawn(move || thread.run(queue))?;
        Ok(Self {
            jobs,
            act_pending,
            stats,
        })
    }

    /// What the worker has done so far, for `/metrics`.
    pub fn stats(&self) -> &WorkerStats {
        &self.stats
    }

    /// Queue `events` for the policy; never waits. False if they were dropped (queue full).
    pub fn observe(&self, events: Vec<Event>) -> bool {
        let n = events.len() as u64;
        if self.enqueue(Job::Observe(events, Span::current())) {
            // An `act` still queued sits ahead of these events and will not see them, so it
            // cannot answer for them: the next `act()` queues a new one behind them. (Without
            // this a request's finish could be heard only by the *next* request's act: a
            // session over its budget got one call more than it should.)
            self.act_pending.store(false, Relaxed);
            true
        } else {
            self.stats.dropped.fetch_add(n, Relaxed);
            false
        }
    }

    /// Ask the policy for side effects. `None` when no new `act` was queued: one is already
    /// queued behind every event queued so far (its answer serves this request too), or the
    /// queue is full.
    pub fn act(&self) -> Option<oneshot::Receiver<Result<Vec<SideEffect>, PolicyError>>> {
        if self.act_pending.swap(true, Relaxed) {
            return None;
        }
        let (reply, answer) = oneshot::channel();
        if self.enqueue(Job::Act(reply, Span::current())) {
            Some(answer)
        } else {
            self.act_pending.store(false, Relaxed);
            None
        }
    }

    fn enqueue(&self, job: Job) -> bool {
        // Counted before sending: the thread may take the job before `try_send` returns.
        self.stats.queued.fetch_add(1, Relaxed);
        match self.jobs.try_send(job) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.stats.queued.fetch_sub(1, Relaxed);
                false
            }
        }
    }
}

/// The worker's thread: takes jobs in order and makes the calls, within the time budget.
struct WorkerThread {
    tenant: String,
    policy: Arc<PolicyHandle>,
    act_pending: Arc<AtomicBool>,
    stats: Arc<WorkerStats>,
    /// Milliseconds of policy calls left this second. Calls are CPU-bound, so their wall time
    /// is their CPU time.
    budget: RateBudget,
    quotas: Arc<LiveQuotas>,
    batch: BatchSize,
}

/// Events observed together: the events of one or more queued jobs, the span of the first, and
/// the job that ended the batch (an `act`, which must see them first) if one did.
struct Batch {
    events: Vec<Event>,
    parent: Span,
    jobs: u64,
    next: Option<Job>,
}

impl WorkerThread {
    fn run(mut self, queue: Receiver<Job>) {
        let mut next = None;
        // When the last batch's call ended: a job arriving within GATHER_WAIT of it means steady
        // traffic, worth waiting for more.
        let mut last_end: Option<Instant> = None;
        while let Some(job) = next.take().or_else(|| queue.recv().ok()) {
            match job {
                Job::Observe(events, parent) => {
                    let limit = self.batch.events();
                    // Not when a whole batch is queued already: waiting would only take time
                    // from a busy policy. (Jobs, not events: a job holds at least one event.)
                    let short = self.stats.queued.load(Relaxed) < limit as u64;
                    if short && last_end.is_some_and(|end| end.elapsed() < GATHER_WAIT) {
                        std::thread::sleep(GATHER_WAIT);
                    }
                    let batch = gather(&queue, events, parent, limit);
                    next = batch.next;
                    self.observe(batch.events, &batch.parent, batch.jobs);
                    last_end = Some(Instant::now());
                }
                Job::Act(reply, parent) => self.act(reply, &parent),
            }
        }
    }
}

/// `events` and the events of the observe jobs queued behind them, until the batch holds `limit`
/// events; an `act` found behind them ends the batch (it is answered after them, in order).
fn gather(queue: &Receiver<Job>, mut events: Vec<Event>, parent: Span, limit: usize) -> Batch {
    {
        let mut jobs = 1;
        while events.len() < limit {
            match queue.try_recv() {
                Ok(Job::Observe(more, _)) => {
                    events.extend(more);
                    jobs += 1;
                }
                Ok(act) => {
                    return Batch {
                        events,
                        parent,
                        jobs,
                        next: Some(act),
                    }
                }
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        Batch {
            events,
            parent,
            jobs,
            next: None,
        }
    }
}

impl WorkerThread {
    /// One `observe` call with the events of `jobs` queued jobs.
    fn observe(&mut self, events: Vec<Event>, parent: &Span, jobs: u64) {
        let within_budget = self.within_budget();
        let started = Instant::now();
        if !within_budget {
            self.stats.throttled.fetch_add(events.len() as u64, Relaxed);
        } else {
            let _span = tracing::info_span!(parent: parent, "policy.observe", tenant = %self.tenant, policy = %self.policy.label(), events = events.len() as i64, requests = jobs as i64).entered();
            self.stats.observed.fetch_add(events.len() as u64, Relaxed);
            self.stats.observe_calls.fetch_add(1, Relaxed);
            match self.policy.observe(&events) {
                Ok(()) => self.batch.measured(events.len(), started.elapsed()),
                Err(e) => {
                    self.stats.failed.fetch_add(1, Relaxed);
                    // A suspended policy was reported once when its circuit opened.
                    if !e.is_circuit_open() {
                        tracing::warn!(tenant = %self.tenant, error = %e, "policy observe failed; requests continue");
                    }
                }
            }
        }
        self.done(started, jobs);
    }

    fn act(&mut self, reply: oneshot::Sender<Result<Vec<SideEffect>, PolicyError>>, parent: &Span) {
        let within_budget = self.within_budget();
        let started = Instant::now();
        let _span = tracing::info_span!(parent: parent, "policy.act", tenant = %self.tenant, policy = %self.policy.label(), within_budget).entered();
        // Cleared before the call: a request arriving during it queues the next `act`, which
        // will see its events.
        self.act_pending.store(false, Relaxed);
        let answer = if within_budget {
            self.policy.act()
        } else {
            self.stats.throttled.fetch_add(1, Relaxed);
            Ok(Vec::new())
        };
        // The warm-up task may have gone (shutdown); nothing to tell then.
        let _ = reply.send(answer);
        self.done(started, 1);
    }

    fn within_budget(&mut self) -> bool {
        self.budget.available(f64::from(self.quotas.get().policy_cpu_ms_per_s))
    }

    /// A call (or its skipping) of `jobs` jobs took since `started`.
    fn done(&mut self, started: Instant, jobs: u64) {
        self.budget.spend(started.elapsed().as_secs_f64() * 1000.0);
        // Counted until done: zero means the policy has been given everything.
        self.stats.queued.fetch_sub(jobs, Relaxed);
    }
}

/// How many events a batch may hold: as many as the policy observes in about
/// [`BATCH_CALL_BUDGET`], by its time per event so far (an average that follows the last calls),
/// between 1 and `max` ([`MAX_BATCH_EVENTS`]). Before the first measured call, one job's events.
#[derive(Debug)]
struct BatchSize {
    max: usize,
    nanos_per_event: Option<f64>,
}

impl Default for BatchSize {
    fn default() -> Self {
        Self::up_to(MAX_BATCH_EVENTS)
    }
}

impl BatchSize {
    fn up_to(max: usize) -> Self {
        Self {
            max: max.max(1),
            nanos_per_event: None,
        }
    }

    fn events(&self) -> usize {
        match self.nanos_per_event {
            None => 1,
            Some(ns) => ((BATCH_CALL_BUDGET.as_nanos() as f64 / ns.max(1.0)) as usize).clamp(1, self.max),
        }
    }

    fn measured(&mut self, events: usize, took: Duration) {
        if events == 0 {
            return;
        }
        let ns = took.as_nanos() as f64 / events as f64;
        // Weighted to the recent calls, so a policy that slows down (a bigger model) gets
        // smaller batches within a few calls.
        self.nanos_per_event = Some(match self.nanos_per_event {
            None => ns,
            Some(old) => 0.75 * old + 0.25 * ns,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentrt_runtime::types::{EndReason, SessionEnd};

    /// `n` events, told apart by their session: `first`, `first + 1`, …
    fn events(first: u64, n: u64) -> Vec<Event> {
        (first..first + n)
            .map(|session| {
                Event::SessionEnd(SessionEnd {
                    session,
                    reason: EndReason::Closed,
                    at_us: 0,
                })
            })
            .collect()
    }

    fn sessions(events: &[Event]) -> Vec<u64> {
        events
            .iter()
            .map(|e| match e {
                Event::SessionEnd(end) => end.session,
                _ => unreachable!("only session ends are queued"),
            })
            .collect()
    }

    #[test]
    fn queued_observe_jobs_are_taken_together_in_order_until_an_act() {
        let (jobs, queue) = sync_channel(16);
        for first in [2, 4, 6] {
            jobs.try_send(Job::Observe(events(first, 2), Span::none())).unwrap();
        }
        let (reply, _answer) = oneshot::channel();
        jobs.try_send(Job::Act(reply, Span::none())).unwrap();
        jobs.try_send(Job::Observe(events(8, 2), Span::none())).unwrap();

        let batch = gather(&queue, events(0, 2), Span::none(), MAX_BATCH_EVENTS);
        assert_eq!(sessions(&batch.events), [0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(batch.jobs, 4);
        assert!(
            matches!(batch.next, Some(Job::Act(..))),
            "the act ends the batch, after its events"
        );
        // The observe behind the act is the next batch's.
        assert!(matches!(queue.try_recv(), Ok(Job::Observe(..))));
    }

    #[test]
    fn a_batch_stops_once_it_holds_its_limit() {
        let (jobs, queue) = sync_channel(16);
        for first in [2, 4, 6] {
            jobs.try_send(Job::Observe(events(first, 2), Span::none())).unwrap();
        }
        let batch = gather(&queue, events(0, 2), Span::none(), 3);
        assert_eq!(sessions(&batch.events), [0, 1, 2, 3]);
        assert_eq!(batch.jobs, 2);
        assert!(batch.next.is_none());
        let batch = gather(&queue, events(10, 1), Span::none(), 1);
        assert_eq!(batch.jobs, 1, "a limit of one takes no other job");
    }

    #[test]
    fn the_batch_size_follows_the_policys_time_per_event() {
        let mut size = BatchSize::default();
        assert_eq!(size.events(), 1, "one job's events until a call was measured");
        size.measured(100, Duration::from_micros(100)); // 1 µs per event
        assert_eq!(size.events(), 2_000.min(MAX_BATCH_EVENTS));
        let mut slow = BatchSize::default();
        slow.measured(10, Duration::from_millis(50)); // 5 ms per event: one job at a time
        assert_eq!(slow.events(), 1);
        let mut middling = BatchSize::default();
        middling.measured(10, Duration::from_micros(100)); // 10 µs per event
        assert_eq!(middling.events(), 200);
        // A policy that slows down gets smaller batches within a few calls.
        for _ in 0..8 {
            middling.measured(10, Duration::from_millis(1));
        }
        assert!(middling.events() < 40, "{}", middling.events());
    }
}

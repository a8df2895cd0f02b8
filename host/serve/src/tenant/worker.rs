//! Each tenant's policy runs on a thread of its own, behind a bounded queue.
//!
//! A policy call may take up to its deadline (20 ms by default), and a failing one a restart on
//! top. Made on the proxy's async workers, such calls hold the threads every other tenant's
//! requests need: before this module, bob's p50 went from 2.5 ms to 3.9–18.8 s while alice's
//! policy looped. So a request never calls a policy; it hands the call to its tenant's worker:
//!
//! - `observe` is fire-and-forget. When the queue is full the events are dropped and counted:
//!   the policy learns less, and only this tenant's policy; the request is not delayed.
//! - `act` is asked for at most once at a time per tenant (requests that find one queued or
//!   running do not queue another: its answer covers them) and answered through a one-shot
//!   channel the warm-up task awaits.
//!
//! One thread per tenant keeps each tenant's calls in the order its requests made them, and a
//! slow tenant costs only its own thread — at most `--policy-cpu-ms-per-s` of it: past that budget
//! its events are dropped and its `act` answers nothing (both counted) until the budget refills. `rank`, which the engine needs within milliseconds,
//! does not queue behind these: the eviction service calls the policy directly.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::oneshot;
use tracing::Span;

use agentrt_runtime::types::{Event, SideEffect};
use agentrt_runtime::{PolicyError, PolicyHandle};

use crate::tenant::quotas::{LiveQuotas, RateBudget};

/// Jobs a tenant's worker holds at most; what comes beyond is dropped and counted.
pub const DEFAULT_QUEUE_JOBS: usize = 1024;

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
}

impl WorkerThread {
    fn run(mut self, queue: Receiver<Job>) {
        for job in queue {
            let within_budget = self.budget.available(f64::from(self.quotas.get().policy_cpu_ms_per_s));
            let started = Instant::now();
            match job {
                Job::Observe(events, _) if !within_budget => {
                    self.stats.throttled.fetch_add(events.len() as u64, Relaxed);
                }
                Job::Observe(events, parent) => {
                    let _span = tracing::info_span!(parent: &parent, "policy.observe", tenant = %self.tenant, policy = %self.policy.label(), events = events.len() as i64).entered();
                    self.stats.observed.fetch_add(events.len() as u64, Relaxed);
                    if let Err(e) = self.policy.observe(&events) {
                        self.stats.failed.fetch_add(1, Relaxed);
                        // A suspended policy was reported once when its circuit opened.
                        if !e.is_circuit_open() {
                            tracing::warn!(tenant = %self.tenant, error = %e, "policy observe failed; requests continue");
                        }
                    }
                }
                Job::Act(reply, parent) => {
                    let _span = tracing::info_span!(parent: &parent, "policy.act", tenant = %self.tenant, policy = %self.policy.label(), within_budget).entered();
                    // Cleared before the call: a request arriving during it queues the next `act`,
                    // which will see its events.
                    self.act_pending.store(false, Relaxed);
                    let answer = if within_budget {
                        self.policy.act()
                    } else {
                        self.stats.throttled.fetch_add(1, Relaxed);
                        Ok(Vec::new())
                    };
                    // The warm-up task may have gone (shutdown); nothing to tell then.
                    let _ = reply.send(answer);
                }
            }
            self.budget.spend(started.elapsed().as_secs_f64() * 1000.0);
            // Counted until done: zero means the policy has been given everything.
            self.stats.queued.fetch_sub(1, Relaxed);
        }
    }
}

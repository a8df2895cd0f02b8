//! The thread that makes one tenant's tool-memo policy calls, behind a bounded queue.
//!
//! Policy calls never run on the async workers that serve MCP requests (a call may take its whole
//! deadline, and a failing one a restart). Two kinds of job, taken in order:
//!
//! - `observe`: fire-and-forget; dropped and counted when the queue is full;
//! - `decide`: observe a few events, then score `tool-result` items, answered on a one-shot
//!   channel. Both in one job so the policy has seen the call it is asked about (its clock is
//!   the events' `at-us`) even when other jobs were dropped. A caller that stops waiting (its
//!   deadline) loses nothing but the answer.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;

use tokio::sync::oneshot;

use agentrt_runtime::types::{Event, Item};
use agentrt_runtime::PolicyHandle;

/// Jobs a worker holds at most.
pub const QUEUE_JOBS: usize = 1024;

/// What `decide` answers: one score per item, or why there are none.
pub type Scores = Result<Vec<f32>, String>;

enum Job {
    Observe(Vec<Event>),
    Decide {
        events: Vec<Event>,
        items: Vec<Item>,
        reply: oneshot::Sender<Scores>,
    },
}

/// Counters of one worker.
#[derive(Debug, Default)]
pub struct MemoWorkerStats {
    /// Jobs dropped because the queue was full.
    pub dropped: AtomicU64,
    /// Policy calls that failed (the handle contains and logs each).
    pub failed: AtomicU64,
}

/// The queue into one tenant's policy thread; the thread ends when the worker is dropped.
pub struct MemoWorker {
    jobs: SyncSender<Job>,
    /// Its counters, shared with the thread.
    pub stats: Arc<MemoWorkerStats>,
}

impl MemoWorker {
    /// Start the worker of `tenant`'s tool-memo `policy`.
    pub fn spawn(tenant: &str, policy: Arc<PolicyHandle>) -> std::io::Result<Self> {
        let (jobs, queue) = sync_channel(QUEUE_JOBS);
        let stats = Arc::new(MemoWorkerStats::default());
        let thread_stats = stats.clone();
        std::thread::Builder::new()
            .name(format!("memo-{tenant}"))
            .spawn(move || run(policy, queue, thread_stats))?;
        Ok(Self { jobs, stats })
    }

    /// Queue `events`; never waits.
    pub fn observe(&self, events: Vec<Event>) {
        if self.jobs.try_send(Job::Observe(events)).is_err() {
            self.stats.dropped.fetch_add(1, Relaxed);
        }
    }

    /// Queue `events` then a `score` of `items`; `None` when the queue is full.
    pub fn decide(&self, events: Vec<Event>, items: Vec<Item>) -> Option<oneshot::Receiver<Scores>> {
        let (reply, answer) = oneshot::channel();
        match self.jobs.try_send(Job::Decide { events, items, reply }) {
            Ok(()) => Some(answer),
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.stats.dropped.fetch_add(1, Relaxed);
                None
            }
        }
    }
}

fn run(policy: Arc<PolicyHandle>, queue: Receiver<Job>, stats: Arc<MemoWorkerStats>) {
    for job in queue {
        match job {
            Job::Observe(events) => {
                if policy.observe(&events).is_err() {
                    stats.failed.fetch_add(1, Relaxed);
                }
            }
            Job::Decide { events, items, reply } => {
                let observed = if events.is_empty() {
                    Ok(())
                } else {
                    policy.observe(&events)
                };
                let scores = observed.and_then(|()| policy.score(&items)).map_err(|e| {
                    stats.failed.fetch_add(1, Relaxed);
                    format!("tool-memo policy {}: {e}", policy.label())
                });
                // The caller may have stopped waiting (its deadline): nothing to tell then.
                let _ = reply.send(scores);
            }
        }
    }
}

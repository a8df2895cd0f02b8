//! What a call is charged for: the CPU time of the thread that runs it, not the time on the clock.
//!
//! A policy's deadline exists to stop a policy that computes too long. On a loaded host the
//! thread running a call can be preempted — by another tenant's policy, the proxy's own threads,
//! or the engine beside it — and a wall-clock deadline would then fail a policy for time it never
//! had: one tenant's load would count against another tenant's policy. So the epoch deadline
//! only *wakes* the host; [`CallClock`] then decides from the thread's CPU time whether the call
//! has used its allowance (trap) or was only kept waiting (run on, for what is left).
//!
//! A call also ends once it has been on the clock for [`WALL_BACKSTOP`] times its deadline,
//! however little CPU it had: the host's latency stays bounded on a starved machine, and a
//! platform without a per-thread CPU clock falls back to the wall clock alone.
//!
//! The calls that start an instance (its start functions, `init`, `info`, `restore`) are on the
//! clock for at least [`START_UP_WALL_LIMIT`] instead. They run once per instance, not per request,
//! and they pay for the instance's first touches of its code and memory — page faults that may
//! read the compiled code from disk while the thread uses no CPU at all. Those waits are the
//! host's, not the policy's; charging them against a hot-path backstop failed a tenant's start on
//! a busy machine (its `info`, a few microseconds of work, spent 100 ms on the clock), and a
//! tenant that does not start loses its requests, which a slow first request does not.
//!
//! A call runs on one thread from start to end (calls into a store are synchronous), so the
//! thread's CPU time between the start and now is the call's own.

use std::time::{Duration, Instant};

/// How many deadlines a call may spend on the clock, waiting for a core included.
pub const WALL_BACKSTOP: u32 = 5;

/// The least time a call that starts an instance may spend on the clock (see the module's note).
/// Its CPU allowance is the slot's deadline like any other call's.
pub const START_UP_WALL_LIMIT: Duration = Duration::from_secs(2);

/// The CPU time the calling thread has used since it started, where the platform keeps one.
#[cfg(unix)]
pub(crate) fn thread_cpu_time() -> Option<Duration> {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `clock_gettime` writes one `timespec` through a pointer to a live local.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    (status == 0).then(|| Duration::new(now.tv_sec as u64, now.tv_nsec as u32))
}

/// No per-thread CPU clock here: calls are judged by the wall clock.
#[cfg(not(unix))]
pub(crate) fn thread_cpu_time() -> Option<Duration> {
    None
}

/// Which calls a clock times: they differ in how long they may wait on the clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallKind {
    /// A call of the request stream (`observe`, `score`, `act`, …): [`WALL_BACKSTOP`] deadlines.
    Steady,
    /// A call that starts an instance: at least [`START_UP_WALL_LIMIT`].
    StartUp,
}

/// The clock of one call: when it started, on the wall and in the thread's CPU time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CallClock {
    deadline: Duration,
    wall_limit: Duration,
    wall_start: Instant,
    cpu_start: Option<Duration>,
}

/// Where a running call stands against its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    /// It has run out of time, as [`Overrun`] says: stop it.
    Spent(Overrun),
    /// It may run on for this much more of its own CPU time.
    Left(Duration),
}

/// How a call ran out of time: what an operator does about it differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overrun {
    /// It used its CPU allowance: the policy computes too long for its deadline.
    Cpu,
    /// It spent its time on the clock (`on_clock`) having used only `cpu` of its allowance: the
    /// host was short of CPU, or waited on the disk, not the policy slow.
    Waiting {
        /// How long the call had been on the clock.
        on_clock: Duration,
        /// The CPU time it had used, where the platform keeps a per-thread clock.
        cpu: Option<Duration>,
    },
}

impl CallClock {
    /// A clock for a call of `kind` with `deadline` of CPU time, started now.
    pub(crate) fn start(deadline: Duration, kind: CallKind) -> Self {
        let backstop = deadline * WALL_BACKSTOP;
        Self {
            deadline,
            wall_limit: match kind {
                CallKind::Steady => backstop,
                CallKind::StartUp => backstop.max(START_UP_WALL_LIMIT),
            },
            wall_start: Instant::now(),
            cpu_start: thread_cpu_time(),
        }
    }

    /// The call's standing now.
    pub(crate) fn standing(&self) -> Standing {
        let wall = self.wall_start.elapsed();
        // A thread cannot have used more CPU than time has passed: a call within its deadline on
        // the clock (every call the host checks after it returns, nearly) skips the CPU clock.
        if wall < self.deadline {
            return Standing::Left(self.deadline - wall);
        }
        let cpu = match (self.cpu_start, thread_cpu_time()) {
            (Some(start), Some(now)) => Some(now.saturating_sub(start)),
            _ => None,
        };
        if wall >= self.wall_limit {
            return Standing::Spent(Overrun::Waiting { on_clock: wall, cpu });
        }
        match self.deadline.checked_sub(cpu.unwrap_or(wall)) {
            Some(left) if !left.is_zero() => Standing::Left(left),
            _ => Standing::Spent(Overrun::Cpu),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spin_for(cpu: Duration) {
        let start = thread_cpu_time().expect("a thread CPU clock on this platform");
        while thread_cpu_time().unwrap().saturating_sub(start) < cpu {
            std::hint::spin_loop();
        }
    }

    #[cfg(unix)]
    #[test]
    fn the_thread_clock_counts_cpu_not_sleep() {
        let start = thread_cpu_time().unwrap();
        std::thread::sleep(Duration::from_millis(30));
        let slept = thread_cpu_time().unwrap() - start;
        assert!(
            slept < Duration::from_millis(10),
            "a sleeping thread used {slept:?} of CPU"
        );
    }

    #[cfg(unix)]
    #[test]
    fn waiting_is_not_charged_and_computing_is() {
        let clock = CallClock::start(Duration::from_millis(40), CallKind::Steady);
        std::thread::sleep(Duration::from_millis(60));
        assert!(
            matches!(clock.standing(), Standing::Left(_)),
            "60 ms asleep spent a 40 ms CPU allowance"
        );
        spin_for(Duration::from_millis(45));
        assert_eq!(
            clock.standing(),
            Standing::Spent(Overrun::Cpu),
            "45 ms of CPU fit a 40 ms allowance"
        );
    }

    #[test]
    fn the_wall_backstop_ends_a_call_that_only_waits_and_says_so() {
        let clock = CallClock::start(Duration::from_millis(4), CallKind::Steady);
        std::thread::sleep(Duration::from_millis(4) * WALL_BACKSTOP + Duration::from_millis(2));
        match clock.standing() {
            Standing::Spent(Overrun::Waiting { on_clock, cpu }) => {
                assert!(on_clock >= Duration::from_millis(4) * WALL_BACKSTOP);
                if let Some(cpu) = cpu {
                    assert!(cpu < Duration::from_millis(4), "a sleeping call used {cpu:?} of CPU");
                }
            }
            other => panic!("a call that only waited stands {other:?}"),
        }
    }

    #[test]
    fn a_start_up_call_may_wait_past_the_backstop_but_not_past_its_own_limit() {
        let deadline = Duration::from_millis(4);
        let clock = CallClock::start(deadline, CallKind::StartUp);
        std::thread::sleep(deadline * WALL_BACKSTOP * 3);
        assert!(
            matches!(clock.standing(), Standing::Left(_)),
            "a start-up call that only waited {:?} was stopped",
            deadline * WALL_BACKSTOP * 3
        );
        // A deadline whose backstop exceeds the start-up limit keeps its backstop.
        let long = Duration::from_secs(1);
        assert_eq!(
            CallClock::start(long, CallKind::StartUp).wall_limit,
            long * WALL_BACKSTOP
        );
        assert_eq!(
            CallClock::start(deadline, CallKind::StartUp).wall_limit,
            START_UP_WALL_LIMIT
        );
    }
}

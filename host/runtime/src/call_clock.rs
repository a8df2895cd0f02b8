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
//! A call runs on one thread from start to end (calls into a store are synchronous), so the
//! thread's CPU time between the start and now is the call's own.

use std::time::{Duration, Instant};

/// How many deadlines a call may spend on the clock, waiting for a core included.
pub const WALL_BACKSTOP: u32 = 5;

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

/// The clock of one call: when it started, on the wall and in the thread's CPU time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CallClock {
    deadline: Duration,
    wall_start: Instant,
    cpu_start: Option<Duration>,
}

/// Where a running call stands against its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    /// It has used its CPU allowance (or its time on the clock): stop it.
    Spent,
    /// It may run on for this much more of its own CPU time.
    Left(Duration),
}

impl CallClock {
    /// A clock for a call with `deadline` of CPU time, started now.
    pub(crate) fn start(deadline: Duration) -> Self {
        Self {
            deadline,
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
        if wall >= self.deadline * WALL_BACKSTOP {
            return Standing::Spent;
        }
        let used = match (self.cpu_start, thread_cpu_time()) {
            (Some(start), Some(now)) => now.saturating_sub(start),
            _ => wall,
        };
        match self.deadline.checked_sub(used) {
            Some(left) if !left.is_zero() => Standing::Left(left),
            _ => Standing::Spent,
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
        let clock = CallClock::start(Duration::from_millis(40));
        std::thread::sleep(Duration::from_millis(60));
        assert!(
            matches!(clock.standing(), Standing::Left(_)),
            "60 ms asleep spent a 40 ms CPU allowance"
        );
        spin_for(Duration::from_millis(45));
        assert_eq!(clock.standing(), Standing::Spent, "45 ms of CPU fit a 40 ms allowance");
    }

    #[test]
    fn the_wall_backstop_ends_a_call_that_only_waits() {
        let clock = CallClock::start(Duration::from_millis(4));
        std::thread::sleep(Duration::from_millis(4) * WALL_BACKSTOP + Duration::from_millis(2));
        assert_eq!(clock.standing(), Standing::Spent);
    }
}

//! A circuit breaker per policy slot, and the exponential backoff it (and the checkpointer) use.
//!
//! Without it a policy that fails on every call is restarted on every call, forever: each restart
//! costs an instantiation and a restore, each failure a log line (measured: 1,600 restarts and
//! 3,200 WARN lines in 8 s). With it, [`BreakerConfig::failure_threshold`] consecutive failures
//! of one primitive *open* the slot (counted per primitive: a policy whose `observe` always traps
//! while its `score` works still loses its instance on every request, so `score`'s successes must
//! not hide `observe`'s failures): calls are not made at all (callers get `PolicyError::CircuitOpen`, `rank`
//! answers in LRU order) until a backoff has passed; then one trial call is let through
//! (*half-open*). A success of a primitive that was failing closes the slot (another primitive's
//! success does not: it leaves the slot half-open); any failure opens it again for twice as long.

use std::time::{Duration, Instant};

use crate::error::Primitive;

/// When a slot opens and how long it stays open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BreakerConfig {
    /// Consecutive failed calls that open the slot. 0 disables the breaker.
    pub failure_threshold: u32,
    /// How long the slot stays open the first time.
    pub first_backoff: Duration,
    /// The longest it stays open: the backoff doubles on every failed trial up to this.
    pub max_backoff: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            // A healthy policy fails ~never; five in a row is a pattern, not bad luck.
            failure_threshold: 5,
            first_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
        }
    }
}

impl BreakerConfig {
    /// Give up on the policy for good once `failure_threshold` calls of one primitive failed in
    /// a row (0: never): no trial call follows within the life of any process. For replays — the
    /// simulator, `agentrt policy test` — whose clock is simulated: a backoff in wall time would
    /// let trials in at a rate set by the machine's speed, not by the replay.
    pub fn give_up_after(failure_threshold: u32) -> Self {
        Self {
            failure_threshold,
            first_backoff: NEVER_AGAIN,
            max_backoff: NEVER_AGAIN,
        }
    }
}

/// A backoff no process outlives (a year), yet small enough that `Instant + it` cannot overflow.
const NEVER_AGAIN: Duration = Duration::from_secs(365 * 24 * 3600);

/// Exponential backoff: `first`, `2·first`, `4·first`, … up to `max`.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    first: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    pub(crate) fn new(first: Duration, max: Duration) -> Self {
        Self {
            first,
            max: max.max(first),
            next: first,
        }
    }

    /// The wait to use now; the one after it is twice as long (capped).
    pub(crate) fn step(&mut self) -> Duration {
        let now = self.next;
        self.next = (self.next * 2).min(self.max);
        now
    }

    pub(crate) fn reset(&mut self) {
        self.next = self.first;
    }
}

/// Whether a call may go to the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Closed: call as usual.
    Call,
    /// Half-open: this one call is the trial.
    Trial,
    /// Open: do not call; the next trial is this far away.
    Refuse { retry_in: Duration },
}

/// What recording a call's outcome changed, for the one log line and the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transition {
    None,
    /// The slot just opened (from closed) for this long.
    Opened {
        after_failures: u32,
        backoff: Duration,
    },
    /// A trial failed: open again, for this long.
    Reopened {
        backoff: Duration,
    },
    /// A trial succeeded: closed.
    Closed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Closed,
    Open {
        until: Instant,
    },
    /// A trial call is running (calls are serialised by the handle, so there is one at most).
    HalfOpen,
}

#[derive(Debug)]
pub(crate) struct CircuitBreaker {
    threshold: u32,
    state: State,
    /// Failed calls in a row, per primitive (indexed as [`Primitive::ALL`]).
    consecutive_failures: [u32; Primitive::ALL.len()],
    backoff: Backoff,
}

fn index(p: Primitive) -> usize {
    Primitive::ALL
        .iter()
        .position(|q| *q == p)
        .expect("every primitive is in ALL")
}

impl CircuitBreaker {
    pub(crate) fn new(config: &BreakerConfig) -> Self {
        Self {
            threshold: config.failure_threshold,
            state: State::Closed,
            consecutive_failures: [0; Primitive::ALL.len()],
            backoff: Backoff::new(config.first_backoff, config.max_backoff),
        }
    }

    pub(crate) fn admit(&mut self, now: Instant) -> Admission {
        match self.state {
            State::Closed => Admission::Call,
            State::HalfOpen => Admission::Trial,
            State::Open { until } if now >= until => {
                self.state = State::HalfOpen;
                Admission::Trial
            }
            State::Open { until } => Admission::Refuse { retry_in: until - now },
        }
    }

    pub(crate) fn record_success(&mut self, primitive: Primitive) -> Transition {
        let was_failing = std::mem::take(&mut self.consecutive_failures[index(primitive)]) > 0;
        if self.state == State::Closed {
            return Transition::None;
        }
        // A trial tries what failed. Another primitive answering says nothing about it: were it
        // to close the slot, an `observe` that works would reopen a `score` that spins to
        // `failure_threshold` more deadlines after every backoff. Calls keep flowing meanwhile
        // (half-open admits them), and any failure opens the slot again.
        if !was_failing && self.consecutive_failures.iter().any(|&f| f > 0) {
            return Transition::None;
        }
        self.consecutive_failures = [0; Primitive::ALL.len()];
        self.state = State::Closed;
        self.backoff.reset();
        Transition::Closed
    }

    pub(crate) fn record_failure(&mut self, primitive: Primitive, now: Instant) -> Transition {
        let failures = &mut self.consecutive_failures[index(primitive)];
        *failures = failures.saturating_add(1);
        let failures = *failures;
        match self.state {
            State::Closed if self.threshold > 0 && failures >= self.threshold => {
                let backoff = self.backoff.step();
                self.state = State::Open { until: now + backoff };
                Transition::Opened {
                    after_failures: failures,
                    backoff,
                }
            }
            State::Closed => Transition::None,
            State::HalfOpen | State::Open { .. } => {
                let backoff = self.backoff.step();
                self.state = State::Open { until: now + backoff };
                Transition::Reopened { backoff }
            }
        }
    }

    /// Forget failures and close (a different component now runs in the slot).
    pub(crate) fn reset(&mut self) {
        self.state = State::Closed;
        self.consecutive_failures = [0; Primitive::ALL.len()];
        self.backoff.reset();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const O: Primitive = Primitive::Observe;

    fn breaker() -> CircuitBreaker {
        CircuitBreaker::new(&BreakerConfig {
            failure_threshold: 3,
            first_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(4),
        })
    }

    #[test]
    fn opens_after_the_threshold_and_lets_one_trial_through_after_the_backoff() {
        let mut b = breaker();
        let t0 = Instant::now();
        assert_eq!(b.record_failure(O, t0), Transition::None);
        assert_eq!(b.record_failure(O, t0), Transition::None);
        assert_eq!(
            b.record_failure(O, t0),
            Transition::Opened {
                after_failures: 3,
                backoff: Duration::from_secs(1)
            }
        );
        assert!(matches!(b.admit(t0), Admission::Refuse { .. }));
        assert_eq!(b.admit(t0 + Duration::from_secs(1)), Admission::Trial);
        assert_eq!(b.record_success(O), Transition::Closed);
        assert_eq!(b.admit(t0 + Duration::from_secs(1)), Admission::Call);
    }

    #[test]
    fn a_failed_trial_doubles_the_backoff_up_to_the_cap_and_success_resets_it() {
        let mut b = breaker();
        let mut t = Instant::now();
        for _ in 0..3 {
            b.record_failure(O, t);
        }
        for expected in [2, 4, 4] {
            t += Duration::from_secs(10);
            assert_eq!(b.admit(t), Admission::Trial);
            assert_eq!(
                b.record_failure(O, t),
                Transition::Reopened {
                    backoff: Duration::from_secs(expected)
                }
            );
        }
        t += Duration::from_secs(10);
        b.admit(t);
        b.record_success(O);
        for _ in 0..3 {
            b.record_failure(O, t);
        }
        assert_eq!(
            b.admit(t + Duration::from_millis(999)),
            Admission::Refuse {
                retry_in: Duration::from_millis(1)
            }
        );
    }

    #[test]
    fn a_success_between_failures_keeps_it_closed() {
        let mut b = breaker();
        let t = Instant::now();
        for _ in 0..10 {
            b.record_failure(O, t);
            b.record_failure(O, t);
            b.record_success(O);
        }
        assert_eq!(b.admit(t), Admission::Call);
    }

    #[test]
    fn only_the_failing_primitive_answering_closes_a_half_open_slot() {
        let mut b = breaker();
        let t = Instant::now();
        for _ in 0..3 {
            b.record_failure(Primitive::Score, t);
        }
        let later = t + Duration::from_secs(1);
        assert_eq!(b.admit(later), Admission::Trial);
        // Observe works — it always did; score is still untried.
        assert_eq!(b.record_success(O), Transition::None);
        assert_eq!(b.admit(later), Admission::Trial, "still half-open");
        // Score fails again: open at once, for twice as long.
        assert_eq!(
            b.record_failure(Primitive::Score, later),
            Transition::Reopened {
                backoff: Duration::from_secs(2)
            }
        );
        let trial = later + Duration::from_secs(2);
        assert_eq!(b.admit(trial), Admission::Trial);
        assert_eq!(b.record_success(Primitive::Score), Transition::Closed);
        assert_eq!(b.admit(trial), Admission::Call);
    }

    #[test]
    fn a_breaker_that_gives_up_never_lets_a_trial_through() {
        let mut b = CircuitBreaker::new(&BreakerConfig::give_up_after(2));
        let t = Instant::now();
        b.record_failure(O, t);
        assert!(matches!(b.record_failure(O, t), Transition::Opened { .. }));
        let a_month = Duration::from_secs(30 * 24 * 3600);
        assert!(matches!(b.admit(t + a_month), Admission::Refuse { .. }));
    }

    #[test]
    fn another_primitive_succeeding_does_not_hide_one_that_always_fails() {
        let mut b = breaker();
        let t = Instant::now();
        for _ in 0..2 {
            b.record_failure(O, t);
            b.record_success(Primitive::Score);
        }
        assert!(matches!(b.record_failure(O, t), Transition::Opened { .. }));
    }
}

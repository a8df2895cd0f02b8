//! Each tenant's hint rate (`--hint-rate` per second, a burst of twice that): a token bucket, one
//! token per hint, a call taken whole or not at all. A refused call learns when it would fit.

use std::time::{Duration, Instant};

/// The default of `--hint-rate`: hints per second per tenant.
pub const DEFAULT_HINT_RATE: f64 = 200.0;

/// A token bucket: `rate` tokens per second, holding at most `2 × rate`.
#[derive(Debug)]
pub struct Bucket {
    rate: f64,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    /// A full bucket at `rate` per second (`rate` > 0, checked by the flag's parser).
    pub fn new(rate: f64, now: Instant) -> Self {
        Self {
            rate,
            tokens: rate * 2.0,
            last: now,
        }
    }

    /// The most one call may take.
    pub fn burst(&self) -> f64 {
        self.rate * 2.0
    }

    /// Take `n` tokens at `now`, or none: then how long until `n` would be there (`None` when `n`
    /// is over the burst and never will be).
    pub fn take(&mut self, n: usize, now: Instant) -> Result<(), Option<Duration>> {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst());
        let n = n as f64;
        if n <= self.tokens {
            self.tokens -= n;
            return Ok(());
        }
        if n > self.burst() {
            return Err(None);
        }
        Err(Some(Duration::from_secs_f64((n - self.tokens) / self.rate)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_of_twice_the_rate_then_the_rate() {
        let t0 = Instant::now();
        let mut bucket = Bucket::new(10.0, t0);
        assert_eq!(bucket.take(20, t0), Ok(()));
        let wait = bucket.take(5, t0).unwrap_err().unwrap();
        assert!((wait.as_secs_f64() - 0.5).abs() < 1e-9, "{wait:?}");
        assert_eq!(bucket.take(5, t0 + Duration::from_millis(500)), Ok(()));
        assert_eq!(
            bucket.take(21, t0 + Duration::from_secs(60)),
            Err(None),
            "over the burst"
        );
        assert_eq!(
            bucket.take(20, t0 + Duration::from_secs(60)),
            Ok(()),
            "refill stops at the burst"
        );
    }
}

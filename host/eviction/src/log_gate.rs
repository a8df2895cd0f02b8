//! A rate limit on one cause of log lines: at most one line per interval, and the line that gets
//! through says how many were held back since the last one. A peer that can make the host log
//! (garbage frames, a connection flood) then costs a line per interval, not a line per attempt.
//!
//! One gate per cause, shared by every connection the cause can come from:
//!
//! ```
//! # use agentrt_eviction::log_gate::LogGate;
//! let malformed = LogGate::default();
//! if let Some(more_since_last) = malformed.admit() {
//!     tracing::warn!(more_since_last, "malformed frame; closing this connection");
//! }
//! ```

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often a cause may log by default.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);

/// One cause's rate limit (see the module doc).
#[derive(Debug)]
pub struct LogGate {
    interval: Duration,
    state: Mutex<GateState>,
}

#[derive(Debug, Default)]
struct GateState {
    /// When the last line went through; `None` before the first.
    last: Option<Instant>,
    /// Lines held back since then.
    held_back: u64,
}

impl Default for LogGate {
    fn default() -> Self {
        Self::every(DEFAULT_INTERVAL)
    }
}

impl LogGate {
    /// A gate that lets one line through per `interval`.
    pub fn every(interval: Duration) -> Self {
        Self {
            interval,
            state: Mutex::new(GateState::default()),
        }
    }

    /// `Some(n)` when a line may be written now, `n` being the lines held back since the last
    /// one (write it into the line); `None` when this line is to be held back (it is counted).
    pub fn admit(&self) -> Option<u64> {
        self.admit_at(Instant::now())
    }

    fn admit_at(&self, now: Instant) -> Option<u64> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let due = state.last.is_none_or(|last| now.duration_since(last) >= self.interval);
        if !due {
            state.held_back += 1;
            return None;
        }
        state.last = Some(now);
        Some(std::mem::take(&mut state.held_back))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_and_the_next_one_counts_those_held_back() {
        let gate = LogGate::every(Duration::from_secs(10));
        let start = Instant::now();
        assert_eq!(gate.admit_at(start), Some(0), "the first line goes through");
        for i in 1..=5 {
            assert_eq!(gate.admit_at(start + Duration::from_secs(i)), None);
        }
        assert_eq!(gate.admit_at(start + Duration::from_secs(10)), Some(5));
        assert_eq!(gate.admit_at(start + Duration::from_secs(11)), None);
        assert_eq!(gate.admit_at(start + Duration::from_secs(25)), Some(1));
    }
}

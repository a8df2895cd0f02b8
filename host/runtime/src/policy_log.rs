//! A policy's `host.log`, made safe for the host's log: a policy is untrusted code, and its lines
//! land next to the host's own.
//!
//! - Control characters are escaped (`\n` → `\\n`, ESC → `\\u{1b}`): a message cannot start a
//!   line that looks like the host's, nor drive a terminal.
//! - A message is cut at [`MAX_LOG_MESSAGE_BYTES`].
//! - Lines are rate-limited per slot by a token bucket ([`crate::SandboxLimits::log_lines_per_second`],
//!   [`crate::SandboxLimits::log_burst`]); the slot keeps its bucket across restarts and swaps, so
//!   trapping does not refill it. Dropped lines are counted
//!   (`agentrt_policy_log_lines_dropped_total`) and summed up in one line when logging resumes.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::types::LogLevel;

/// Longest message kept, in bytes of its escaped form.
pub const MAX_LOG_MESSAGE_BYTES: usize = 1024;

/// One slot's log: its tag, its bucket and its count of dropped lines.
#[derive(Debug)]
pub(crate) struct PolicyLog {
    /// `tenant/slot`: every line carries it.
    label: Arc<str>,
    bucket: Mutex<Bucket>,
    /// Shared with the slot's metrics.
    dropped: Arc<AtomicU64>,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    capacity: f64,
    per_second: f64,
    refilled: Instant,
    /// Dropped since the last line that got through: the next one reports them first.
    dropped_unreported: u64,
}

impl PolicyLog {
    pub(crate) fn new(label: Arc<str>, lines_per_second: u32, burst: u32, dropped: Arc<AtomicU64>) -> Self {
        let capacity = f64::from(burst.max(1));
        Self {
            label,
            bucket: Mutex::new(Bucket {
                tokens: capacity,
                capacity,
                per_second: f64::from(lines_per_second),
                refilled: Instant::now(),
                dropped_unreported: 0,
            }),
            dropped,
        }
    }

    /// Write one of the policy's lines, or count it as dropped.
    pub(crate) fn write(&self, level: LogLevel, message: &str) {
        let dropped_before = match self.admit(Instant::now()) {
            Admission::Drop => {
                self.dropped.fetch_add(1, Relaxed);
                return;
            }
            Admission::Write { dropped_before } => dropped_before,
        };
        let policy = &*self.label;
        if dropped_before > 0 {
            tracing::warn!(
                policy,
                dropped = dropped_before,
                "policy log lines dropped: over the slot's log rate limit"
            );
        }
        let message = sanitize(message);
        match level {
            LogLevel::Trace => tracing::trace!(policy, "{message}"),
            LogLevel::Debug => tracing::debug!(policy, "{message}"),
            LogLevel::Info => tracing::info!(policy, "{message}"),
            LogLevel::Warn => tracing::warn!(policy, "{message}"),
            LogLevel::Error => tracing::error!(policy, "{message}"),
        }
    }

    fn admit(&self, now: Instant) -> Admission {
        let mut bucket = self.bucket.lock().unwrap_or_else(|p| p.into_inner());
        let elapsed = now.saturating_duration_since(bucket.refilled).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * bucket.per_second).min(bucket.capacity);
        bucket.refilled = now;
        if bucket.tokens < 1.0 {
            bucket.dropped_unreported += 1;
            return Admission::Drop;
        }
        bucket.tokens -= 1.0;
        Admission::Write {
            dropped_before: std::mem::take(&mut bucket.dropped_unreported),
        }
    }
}

enum Admission {
    Drop,
    /// Write the line, after a summary of the lines dropped before it.
    Write {
        dropped_before: u64,
    },
}

/// A message as it may appear in the host's log: control characters escaped, cut at
/// [`MAX_LOG_MESSAGE_BYTES`] (on a character boundary, marked with `…[truncated]`).
pub fn sanitize(message: &str) -> String {
    let mut out = String::with_capacity(message.len().min(MAX_LOG_MESSAGE_BYTES));
    for c in message.chars() {
        let before = out.len();
        if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') {
            let _ = write!(out, "{}", c.escape_default());
        } else {
            out.push(c);
        }
        if out.len() > MAX_LOG_MESSAGE_BYTES {
            out.truncate(before);
            out.push_str("…[truncated]");
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::SandboxLimits;

    fn log(per_second: u32, burst: u32) -> PolicyLog {
        let limits = SandboxLimits {
            log_lines_per_second: per_second,
            log_burst: burst,
            ..SandboxLimits::default()
        };
        PolicyLog::new(
            Arc::from("t/kv"),
            limits.log_lines_per_second,
            limits.log_burst,
            Arc::default(),
        )
    }

    #[test]
    fn control_characters_are_escaped_so_a_message_stays_on_its_line() {
        assert_eq!(
            sanitize("ok\nERROR agentrt_serve: forged\r\t\u{1b}[31m"),
            "ok\\nERROR agentrt_serve: forged\\r\\t\\u{1b}[31m"
        );
        assert_eq!(sanitize("a\u{2028}b"), "a\\u{2028}b");
        assert_eq!(sanitize("plain, ünïcode"), "plain, ünïcode");
    }

    #[test]
    fn long_messages_are_cut_on_a_character_boundary() {
        let cut = sanitize(&"é".repeat(2000));
        assert!(cut.ends_with("…[truncated]"));
        assert!(cut.len() <= MAX_LOG_MESSAGE_BYTES + "…[truncated]".len());
        let newlines = sanitize(&"\n".repeat(2000));
        assert!(
            newlines.starts_with("\\n\\n") && newlines.ends_with("…[truncated]"),
            "{newlines}"
        );
        assert_eq!(
            sanitize(&"a".repeat(MAX_LOG_MESSAGE_BYTES)).len(),
            MAX_LOG_MESSAGE_BYTES
        );
    }

    #[test]
    fn the_bucket_lets_a_burst_through_then_the_rate_and_reports_what_it_dropped() {
        let log = log(10, 5);
        let start = Instant::now();
        let written = (0..100)
            .filter(|_| matches!(log.admit(start), Admission::Write { .. }))
            .count();
        assert_eq!(written, 5, "the burst");
        // 10 lines/s: a tenth of a second later, one more line, reporting the 95 dropped.
        let later = start + std::time::Duration::from_millis(100);
        assert!(matches!(log.admit(later), Admission::Write { dropped_before: 95 }));
        assert!(matches!(log.admit(later), Admission::Drop));
    }
}

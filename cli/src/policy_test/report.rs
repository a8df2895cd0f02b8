//! The kit's output: one line per property — `pass`, `FAIL`, `skip` (not run, because what it
//! needs failed above), `warn` (holds by the contract, but not as a policy that keeps state should:
//! no failure) or `info` (a measurement) — with a short reason (a policy's failures in
//! the words of [`crate::describe::error`]).

use std::fmt;
use std::time::Duration;

use super::slot::{CallError, Measures};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    Fail,
    Skip,
    Warn,
    Info,
}

/// One line of the report.
#[derive(Debug, Clone)]
pub struct Line {
    pub verdict: Verdict,
    pub property: String,
    pub detail: String,
}

/// Why a property does not hold, or was not checked.
#[derive(Debug)]
pub enum Problem {
    Fail(String),
    Skip(String),
}

/// A property's outcome: what held, or the problem.
pub type Check = Result<String, Problem>;

impl From<CallError> for Problem {
    fn from(error: CallError) -> Self {
        match error {
            CallError::Policy(e) => Problem::Fail(crate::describe::error(&e)),
            CallError::FailedBefore { export, how } => Problem::Skip(format!("not run: {export} failed above ({how})")),
            CallError::Hung(export) => Problem::Skip(format!("not run: {export} ran out of its fuel above")),
        }
    }
}

impl Line {
    pub fn checked(property: impl Into<String>, check: Check) -> Self {
        let (verdict, detail) = match check {
            Ok(detail) => (Verdict::Pass, detail),
            Err(Problem::Fail(detail)) => (Verdict::Fail, detail),
            Err(Problem::Skip(detail)) => (Verdict::Skip, detail),
        };
        Self {
            verdict,
            property: property.into(),
            detail,
        }
    }

    pub fn warning(property: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            verdict: Verdict::Warn,
            property: property.into(),
            detail: detail.into(),
        }
    }

    pub fn info(property: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            verdict: Verdict::Info,
            property: property.into(),
            detail: detail.into(),
        }
    }
}

/// Width of the property column.
const PROPERTY_WIDTH: usize = 34;

impl fmt::Display for Line {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = match self.verdict {
            Verdict::Pass => "pass",
            Verdict::Fail => "FAIL",
            Verdict::Skip => "skip",
            Verdict::Warn => "warn",
            Verdict::Info => "info",
        };
        write!(f, "{verdict}  {:<PROPERTY_WIDTH$} {}", self.property, self.detail)
    }
}

/// A size in bytes for people: `42 KB`, `18.5 MB`.
pub fn size(bytes: usize) -> String {
    if bytes < 1_000_000 {
        format!("{} KB", bytes.div_ceil(1000))
    } else {
        format!("{:.1} MB", bytes as f64 / 1e6)
    }
}

fn micros(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us >= 10_000.0 {
        crate::describe::millis(d)
    } else {
        format!("{us:.0} µs")
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
}

/// The time and memory lines: per export, p50 and max of its successful calls; the peak memory
/// against the cap.
pub fn measure_lines(m: &Measures, memory_cap: usize) -> Vec<Line> {
    let mut lines = Vec::new();
    for (export, calls) in &m.calls {
        let mut sorted = calls.clone();
        sorted.sort_unstable();
        let p50 = sorted[(sorted.len() - 1) / 2];
        let max = sorted[sorted.len() - 1];
        lines.push(Line::info(
            format!("time: {export}"),
            format!(
                "p50 {} · max {} ({} call{})",
                micros(p50),
                micros(max),
                sorted.len(),
                if sorted.len() == 1 { "" } else { "s" }
            ),
        ));
    }
    if let Some((export, peak)) = m.peak_memory.iter().max_by_key(|(_, bytes)| **bytes) {
        let by_export: Vec<String> = m.peak_memory.iter().map(|(e, b)| format!("{e} {}", mib(*b))).collect();
        lines.push(Line::info(
            "memory: peak",
            format!(
                "{} after {export}, of a {} cap (after each export: {})",
                mib(*peak),
                mib(memory_cap as u64),
                by_export.join(", ")
            ),
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentrt_runtime::PolicyError;

    #[test]
    fn a_trap_is_told_in_one_line_and_a_skip_names_what_hung() {
        let trap = PolicyError::Trap {
            policy: "t".into(),
            primitive: agentrt_runtime::Primitive::Observe,
            message: "error while executing at wasm backtrace:\n    0:   0xe95e - <unknown>!<wasm function 103>\n    \
                      9:   0xa985 - <unknown>!<wasm function 53>: wasm trap: wasm `unreachable` instruction executed"
                .into(),
        };
        assert_eq!(
            crate::describe::error(&trap),
            "observe trapped: wasm trap: wasm `unreachable` instruction executed"
        );
        let line = Line::checked("observe: a stream", Err(Problem::from(CallError::Policy(trap))));
        assert_eq!(line.verdict, Verdict::Fail);
        assert!(line.to_string().starts_with("FAIL  observe: a stream "), "{line}");
        let skipped = Line::checked("score: huge", Err(Problem::from(CallError::Hung("score-packed"))));
        assert_eq!(skipped.verdict, Verdict::Skip);
        assert!(skipped.detail.contains("score-packed ran out of its fuel"));
    }

    #[test]
    fn times_are_reported_as_median_and_max_per_export() {
        let mut m = Measures::default();
        m.calls.insert(
            "observe",
            [3, 1, 2, 40_000].iter().map(|&us| Duration::from_micros(us)).collect(),
        );
        m.peak_memory.insert("observe", 3 << 20);
        m.peak_memory.insert("score-packed", 5 << 20);
        let lines = measure_lines(&m, 128 << 20);
        assert_eq!(lines[0].detail, "p50 2 µs · max 40.0 ms (4 calls)");
        assert_eq!(
            (size(42_001), size(18_512_345)),
            ("43 KB".to_string(), "18.5 MB".to_string())
        );
        assert!(
            lines[1]
                .detail
                .starts_with("5.0 MiB after score-packed, of a 128.0 MiB cap"),
            "{}",
            lines[1].detail
        );
    }
}

//! Writing the Prometheus text format, and what every part of the proxy that has figures to show
//! on `/metrics` implements ([`Report`]). A leaf: every layer may use it.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A part of the proxy with series for `/metrics`: it writes them, `# HELP` and `# TYPE` lines
/// included. The route renders a list of reports, in order.
pub trait Report: Send + Sync {
    /// Append this part's series to `out`, in the Prometheus text format.
    fn render(&self, out: &mut String);
}

/// Prometheus text for `(name, help, value)` counters.
pub fn render_counters(out: &mut String, counters: &[(&str, &str, &AtomicU64)]) {
    for (name, help, value) in counters {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
            value.load(Relaxed)
        );
    }
}

//! The proxy's clock: the microseconds since the process started that every policy event is
//! stamped with (`at-us`), one clock for the requests, the warm-ups and the MCP gateway, so a
//! policy sees one time line.

use std::time::Instant;

/// Microseconds since the clock started. Cheap to copy.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    start: Instant,
}

impl Clock {
    /// A clock starting now.
    pub fn start() -> Self {
        Self { start: Instant::now() }
    }

    /// Microseconds since the clock started.
    pub fn now_us(&self) -> u64 {
        self.start.elapsed().as_micros() as u64
    }
}

//! The process's log, captured for the tests that check what it says (never a secret, at most so
//! many lines): one subscriber per test binary, writing into [`LOG`].

use std::io::Write;
use std::sync::Mutex;

/// Log lines the process writes.
pub static LOG: Mutex<Vec<u8>> = Mutex::new(Vec::new());

struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        LOG.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Capture every line at `level` and above from now on (the first call in a binary wins).
pub fn capture(level: tracing::Level) {
    let _ = tracing_subscriber::fmt()
        .with_writer(|| LogWriter)
        .with_ansi(false)
        .with_max_level(level)
        .try_init();
}

/// What was logged so far.
pub fn text() -> String {
    String::from_utf8_lossy(&LOG.lock().unwrap()).to_string()
}

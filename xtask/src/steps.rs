//! The steps of a long xtask command, each said on stderr as it starts (with what it usually
//! takes) and timed as it ends, so that a first run that builds for minutes says what it is doing
//! — also when stderr is a log file, not a terminal.

use std::time::{Duration, Instant};

use anyhow::Result;

pub struct Steps {
    command: &'static str,
    total: usize,
    done: usize,
    started: Instant,
}

impl Steps {
    /// The `total` steps of `cargo xtask <command>`.
    pub fn new(command: &'static str, total: usize) -> Self {
        Self {
            command,
            total,
            done: 0,
            started: Instant::now(),
        }
    }

    /// Run the next step, `what`, which usually takes `usually`.
    pub fn run<T>(&mut self, what: &str, usually: &str, step: impl FnOnce() -> Result<T>) -> Result<T> {
        self.done += 1;
        let (command, done, total) = (self.command, self.done, self.total);
        eprintln!("xtask {command} [{done}/{total}] {what} ({usually})");
        let started = Instant::now();
        let value = step()?;
        eprintln!(
            "xtask {command} [{done}/{total}] done in {}",
            duration(started.elapsed())
        );
        Ok(value)
    }

    /// The closing line: the whole command's time.
    pub fn finish(&self) {
        eprintln!("xtask {}: done in {}", self.command, duration(self.started.elapsed()));
    }
}

/// `4 min 09 s`, `12 s`.
fn duration(elapsed: Duration) -> String {
    let seconds = elapsed.as_secs();
    if seconds < 60 {
        format!("{:.1} s", elapsed.as_secs_f64())
    } else {
        format!("{} min {:02} s", seconds / 60, seconds % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_minutes_and_seconds() {
        assert_eq!(duration(Duration::from_millis(12_340)), "12.3 s");
        assert_eq!(duration(Duration::from_secs(249)), "4 min 09 s");
    }
}

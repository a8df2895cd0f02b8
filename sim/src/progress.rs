//! How a long `sim` command shows its progress on stderr: a bar on a terminal; anywhere else (a
//! log file, a pipe, CI) a plain line per replay done — the count, the share, the time so far and
//! what finished — so that a run of minutes is never silent.

use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

/// The progress of `total` replays.
pub struct Progress {
    total: u64,
    shown: Shown,
}

enum Shown {
    Bar(ProgressBar),
    Lines(Mutex<Lines>),
}

struct Lines {
    out: Box<dyn Write + Send>,
    done: u64,
    started: Instant,
}

impl Progress {
    /// A bar when stderr is a terminal, else a line per replay on stderr.
    pub fn new(total: u64) -> Self {
        if std::io::stderr().is_terminal() {
            let bar = ProgressBar::new(total);
            bar.set_style(
                ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} replays  {msg}")
                    .expect("valid template")
                    .progress_chars("=> "),
            );
            Self {
                total,
                shown: Shown::Bar(bar),
            }
        } else {
            Self::lines(total, Box::new(std::io::stderr()))
        }
    }

    /// A line per replay into `out`.
    pub fn lines(total: u64, out: Box<dyn Write + Send>) -> Self {
        Self {
            total,
            shown: Shown::Lines(Mutex::new(Lines {
                out,
                done: 0,
                started: Instant::now(),
            })),
        }
    }

    /// One replay finished; `what` names it (workload, capacity, policy).
    pub fn replayed(&self, what: &str) {
        match &self.shown {
            Shown::Bar(bar) => {
                bar.set_message(what.to_string());
                bar.inc(1);
            }
            Shown::Lines(lines) => {
                let mut lines = lines.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                lines.done += 1;
                let line = format!(
                    "sim: {}/{} replays ({:.0} %), {}: {what}\n",
                    lines.done,
                    self.total,
                    lines.done as f64 * 100.0 / self.total.max(1) as f64,
                    elapsed(lines.started.elapsed())
                );
                // Progress is best effort: a closed stderr must not stop the replays.
                let _ = lines.out.write_all(line.as_bytes());
            }
        }
    }

    /// The replays are over: the bar is cleared (the lines stay).
    pub fn finish(&self) {
        if let Shown::Bar(bar) = &self.shown {
            bar.finish_and_clear();
        }
    }
}

/// `1 min 03 s`, `12 s`.
fn elapsed(time: Duration) -> String {
    let seconds = time.as_secs();
    if seconds < 60 {
        format!("{seconds} s")
    } else {
        format!("{} min {:02} s", seconds / 60, seconds % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A writer the test reads back.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn off_a_terminal_each_replay_is_a_line_with_its_count_and_share() {
        let out = Shared::default();
        let progress = Progress::lines(4, Box::new(out.clone()));
        std::thread::scope(|s| {
            for policy in ["lru", "cachesage"] {
                let progress = &progress;
                s.spawn(move || {
                    progress.replayed(&format!("gsm8k @ 3540 blocks: {policy}"));
                    progress.replayed(&format!("mmlu @ 3540 blocks: {policy}"));
                });
            }
        });
        progress.finish();
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        for (i, line) in lines.iter().enumerate() {
            let count = format!("sim: {}/4 replays ({} %), 0 s: ", i + 1, (i + 1) * 25);
            assert!(line.starts_with(&count), "{line}");
        }
        assert!(text.contains("mmlu @ 3540 blocks: cachesage"), "{text}");
    }

    #[test]
    fn elapsed_reads_as_minutes_and_seconds() {
        assert_eq!(elapsed(Duration::from_secs(12)), "12 s");
        assert_eq!(elapsed(Duration::from_secs(63)), "1 min 03 s");
    }
}

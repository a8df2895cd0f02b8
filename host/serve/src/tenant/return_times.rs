//! How long tools take to come back, learned from the traffic: a session that waits for a tool
//! (read from a response, or said by a hint) is remembered with the time it paused; its next
//! request ends the wait, and the gap is recorded per (agent, tool). The table keeps the latest
//! gaps of at most [`MAX_PAIRS`] pairs, least recently used forgotten first, and shows their
//! median (`/admin/tenants/{t}/stats`). Policies learn their own return curves from the events.
//!
//! Both tables are bounded in bytes as well as entries: names are the clients' and the models'
//! (up to 256 bytes each, 16 tools a reply), so 20,000 waits of 16 long names once cost 5.2 KB
//! each — 85 MB per tenant. A wait weighs its names' bytes (at most [`MAX_OPEN_WAIT_BYTES`] per
//! tenant), a pair its names and its samples (at most [`MAX_PAIR_BYTES`]).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::table::LruTable;

/// Most (agent, tool) pairs one tenant's table keeps.
pub const MAX_PAIRS: usize = 4096;
/// Most waits one tenant may have open at once (sessions paused for a tool).
pub const MAX_OPEN_WAITS: usize = 16_384;
/// Gaps kept per pair, the latest: what the median is taken over.
const SAMPLES_PER_PAIR: usize = 32;
/// Bytes of names the open waits of one tenant may hold (agents' and tools').
pub const MAX_OPEN_WAIT_BYTES: usize = 4 << 20;
/// Bytes the pairs of one tenant may hold: their names and their samples.
pub const MAX_PAIR_BYTES: usize = 4 << 20;

/// A session paused for tools.
#[derive(Debug)]
struct OpenWait {
    agent: String,
    tools: Vec<String>,
    since: Instant,
}

/// One tenant's open tool waits and the gaps they ended with.
#[derive(Debug)]
pub struct ReturnTimes {
    open: LruTable<u64, OpenWait>,
    gaps: LruTable<(String, String), VecDeque<Duration>>,
}

impl Default for ReturnTimes {
    fn default() -> Self {
        Self {
            open: LruTable::new(MAX_OPEN_WAITS, MAX_OPEN_WAIT_BYTES),
            gaps: LruTable::new(MAX_PAIRS, MAX_PAIR_BYTES),
        }
    }
}

impl ReturnTimes {
    /// `session` paused at `since`, `agent` waiting for `tools` (`""`: a tool not named).
    pub fn paused(&mut self, session: u64, agent: &str, tools: Vec<String>, since: Instant) {
        let bytes = agent.len() + tools.iter().map(String::len).sum::<usize>();
        let wait = OpenWait {
            agent: agent.to_string(),
            tools,
            since,
        };
        self.open.insert(session, wait, bytes);
    }

    /// Whether `session` is waiting for `tool` now (its wait not yet ended by a request).
    pub fn is_waiting_for(&self, session: u64, tool: &str) -> bool {
        self.open
            .peek(&session)
            .is_some_and(|w| w.tools.iter().any(|t| t == tool))
    }

    /// A request of `session` arrived at `now`: the wait, if one was open, ends; returns whether
    /// one did.
    pub fn resumed(&mut self, session: u64, now: Instant) -> bool {
        let Some(wait) = self.open.remove(&session) else {
            return false;
        };
        let gap = now.saturating_duration_since(wait.since);
        for tool in wait.tools {
            let key = (wait.agent.clone(), tool);
            let samples = match self.gaps.get_mut(&key) {
                Some(samples) => samples,
                None => {
                    let bytes = key.0.len() + key.1.len() + SAMPLES_PER_PAIR * std::mem::size_of::<Duration>();
                    self.gaps
                        .insert(key.clone(), VecDeque::with_capacity(SAMPLES_PER_PAIR), bytes);
                    self.gaps.get_mut(&key).expect("just inserted")
                }
            };
            if samples.len() == SAMPLES_PER_PAIR {
                samples.pop_front();
            }
            samples.push_back(gap);
        }
        true
    }

    /// A closed session waits for nothing.
    pub fn forget(&mut self, session: u64) {
        self.open.remove(&session);
    }

    /// Sessions waiting now.
    pub fn open_waits(&self) -> usize {
        self.open.len()
    }

    /// Every pair's median gap and sample count, sorted by agent and tool, for the stats route.
    pub fn report(&self) -> Vec<Value> {
        let mut rows: Vec<(&(String, String), &VecDeque<Duration>)> = self.gaps.iter().collect();
        rows.sort_by(|a, b| a.0.cmp(b.0));
        rows.into_iter()
            .map(|((agent, tool), samples)| {
                json!({"agent": agent, "tool": tool, "samples": samples.len(),
                    "median_ms": median(samples).as_secs_f64() * 1000.0})
            })
            .collect()
    }
}

fn median(samples: &VecDeque<Duration>) -> Duration {
    let mut sorted: Vec<Duration> = samples.iter().copied().collect();
    sorted.sort();
    match sorted.len() {
        0 => Duration::ZERO,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_ends_with_the_sessions_next_request_and_its_gap_is_kept_per_agent_and_tool() {
        let t0 = Instant::now();
        let mut times = ReturnTimes::default();
        assert!(!times.resumed(1, t0), "no wait open");
        for (i, ms) in [100u64, 300, 200].into_iter().enumerate() {
            let since = t0 + Duration::from_secs(i as u64);
            times.paused(1, "coder", vec!["bash".into(), "grep".into()], since);
            assert!(times.resumed(1, since + Duration::from_millis(ms)));
        }
        times.paused(2, "coder", vec!["bash".into()], t0);
        times.forget(2);
        assert!(!times.resumed(2, t0 + Duration::from_secs(9)), "closed: no gap");
        let report = times.report();
        assert_eq!(report.len(), 2);
        assert_eq!(report[0]["tool"], "bash");
        assert_eq!(report[0]["samples"], 3);
        assert_eq!(report[0]["median_ms"], 200.0);
    }

    #[test]
    fn waits_of_long_names_are_bounded_in_bytes_not_only_in_count() {
        let t0 = Instant::now();
        let mut times = ReturnTimes::default();
        let name = |i: usize, c: char| format!("{i:08}{}", c.to_string().repeat(248));
        for session in 0..20_000u64 {
            let tools = (0..16).map(|t| name(t, 't')).collect();
            times.paused(session, &name(session as usize, 'a'), tools, t0);
        }
        // 17 names of 256 bytes a wait: the bytes bind long before the 16,384 waits do.
        let per_wait = 17 * 256;
        assert_eq!(times.open_waits(), MAX_OPEN_WAIT_BYTES / per_wait);
        assert!(times.open.bytes() <= MAX_OPEN_WAIT_BYTES);
        assert!(times.resumed(19_999, t0), "the latest wait is kept");
        assert!(!times.resumed(0, t0), "the oldest was forgotten");
    }
}

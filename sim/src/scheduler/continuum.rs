//! Continuum's engine (arXiv 2511.02230, "CacheTTL" in its later versions; a fork of vLLM 0.10):
//! a request whose answer calls a tool keeps its KV pinned — its blocks stay held, out of the
//! free queue — for a time-to-live, so that the program's next call finds them; and the waiting
//! queue is ordered by program (first come, first served by the program's first arrival), so a
//! returning program goes ahead of newer ones.
//!
//! The TTL, as modelled here: each tool's observed durations (from the answer that called it to
//! the program's next request, the last 256) decide; a tool whose mean is within the threshold
//! (2 s, the preview code's fixed rule as a reading of it describes) is pinned for the 90th
//! percentile of its durations (until it has one, for the threshold), a slower tool not at all.
//! The paper's later versions choose the TTL by a cost model (reload cost against the queueing a
//! recompute causes) that the public preview does not show; this rule is the approximation. The
//! next request's admission releases the pin (its blocks are then the request's), or the TTL
//! expires and the blocks go to the free queue as vLLM frees a finished request's. A tool is
//! named by the trace's `hints.wait.tool` (Continuum parses it from the answer); unnamed tools are
//! one class.

use std::collections::VecDeque;

use super::*;

/// Continuum's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct ContinuumConfig {
    /// Tools whose mean duration is at most this are pinned.
    pub threshold_ms: f64,
}

impl Default for ContinuumConfig {
    fn default() -> Self {
        Self { threshold_ms: 2_000.0 }
    }
}

/// Durations kept per tool.
const DURATIONS_KEPT: usize = 256;

#[derive(Default)]
pub(super) struct ContinuumState {
    /// Each tool's observed durations (ns), most recent last.
    durations: HashMap<u64, VecDeque<u64>>,
    /// A session's tool in flight: (tool, when the answer that called it ended).
    waits: HashMap<u32, (u64, u64)>,
    /// A session's pinned KV and when its TTL ends.
    pins: HashMap<u32, (SeqKv, u64)>,
    /// Each session's program start (its first arrival), for program-level FCFS.
    program_start: HashMap<u64, u64>,
}

impl ContinuumState {
    fn ttl_ns(&self, tool: u64, threshold_ns: u64) -> Option<u64> {
        let Some(seen) = self.durations.get(&tool).filter(|d| !d.is_empty()) else {
            return Some(threshold_ns);
        };
        let mean = seen.iter().sum::<u64>() / seen.len() as u64;
        if mean > threshold_ns {
            return None;
        }
        let mut sorted: Vec<u64> = seen.iter().copied().collect();
        sorted.sort_unstable();
        Some(sorted[(sorted.len() * 9 / 10).min(sorted.len() - 1)])
    }
}

impl Sim<'_> {
    /// Request `r` of session `s` (trace request `uid`) finished: with Continuum, an answer that
    /// calls a tool keeps its blocks pinned for the tool's TTL. Returns whether it did (the caller
    /// then does not free them).
    pub(super) fn continuum_pin(&mut self, r: usize, s: u32, uid: u32) -> bool {
        let Some(cfg) = &self.cfg.continuum else { return false };
        let threshold_ns = (cfg.threshold_ms * 1e6) as u64;
        let request = &self.trace.requests[uid as usize];
        if !request.tool_call {
            return false;
        }
        let tool = request
            .hints
            .wait
            .as_ref()
            .and_then(|w| w.tool.as_deref())
            .map_or(0, crate::tokens::hash_str);
        let now = self.now_ns;
        let state = self.continuum.as_mut().expect("continuum state with its config");
        state.waits.insert(s, (tool, now));
        let Some(ttl) = state.ttl_ns(tool, threshold_ns) else {
            return false;
        };
        // The request's blocks stay held by the pin (the request itself is done).
        let kv = SeqKv {
            blocks: std::mem::take(&mut self.reqs[r].kv.blocks),
            ..SeqKv::default()
        };
        if let Some((old, _)) = state.pins.insert(s, (kv, now + ttl)) {
            let mut old = old;
            self.kv.free(&mut old, &mut *self.policy);
        }
        self.result.pins += 1;
        true
    }

    /// Session `s` issued its next request: the tool it waited for took this long.
    pub(super) fn continuum_tool_returned(&mut self, s: u32) {
        let now = self.now_ns;
        let Some(state) = self.continuum.as_mut() else { return };
        let session = self.trace.sessions[s as usize].id;
        state.program_start.entry(session).or_insert(now);
        if let Some((tool, since)) = state.waits.remove(&s) {
            let seen = state.durations.entry(tool).or_default();
            if seen.len() == DURATIONS_KEPT {
                seen.pop_front();
            }
            seen.push_back(now.saturating_sub(since));
        }
    }

    /// Session `s`'s request was admitted (its hit counted the pinned blocks): the pin goes.
    pub(super) fn continuum_unpin(&mut self, s: u32) {
        let Some(state) = self.continuum.as_mut() else { return };
        if let Some((mut kv, _)) = state.pins.remove(&s) {
            self.kv.free(&mut kv, &mut *self.policy);
        }
    }

    /// Pins whose TTL ended by now go back to the free queue, oldest first.
    pub(super) fn continuum_expire(&mut self) {
        let now = self.now_ns;
        let Some(state) = self.continuum.as_mut() else { return };
        let mut due: Vec<(u64, u32)> = state
            .pins
            .iter()
            .filter(|(_, (_, until))| *until <= now)
            .map(|(&s, (_, until))| (*until, s))
            .collect();
        due.sort_unstable();
        for (_, s) in due {
            let (mut kv, _) = state.pins.remove(&s).expect("listed");
            self.kv.free(&mut kv, &mut *self.policy);
            self.result.pins_expired += 1;
        }
    }

    /// Nothing could be scheduled and the engine is empty: pins hold the blocks a waiting
    /// request needs. The engine idles until the first pin's TTL ends.
    pub(super) fn continuum_wait_for_pin(&mut self) -> bool {
        let Some(until) = self.continuum_next_expiry() else {
            return false;
        };
        let until = until.max(self.now_ns);
        self.account_working_set(until - self.now_ns);
        self.now_ns = until;
        self.continuum_expire();
        true
    }

    /// When the next pin expires (the replay wakes then when nothing else happens).
    pub(super) fn continuum_next_expiry(&self) -> Option<u64> {
        self.continuum.as_ref()?.pins.values().map(|(_, until)| *until).min()
    }

    /// Program-level FCFS: a request's place is its program's first arrival, then its own.
    pub(super) fn program_key(&self, r: usize) -> (u64, u64, usize) {
        let req = &self.reqs[r];
        let start = self
            .continuum
            .as_ref()
            .and_then(|c| c.program_start.get(&req.kv.session).copied())
            .unwrap_or(req.arrival_ns);
        (start, req.arrival_ns, r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policies::NativeLru as VllmLru;
    use crate::trace::Trace;

    /// `agent` calls a 20 ms tool between two calls of a 480-token context while `flood`
    /// sends unique prompts that churn the 59-block cache.
    fn trace() -> PreparedTrace {
        let mut lines = vec![
            r#"{"session": "agent", "agent": "agent", "after_ms": 0, "prompt": [{"seg": "agent/ctx", "tokens": 480}], "output_tokens": 2, "tool_call": true, "hints": {"wait": {"kind": "tool", "tool": "bash"}}}"#.to_string(),
            r#"{"session": "agent", "agent": "agent", "after_ms": 20, "prompt": [{"seg": "agent/ctx", "tokens": 480}, {"seg": "agent/obs", "tokens": 16}], "output_tokens": 2}"#.to_string(),
        ];
        for i in 0..6 {
            lines.push(format!(
                r#"{{"session": "flood{i}", "agent": "flood", "after_ms": {}, "prompt": [{{"seg": "flood/{i}", "tokens": 320}}], "output_tokens": 1}}"#,
                2 + 2 * i
            ));
        }
        PreparedTrace::new(&Trace::parse(&lines.join("\n")).unwrap(), 16, false)
    }

    /// Tokens hit in all (only the agent's second call can hit: every other prompt is unique)
    /// and pins set.
    fn second_call_hit(continuum: bool) -> (u64, u64) {
        let t = trace();
        let mut cfg = SimConfig::new(60);
        cfg.continuum = continuum.then(ContinuumConfig::default);
        let r = Sim::new(cfg, &t, &mut VllmLru).run().unwrap();
        (r.hit_tokens, r.pins)
    }

    #[test]
    fn a_pinned_context_survives_the_tool_call_that_lru_evicts() {
        let (lru_hits, lru_pins) = second_call_hit(false);
        let (pinned_hits, pins) = second_call_hit(true);
        assert_eq!(lru_pins, 0);
        assert_eq!(pins, 1, "one answer called a tool");
        // The second call's 480 cached tokens (30 blocks; at most 495 − 1 hittable) are hit
        // only with the pin: the flood evicted them under LRU.
        assert!(pinned_hits >= lru_hits + 480, "pinned {pinned_hits} vs LRU {lru_hits}");
    }
}

//! Where a live session goes next, and when: a walk of at most K calls over the agents' learned
//! successors, carrying each path's probability and its expected arrival time (the waits between
//! calls plus the calls' own service times).

use super::sessions::LiveSession;
use super::Model;

/// Paths less likely than this are not followed further: they add little and cost a walk.
const MIN_PATH_P: f32 = 0.02;
/// A predicted call is never expected sooner than this (ms): an overdue session's next call is
/// imminent, not in the past.
pub const MIN_LEAD_MS: f32 = 50.0;

impl Model {
    /// Milliseconds until the session's current call hands over to the next one: the rest of a
    /// running call's service time, or minus the time it has already waited since its call
    /// finished.
    pub(super) fn handover_ms(&self, s: &LiveSession, now_us: u64) -> f32 {
        if s.in_flight > 0 {
            let running = now_us.saturating_sub(s.arrived_us) as f32 / 1000.0;
            let service = self.agents.get(&s.agent).map_or(0.0, |a| a.service_ms);
            (service - running).max(0.0)
        } else {
            -(now_us.saturating_sub(s.finished_us) as f32 / 1000.0)
        }
    }

    /// Every call reachable from where session `s` is now, as `visit(agent, p, ms)`. A waiting
    /// session's next call is timed by the distribution of its agent's waits in its state (after
    /// a tool call, or after an answer) — the agent's own once it has enough of them, else every
    /// agent's pooled, else the mean gap — given how long it has waited: each path is weighted by
    /// the chance that a session that waited this long comes back at all, and expected after the
    /// remaining wait.
    pub(super) fn walk_session(&self, s: &LiveSession, now_us: u64, visit: &mut impl FnMut(u32, f32, f32)) {
        let Some(agent) = self.agents.get(&s.agent) else { return };
        let (state, k) = (usize::from(s.tool_wait), self.settings.k);
        let gaps = [&agent.gaps[state], &self.gaps[state]]
            .into_iter()
            .find(|h| h.trusted());
        let (Some(gaps), 0) = (gaps, s.in_flight) else {
            return self.walk(s.agent, 1.0, self.handover_ms(s, now_us), None, k, visit);
        };
        let waited = now_us.saturating_sub(s.finished_us) as f32 / 1000.0;
        // P(back | waited w) = q·S(w) / (q·S(w) + 1 − q), q = P(a next call) after this agent.
        let survival = gaps.survival(waited);
        let q: f32 = agent.next(self.settings.prior).map(|(_, p, _)| p).sum();
        let back = if q > 0.0 {
            survival / (q * survival + 1.0 - q)
        } else {
            0.0
        };
        let remaining = gaps.remaining_ms(waited, MIN_LEAD_MS);
        self.walk(s.agent, back, 0.0, Some(remaining), k, visit);
    }

    /// Every call reachable in at most `steps` calls from a call of `from` (reached with `p`)
    /// that hands over `start_ms` from now: each next call after its mean gap, or — `fixed_ms` —
    /// at that time.
    pub(super) fn walk(
        &self,
        from: u32,
        p: f32,
        start_ms: f32,
        fixed_ms: Option<f32>,
        steps: u32,
        visit: &mut impl FnMut(u32, f32, f32),
    ) {
        let Some(agent) = self.agents.get(&from) else { return };
        for (next, q, gap_ms) in agent.next(self.settings.prior) {
            let p = p * q;
            let ms = fixed_ms.unwrap_or(start_ms + gap_ms).max(MIN_LEAD_MS);
            visit(next, p, ms);
            if steps > 1 && p >= MIN_PATH_P {
                let service = self.agents.get(&next).map_or(0.0, |a| a.service_ms);
                self.walk(next, p, ms + service, None, steps - 1, visit);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::agents::entry;
    use super::*;
    use crate::settings::Settings;

    fn model(k: u32) -> Model {
        Model::new(&Settings {
            k,
            ..Settings::default()
        })
    }

    #[test]
    fn a_session_waiting_past_its_tool_waits_fades_instead_of_becoming_imminent() {
        let mut m = model(1);
        let a = entry(&mut m.agents, 8, 1).0;
        for _ in 0..20 {
            a.learn_successor(1, 2_000.0);
            a.gaps[1].record(2_000.0);
        }
        let mut s = LiveSession {
            id: 9,
            agent: 1,
            arrived_us: 0,
            finished_us: 1_000_000,
            in_flight: 0,
            tool_wait: true,
            prompt_tokens: 0,
        };
        let rate = |s: &LiveSession, waited_ms: u64| {
            let mut r = 0.0;
            let now = 1_000_000 + waited_ms * 1000;
            m.walk_session(s, now, &mut |_, p, ms| r += p / ms);
            r
        };
        let (fresh, late) = (rate(&s, 100), rate(&s, 30_000));
        assert!(fresh > 0.0);
        assert!(late < fresh / 100.0, "waited 15× its tool waits: {late} vs {fresh}");
        // Without waits to go by (after an answer: none seen), the mean gap calls it imminent.
        s.tool_wait = false;
        assert!(rate(&s, 30_000) > fresh);
    }

    #[test]
    fn a_pipeline_is_walked_with_probabilities_and_times() {
        let mut m = model(3);
        for _ in 0..3 {
            entry(&mut m.agents, 8, 1).0.learn_successor(2, 1000.0);
            entry(&mut m.agents, 8, 2).0.learn_successor(3, 500.0);
        }
        entry(&mut m.agents, 8, 2).0.service_ms = 200.0;
        let walk = |steps| {
            let mut seen = Vec::new();
            m.walk(1, 1.0, 0.0, None, steps, &mut |a, p, ms| seen.push((a, p, ms)));
            seen
        };
        let seen = walk(3);
        assert_eq!(seen.len(), 2);
        let ((a2, p2, ms2), (a3, p3, ms3)) = (seen[0], seen[1]);
        assert_eq!((a2, a3), (2, 3), "one step, then two");
        assert!((p2 - 0.75).abs() < 1e-6 && (ms2 - 1000.0).abs() < 1e-3);
        assert!((p3 - 0.5625).abs() < 1e-6 && (ms3 - 1700.0).abs() < 1e-3);
        // One step only with k = 1.
        assert_eq!(walk(1).len(), 1);
    }
}

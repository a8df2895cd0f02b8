//! Where a live session goes next, and when: a walk of at most K steps over the agents' learned
//! successors, carrying each path's probability and its expected arrival time (the gaps between
//! calls plus the calls' own service times).

use super::agents::AgentTable;
use super::gaps::GapHistogram;
use super::sessions::LiveSession;

/// Paths less likely than this are not followed further: they add little and cost a walk.
const MIN_PATH_P: f32 = 0.02;
/// A predicted call is never expected sooner than this (ms): an overdue session's next call is
/// imminent, not in the past.
pub const MIN_LEAD_MS: f32 = 50.0;

/// One predicted call: `agent`, with `p`, expected in `ms`, `steps` calls from now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Predicted {
    pub agent: u32,
    pub p: f32,
    pub ms: f32,
    pub steps: u32,
}

/// Milliseconds until the session's current call hands over to the next one: the rest of a
/// running call's service time, or minus the time it has already waited since its call finished.
pub fn handover_ms(agents: &AgentTable, s: &LiveSession, now_us: u64) -> f32 {
    if s.in_flight > 0 {
        let running = now_us.saturating_sub(s.arrived_us) as f32 / 1000.0;
        let service = agents.get(s.agent).map_or(0.0, |a| a.service_ms);
        (service - running).max(0.0)
    } else {
        -(now_us.saturating_sub(s.finished_us) as f32 / 1000.0)
    }
}

/// Every call reachable within `k` steps from where session `s` is now. A waiting session's next
/// call is timed by the distribution of its agent's gaps in its state (after a tool call, or
/// after an answer) — the agent's own once it has enough of them, else `pooled`, else the mean
/// gap — given how long it has waited: each path is weighted by the chance a session that waited
/// this long comes back at all, and expected the mean remaining wait from now. `pooled` = `None`:
/// mean gaps only (the first version of the model).
pub fn walk_session(
    agents: &AgentTable,
    pooled: Option<&[GapHistogram; 2]>,
    prior: f32,
    k: u32,
    s: &LiveSession,
    now_us: u64,
    visit: &mut impl FnMut(Predicted),
) {
    let Some(agent) = agents.get(s.agent) else { return };
    let state = usize::from(s.tool_wait);
    let gaps = pooled.and_then(|pooled| [&agent.gaps[state], &pooled[state]].into_iter().find(|h| h.trusted()));
    let (Some(gaps), 0) = (gaps, s.in_flight) else {
        let start = handover_ms(agents, s, now_us);
        walk(agents, prior, k, s.agent, start, visit);
        return;
    };
    let waited = now_us.saturating_sub(s.finished_us) as f32 / 1000.0;
    // P(back | waited w) = q·S(w) / (q·S(w) + 1 − q), q = P(a next call) after this agent.
    let survival = gaps.survival(waited);
    let q: f32 = agent.next(prior).map(|(_, p, _)| p).sum();
    let back = if q > 0.0 {
        survival / (q * survival + 1.0 - q)
    } else {
        0.0
    };
    let ms = gaps.remaining_ms(waited, MIN_LEAD_MS);
    for (next, p, _) in agent.next(prior) {
        let p = p * back;
        visit(Predicted {
            agent: next,
            p,
            ms,
            steps: 1,
        });
        if k > 1 && p >= MIN_PATH_P {
            let service = agents.get(next).map_or(0.0, |a| a.service_ms);
            step(agents, prior, k, next, p, ms + service, 2, visit);
        }
    }
}

/// Every call reachable within `k` steps from `from`, starting `start_ms` from now.
pub fn walk(agents: &AgentTable, prior: f32, k: u32, from: u32, start_ms: f32, visit: &mut impl FnMut(Predicted)) {
    step(agents, prior, k, from, 1.0, start_ms, 1, visit);
}

#[allow(clippy::too_many_arguments)]
fn step(
    agents: &AgentTable,
    prior: f32,
    k: u32,
    from: u32,
    p: f32,
    start_ms: f32,
    steps: u32,
    visit: &mut impl FnMut(Predicted),
) {
    let Some(agent) = agents.get(from) else { return };
    for (next, q, gap_ms) in agent.next(prior) {
        let p = p * q;
        let ms = (start_ms + gap_ms).max(MIN_LEAD_MS);
        visit(Predicted {
            agent: next,
            p,
            ms,
            steps,
        });
        if steps < k && p >= MIN_PATH_P {
            let service = agents.get(next).map_or(0.0, |a| a.service_ms);
            step(agents, prior, k, next, p, ms + service, steps + 1, visit);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scaled::sessions::LiveSession;

    #[test]
    fn a_session_waiting_past_its_tool_waits_fades_instead_of_becoming_imminent() {
        let mut t = AgentTable::new(8);
        let a = t.entry(1).0;
        for _ in 0..20 {
            a.learn_successor(1, 2_000.0);
            a.gaps[1].record(2_000.0);
        }
        let s = LiveSession {
            id: 9,
            agent: 1,
            arrived_us: 0,
            finished_us: 1_000_000,
            in_flight: 0,
            tool_wait: true,
            prompt_tokens: 0,
        };
        let rate = |waited_ms: u64| {
            let mut r = 0.0;
            let now = 1_000_000 + waited_ms * 1000;
            walk_session(&t, Some(&Default::default()), 1.0, 1, &s, now, &mut |p| r += p.p / p.ms);
            r
        };
        let (fresh, late) = (rate(100), rate(30_000));
        assert!(fresh > 0.0);
        assert!(late < fresh / 100.0, "waited 15× its tool waits: {late} vs {fresh}");
        // The mean-gap walk would call it imminent.
        let mut old = 0.0;
        walk(&t, 1.0, 1, 1, -30_000.0, &mut |p| old += p.p / p.ms);
        assert!(old > fresh, "{old}");
    }

    #[test]
    fn a_pipeline_is_walked_with_probabilities_and_times() {
        let mut t = AgentTable::new(8);
        for _ in 0..3 {
            t.entry(1).0.learn_successor(2, 1000.0);
            t.entry(2).0.learn_successor(3, 500.0);
        }
        t.entry(2).0.service_ms = 200.0;
        let mut seen = Vec::new();
        walk(&t, 1.0, 3, 1, 0.0, &mut |p| seen.push(p));
        assert_eq!(seen.len(), 2);
        assert_eq!((seen[0].agent, seen[0].steps), (2, 1));
        assert!((seen[0].p - 0.75).abs() < 1e-6 && (seen[0].ms - 1000.0).abs() < 1e-3);
        assert_eq!((seen[1].agent, seen[1].steps), (3, 2));
        assert!((seen[1].p - 0.5625).abs() < 1e-6 && (seen[1].ms - 1700.0).abs() < 1e-3);
        // Two steps only with k = 1.
        let mut short = Vec::new();
        walk(&t, 1.0, 1, 1, 0.0, &mut |p| short.push(p));
        assert_eq!(short.len(), 1);
    }
}

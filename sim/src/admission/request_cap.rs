//! agentrt today: `serve --upstream-max-in-flight N` — at most N requests in flight upstream, the
//! rest waiting in the proxy, tenants taking turns at freed places (every tenant of weight 1), a
//! tenant's own requests in arrival order (no `admission` slot). It counts requests, so it cannot
//! see the idle sessions whose blocks a new request's prefill evicts.

use std::collections::{BTreeMap, VecDeque};

use super::{AdmissionStage, Answer, EngineView, FairTurns, Offer, StageFigures};
use crate::prepare::PreparedTrace;

/// The cap an operator sizes to the cache: as many requests as the cache holds at the trace's
/// mean prompt length (capacity ÷ mean prompt tokens), at least 1 — fixed from the trace before
/// any replay, never tuned on results.
pub fn sized_to_cache(trace: &PreparedTrace, num_blocks: usize) -> usize {
    let requests = trace.requests.len().max(1) as f64;
    let mean_prompt = trace.prompt_tokens() as f64 / requests;
    ((num_blocks * trace.block_size) as f64 / mean_prompt.max(1.0))
        .floor()
        .max(1.0) as usize
}

pub struct RequestCap {
    max_in_flight: usize,
    in_flight: usize,
    /// Per tenant, its waiting requests' sessions with their arrival times, oldest first.
    lines: BTreeMap<u16, VecDeque<(u64, u64)>>,
    turns: FairTurns,
    figures: StageFigures,
}

impl RequestCap {
    pub fn new(max_in_flight: usize) -> Self {
        Self {
            max_in_flight: max_in_flight.max(1),
            in_flight: 0,
            lines: BTreeMap::new(),
            turns: FairTurns::default(),
            figures: StageFigures::default(),
        }
    }

    fn waiting(&self) -> bool {
        self.lines.values().any(|line| !line.is_empty())
    }
}

impl AdmissionStage for RequestCap {
    fn name(&self) -> String {
        format!("cap:{}", self.max_in_flight)
    }

    fn offer(&mut self, offer: &Offer, _engine: &EngineView) -> bool {
        if self.in_flight < self.max_in_flight && !self.waiting() {
            self.in_flight += 1;
            return true;
        }
        let line = self.lines.entry(offer.tenant).or_default();
        if line.is_empty() {
            self.turns.join(offer.tenant);
        }
        line.push_back((offer.session, offer.at_us));
        false
    }

    fn answered(&mut self, _answer: &Answer, _engine: &EngineView) {
        self.in_flight = self.in_flight.saturating_sub(1);
    }

    fn release(&mut self, now_us: u64, _engine: &EngineView) -> Vec<u64> {
        let mut out = Vec::new();
        while self.in_flight < self.max_in_flight {
            let waiting = self.lines.iter().filter(|(_, l)| !l.is_empty()).map(|(t, _)| *t);
            let Some(tenant) = self.turns.next(waiting) else { break };
            let (session, since) = self
                .lines
                .get_mut(&tenant)
                .and_then(VecDeque::pop_front)
                .expect("it waits");
            self.turns.gave(tenant, 1.0);
            self.in_flight += 1;
            self.figures.requests_waited += 1;
            self.figures.max_wait_us = self.figures.max_wait_us.max(now_us.saturating_sub(since));
            out.push(session);
        }
        out
    }

    fn next_check_us(&self) -> Option<u64> {
        None
    }

    fn figures(&self) -> StageFigures {
        self.figures.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offer(session: u64, tenant: u16) -> Offer {
        Offer {
            session,
            tenant,
            agent: 1,
            prompt_tokens: 100,
            anchor_tokens: 0,
            anchor_hash: 0,
            at_us: 0,
        }
    }

    fn answer(session: u64) -> Answer {
        Answer {
            session,
            tenant: 0,
            prompt_tokens: 100,
            cached_tokens: 0,
            output_tokens: 10,
            prefill_us: 1,
            decode_us: 1,
            asked_tool: false,
            at_us: 1,
        }
    }

    #[test]
    fn at_most_n_in_flight_and_freed_places_alternate_between_tenants() {
        let engine = EngineView::default();
        let mut cap = RequestCap::new(2);
        assert!(cap.offer(&offer(1, 0), &engine));
        assert!(cap.offer(&offer(2, 0), &engine));
        // Full: tenant 0 queues three, tenant 1 one after them.
        for s in [3, 4, 5] {
            assert!(!cap.offer(&offer(s, 0), &engine));
        }
        assert!(!cap.offer(&offer(9, 1), &engine));
        assert!(cap.release(0, &engine).is_empty(), "no place is free");
        cap.answered(&answer(1), &engine);
        cap.answered(&answer(2), &engine);
        let released = cap.release(10, &engine);
        assert_eq!(released.len(), 2);
        assert!(
            released.contains(&9),
            "tenant 1 gets one of the two places: {released:?}"
        );
        assert_eq!(cap.figures().requests_waited, 2);
    }
}

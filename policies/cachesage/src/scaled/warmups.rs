//! What the model's warm-ups turned out to be worth, and how far to trust its next ones.
//!
//! A warm-up is a bet that the agent calls again while its freshly computed anchor is still
//! cached. The model prices it with its predicted probability `p` that the agent is next; when the
//! bet loses, the warm-up's prefill displaced blocks other requests would have hit. The model's
//! `p` says whether the agent comes, not whether the anchor survives until it does, so it can be
//! confident and still lose most bets: on Claude Code conversations (kv-cache-tester's, at 2.5 %
//! of the distinct blocks) warm-ups predicted at p ≈ 0.94 found their anchor still cached at the
//! agent's next call for a quarter to two fifths of them, and cost 0.2 pp of hit rate.
//!
//! So the ledger keeps score the way feedback-directed prefetchers do (prefetch accuracy, used
//! to throttle): each warm-up is resolved at its agent's next call — *used* if the whole anchor
//! is cached then, *lost* if not (or if the agent was warmed again first, because its anchor was
//! gone). The calibration `(used + PRIOR) / (Σ p + PRIOR)` scales the model's probability and
//! expected use when it next decides: a model whose bets pay as it says keeps warming as before;
//! one whose bets lose warms less, and none once `calibration · p` falls under the threshold.
//! The calibration is capped at 1: it only ever holds back warm-ups the model would issue.
//!
//! A throttled model issues no warm-ups and so would learn nothing more; the evidence ages
//! instead, one step per call of an agent the calibration kept from being warmed — an
//! opportunity that came and went — so after enough of them the prior speaks again and a few
//! warm-ups test whether the traffic changed. Bounded: one entry per tracked agent.

use std::collections::HashMap;

/// Pseudo-warm-ups that paid off as predicted: the ledger starts by trusting the model.
const PRIOR: f32 = 4.0;
/// Share of the evidence forgotten at each missed opportunity (see the module doc).
const FORGET: f32 = 1.0 / 64.0;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Outstanding {
    /// A warm-up was issued with this predicted probability.
    Issued(f32),
    /// The calibration kept the model from warming this agent.
    Withheld,
}

/// Warm-ups issued and not yet resolved, and the score of those resolved.
#[derive(Debug, Clone, Default)]
pub struct WarmupLedger {
    outstanding: HashMap<u32, Outstanding>,
    /// Σ p over resolved warm-ups.
    predicted: f32,
    /// Resolved warm-ups whose anchor was cached at the agent's next call.
    used: f32,
}

impl WarmupLedger {
    /// How far the model's warm-up bets are to be trusted: 1 while they pay as predicted, less as
    /// they lose. Never above 1: the ledger only ever holds back warm-ups the model would issue —
    /// the guard judges rankings, not warm-ups, so nothing else would catch a bolder model's
    /// losses.
    pub fn calibration(&self) -> f32 {
        ((self.used + PRIOR) / (self.predicted + PRIOR)).min(1.0)
    }

    /// A warm-up of `agent`'s anchor was issued at predicted probability `p`. One still
    /// outstanding is lost: the agent is warmed again because its anchor is gone.
    pub fn issued(&mut self, agent: u32, p: f32) {
        if let Some(Outstanding::Issued(before)) = self.outstanding.insert(agent, Outstanding::Issued(p)) {
            self.predicted += before;
        }
    }

    /// The model would have warmed `agent` but for the calibration.
    pub fn withheld(&mut self, agent: u32) {
        self.outstanding.entry(agent).or_insert(Outstanding::Withheld);
    }

    /// `agent` called (not a warm-up); `anchor_cached`: its whole anchor is in the cache as the
    /// call arrives.
    pub fn called(&mut self, agent: u32, anchor_cached: bool) {
        match self.outstanding.remove(&agent) {
            Some(Outstanding::Issued(p)) => {
                self.predicted += p;
                if anchor_cached {
                    self.used += 1.0;
                }
            }
            Some(Outstanding::Withheld) => {
                self.predicted *= 1.0 - FORGET;
                self.used *= 1.0 - FORGET;
            }
            None => {}
        }
    }

    /// The agent table dropped `agent`: its outstanding bet is never resolved.
    pub fn forget_agent(&mut self, agent: u32) {
        self.outstanding.remove(&agent);
    }

    pub fn outstanding(&self) -> usize {
        self.outstanding.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 100 warm-ups of agents 0–99, each predicted at `p` and resolved at its agent's call,
    /// the anchor cached there when `cached(agent)`.
    fn resolve_100(ledger: &mut WarmupLedger, p: f32, cached: impl Fn(u32) -> bool) {
        for agent in 0..100 {
            ledger.issued(agent, p);
            ledger.called(agent, cached(agent));
        }
    }

    #[test]
    fn warm_ups_that_pay_as_predicted_keep_the_models_probability() {
        let mut ledger = WarmupLedger::default();
        resolve_100(&mut ledger, 0.5, |agent| agent % 2 == 0);
        assert!((ledger.calibration() - 1.0).abs() < 0.01, "{}", ledger.calibration());
        // Bets that pay more often than predicted do not make the model bolder.
        resolve_100(&mut ledger, 0.2, |_| true);
        assert_eq!(ledger.calibration(), 1.0);
    }

    #[test]
    fn warm_ups_whose_anchor_is_gone_at_the_call_scale_the_bets_down() {
        let mut ledger = WarmupLedger::default();
        // One in four finds its anchor still cached.
        resolve_100(&mut ledger, 0.95, |agent| agent % 4 == 0);
        let c = ledger.calibration();
        assert!((0.25..0.35).contains(&c), "{c}");
        // A second warm-up of an agent before it called means the first was lost.
        ledger.issued(7, 0.9);
        ledger.issued(7, 0.9);
        assert!(ledger.calibration() < c);
        assert_eq!(ledger.outstanding(), 1);
    }

    #[test]
    fn missed_opportunities_age_the_evidence_back_to_the_prior() {
        let mut ledger = WarmupLedger::default();
        resolve_100(&mut ledger, 1.0, |_| false);
        assert!(ledger.calibration() < 0.05);
        // A call without a withheld warm-up before it ages nothing.
        ledger.called(1000, true);
        assert!(ledger.calibration() < 0.05);
        for round in 0..400 {
            ledger.withheld(round % 5);
            ledger.called(round % 5, false);
        }
        assert!(ledger.calibration() > 0.5, "{}", ledger.calibration());
        ledger.forget_agent(3);
        assert_eq!(ledger.outstanding(), 0);
    }
}

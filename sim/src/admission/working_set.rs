//! agentrt's working-set admission in front of the modelled engine: the decision is the
//! `agentrt-admission` crate's (the same one `serve`'s queue calls), the sessions' scores come
//! from the tenant's `admission` slot — a real policy component (`working-set` by default) run
//! through the host, hearing what a slot hears — and the cache is ranked with the held-first
//! rule ([`super::held_first`]) in front of the replay's cache policy.
//!
//! What the slot hears, as `serve` tells it: every event of the replay but the engine's
//! `request-arrival`, which it hears when the call reaches the proxy instead (before the
//! admission decision, as `serve` queues it); the tool wait a response that asks for a tool
//! implies (`session-wait`, not hinted); `engine-capacity` after each rebalance. Its `score` is
//! asked for the candidate sessions once per rebalance; when it fails, every score is 0.
//!
//! A client's release call (ThunderAgent's `POST /programs/release`, which `serve` reads as a
//! closing hint) ends its session at once, unless the arm says `releases=false`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use agentrt_admission::{Answered, Arrival, Candidate, EngineNow, EvictionClass, Settings, Verdict, WorkingSet};
use agentrt_runtime::types::{EndReason, Event, Item, RequestArrival};

use super::held_first::EvictionClasses;
use super::{AdmissionStage, Answer, EngineView, Offer, StageFigures};
use crate::policies::{SimPolicy, WasmPolicy};

pub struct WorkingSetStage {
    decision: WorkingSet,
    /// Whether the clients' release calls are heard (closings otherwise come from hints and the
    /// idle rule only).
    releases: bool,
    slot: Option<WasmPolicy>,
    classes: Rc<RefCell<EvictionClasses>>,
    next_request_id: u64,
    /// The slot's score calls that failed (every score 0 then).
    pub failed_scores: u64,
}

impl WorkingSetStage {
    /// Working-set admission with `settings`, scored by `slot` (none: every score 0), sharing
    /// its eviction classes with the ranker through `classes`.
    pub fn new(
        settings: Settings,
        releases: bool,
        slot: Option<WasmPolicy>,
        classes: Rc<RefCell<EvictionClasses>>,
    ) -> Self {
        Self {
            decision: WorkingSet::new(settings),
            releases,
            slot,
            classes,
            next_request_id: 1 << 62,
            failed_scores: 0,
        }
    }

    fn tell(&mut self, event: Event) {
        if let Some(slot) = &mut self.slot {
            slot.event(event);
        }
    }

    /// Bring the ranker's classes up to date with the ledger.
    fn publish_classes(&mut self) {
        let mut c = self.classes.borrow_mut();
        c.first.clear();
        c.keep.clear();
        for (id, _) in self.decision.ledger().sessions() {
            match self.decision.eviction_class(id) {
                EvictionClass::First => {
                    c.first.insert(id);
                }
                EvictionClass::Keep => {
                    c.keep.insert(id);
                }
                EvictionClass::Policy => {}
            }
        }
    }

    fn scores(&mut self) -> HashMap<u64, f32> {
        let candidates = self.decision.candidates();
        let Some(slot) = &mut self.slot else {
            return HashMap::new();
        };
        if candidates.is_empty() {
            return HashMap::new();
        }
        slot.flush();
        let items: Vec<Item> = candidates.iter().map(Candidate::item).collect();
        match slot.handle().score(&items) {
            Ok(scores) => candidates.iter().map(|c| c.session).zip(scores).collect(),
            Err(_) => {
                self.failed_scores += 1;
                HashMap::new()
            }
        }
    }
}

impl AdmissionStage for WorkingSetStage {
    fn name(&self) -> String {
        "working-set".into()
    }

    fn offer(&mut self, offer: &Offer, engine: &EngineView) -> bool {
        self.decision.set_capacity(engine.capacity_tokens());
        self.next_request_id += 1;
        self.tell(Event::RequestArrival(RequestArrival {
            request_id: self.next_request_id,
            agent: offer.agent,
            session: offer.session,
            anchor_hash: offer.anchor_hash,
            prompt_tokens: offer.prompt_tokens,
            continues: None,
            warmup: false,
            at_us: offer.at_us,
        }));
        let verdict = self.decision.arrive(
            &Arrival {
                session: offer.session,
                tenant: u32::from(offer.tenant),
                agent: offer.agent,
                anchor_hash: offer.anchor_hash,
                anchor_tokens: offer.anchor_tokens,
                prompt_tokens: offer.prompt_tokens,
            },
            offer.at_us,
        );
        self.publish_classes();
        verdict == Verdict::Admit
    }

    fn answered(&mut self, answer: &Answer, _engine: &EngineView) {
        self.decision.answer(
            &Answered {
                session: answer.session,
                prompt_tokens: answer.prompt_tokens,
                cached_tokens: answer.cached_tokens,
                output_tokens: answer.output_tokens,
                prefill_us: answer.prefill_us,
                decode_us: answer.decode_us,
            },
            answer.at_us,
        );
        self.publish_classes();
    }

    fn program_released(&mut self, session: u64, at_us: u64) {
        if self.releases {
            self.decision.close(session, at_us);
            self.publish_classes();
        }
    }

    fn event(&mut self, event: &Event) {
        match event {
            // The slot heard this call when it reached the proxy.
            Event::RequestArrival(r) if !r.warmup => {}
            Event::SessionEnd(e) => {
                if e.reason == EndReason::Closed {
                    self.decision.close(e.session, e.at_us);
                } else {
                    self.decision.idle_end(e.session, e.at_us);
                }
                self.tell(event.clone());
            }
            _ => self.tell(event.clone()),
        }
    }

    fn release(&mut self, now_us: u64, engine: &EngineView) -> Vec<u64> {
        self.decision.set_capacity(engine.capacity_tokens());
        if !self.decision.due(now_us) {
            return Vec::new();
        }
        let scores = self.scores();
        let now = EngineNow {
            running: engine.running,
            waiting: engine.waiting,
        };
        let released = self.decision.rebalance(now_us, now, &scores);
        self.publish_classes();
        let capacity = self.decision.capacity_report().event(now_us);
        self.tell(capacity);
        released
    }

    fn next_check_us(&self) -> Option<u64> {
        self.decision.next_due_us()
    }

    fn resident_tokens(&self) -> Option<u64> {
        Some(self.decision.resident_tokens())
    }

    fn figures(&self) -> StageFigures {
        let f = self.decision.figures();
        StageFigures {
            sessions_held: f.sessions_held,
            holds: f.holds,
            requests_waited: f.calls_waited,
            max_wait_us: f.max_wait_us,
            forced_resumes: f.forced_resumes,
            checks: f.rebalances,
            checks_not_paying: f.gate_closed,
        }
    }
}

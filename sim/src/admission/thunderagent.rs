//! ThunderAgent's `tr` scheduler (arXiv 2602.13692; ThunderAgent-org/ThunderAgent, read at commit
//! a7eef77: `scheduler/router.py`, `backend/state.py`), written here from its code's rules for one
//! vLLM backend:
//!
//! - A program is REASONING while a request of it is in flight, ACTING otherwise (a tool, a user,
//!   a dead client: it cannot tell). Its size is its last answer's `total_tokens` (prompt +
//!   output), or, when a request arrives, the request's own size (its code estimates it from the
//!   body's characters; the replay uses the prompt's tokens, an approximation in its favour).
//! - The ledger: reasoning tokens + 1.0 × acting tokens + 100 per active program, against the
//!   capacity read from `vllm:cache_config_info` (blocks × block size). Shared prefixes are not
//!   subtracted: its `shared_tokens` is never updated in that code, so it stays 0.
//! - A new program goes at once only if no program waits and the ledger has room for it + 100;
//!   otherwise it waits in the one global queue.
//! - Every 5 s: first resume, then pause. Resume: paused programs in three groups — with a
//!   request waiting (not new), new, without a request — each smallest first, as many as fit the
//!   remaining capacity, each + 100 (the decay variant counts acting programs at 2^-t, t = seconds
//!   since they went acting, for this step only). Pause while over capacity: acting programs
//!   smallest first at once; then reasoning ones smallest first, *marked* — paused when their
//!   answer ends. Marking does not lower the ledger in that code, so once no acting program is
//!   left every reasoning program is marked (kept here as it is).
//! - A paused program's request waits for a resume; one that waited 1,800 s is resumed anyway.
//! - A program leaves only on `POST /programs/release` ([`AdmissionStage::program_released`]); its clients
//!   send it when the task ends, and so does the replay.
//!
//! Approximations: one backend (no best-fit across replicas); checks on the simulated clock
//! exactly every 5 s from the first request; the size estimate above.

use std::collections::HashMap;

use super::{AdmissionStage, Answer, EngineView, Offer, StageFigures};

/// Seconds between checks (its `scheduler_interval`).
const CHECK_US: u64 = 5_000_000;
/// Tokens reserved per active program (`BUFFER_PER_PROGRAM`).
const BUFFER_PER_PROGRAM: i64 = 100;
/// A paused request is resumed anyway after this long (`_wait_for_resume`'s timeout).
const FORCED_RESUME_US: u64 = 1_800_000_000;
/// Weight of acting programs' tokens (`acting_token_weight`).
const ACTING_WEIGHT: f64 = 1.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Reasoning,
    Acting,
}

#[derive(Debug, Clone)]
struct Program {
    status: Status,
    /// Registered with the backend (ACTIVE) or in the global queue (PAUSED).
    active: bool,
    total_tokens: i64,
    step_count: u32,
    marked_for_pause: bool,
    acting_since_us: u64,
    /// When its held request arrived (a paused program with a request waiting).
    waiting_since_us: Option<u64>,
    /// When it entered the paused pool (its order among equals).
    paused_at_us: u64,
}

pub struct ThunderAgent {
    decay: bool,
    programs: HashMap<u64, Program>,
    next_check_us: Option<u64>,
    figures: StageFigures,
    held_once: std::collections::HashSet<u64>,
}

impl ThunderAgent {
    pub fn new(decay: bool) -> Self {
        Self {
            decay,
            programs: HashMap::new(),
            next_check_us: None,
            figures: StageFigures::default(),
            held_once: Default::default(),
        }
    }

    fn active(&self) -> impl Iterator<Item = &Program> {
        self.programs.values().filter(|p| p.active)
    }

    /// `remaining_capacity()` (or `remaining_capacity_with_decay()` at `now_us`).
    fn remaining(&self, engine: &EngineView, decayed_at_us: Option<u64>) -> i64 {
        let mut tokens = 0.0;
        let mut count = 0;
        for p in self.active() {
            count += 1;
            tokens += match (p.status, decayed_at_us) {
                (Status::Reasoning, _) => p.total_tokens as f64,
                (Status::Acting, None) => ACTING_WEIGHT * p.total_tokens as f64,
                (Status::Acting, Some(now)) => {
                    let t = now.saturating_sub(p.acting_since_us) as f64 / 1e6;
                    p.total_tokens as f64 * 2f64.powf(-t)
                }
            };
        }
        engine.capacity_tokens() as i64 - (tokens as i64 + BUFFER_PER_PROGRAM * count)
    }

    fn queue_is_empty(&self) -> bool {
        !self.programs.values().any(|p| !p.active)
    }

    fn pause(&mut self, session: u64, now_us: u64) {
        let p = self.programs.get_mut(&session).expect("known program");
        p.active = false;
        p.marked_for_pause = false;
        p.paused_at_us = now_us;
        self.figures.holds += 1;
        if self.held_once.insert(session) {
            self.figures.sessions_held += 1;
        }
    }

    /// `_scheduled_check`: resume, then pause while over capacity. Returns the resumed programs
    /// that have a request waiting.
    fn check(&mut self, now_us: u64, engine: &EngineView) -> Vec<u64> {
        let released = self.greedy_resume(now_us, engine);
        self.pause_until_safe(now_us, engine);
        released
    }

    fn greedy_resume(&mut self, now_us: u64, engine: &EngineView) -> Vec<u64> {
        let mut capacity = self.remaining(engine, self.decay.then_some(now_us));
        if capacity <= BUFFER_PER_PROGRAM {
            return Vec::new();
        }
        let mut paused: Vec<(u8, i64, u64, u64)> = self
            .programs
            .iter()
            .filter(|(_, p)| !p.active)
            .map(|(&s, p)| {
                let group = if p.step_count == 1 {
                    1 // new
                } else if p.status == Status::Reasoning {
                    0 // a request waits
                } else {
                    2 // acting, no request
                };
                (group, p.total_tokens, p.paused_at_us, s)
            })
            .collect();
        paused.sort_unstable();
        let mut released = Vec::new();
        for (_, tokens, _, session) in paused {
            let required = tokens + BUFFER_PER_PROGRAM;
            if required > capacity {
                continue;
            }
            capacity -= required;
            self.resume(session, now_us, &mut released);
        }
        released
    }

    fn resume(&mut self, session: u64, now_us: u64, released: &mut Vec<u64>) {
        let p = self.programs.get_mut(&session).expect("known program");
        p.active = true;
        if let Some(since) = p.waiting_since_us.take() {
            self.figures.requests_waited += 1;
            self.figures.max_wait_us = self.figures.max_wait_us.max(now_us.saturating_sub(since));
            released.push(session);
        }
    }

    fn pause_until_safe(&mut self, now_us: u64, engine: &EngineView) {
        while self.remaining(engine, None) < 0 {
            let smallest = |status: Status, programs: &HashMap<u64, Program>| {
                programs
                    .iter()
                    .filter(|(_, p)| p.active && p.status == status && !p.marked_for_pause)
                    .min_by_key(|(&s, p)| (p.total_tokens, s))
                    .map(|(&s, _)| s)
            };
            if let Some(s) = smallest(Status::Acting, &self.programs) {
                self.pause(s, now_us);
            } else if let Some(s) = smallest(Status::Reasoning, &self.programs) {
                self.programs.get_mut(&s).expect("found").marked_for_pause = true;
            } else {
                break;
            }
        }
    }
}

impl AdmissionStage for ThunderAgent {
    fn name(&self) -> String {
        if self.decay {
            "thunderagent-decay".into()
        } else {
            "thunderagent".into()
        }
    }

    fn offer(&mut self, offer: &Offer, engine: &EngineView) -> bool {
        self.next_check_us.get_or_insert(offer.at_us + CHECK_US);
        let queue_empty = self.queue_is_empty();
        let fits_new = self.remaining(engine, None) >= i64::from(offer.prompt_tokens) + BUFFER_PER_PROGRAM;
        let p = self.programs.entry(offer.session).or_insert(Program {
            status: Status::Reasoning,
            active: false,
            total_tokens: 0,
            step_count: 0,
            marked_for_pause: false,
            acting_since_us: offer.at_us,
            waiting_since_us: None,
            paused_at_us: offer.at_us,
        });
        p.step_count += 1;
        p.total_tokens = i64::from(offer.prompt_tokens);
        p.status = Status::Reasoning;
        if p.step_count == 1 {
            if queue_empty && fits_new {
                p.active = true;
                return true;
            }
            p.waiting_since_us = Some(offer.at_us);
            p.paused_at_us = offer.at_us;
            self.figures.holds += 1;
            if self.held_once.insert(offer.session) {
                self.figures.sessions_held += 1;
            }
            return false;
        }
        if !p.active {
            p.waiting_since_us = Some(offer.at_us);
            return false;
        }
        true
    }

    fn answered(&mut self, answer: &Answer, _engine: &EngineView) {
        let Some(p) = self.programs.get_mut(&answer.session) else {
            return;
        };
        p.status = Status::Acting;
        p.acting_since_us = answer.at_us;
        p.total_tokens = i64::from(answer.prompt_tokens) + i64::from(answer.output_tokens);
        if p.marked_for_pause {
            self.pause(answer.session, answer.at_us);
        }
    }

    fn program_released(&mut self, session: u64, _at_us: u64) {
        self.programs.remove(&session);
    }

    fn release(&mut self, now_us: u64, engine: &EngineView) -> Vec<u64> {
        let mut released = Vec::new();
        if self.next_check_us.is_some_and(|t| now_us >= t) {
            released = self.check(now_us, engine);
            // The loop sleeps 5 s after each check: checks fall on the 5 s grid from the first.
            let t = self.next_check_us.expect("set");
            self.next_check_us = Some(t + (now_us - t) / CHECK_US * CHECK_US + CHECK_US);
        }
        // `_wait_for_resume`'s timeout: a request paused 1,800 s is resumed regardless.
        let overdue: Vec<(Option<u64>, u64)> = self
            .programs
            .iter()
            .filter(|(_, p)| !p.active && p.waiting_since_us.is_some_and(|t| now_us >= t + FORCED_RESUME_US))
            .map(|(&s, p)| (p.waiting_since_us, s))
            .collect();
        let mut overdue = overdue;
        overdue.sort_unstable();
        for (_, s) in overdue {
            self.figures.forced_resumes += 1;
            self.resume(s, now_us, &mut released);
        }
        released
    }

    fn next_check_us(&self) -> Option<u64> {
        if self.programs.is_empty() {
            return None;
        }
        let forced = self
            .programs
            .values()
            .filter_map(|p| (!p.active).then_some(p.waiting_since_us?.saturating_add(FORCED_RESUME_US)))
            .min();
        match (self.next_check_us, forced) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn resident_tokens(&self) -> Option<u64> {
        Some(self.active().map(|p| p.total_tokens.max(0) as u64).sum())
    }

    fn figures(&self) -> StageFigures {
        self.figures.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine(blocks: u32) -> EngineView {
        EngineView {
            total_blocks: blocks,
            block_size: 16,
            ..EngineView::default()
        }
    }

    fn offer(session: u64, tokens: u32, at_us: u64) -> Offer {
        Offer {
            session,
            tenant: 0,
            agent: 1,
            prompt_tokens: tokens,
            anchor_tokens: 0,
            anchor_hash: 0,
            at_us,
        }
    }

    fn answer(session: u64, tokens: u32, at_us: u64) -> Answer {
        Answer {
            session,
            tenant: 0,
            prompt_tokens: tokens,
            cached_tokens: 0,
            output_tokens: 0,
            prefill_us: 1,
            decode_us: 1,
            asked_tool: true,
            at_us,
        }
    }

    #[test]
    fn a_new_program_that_does_not_fit_waits_for_the_five_second_check() {
        // 100 blocks of 16 = 1,600 tokens.
        let e = engine(100);
        let mut ta = ThunderAgent::new(false);
        assert!(ta.offer(&offer(1, 1000, 0), &e));
        // 1,000 + 100 used: a 600-token program does not fit (600 + 100 > 500).
        assert!(!ta.offer(&offer(2, 600, 1_000), &e));
        // Program 1 finishes and is released: nothing happens before the check.
        ta.answered(&answer(1, 1000, 2_000), &e);
        ta.program_released(1, 2_000);
        assert!(ta.release(3_000_000, &e).is_empty());
        assert_eq!(ta.next_check_us(), Some(5_000_000));
        assert_eq!(ta.release(5_000_000, &e), vec![2]);
        assert_eq!(ta.figures().max_wait_us, 4_999_000);
    }

    #[test]
    fn over_capacity_it_pauses_acting_programs_smallest_first_and_marks_reasoning_ones() {
        let e = engine(200); // 3,200 tokens
        let mut ta = ThunderAgent::new(false);
        for (s, tokens) in [(1, 900), (2, 700), (3, 1200)] {
            assert!(ta.offer(&offer(s, tokens, 0), &e));
        }
        // 1 and 2 go acting, grown; 3 still reasons. 1,500 + 1,000 + 1,200 + 300 > 3,200.
        ta.answered(&answer(1, 1500, 10), &e);
        ta.answered(&answer(2, 1000, 10), &e);
        assert!(ta.release(5_000_000, &e).is_empty());
        // The smallest acting one (2) is paused; 1,500 + 1,200 + 200 fits.
        assert!(!ta.programs[&2].active && ta.programs[&1].active);
        // Its next request waits for a resume; when 3 finishes small and 1 is released, it goes.
        assert!(!ta.offer(&offer(2, 1100, 6_000_000), &e));
        ta.answered(&answer(3, 1200, 7_000_000), &e);
        ta.program_released(1, 7_000_000);
        assert_eq!(ta.release(10_000_000, &e), vec![2]);
    }

    #[test]
    fn a_paused_request_is_resumed_after_1800_seconds_whatever_the_capacity() {
        let e = engine(10); // 160 tokens: nothing ever fits
        let mut ta = ThunderAgent::new(true);
        assert!(!ta.offer(&offer(1, 1000, 0), &e));
        assert!(ta.release(1_000_000_000, &e).is_empty());
        assert_eq!(ta.release(FORCED_RESUME_US, &e), vec![1]);
        assert_eq!(ta.figures().forced_resumes, 1);
    }
}

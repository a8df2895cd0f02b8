//! What sits between the sessions and the engine: the proxy's admission stage (requests it holds
//! wait outside vLLM, their wait counted in their TTFT), closed-loop programs (`--programs N`: at
//! most N sessions live at once, the next starting when one ends), and the working set the live
//! sessions bring (their contexts, against the cache) for the report.

use super::*;
use crate::admission::{Answer, EngineView, Offer};

impl Sim<'_> {
    /// The proxy's view of the engine now.
    pub(super) fn engine_view(&self) -> EngineView {
        EngineView {
            running: self.running.len() as u32,
            waiting: self.queue_depth() as u32,
            free_blocks: self.kv.pool.num_free() as u32,
            total_blocks: self.cfg.num_blocks as u32,
            block_size: self.trace.block_size as u32,
        }
    }

    /// A policy event, to the policy and to the admission stage (which hears what a slot hears).
    pub(super) fn tell(&mut self, event: Event) {
        if let Some(stage) = &mut self.admission {
            stage.event(&event);
        }
        self.policy.event(event);
    }

    /// Session `s`'s request `req` reaches the proxy: to the engine now, or held by the stage.
    pub(super) fn offer(&mut self, s: u32, req: Req) {
        self.first_arrival_ns.get_or_insert(req.offered_ns);
        // The proxy saw the call: the session is active, held or not (serve's idle rule counts
        // a request when it arrives, before its admission).
        self.session_active(s);
        self.live[s as usize] = true;
        self.set_context(s, req.prompt_tokens);
        self.continuum_tool_returned(s);
        if self.admission.is_none() {
            return self.arrive(req);
        }
        let r = &self.trace.requests[match req.origin {
            Origin::Trace(uid) => uid as usize,
            Origin::Warmup(_) => unreachable!("warm-ups do not pass the proxy's queue"),
        }];
        let agent = self.trace.agent(req.agent);
        let offer = Offer {
            session: req.kv.session,
            tenant: r.tenant,
            agent: req.agent,
            prompt_tokens: req.prompt_tokens,
            anchor_tokens: agent.map_or(0, |a| a.anchor_tokens),
            anchor_hash: req.anchor_hash,
            at_us: us(self.now_ns),
        };
        let view = self.engine_view();
        let stage = self.admission.as_mut().expect("checked");
        if stage.offer(&offer, &view) {
            self.arrive(req);
        } else {
            self.held.insert(s, req);
        }
    }

    /// Held requests the stage lets go now enter the engine.
    pub(super) fn release_held(&mut self) {
        if self.admission.is_none() {
            return;
        }
        let view = self.engine_view();
        let stage = self.admission.as_mut().expect("checked");
        let sessions = stage.release(us(self.now_ns), &view);
        for id in sessions {
            let Some(&s) = self.session_index.get(&id) else {
                continue;
            };
            if let Some(mut req) = self.held.remove(&s) {
                req.arrival_ns = self.now_ns;
                self.arrive(req);
            }
        }
    }

    /// Nothing runs, nothing is due, and the stage holds requests it will never release by
    /// itself: a stage that would hang the replay. Every held request goes (counted: a stage
    /// that is correct never needs this).
    pub(super) fn release_stuck(&mut self) -> bool {
        if self.held.is_empty() {
            return false;
        }
        let mut held: Vec<(u32, Req)> = self.held.drain().collect();
        held.sort_by_key(|(s, r)| (r.offered_ns, *s));
        self.result.stuck_releases += held.len() as u64;
        for (_, mut req) in held {
            req.arrival_ns = self.now_ns;
            self.arrive(req);
        }
        true
    }

    /// The next time the stage must be asked (strictly later than now).
    pub(super) fn next_stage_check(&self) -> Option<u64> {
        let now_us = us(self.now_ns);
        self.admission
            .as_ref()
            .and_then(|s| s.next_check_us())
            .filter(|&t| t > now_us)
            .map(|t| t * 1000)
    }

    /// Trace request `r` of session `s` answered: the stage hears the answer as the proxy sees
    /// it, and the tool wait a proxy reads from a response that asks for a tool.
    pub(super) fn stage_answered(&mut self, r: usize, s: u32, uid: u32) {
        let req = &self.reqs[r];
        let now = self.now_ns;
        let first = req.first_token_ns.unwrap_or(now);
        let asked_tool = self.trace.requests[uid as usize].tool_call;
        let answer = Answer {
            session: req.kv.session,
            tenant: self.trace.requests[uid as usize].tenant,
            prompt_tokens: req.prompt_tokens,
            cached_tokens: req.hit_tokens,
            output_tokens: req.generated,
            prefill_us: us(first.saturating_sub(req.scheduled_ns.unwrap_or(req.arrival_ns))),
            decode_us: us(now.saturating_sub(first)),
            asked_tool,
            at_us: us(now),
        };
        let (session, agent) = (req.kv.session, req.agent);
        self.set_context(s, req.prompt_tokens + req.generated);
        let view = self.engine_view();
        if let Some(stage) = &mut self.admission {
            stage.answered(&answer, &view);
            if asked_tool {
                stage.event(&Event::SessionWait(agentrt_runtime::types::SessionWait {
                    session,
                    agent,
                    kind: agentrt_runtime::types::WaitKind::Tool,
                    tool: 0,
                    expected_us: 0,
                    hinted: false,
                    at_us: us(now),
                }));
            }
        }
    }

    /// Session `s` gave its last answer: it is no longer live, its client releases the program
    /// (ThunderAgent's clients do), and with closed-loop programs the next one starts.
    pub(super) fn session_over(&mut self, s: u32) {
        self.set_context(s, 0);
        self.live[s as usize] = false;
        let id = self.trace.sessions[s as usize].id;
        if let Some(stage) = &mut self.admission {
            stage.program_released(id, us(self.now_ns));
        }
        if self.cfg.programs.is_some() && self.next_program < self.trace.sessions.len() {
            let next = self.next_program as u32;
            self.next_program += 1;
            self.pending.push(Reverse((self.now_ns, next)));
        }
    }

    /// Session `s`'s context is now `tokens` (its prompt in flight, or its last prompt + answer).
    fn set_context(&mut self, s: u32, tokens: u32) {
        let old = std::mem::replace(&mut self.context_tokens[s as usize], tokens);
        if self.live[s as usize] {
            self.live_tokens = self.live_tokens - u64::from(old) + u64::from(tokens);
        }
    }

    /// The live sessions' contexts and the stage's resident tokens over `dt_ns` (the report's
    /// working set against the cache).
    pub(super) fn account_working_set(&mut self, dt_ns: u64) {
        if dt_ns == 0 {
            return;
        }
        let live = self.live_tokens;
        let resident = self
            .admission
            .as_ref()
            .and_then(|s| s.resident_tokens())
            .unwrap_or(live);
        let dt_us = dt_ns as f64 / 1000.0;
        self.result.demand_token_us += live as f64 * dt_us;
        self.result.resident_token_us += resident as f64 * dt_us;
    }
}

#[cfg(test)]
mod tests {
    use crate::admission::{AdmissionStage, Answer, EngineView, Offer, StageFigures};
    use crate::policies::NativeLru as VllmLru;
    use crate::prepare::PreparedTrace;
    use crate::scheduler::{Sim, SimConfig};
    use crate::trace::Trace;

    fn line(session: &str, after: u32, prompt: u32, output: u32) -> String {
        format!(
            r#"{{"session": "{session}", "agent": "{session}", "after_ms": {after}, "prompt": [{{"seg": "{session}/q", "tokens": {prompt}}}], "output_tokens": {output}}}"#
        )
    }

    fn trace(lines: &[String]) -> PreparedTrace {
        PreparedTrace::new(&Trace::parse(&lines.join("\n")).unwrap(), 16, false)
    }

    #[test]
    fn closed_loop_programs_start_the_next_session_when_one_ends_not_at_its_trace_time() {
        // Three one-call sessions meant to start at 0, 1 and 2 ms; two programs at once.
        let t = trace(&[line("a", 0, 64, 400), line("b", 1, 64, 4), line("c", 2, 64, 4)]);
        let mut cfg = SimConfig::new(200);
        cfg.programs = Some(2);
        let r = Sim::new(cfg, &t, &mut VllmLru).run().unwrap();
        // a and b start at once (b's trace time is ignored); c waits for b, the short one.
        assert_eq!((r.arrival_us[0], r.arrival_us[1]), (0.0, 0.0));
        assert_eq!(r.arrival_us[2], r.finish_us[1], "c starts when b ends");
        assert!(r.arrival_us[2] < r.finish_us[0], "…not when a, the long one, ends");
        // Without programs every session starts at its trace time (at the step boundary after
        // it), long before b ends.
        let r = Sim::new(SimConfig::new(200), &t, &mut VllmLru).run().unwrap();
        assert!(
            r.arrival_us[2] >= 2_000.0 && r.arrival_us[2] < r.finish_us[1],
            "{}",
            r.arrival_us[2]
        );
    }

    /// Holds every request until the clock reaches `until_us`.
    struct HoldUntil {
        until_us: u64,
        held: Vec<u64>,
    }

    impl AdmissionStage for HoldUntil {
        fn name(&self) -> String {
            "hold-until".into()
        }
        fn offer(&mut self, offer: &Offer, _engine: &EngineView) -> bool {
            self.held.push(offer.session);
            false
        }
        fn answered(&mut self, _answer: &Answer, _engine: &EngineView) {}
        fn release(&mut self, now_us: u64, _engine: &EngineView) -> Vec<u64> {
            if now_us >= self.until_us {
                std::mem::take(&mut self.held)
            } else {
                Vec::new()
            }
        }
        fn next_check_us(&self) -> Option<u64> {
            (!self.held.is_empty()).then_some(self.until_us)
        }
        fn figures(&self) -> StageFigures {
            StageFigures::default()
        }
    }

    #[test]
    fn a_request_the_proxy_holds_waits_outside_the_engine_and_its_wait_counts_in_its_ttft() {
        let t = trace(&[line("a", 0, 64, 4)]);
        let stage = HoldUntil {
            until_us: 1_000_000,
            held: Vec::new(),
        };
        let r = Sim::new(SimConfig::new(200), &t, &mut VllmLru)
            .with_admission(Box::new(stage))
            .run()
            .unwrap();
        assert_eq!(r.arrival_us[0], 0.0, "issued at 0");
        assert!(
            r.ttft_us[0] > 1_000_000.0,
            "first token after the 1 s hold: {}",
            r.ttft_us[0]
        );
        assert_eq!(r.stuck_releases, 0);
        // A stage that never lets go is caught, counted, and the replay still ends.
        struct Never;
        impl AdmissionStage for Never {
            fn name(&self) -> String {
                "never".into()
            }
            fn offer(&mut self, _: &Offer, _: &EngineView) -> bool {
                false
            }
            fn answered(&mut self, _: &Answer, _: &EngineView) {}
            fn release(&mut self, _: u64, _: &EngineView) -> Vec<u64> {
                Vec::new()
            }
            fn next_check_us(&self) -> Option<u64> {
                None
            }
            fn figures(&self) -> StageFigures {
                StageFigures::default()
            }
        }
        let r = Sim::new(SimConfig::new(200), &t, &mut VllmLru)
            .with_admission(Box::new(Never))
            .run()
            .unwrap();
        assert_eq!((r.stuck_releases, r.finish_us[0].is_finite()), (1, true));
    }
}

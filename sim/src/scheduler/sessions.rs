//! Sessions over simulated time: when they are live, when the idle rule ends them, what a
//! finished request tells the policy, and when the session's next request is due.

use super::*;

impl Sim<'_> {
    /// A request of session `s` arrived or finished now: it is live, and ends (idle rule) if
    /// nothing more of it arrives or finishes within the idle time.
    pub(super) fn session_active(&mut self, s: u32) {
        if let SessionEnds::Idle { ms } = self.cfg.session_ends {
            self.last_activity[s as usize] = Some(self.now_ns);
            let deadline = self.now_ns + (ms * 1e6) as u64;
            self.idle_deadlines.push(Reverse((deadline, s)));
        }
    }

    pub(super) fn idle_ns(&self) -> u64 {
        match self.cfg.session_ends {
            SessionEnds::Idle { ms } => (ms * 1e6) as u64,
            SessionEnds::Oracle => u64::MAX,
        }
    }

    /// The earliest deadline that still holds (stale ones dropped).
    pub(super) fn next_idle_deadline(&mut self) -> Option<u64> {
        let idle = self.idle_ns();
        while let Some(&Reverse((d, s))) = self.idle_deadlines.peek() {
            if self.last_activity[s as usize].is_some_and(|t| t.saturating_add(idle) == d) {
                return Some(d);
            }
            self.idle_deadlines.pop();
        }
        None
    }

    /// Tell the policy of every session silent for the idle time by now, as `serve` does.
    pub(super) fn end_idle_sessions(&mut self) {
        while let Some(d) = self.next_idle_deadline() {
            if d > self.now_ns {
                break;
            }
            let Some(Reverse((_, s))) = self.idle_deadlines.pop() else {
                break;
            };
            self.last_activity[s as usize] = None;
            self.result.sessions_ended += 1;
            let session = self.trace.sessions[s as usize].id;
            self.tell(session_end(session, EndReason::Idle, self.now_ns));
        }
    }

    pub(super) fn register_agents(&mut self) {
        for a in &self.trace.agents {
            self.tell(Event::AgentRegistered(AgentRegistered {
                agent: a.handle,
                name: a.name.clone(),
                anchor_hash: a.anchor_hash,
                anchor_tokens: a.anchor_tokens,
            }));
        }
    }

    pub(super) fn finish(&mut self, r: usize) {
        self.op(serde_json::json!({"op": "free", "id": r}));
        let now = self.now_ns;
        let pinned = match (self.reqs[r].origin, self.reqs[r].session) {
            (Origin::Trace(uid), Some(s)) => self.continuum_pin(r, s, uid),
            _ => false,
        };
        let req = &mut self.reqs[r];
        if !pinned {
            self.kv.free(&mut req.kv, &mut *self.policy);
        }
        if self.host.is_some() {
            self.host_finished.push(r);
        }
        let warmup = matches!(req.origin, Origin::Warmup(_));
        if let Origin::Trace(uid) = req.origin {
            if self.trace.requests[uid as usize].tool_call {
                // The answer asks for a tool: the proxy sees it as the answer completes.
                let event = Event::ToolCall(ToolCall {
                    session: req.kv.session,
                    agent: req.agent,
                    tool: 0,
                    args_hash: 0,
                    at_us: us(now),
                });
                self.tell(event);
            }
        }
        let req = &self.reqs[r];
        let event = Event::RequestFinish(RequestFinish {
            request_id: r as u64,
            agent: req.agent,
            session: req.kv.session,
            prompt_tokens: req.prompt_tokens,
            cached_tokens: req.hit_tokens,
            output_tokens: req.generated,
            warmup,
            ok: true,
            at_us: us(now),
        });
        self.tell(event);
        if let (Origin::Trace(uid), Some(s)) = (self.reqs[r].origin, self.reqs[r].session) {
            self.stage_answered(r, s, uid);
        }
        let req = &self.reqs[r];
        match req.origin {
            Origin::Warmup(agent) => self.warmup_in_flight[agent as usize] = false,
            Origin::Trace(uid) => {
                let arrival = req.offered_ns;
                let first = req.first_token_ns.unwrap_or(now);
                self.result.ttft_us[uid as usize] = (first - arrival) as f64 / 1000.0;
                self.result.turn_us[uid as usize] = (now - arrival) as f64 / 1000.0;
                let origin = self.first_arrival_ns.unwrap_or(0);
                self.result.arrival_us[uid as usize] = arrival.saturating_sub(origin) as f64 / 1000.0;
                self.result.finish_us[uid as usize] = now.saturating_sub(origin) as f64 / 1000.0;
                let tenant = &mut self.result.tenants[self.trace.requests[uid as usize].tenant as usize];
                tenant.requests += 1;
                tenant.turn_us_sum += (now - arrival) as f64 / 1000.0;
                self.result.output_tokens += u64::from(req.generated);
                let s = req.session.expect("trace requests belong to sessions");
                let agent = req.agent;
                self.session_active(s);
                self.tell_hints(s, uid, agent, now);
                self.next_request(s, now);
            }
        }
    }

    /// The trace's hints of request `uid` (session `s`, answered at `now`), as the framework would
    /// send them; a closed session is not also ended by the idle rule (a later request of it, if
    /// the hint was wrong, starts it again).
    pub(super) fn tell_hints(&mut self, s: u32, uid: u32, agent: u32, now: u64) {
        let session = &self.trace.sessions[s as usize];
        let oracle_last = self.cfg.session_ends == SessionEnds::Oracle
            && self.next_in_session[s as usize] as usize >= session.requests.len();
        let hints = &self.trace.requests[uid as usize].hints;
        for event in self.cfg.hints.events(hints, session.id, agent, us(now), oracle_last) {
            if matches!(event, Event::SessionEnd(_)) {
                self.result.sessions_ended += 1;
                self.last_activity[s as usize] = None;
            }
            self.tell(event);
        }
    }

    /// Session `s` finished a request at `now`: its next one is due `after_ms` later.
    pub(super) fn next_request(&mut self, s: u32, now: u64) {
        let session = &self.trace.sessions[s as usize];
        let next = self.next_in_session[s as usize] as usize;
        match session.requests.get(next) {
            Some(&uid) => {
                let after = self.cfg.after_ns(self.trace.requests[uid as usize].after_us);
                self.pending.push(Reverse((now + after, s)));
            }
            None if self.cfg.session_ends == SessionEnds::Oracle => {
                self.result.sessions_ended += 1;
                // The oracle knows the session is over for certain, as a framework does.
                self.tell(session_end(session.id, EndReason::Closed, now));
                self.session_over(s);
            }
            None => self.session_over(s),
        }
    }
}

//! # Guard — token budgets and runaway loops
//!
//! A slot beside the cache policy (`agentrt serve --slot guard=guard`): it hears the same events
//! and answers only with `deny`, which the proxy enforces on the session's later requests
//! (an OpenAI-style 403 naming the rule; other sessions are untouched).
//!
//! Rules, each off when its setting is 0:
//!
//! - **Runaway loop** (`loop-repeats`, default 3): an agent that sends its previous prompt again
//!   — a call of the same agent in the same session whose prompt carries all of the previous one
//!   forward and adds at most `loop-slack-tokens` (default 16: a "try again") — that many times in a
//!   row is stuck; its session is denied. Any call that adds more resets the count: a ReAct loop
//!   that appends tool results is making progress.
//! - **Session budget** (`session-token-budget`, default 0): prompt + output tokens of a
//!   session's finished calls, as the engine counted them; past it the session is denied.
//! - **Tenant budget** (`tenant-token-budget`, default 0): the same over every session of the
//!   tenant since this policy started; past it every session is denied (`deny` of session 0).
//!   Swapping the guard with fresh state (`?fresh=true`) lifts it.
//!
//! Warm-ups (the host's own requests) count toward nothing. State: per-session counters, at most
//! `max-sessions` (default 4096; the least recently active go first).

use std::collections::HashMap;

use agentrt_sdk::state::{Reader, Writer};
use agentrt_sdk::{info, Config, Deny, Event, Item, Policy, PolicyInfo, SideEffect};

const MAGIC: [u8; 4] = *b"GRD1";
const FORMAT: u16 = 1;
/// `deny` of this session: every session of the tenant.
const WHOLE_TENANT: u64 = 0;

/// What the guard keeps per session.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct SessionRecord {
    /// The agent of the last call, and how many calls in a row re-sent its previous prompt.
    last_agent: u32,
    repeats: u32,
    /// Prompt + output tokens of finished calls.
    tokens: u64,
    /// Already denied: say it once.
    denied: bool,
    /// Order of last activity, for bounding the table.
    touched: u64,
}

#[derive(Debug)]
pub struct Guard {
    loop_repeats: u32,
    loop_slack_tokens: u32,
    session_budget: u64,
    tenant_budget: u64,
    max_sessions: usize,
    sessions: HashMap<u64, SessionRecord>,
    tenant_tokens: u64,
    tenant_denied: bool,
    clock: u64,
    /// Denials decided since the last `act`.
    pending: Vec<Deny>,
}

impl Default for Guard {
    fn default() -> Self {
        Self {
            loop_repeats: 3,
            loop_slack_tokens: 16,
            session_budget: 0,
            tenant_budget: 0,
            max_sessions: 4096,
            sessions: HashMap::new(),
            tenant_tokens: 0,
            tenant_denied: false,
            clock: 0,
            pending: Vec::new(),
        }
    }
}

impl Guard {
    fn record(&mut self, session: u64) -> &mut SessionRecord {
        self.clock += 1;
        if self.sessions.len() >= self.max_sessions && !self.sessions.contains_key(&session) {
            if let Some((&oldest, _)) = self.sessions.iter().min_by_key(|(_, r)| r.touched) {
                self.sessions.remove(&oldest);
            }
        }
        let clock = self.clock;
        let record = self.sessions.entry(session).or_default();
        record.touched = clock;
        record
    }

    fn deny(&mut self, session: u64, reason: String) {
        self.pending.push(Deny { session, reason });
    }

    fn on_arrival(&mut self, arrival: &agentrt_sdk::RequestArrival) {
        let (limit, slack) = (self.loop_repeats, self.loop_slack_tokens);
        let record = self.record(arrival.session);
        let repeated = record.last_agent == arrival.agent
            && arrival.continues.is_some_and(|c| {
                c.shared_tokens >= c.previous_tokens && arrival.prompt_tokens <= c.previous_tokens.saturating_add(slack)
            });
        record.repeats = if repeated { record.repeats + 1 } else { 0 };
        record.last_agent = arrival.agent;
        if limit > 0 && record.repeats >= limit && !record.denied {
            record.denied = true;
            let repeats = record.repeats;
            self.deny(
                arrival.session,
                format!("runaway loop: agent {} sent its previous prompt again {repeats} times in a row (loop-repeats={limit})", arrival.agent),
            );
        }
    }

    fn on_finish(&mut self, finish: &agentrt_sdk::RequestFinish) {
        let used = u64::from(finish.prompt_tokens) + u64::from(finish.output_tokens);
        let budget = self.session_budget;
        let record = self.record(finish.session);
        record.tokens += used;
        if budget > 0 && record.tokens > budget && !record.denied {
            record.denied = true;
            let tokens = record.tokens;
            self.deny(
                finish.session,
                format!("token budget: the session used {tokens} tokens, over session-token-budget={budget}"),
            );
        }
        self.tenant_tokens += used;
        if self.tenant_budget > 0 && self.tenant_tokens > self.tenant_budget && !self.tenant_denied {
            self.tenant_denied = true;
            let (tokens, budget) = (self.tenant_tokens, self.tenant_budget);
            self.deny(
                WHOLE_TENANT,
                format!("token budget: the tenant used {tokens} tokens, over tenant-token-budget={budget}"),
            );
        }
    }
}

impl Policy for Guard {
    fn info() -> PolicyInfo {
        info(
            "guard",
            "token budgets per session and tenant, and runaway-loop detection; answers only with deny",
        )
    }

    fn init(&mut self, config: &Config) -> Result<(), String> {
        config.expect_only(&[
            "loop-repeats",
            "loop-slack-tokens",
            "session-token-budget",
            "tenant-token-budget",
            "max-sessions",
        ])?;
        self.loop_repeats = config.parse_or("loop-repeats", 3u32)?;
        self.loop_slack_tokens = config.parse_or("loop-slack-tokens", 16u32)?;
        self.session_budget = config.parse_or("session-token-budget", 0u64)?;
        self.tenant_budget = config.parse_or("tenant-token-budget", 0u64)?;
        self.max_sessions = config.parse_or("max-sessions", 4096usize)?.max(1);
        Ok(())
    }

    fn observe(&mut self, event: &Event) {
        match event {
            Event::RequestArrival(r) if !r.warmup => self.on_arrival(r),
            Event::RequestFinish(r) if !r.warmup => self.on_finish(r),
            Event::SessionEnd(end) => {
                self.sessions.remove(&end.session);
            }
            _ => {}
        }
    }

    /// The guard ranks nothing: every item scores the same (the host breaks ties by recency).
    fn score(&mut self, items: &[Item]) -> Vec<f32> {
        vec![0.0; items.len()]
    }

    fn act(&mut self) -> Vec<SideEffect> {
        self.pending.drain(..).map(SideEffect::Deny).collect()
    }

    fn snapshot(&self) -> Vec<u8> {
        let mut w = Writer::new(MAGIC, FORMAT);
        w.u64(self.tenant_tokens)
            .u8(u8::from(self.tenant_denied))
            .u64(self.clock);
        let mut entries: Vec<_> = self.sessions.iter().collect();
        entries.sort_unstable_by_key(|(s, _)| **s);
        w.u32(entries.len() as u32);
        for (&session, r) in entries {
            w.u64(session)
                .u32(r.last_agent)
                .u32(r.repeats)
                .u64(r.tokens)
                .u8(u8::from(r.denied))
                .u64(r.touched);
        }
        w.finish()
    }

    fn restore(&mut self, state: &[u8]) -> Result<(), String> {
        let mut r = Reader::of_format(state, MAGIC, FORMAT, "guard")?;
        let tenant_tokens = r.u64()?;
        let tenant_denied = r.u8()? != 0;
        let clock = r.u64()?;
        let n = r.u32()?;
        let mut sessions = HashMap::with_capacity((n as usize).min(self.max_sessions));
        for _ in 0..n {
            let session = r.u64()?;
            let record = SessionRecord {
                last_agent: r.u32()?,
                repeats: r.u32()?,
                tokens: r.u64()?,
                denied: r.u8()? != 0,
                touched: r.u64()?,
            };
            sessions.insert(session, record);
        }
        r.finish()?;
        (self.tenant_tokens, self.tenant_denied, self.clock, self.sessions) =
            (tenant_tokens, tenant_denied, clock, sessions);
        Ok(())
    }
}

agentrt_sdk::export_policy!(Guard);

#[cfg(test)]
mod tests {
    use super::*;
    use agentrt_sdk::testing::Harness;
    use agentrt_sdk::{Continuation, RequestArrival, RequestFinish};

    fn arrival(session: u64, agent: u32, prompt_tokens: u32, previous: Option<u32>) -> Event {
        Event::RequestArrival(RequestArrival {
            request_id: 1,
            agent,
            session,
            anchor_hash: 0,
            prompt_tokens,
            continues: previous.map(|p| Continuation {
                shared_tokens: p,
                previous_tokens: p,
            }),
            warmup: false,
            at_us: 0,
        })
    }

    fn finish(session: u64, tokens: u32, warmup: bool) -> Event {
        Event::RequestFinish(RequestFinish {
            request_id: 1,
            agent: 1,
            session,
            prompt_tokens: tokens,
            cached_tokens: 0,
            output_tokens: 0,
            warmup,
            ok: true,
            at_us: 0,
        })
    }

    fn denied(effects: &[SideEffect]) -> Vec<(u64, String)> {
        effects
            .iter()
            .map(|e| match e {
                SideEffect::Deny(d) => (d.session, d.reason.clone()),
                other => panic!("the guard only denies: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn an_agent_resending_its_prompt_is_denied_and_progress_is_not() {
        let mut guard = Harness::<Guard>::new([("loop-repeats", "3")]).unwrap();
        guard.observe(&[arrival(7, 1, 100, None)]);
        // Two repeats, then a call that appends a tool result: progress resets the count.
        guard.observe(&[arrival(7, 1, 100, Some(100)), arrival(7, 1, 105, Some(100))]);
        guard.observe(&[arrival(7, 1, 400, Some(105))]);
        assert!(guard.act().is_empty(), "appending 295 tokens is progress");
        // Session 8 loops: its third repeat is denied, once.
        guard.observe(&[arrival(8, 2, 50, None)]);
        for _ in 0..4 {
            guard.observe(&[arrival(8, 2, 50, Some(50))]);
        }
        let denials = denied(&guard.act());
        assert_eq!(denials.len(), 1, "{denials:?}");
        assert_eq!(denials[0].0, 8);
        assert!(denials[0].1.contains("loop-repeats=3"), "{}", denials[0].1);
        assert!(guard.act().is_empty(), "denied once");
    }

    #[test]
    fn another_agent_in_between_is_not_a_loop() {
        let mut guard = Harness::<Guard>::new([("loop-repeats", "2")]).unwrap();
        for agent in [1, 2, 1, 2, 1, 2] {
            guard.observe(&[arrival(5, agent, 50, Some(50))]);
        }
        assert!(guard.act().is_empty());
    }

    #[test]
    fn budgets_deny_the_session_and_then_the_tenant_and_warmups_are_free() {
        let mut guard =
            Harness::<Guard>::new([("session-token-budget", "1000"), ("tenant-token-budget", "2500")]).unwrap();
        guard.observe(&[finish(1, 600, false), finish(1, 10_000, true), finish(2, 900, false)]);
        assert!(guard.act().is_empty(), "warm-ups count toward nothing");
        guard.observe(&[finish(1, 600, false)]);
        let denials = denied(&guard.act());
        assert_eq!(denials.len(), 1);
        assert_eq!(denials[0].0, 1);
        assert!(denials[0].1.contains("session-token-budget=1000"));
        guard.observe(&[finish(3, 500, false)]);
        let denials = denied(&guard.act());
        assert_eq!(
            denials,
            vec![(
                0,
                "token budget: the tenant used 2600 tokens, over tenant-token-budget=2500".to_string()
            )]
        );
    }

    #[test]
    fn state_round_trips_and_bad_config_or_state_is_refused() {
        let mut guard = Harness::<Guard>::new([("session-token-budget", "100")]).unwrap();
        guard.observe(&[finish(4, 60, false), arrival(4, 1, 10, None)]);
        let state = guard.snapshot();
        let mut other = Harness::<Guard>::new([("session-token-budget", "100")]).unwrap();
        other.restore(&state).unwrap();
        assert_eq!(other.snapshot(), state);
        other.observe(&[finish(4, 60, false)]);
        assert_eq!(denied(&other.act()).len(), 1, "the restored count carries on");
        assert!(other.restore(&state[..state.len() - 3]).is_err());
        assert!(Harness::<Guard>::new([("loop", "3")]).unwrap_err().contains("loop"));
        assert!(Harness::<Guard>::new([("loop-repeats", "-1")]).is_err());
    }
}

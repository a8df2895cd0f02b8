//! Lifecycle hints: what only the framework knows of a session's life — it is closed, it waits for
//! a tool or a person, which agent runs next — told to the tenant's policies as `session-end`
//! (closed), `session-wait` and `handoff` (docs/agents.md, "Lifecycle hints").
//!
//! Four ways in: headers on a request ([`parse::request_hints`], applied when its response
//! ends), the field's dialects in its body — vLLM's `kv_hints` envelope, Dynamo's `nvext`,
//! ThunderAgent's `program_id` ([`dialects`], applied with the headers') — the endpoints
//! `POST /v1/agentrt/hints` and ThunderAgent's `POST /programs/release` ([`route`]), and the traffic itself — a response
//! that asks for a tool marks its session as waiting for it ([`tool_wait`]), and the session's
//! next request ends the wait, its gap learned per (agent, tool)
//! ([`crate::tenant::return_times`]). Each tenant's hint state is the tenant's own
//! ([`crate::tenant::hint_state`]), gone with it. Hints name
//! sessions as requests do and are scoped to the caller's tenant the same way
//! ([`crate::identity::tenant_session`]), so one can never reach another tenant's session.
//! Bounded: 64 hints and 16 KiB a call, names of 256 bytes, a per-tenant rate
//! ([`crate::tenant::hint_rate`]) that
//! header hints and calls share (a call of no hints costs one);
//! idempotent: a session closed twice (not reopened by a request between) ends once.

pub mod dialects;
pub mod parse;
pub mod route;
pub mod tool_wait;

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use agentrt_exposition::{Exposition, Report};
use agentrt_runtime::types::{EndReason, Event, Handoff, SessionWait, WaitKind};
use serde_json::{json, Value};

use self::parse::{Hint, RequestHints, WaitFor};
use crate::clock::Clock;
use crate::identity::{tenant_session, Identity};
use crate::policy::feed::{session_end, PolicyFeed};
use crate::tenant::hint_state::HintState;
use crate::tenant::{Tenant, Tenants};

/// Where a hint came from (the `source` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Source {
    /// A request's header.
    Header,
    /// A request's body, in one of the field's dialects ([`dialects`]).
    Body,
    /// `POST /v1/agentrt/hints`.
    Endpoint,
    /// Read from a response.
    Response,
}

impl Source {
    fn label(self) -> &'static str {
        match self {
            Source::Header => "header",
            Source::Body => "body",
            Source::Endpoint => "endpoint",
            Source::Response => "response",
        }
    }
}

/// What became of a hint (the `outcome` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Applied,
    Duplicate,
    UnknownSession,
    /// Checked and counted; the policy contract has no event for it.
    NoEvent,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Outcome::Applied => "applied",
            Outcome::Duplicate => "duplicate",
            Outcome::UnknownSession => "unknown_session",
            Outcome::NoEvent => "no_event",
        }
    }
}

/// The result of applying one call's hints.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Applied {
    /// Hints taken (duplicates included).
    pub accepted: usize,
    /// Of those, the ones that changed nothing (a session already closed).
    pub duplicates: usize,
}

/// What tells the tenants' policies their hints; each tenant's hint state is its own
/// ([`crate::tenant::hint_state`]). Cheap to share (`Arc`).
pub struct Hints {
    rate: f64,
    feed: PolicyFeed,
    clock: Clock,
    /// The live tenants, whose counters `/metrics` shows.
    tenants: Arc<Tenants>,
}

impl Hints {
    /// Hints at `rate` per second per tenant (`--hint-rate`), told through `feed`.
    pub fn new(rate: f64, feed: PolicyFeed, clock: Clock, tenants: Arc<Tenants>) -> Self {
        Self {
            rate,
            feed,
            clock,
            tenants,
        }
    }

    /// A request of `session` arrives: a closed session is open again, and a tool wait ends.
    pub fn arrived(&self, tenant: &Tenant, session: u64) {
        let hints = &tenant.hints;
        let mut sessions = hints.sessions();
        sessions.closed.remove(&session);
        sessions.times.resumed(session, Instant::now());
    }

    /// The events a finished request's hints add after its `request-finish`: a wait for the
    /// `tools` its response asked for (unless the session closes), the handoff its header names,
    /// and the session's end when its header closes it. `agent_name` is the caller's agent.
    pub fn finished(
        &self,
        tenant: &Tenant,
        (session, agent, agent_name): (u64, u32, &str),
        request: &RequestHints,
        tools: Vec<String>,
    ) -> Vec<Event> {
        let hints = &tenant.hints;
        let at_us = self.clock.now_us();
        let mut events = Vec::new();
        let source = if request.in_body { Source::Body } else { Source::Header };
        for kind in &request.noted {
            counted(hints, kind, source, Outcome::NoEvent);
        }
        if !tools.is_empty() && !request.closed {
            for tool in &tools {
                events.push(wait_event(
                    session,
                    agent,
                    &WaitFor::Tool(tool.clone()),
                    None,
                    false,
                    at_us,
                ));
                counted(hints, "wait_tool", Source::Response, Outcome::Applied);
            }
            let mut sessions = hints.sessions();
            sessions.times.paused(session, agent_name, tools, Instant::now());
        }
        if let Some(next) = &request.next_agent {
            self.handoff(tenant, (session, agent), next, source, &mut events);
        }
        if request.closed {
            self.close(tenant, session, source, &mut events);
        }
        events
    }

    /// Apply a call's checked hints for `tenant` and tell its policies: all of them, in order.
    pub fn apply(&self, tenant: &Tenant, hints: &[Hint]) -> Applied {
        let mut events = Vec::new();
        let mut applied = Applied::default();
        for hint in hints {
            let session = tenant_session(&tenant.name, hint.session());
            applied.accepted += 1;
            match hint {
                Hint::Closed { .. } => {
                    if !self.close(tenant, session, Source::Endpoint, &mut events) {
                        applied.duplicates += 1;
                    }
                }
                Hint::Wait {
                    agent,
                    wait,
                    expected_ms,
                    ..
                } => {
                    let told = self.wait(tenant, session, agent.as_deref(), wait, *expected_ms, &mut events);
                    if !told {
                        applied.duplicates += 1;
                    }
                }
                Hint::Handoff {
                    from_agent, to_agent, ..
                } => {
                    let from = from_agent
                        .as_deref()
                        .and_then(|a| tenant.agents.handle_of(a))
                        .unwrap_or(0);
                    self.handoff(tenant, (session, from), to_agent, Source::Endpoint, &mut events);
                }
            }
        }
        if !events.is_empty() {
            self.feed.tell(tenant, events);
        }
        applied
    }

    /// Take `n` hints from `tenant`'s rate — a call of none costs one, as a call is work whatever
    /// it carries: `Err(Some(wait))` when they fit after `wait`, `Err(None)` when a call of `n`
    /// never fits (over the burst).
    pub fn take(&self, tenant: &Tenant, n: usize) -> Result<(), Option<std::time::Duration>> {
        tenant.hints.take(self.rate, n.max(1), Instant::now())
    }

    /// A request's hints (its headers' and its body's) under the same rate as the endpoint's: `request` when its hints
    /// fit in `tenant`'s rate, else none of them (counted as refused for `rate`). The request
    /// itself goes on either way: a hint never fails a model call, and a session whose closing
    /// was dropped ends when it falls silent (`--session-idle-ms`).
    pub fn within_rate(&self, tenant: &Tenant, request: RequestHints) -> RequestHints {
        let n = request.count();
        if n == 0 {
            return request;
        }
        match tenant.hints.take(self.rate, n, Instant::now()) {
            Ok(()) => request,
            Err(_) => {
                self.refused(tenant, "rate");
                RequestHints::default()
            }
        }
    }

    /// The burst: the most hints one call may carry under the rate.
    pub fn burst(&self) -> f64 {
        self.rate * 2.0
    }

    /// Count a refused call of `tenant` (`malformed`, `rate`, `too_large`, `timeout`, `budget`).
    pub fn refused(&self, tenant: &Tenant, reason: &'static str) {
        tenant.hints.refuse(reason);
    }

    /// `tenant`'s learned tool return times and open waits, for `/admin/tenants/{t}/stats`.
    pub fn stats(&self, tenant: &Tenant) -> Value {
        let hints = &tenant.hints;
        let sessions = hints.sessions();
        json!({
            "open_tool_waits": sessions.times.open_waits(),
            "closed_sessions_remembered": sessions.closed.len(),
            "tool_return_times": sessions.times.report(),
        })
    }

    /// Close `session`: `false` (a duplicate, nothing told) when it is closed already.
    fn close(&self, tenant: &Tenant, session: u64, source: Source, events: &mut Vec<Event>) -> bool {
        let hints = &tenant.hints;
        let mut sessions = hints.sessions();
        if sessions.closed.contains(&session) {
            counted(hints, "closed", source, Outcome::Duplicate);
            return false;
        }
        let live = tenant.agents.forget_session(session);
        sessions.closed.insert(session, (), 0);
        sessions.times.forget(session);
        let outcome = if live {
            Outcome::Applied
        } else {
            Outcome::UnknownSession
        };
        counted(hints, "closed", source, outcome);
        events.push(session_end(session, EndReason::Closed, self.clock.now_us()));
        true
    }

    /// A wait said by the framework, told to the policies; false when it only repeats a tool
    /// wait already read from the response that asked for the tool (counted as a duplicate).
    fn wait(
        &self,
        tenant: &Tenant,
        session: u64,
        agent: Option<&str>,
        wait: &WaitFor,
        expected_ms: Option<u64>,
        events: &mut Vec<Event>,
    ) -> bool {
        let hints = &tenant.hints;
        let handle = agent.and_then(|a| tenant.agents.handle_of(a)).unwrap_or(0);
        let kind = match wait {
            WaitFor::Tool(tool) => {
                let mut sessions = hints.sessions();
                // A wait the proxy already read from the response that asked for the tool: the
                // same fact, told once (and its start kept, so the learned gap is the tool's).
                // An expected duration is news the response did not carry, and is told.
                if sessions.times.is_waiting_for(session, tool) {
                    if expected_ms.is_none() {
                        counted(hints, "wait_tool", Source::Endpoint, Outcome::Duplicate);
                        return false;
                    }
                } else {
                    sessions
                        .times
                        .paused(session, agent.unwrap_or_default(), vec![tool.clone()], Instant::now());
                }
                "wait_tool"
            }
            WaitFor::User => "wait_user",
        };
        counted(hints, kind, Source::Endpoint, known(tenant, session));
        events.push(wait_event(
            session,
            handle,
            wait,
            expected_ms,
            true,
            self.clock.now_us(),
        ));
        true
    }

    /// A handoff to agent `to` (registered first if the tenant has not seen it call).
    fn handoff(&self, tenant: &Tenant, (session, from): (u64, u32), to: &str, source: Source, events: &mut Vec<Event>) {
        let identity = Identity {
            agent_name: to.to_string(),
            anchor_hash: 0,
            anchor_tokens: 0,
            session_key: String::new(),
            session,
            prompt_tokens: 0,
        };
        let (to_agent, registration) = tenant.agents.intern(&identity);
        events.extend(registration);
        counted(&tenant.hints, "handoff", source, known(tenant, session));
        events.push(Event::Handoff(Handoff {
            session,
            from_agent: from,
            to_agent,
            at_us: self.clock.now_us(),
        }));
    }
}

fn known(tenant: &Tenant, session: u64) -> Outcome {
    if tenant.agents.is_live(session) {
        Outcome::Applied
    } else {
        Outcome::UnknownSession
    }
}

/// `session-wait` for `wait`: a tool's wait carries the hash `tool-call` events use (0 for a
/// tool not named).
fn wait_event(session: u64, agent: u32, wait: &WaitFor, expected_ms: Option<u64>, hinted: bool, at_us: u64) -> Event {
    let (kind, tool) = match wait {
        WaitFor::Tool(name) if name.is_empty() => (WaitKind::Tool, 0),
        WaitFor::Tool(name) => (WaitKind::Tool, agentrt_mcp::keys::tool_hash(name)),
        WaitFor::User => (WaitKind::User, 0),
    };
    Event::SessionWait(SessionWait {
        session,
        agent,
        kind,
        tool,
        expected_us: expected_ms.unwrap_or(0).saturating_mul(1000),
        hinted,
        at_us,
    })
}

fn counted(hints: &HintState, kind: &'static str, source: Source, outcome: Outcome) {
    hints.count((kind, source.label(), outcome.label()));
}

impl Report for Hints {
    fn report(&self, out: &mut Exposition<'_>) -> fmt::Result {
        // The live tenants only: a tenant a reload removed took its counters with it.
        let mut tenants = self.tenants.list();
        tenants.sort_by(|a, b| a.name.cmp(&b.name));
        let mut taken = Vec::new();
        let mut refused = Vec::new();
        for tenant in &tenants {
            let name = tenant.name.as_str();
            for ((kind, source, outcome), n) in tenant.hints.counts() {
                let labels = [
                    ("tenant", name),
                    ("kind", kind),
                    ("source", source),
                    ("outcome", outcome),
                ];
                taken.push((labels, n));
            }
            for (reason, n) in tenant.hints.refusals() {
                refused.push(([("tenant", name), ("reason", reason)], n));
            }
        }
        out.counters(
            "agentrt_hints_total",
            "Lifecycle hints taken, by kind, where they came from (a request's header or body, the hints \
             endpoints, read from a response) and outcome (applied, duplicate, unknown_session, no_event).",
            taken,
        )?;
        out.counters(
            "agentrt_hints_refused_total",
            "Hint calls or headers refused: malformed (400), rate (429 for a call, dropped hints for a \
             request's headers; --hint-rate), too_large (over 64 hints or 16 KiB), timeout (408: the body \
             missed its deadline), budget (the reading budgets were spent).",
            refused,
        )
    }
}

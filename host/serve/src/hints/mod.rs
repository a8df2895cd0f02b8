//! Lifecycle hints: what only the framework knows of a session's life — it is closed, it waits for
//! a tool or a person, which agent runs next — told to the tenant's policies as `session-end`
//! (closed), `session-wait` and `handoff` (docs/agents.md, "Lifecycle hints").
//!
//! Three ways in: headers on a request ([`parse::request_hints`], applied when its response
//! ends), the endpoint `POST /v1/agentrt/hints` ([`route`]), and the traffic itself — a response
//! that asks for a tool marks its session as waiting for it ([`tool_wait`]), and the session's
//! next request ends the wait, its gap learned per (agent, tool) ([`return_times`]). Hints name
//! sessions as requests do and are scoped to the caller's tenant the same way
//! ([`crate::identity::tenant_session`]), so one can never reach another tenant's session.
//! Bounded: 64 hints and 16 KiB a call, names of 256 bytes, a per-tenant rate ([`rate`]);
//! idempotent: a session closed twice (not reopened by a request between) ends once.

pub mod parse;
pub mod rate;
pub mod return_times;
pub mod route;
pub mod tool_wait;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use agentrt_exposition::{Exposition, Report};
use agentrt_runtime::types::{EndReason, Event, Handoff, SessionWait, WaitKind};
use serde_json::{json, Value};

use self::parse::{Hint, RequestHints, WaitFor};
use self::rate::Bucket;
use self::return_times::ReturnTimes;
use crate::clock::Clock;
use crate::identity::{tenant_session, Identity};
use crate::policy::feed::{session_end, PolicyFeed};
use crate::table::LruTable;
use crate::tenant::Tenant;

/// Closed sessions one tenant remembers, so that closing one again is a duplicate.
pub const MAX_CLOSED_SESSIONS: usize = 65_536;

/// Where a hint came from (the `source` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Source {
    /// A request's header.
    Header,
    /// `POST /v1/agentrt/hints`.
    Endpoint,
    /// Read from a response.
    Response,
}

impl Source {
    fn label(self) -> &'static str {
        match self {
            Source::Header => "header",
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
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Outcome::Applied => "applied",
            Outcome::Duplicate => "duplicate",
            Outcome::UnknownSession => "unknown_session",
        }
    }
}

/// One tenant's hint state: its rate, the sessions it closed, its open tool waits and their
/// return times, and its counters.
struct TenantHints {
    bucket: Mutex<Bucket>,
    lifecycle: Mutex<Lifecycle>,
    counts: Mutex<BTreeMap<(&'static str, Source, Outcome), u64>>,
    refused: Mutex<BTreeMap<&'static str, u64>>,
}

struct Lifecycle {
    closed: LruTable<u64, ()>,
    times: ReturnTimes,
}

/// The result of applying one call's hints.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Applied {
    /// Hints taken (duplicates included).
    pub accepted: usize,
    /// Of those, the ones that changed nothing (a session already closed).
    pub duplicates: usize,
}

/// Every tenant's hint state, and what tells their policies. Cheap to share (`Arc`).
pub struct Hints {
    rate: f64,
    feed: PolicyFeed,
    clock: Clock,
    tenants: Mutex<HashMap<Arc<str>, Arc<TenantHints>>>,
}

impl Hints {
    /// Hints at `rate` per second per tenant (`--hint-rate`), told through `feed`.
    pub fn new(rate: f64, feed: PolicyFeed, clock: Clock) -> Self {
        Self {
            rate,
            feed,
            clock,
            tenants: Mutex::new(HashMap::new()),
        }
    }

    fn of(&self, tenant: &Tenant) -> Arc<TenantHints> {
        let mut tenants = self.tenants.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(known) = tenants.get(tenant.name.as_str()) {
            return known.clone();
        }
        let fresh = Arc::new(TenantHints {
            bucket: Mutex::new(Bucket::new(self.rate, Instant::now())),
            lifecycle: Mutex::new(Lifecycle {
                closed: LruTable::new(MAX_CLOSED_SESSIONS, usize::MAX),
                times: ReturnTimes::default(),
            }),
            counts: Mutex::default(),
            refused: Mutex::default(),
        });
        tenants.insert(tenant.name.as_str().into(), fresh.clone());
        fresh
    }

    /// A request of `session` arrives: a closed session is open again, and a tool wait ends.
    pub fn arrived(&self, tenant: &Tenant, session: u64) {
        let hints = self.of(tenant);
        let mut lifecycle = hints.lifecycle.lock().unwrap_or_else(|p| p.into_inner());
        lifecycle.closed.remove(&session);
        lifecycle.times.resumed(session, Instant::now());
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
        let hints = self.of(tenant);
        let at_us = self.clock.now_us();
        let mut events = Vec::new();
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
                hints.count("wait_tool", Source::Response, Outcome::Applied);
            }
            let mut lifecycle = hints.lifecycle.lock().unwrap_or_else(|p| p.into_inner());
            lifecycle.times.paused(session, agent_name, tools, Instant::now());
        }
        if let Some(next) = &request.next_agent {
            self.handoff(tenant, &hints, (session, agent), next, Source::Header, &mut events);
        }
        if request.closed {
            self.close(tenant, &hints, session, Source::Header, &mut events);
        }
        events
    }

    /// Apply a call's checked hints for `tenant` and tell its policies: all of them, in order.
    pub fn apply(&self, tenant: &Tenant, hints: &[Hint]) -> Applied {
        let state = self.of(tenant);
        let mut events = Vec::new();
        let mut applied = Applied::default();
        for hint in hints {
            let session = tenant_session(&tenant.name, hint.session());
            applied.accepted += 1;
            match hint {
                Hint::Closed { .. } => {
                    if !self.close(tenant, &state, session, Source::Endpoint, &mut events) {
                        applied.duplicates += 1;
                    }
                }
                Hint::Wait {
                    agent,
                    wait,
                    expected_ms,
                    ..
                } => {
                    let told = self.wait(
                        tenant,
                        &state,
                        session,
                        agent.as_deref(),
                        wait,
                        *expected_ms,
                        &mut events,
                    );
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
                    self.handoff(tenant, &state, (session, from), to_agent, Source::Endpoint, &mut events);
                }
            }
        }
        if !events.is_empty() {
            self.feed.tell(tenant, events);
        }
        applied
    }

    /// Take `n` hints from `tenant`'s rate: `Err(Some(wait))` when they fit after `wait`,
    /// `Err(None)` when a call of `n` never fits (over the burst).
    pub fn take(&self, tenant: &Tenant, n: usize) -> Result<(), Option<std::time::Duration>> {
        let hints = self.of(tenant);
        let mut bucket = hints.bucket.lock().unwrap_or_else(|p| p.into_inner());
        bucket.take(n, Instant::now())
    }

    /// The burst: the most hints one call may carry under the rate.
    pub fn burst(&self) -> f64 {
        self.rate * 2.0
    }

    /// Count a refused call of `tenant` (`malformed`, `rate`, `too_large`).
    pub fn refused(&self, tenant: &Tenant, reason: &'static str) {
        let hints = self.of(tenant);
        *hints
            .refused
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(reason)
            .or_default() += 1;
    }

    /// `tenant`'s learned tool return times and open waits, for `/admin/tenants/{t}/stats`.
    pub fn stats(&self, tenant: &Tenant) -> Value {
        let hints = self.of(tenant);
        let lifecycle = hints.lifecycle.lock().unwrap_or_else(|p| p.into_inner());
        json!({
            "open_tool_waits": lifecycle.times.open_waits(),
            "closed_sessions_remembered": lifecycle.closed.len(),
            "tool_return_times": lifecycle.times.report(),
        })
    }

    /// Close `session`: `false` (a duplicate, nothing told) when it is closed already.
    fn close(
        &self,
        tenant: &Tenant,
        hints: &TenantHints,
        session: u64,
        source: Source,
        events: &mut Vec<Event>,
    ) -> bool {
        let mut lifecycle = hints.lifecycle.lock().unwrap_or_else(|p| p.into_inner());
        if lifecycle.closed.contains(&session) {
            hints.count("closed", source, Outcome::Duplicate);
            return false;
        }
        let live = tenant.agents.forget_session(session);
        lifecycle.closed.insert(session, (), 0);
        lifecycle.times.forget(session);
        let outcome = if live {
            Outcome::Applied
        } else {
            Outcome::UnknownSession
        };
        hints.count("closed", source, outcome);
        events.push(session_end(session, EndReason::Closed, self.clock.now_us()));
        true
    }

    /// A wait said by the framework, told to the policies; false when it only repeats a tool
    /// wait already read from the response that asked for the tool (counted as a duplicate).
    #[allow(clippy::too_many_arguments)]
    fn wait(
        &self,
        tenant: &Tenant,
        hints: &TenantHints,
        session: u64,
        agent: Option<&str>,
        wait: &WaitFor,
        expected_ms: Option<u64>,
        events: &mut Vec<Event>,
    ) -> bool {
        let handle = agent.and_then(|a| tenant.agents.handle_of(a)).unwrap_or(0);
        let kind = match wait {
            WaitFor::Tool(tool) => {
                let mut lifecycle = hints.lifecycle.lock().unwrap_or_else(|p| p.into_inner());
                // A wait the proxy already read from the response that asked for the tool: the
                // same fact, told once (and its start kept, so the learned gap is the tool's).
                // An expected duration is news the response did not carry, and is told.
                if lifecycle.times.is_waiting_for(session, tool) {
                    if expected_ms.is_none() {
                        hints.count("wait_tool", Source::Endpoint, Outcome::Duplicate);
                        return false;
                    }
                } else {
                    lifecycle
                        .times
                        .paused(session, agent.unwrap_or_default(), vec![tool.clone()], Instant::now());
                }
                "wait_tool"
            }
            WaitFor::User => "wait_user",
        };
        hints.count(kind, Source::Endpoint, known(tenant, session));
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
    fn handoff(
        &self,
        tenant: &Tenant,
        hints: &TenantHints,
        (session, from): (u64, u32),
        to: &str,
        source: Source,
        events: &mut Vec<Event>,
    ) {
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
        hints.count("handoff", source, known(tenant, session));
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

impl TenantHints {
    fn count(&self, kind: &'static str, source: Source, outcome: Outcome) {
        *self
            .counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry((kind, source, outcome))
            .or_default() += 1;
    }
}

impl Report for Hints {
    fn report(&self, out: &mut Exposition<'_>) -> fmt::Result {
        let mut tenants: Vec<(Arc<str>, Arc<TenantHints>)> = {
            let map = self.tenants.lock().unwrap_or_else(|p| p.into_inner());
            map.iter().map(|(n, h)| (n.clone(), h.clone())).collect()
        };
        tenants.sort_by(|a, b| a.0.cmp(&b.0));
        let mut taken = Vec::new();
        let mut refused = Vec::new();
        for (tenant, hints) in &tenants {
            for ((kind, source, outcome), n) in hints.counts.lock().unwrap_or_else(|p| p.into_inner()).iter() {
                let labels = [
                    ("tenant", &**tenant),
                    ("kind", *kind),
                    ("source", source.label()),
                    ("outcome", outcome.label()),
                ];
                taken.push((labels, *n));
            }
            for (reason, n) in hints.refused.lock().unwrap_or_else(|p| p.into_inner()).iter() {
                refused.push(([("tenant", &**tenant), ("reason", *reason)], *n));
            }
        }
        out.counters(
            "agentrt_hints_total",
            "Lifecycle hints taken, by kind, where they came from (a request's header, the hints endpoint, \
             read from a response) and outcome (applied, duplicate, unknown_session).",
            taken,
        )?;
        out.counters(
            "agentrt_hints_refused_total",
            "Hint calls or headers refused: malformed (400), rate (429, --hint-rate), too_large (over 64 \
             hints or 16 KiB).",
            refused,
        )
    }
}

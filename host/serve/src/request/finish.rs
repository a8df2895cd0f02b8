//! A request's end, reported to its tenant's policies exactly once — when the response completed,
//! or as failed when the handler or the response stream is dropped first (the client went away) —
//! and what it held given back: its places in the tenant's quota, on a replica and in the
//! admission queue; working-set admission told the call is over.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use agentrt_runtime::types::{EndReason, Event, RequestFinish};

use super::state::ProxyState;
use crate::engine::admission::AdmissionPermit;
use crate::engine::replicas::Lease;
use crate::engine::working_set::LedgerCall;
use crate::hints::parse::RequestHints;
use crate::identity::agent_api::Usage;
use crate::policy::feed::session_end;
use crate::tenant::{Tenant, TenantPermit};

/// Reports a request's end to its policy exactly once: when the response completed, or — if the
/// handler or the response stream is dropped first (the client went away) — as failed.
pub(super) struct FinishGuard {
    pub state: ProxyState,
    pub tenant: Arc<Tenant>,
    /// The request counts against its tenant's in-flight limit until the guard goes (and ends
    /// early if its key is revoked).
    pub permit: TenantPermit,
    /// Its place on a replica (several replicas), released when the guard goes.
    pub lease: Option<Lease>,
    /// Its place in `--upstream-max-in-flight`, given on when the guard goes.
    pub admission: Option<AdmissionPermit>,
    /// Its place in working-set admission's ledger (`--session-admission`), told its end.
    pub working_set: Option<LedgerCall>,
    pub template: RequestFinish,
    /// What the request and its response say of the session's life (its lifecycle hints).
    pub hints: FinishHints,
    pub done: bool,
}

/// A request's lifecycle hints, applied when it ends.
pub(super) struct FinishHints {
    /// What its headers and body said (closed, the next agent, hints with no event).
    pub request: RequestHints,
    /// The caller's agent, by name (tool return times are learned per agent and tool).
    pub agent_name: String,
    /// The tools its response asked for (set by the relay when the response succeeded).
    pub tools: Vec<String>,
}

impl FinishHints {
    /// What a request said of its session's life, for its agent `agent_name`; no tools asked yet.
    pub fn new(request: RequestHints, agent_name: &str) -> Self {
        Self {
            request,
            agent_name: agent_name.to_string(),
            tools: Vec::new(),
        }
    }
}

impl FinishGuard {
    /// The guard of a request of `tenant` holding `permit`, to report `template` when it ends.
    pub fn new(
        state: ProxyState,
        tenant: Arc<Tenant>,
        permit: TenantPermit,
        template: RequestFinish,
        hints: FinishHints,
    ) -> Self {
        Self {
            state,
            tenant,
            permit,
            lease: None,
            admission: None,
            working_set: None,
            template,
            hints,
            done: false,
        }
    }

    pub fn finish(mut self, ok: bool, usage: Option<Usage>) {
        self.report(ok, usage);
    }

    /// The answer's first streamed piece came back now: its prefill is over.
    pub fn first_piece(&mut self) {
        if let Some(call) = &mut self.working_set {
            call.first_piece();
        }
    }

    fn report(&mut self, ok: bool, usage: Option<Usage>) {
        if self.done {
            return;
        }
        self.done = true;
        if let Some(call) = self.working_set.take() {
            call.ended(ok, usage.as_ref());
        }
        let mut finish = self.template;
        finish.ok = ok;
        finish.at_us = self.state.clock.now_us();
        if let Some(usage) = usage {
            if let Some(n) = usage.prompt_tokens {
                finish.prompt_tokens = n;
            }
            finish.output_tokens = usage.output_tokens.unwrap_or(0);
            finish.cached_tokens = usage.cached_tokens.unwrap_or(0);
            self.tenant.record_usage(finish.prompt_tokens, finish.cached_tokens);
        }
        let mut events = vec![Event::RequestFinish(finish)];
        // A long request keeps its session alive: idleness counts from the last answer too.
        let ended = self.tenant.agents.record_session(finish.session).forgotten;
        self.state.metrics.sessions_ended.fetch_add(ended.len() as u64, Relaxed);
        let at_us = finish.at_us;
        events.extend(
            ended
                .into_iter()
                .map(|session| session_end(session, EndReason::Evicted, at_us)),
        );
        // After its finish: the wait its response asked for, the handoff and the close its
        // headers said (a failed request asked for no tool).
        let tools = if ok {
            std::mem::take(&mut self.hints.tools)
        } else {
            Vec::new()
        };
        let who = (finish.session, finish.agent, self.hints.agent_name.as_str());
        events.extend(self.state.hints.finished(&self.tenant, who, &self.hints.request, tools));
        self.state.feed.tell(&self.tenant, events);
        // In flight until its end has reached the policy: a caller that sees 0 sees every finish.
        self.state.metrics.in_flight.fetch_sub(1, Relaxed);
        self.state.effects.carry_out(self.tenant.clone());
    }
}

impl Drop for FinishGuard {
    fn drop(&mut self) {
        if !self.done {
            self.state.metrics.streams_cancelled.fetch_add(1, Relaxed);
            self.report(false, None);
        }
    }
}

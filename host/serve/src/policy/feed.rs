//! Telling a tenant's policies what happened: every slot of the tenant hears the same events (on
//! their workers: this never waits), and sessions reported ended leave the replicas' placement table.
//! Most frameworks never say when a task is over (those that do send lifecycle hints:
//! the `hints` module), so a session silent for `--session-idle-ms` is reported ended here too.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentrt_runtime::types::{EndReason, Event, SessionEnd};

use crate::clock::Clock;
use crate::engine::replicas::ReplicaRouting;
use crate::engine::working_set::SessionAdmission;
use crate::metrics::ProxyMetrics;
use crate::tenant::{Tenant, Tenants};

/// Where events go: the tenant's slots, and the replicas' session table. Cheap to clone.
#[derive(Clone)]
pub struct PolicyFeed {
    tenants: Arc<Tenants>,
    replicas: Option<Arc<ReplicaRouting>>,
    /// Working-set admission, which hears every session's end.
    working_set: Option<Arc<SessionAdmission>>,
    metrics: Arc<ProxyMetrics>,
    clock: Clock,
}

impl PolicyFeed {
    /// A feed into `tenants`' slots that also clears ended sessions from `replicas`' placement table
    /// when there are several replicas; session ends are stamped by `clock`.
    pub fn new(
        tenants: Arc<Tenants>,
        replicas: Option<Arc<ReplicaRouting>>,
        metrics: Arc<ProxyMetrics>,
        clock: Clock,
    ) -> Self {
        Self {
            tenants,
            replicas,
            working_set: None,
            metrics,
            clock,
        }
    }

    /// The same feed, also telling `working_set` every session's end.
    pub fn with_working_set(self, working_set: Option<Arc<SessionAdmission>>) -> Self {
        Self { working_set, ..self }
    }

    /// Queue `events` for every slot of `tenant`. Never waits: the tenant's workers make the
    /// calls, and drop (and count) what their full queues cannot hold.
    pub fn tell(&self, tenant: &Tenant, events: Vec<Event>) {
        if let Some(replicas) = &self.replicas {
            // An ended session's replica is no longer a placement hint (idle ends, and table overflow).
            replicas.sessions_ended(events.iter().filter_map(|e| match e {
                Event::SessionEnd(end) => Some(end.session),
                _ => None,
            }));
        }
        if let Some(working_set) = &self.working_set {
            working_set.sessions_ended(&events);
        }
        tenant.observe(events);
    }

    /// Report the sessions with no request for `idle` as ended (`session-end`) to their tenant's
    /// policies — CacheSage learns "the session ends here" from it and stops valuing the
    /// session's blocks. Returns how many ended. `agentrt serve` calls it periodically.
    pub fn end_idle_sessions(&self, idle: Duration) -> usize {
        let now = Instant::now();
        let mut ended = 0;
        for tenant in self.tenants.list() {
            let sessions = tenant.agents.expire_sessions(idle, now);
            if sessions.is_empty() {
                continue;
            }
            ended += sessions.len();
            let at_us = self.clock.now_us();
            let events: Vec<Event> = sessions
                .into_iter()
                .map(|session| session_end(session, EndReason::Idle, at_us))
                .collect();
            self.tell(&tenant, events);
        }
        self.metrics.sessions_ended.fetch_add(ended as u64, Relaxed);
        ended
    }
}

/// `session-end` for `session`: `idle` from the sweep above, `evicted` for a session pushed out of
/// its tenant's full session table (the host stopped following it; it may well be alive).
pub fn session_end(session: u64, reason: EndReason, at_us: u64) -> Event {
    Event::SessionEnd(SessionEnd { session, reason, at_us })
}

//! The gateway's counters per tenant and upstream server, and the families `/metrics` shows of them.
//!
//! Labels are bounded: tenants are the operator's, servers are configured, tools are not labels.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use agentrt_exposition::{Exposition, Family, Kind};

/// Counters of one (tenant, server).
#[derive(Debug, Default)]
pub struct ServerCounters {
    /// `tools/call` requests received.
    pub calls: AtomicU64,
    /// Calls answered from memory.
    pub memo_hits: AtomicU64,
    /// Calls of memoizable tools that went to the server (nothing kept, expired, or no answer).
    pub memo_misses: AtomicU64,
    /// Calls of memoizable tools that went to the server because the policy did not answer in time.
    pub memo_no_answer: AtomicU64,
    /// Fetched results kept.
    pub memo_stored: AtomicU64,
    /// Results dropped because the policy stopped keeping them (TTL).
    pub memo_expired: AtomicU64,
    /// Results dropped to stay within the tenant's budget.
    pub memo_evicted: AtomicU64,
    /// Server time the hits saved: the latency of the fetch each served result came from (µs).
    pub memo_saved_us: AtomicU64,
    /// Time spent waiting on the server for calls (µs).
    pub upstream_us: AtomicU64,
    /// Requests the server failed or could not be reached for (transport, protocol).
    pub upstream_errors: AtomicU64,
    /// Tool results the server marked `isError`.
    pub tool_errors: AtomicU64,
    /// Calls the client cancelled while the server worked.
    pub cancelled: AtomicU64,
    /// Requests of other methods forwarded (lists, reads, prompts, completions).
    pub forwarded: AtomicU64,
    /// Requests the server did not answer within `--mcp-call-timeout-ms` (cancelled there).
    pub timeouts: AtomicU64,
}

/// Why the gateway refused a request before it reached a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// No tenant key, or an unknown one.
    Auth,
    /// An `Mcp-Session-Id` that is not the caller's (unknown, closed, expired, or another's).
    UnknownSession,
    /// An `initialize` past the tenant's `--mcp-max-sessions`.
    SessionCap,
    /// A call past the tenant's in-flight quota (`--tenant-max-in-flight`).
    InFlight,
    /// A body the server would not receive as written (a repeated key, an inexact number).
    Inexact,
    /// A body over `--max-body-bytes`.
    BodyTooLarge,
    /// A body nested deeper than `--max-json-depth`.
    TooDeep,
    /// A body that missed its deadline (`--body-idle-timeout-ms`, `--body-min-bytes-per-s`).
    BodyTimeout,
    /// A body past the reading budgets (`--max-reading-mib`, `--max-reading-mib-per-tenant`).
    BodyBudget,
}

impl Refused {
    /// Every reason, in declaration order: the index of its counter and the order of its series.
    pub const ALL: [Refused; 9] = [
        Refused::Auth,
        Refused::UnknownSession,
        Refused::SessionCap,
        Refused::InFlight,
        Refused::Inexact,
        Refused::BodyTooLarge,
        Refused::TooDeep,
        Refused::BodyTimeout,
        Refused::BodyBudget,
    ];

    /// The `reason` label.
    pub fn label(self) -> &'static str {
        match self {
            Refused::Auth => "auth",
            Refused::UnknownSession => "unknown_session",
            Refused::SessionCap => "session_cap",
            Refused::InFlight => "in_flight",
            Refused::Inexact => "inexact_json",
            Refused::BodyTooLarge => "body_too_large",
            Refused::TooDeep => "too_deep",
            Refused::BodyTimeout => "body_timeout",
            Refused::BodyBudget => "body_budget",
        }
    }
}

/// The gateway's counters: per (tenant, server), and refusals by reason.
#[derive(Debug, Default)]
pub struct GatewayMetrics {
    servers: Mutex<BTreeMap<(String, String), Arc<ServerCounters>>>,
    /// Requests refused before they reached a server, by [`Refused`] (its index in `ALL`).
    refused: [AtomicU64; Refused::ALL.len()],
}

/// What the session metrics show: (tenant, sessions open) for every tenant that opened one, and
/// how many sessions ended so far.
pub struct SessionCounts {
    /// (tenant, sessions it has open now).
    pub open: Vec<(String, usize)>,
    /// Sessions ended so far, every tenant's together (closed, failed or expired).
    pub closed: u64,
}

impl GatewayMetrics {
    /// Count one request refused for `why`.
    pub fn refuse(&self, why: Refused) {
        self.refused[why as usize].fetch_add(1, Relaxed);
    }

    /// Requests refused for `why` so far.
    pub fn refused(&self, why: Refused) -> u64 {
        self.refused[why as usize].load(Relaxed)
    }

    /// The counters of `tenant`'s calls to `server`, created (at zero) on first use.
    pub fn of(&self, tenant: &str, server: &str) -> Arc<ServerCounters> {
        self.servers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry((tenant.to_string(), server.to_string()))
            .or_default()
            .clone()
    }

    /// The gateway's families: every (tenant, server)'s counters, refusals by reason, sessions open
    /// per tenant and ended, and each tenant's memo size (`memo_sizes`: tenant, entries, bytes).
    pub fn report(
        &self,
        memo_sizes: &[(String, usize, usize)],
        sessions: &SessionCounts,
        out: &mut Exposition<'_>,
    ) -> fmt::Result {
        let servers = self.servers.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let rows: Vec<_> = servers
            .iter()
            .map(|((tenant, server), c)| ([("tenant", tenant.as_str()), ("server", server.as_str())], &**c))
            .collect();
        out.table(&SERVER_FAMILIES, &rows)?;
        out.counters(
            "agentrt_mcp_refused_total",
            "MCP requests refused before they reached a server, by reason.",
            Refused::ALL.map(|why| ([("reason", why.label())], self.refused(why))),
        )?;
        out.gauges(
            "agentrt_mcp_sessions",
            "MCP sessions open now (--mcp-max-sessions per tenant).",
            sessions
                .open
                .iter()
                .map(|(tenant, open)| ([("tenant", tenant.as_str())], *open as u64)),
        )?;
        out.counter(
            "agentrt_mcp_sessions_closed_total",
            "MCP sessions that ended (closed, failed or idle past --mcp-session-idle-ms).",
            sessions.closed,
        )?;
        let per_tenant = |pick: fn(&(String, usize, usize)) -> usize| {
            memo_sizes
                .iter()
                .map(move |m| ([("tenant", m.0.as_str())], pick(m) as u64))
        };
        out.gauges(
            "agentrt_mcp_memo_entries",
            "Results kept in memory now.",
            per_tenant(|m| m.1),
        )?;
        out.gauges(
            "agentrt_mcp_memo_bytes",
            "Bytes of results kept in memory now.",
            per_tenant(|m| m.2),
        )
    }
}

/// The counters of each (tenant, server), one family each.
const SERVER_FAMILIES: [Family<ServerCounters>; 14] = [
    Family {
        name: "agentrt_mcp_tool_calls_total",
        kind: Kind::Counter,
        help: "tools/call requests received.",
        read: |c| c.calls.load(Relaxed).into(),
    },
    Family {
        name: "agentrt_mcp_memo_hits_total",
        kind: Kind::Counter,
        help: "Tool calls answered from memory, without the server.",
        read: |c| c.memo_hits.load(Relaxed).into(),
    },
    Family {
        name: "agentrt_mcp_memo_misses_total",
        kind: Kind::Counter,
        help: "Calls of memoizable tools sent to the server.",
        read: |c| c.memo_misses.load(Relaxed).into(),
    },
    Family {
        name: "agentrt_mcp_memo_no_answer_total",
        kind: Kind::Counter,
        help: "Memo lookups the tool-memo policy did not answer in time (sent to the server).",
        read: |c| c.memo_no_answer.load(Relaxed).into(),
    },
    Family {
        name: "agentrt_mcp_memo_stored_total",
        kind: Kind::Counter,
        help: "Fetched results kept in memory.",
        read: |c| c.memo_stored.load(Relaxed).into(),
    },
    Family {
        name: "agentrt_mcp_memo_expired_total",
        kind: Kind::Counter,
        help: "Kept results the policy dropped (TTL).",
        read: |c| c.memo_expired.load(Relaxed).into(),
    },
    Family {
        name: "agentrt_mcp_memo_evicted_total",
        kind: Kind::Counter,
        help: "Kept results dropped to stay within the budget.",
        read: |c| c.memo_evicted.load(Relaxed).into(),
    },
    Family {
        name: "agentrt_mcp_upstream_errors_total",
        kind: Kind::Counter,
        help: "Requests the server failed or could not be reached for.",
        read: |c| c.upstream_errors.load(Relaxed).into(),
    },
    Family {
        name: "agentrt_mcp_tool_errors_total",
        kind: Kind::Counter,
        help: "Tool results the server marked isError.",
        read: |c| c.tool_errors.load(Relaxed).into(),
    },
    Family {
        name: "agentrt_mcp_cancelled_total",
        kind: Kind::Counter,
        help: "Calls the client cancelled while the server worked.",
        read: |c| c.cancelled.load(Relaxed).into(),
    },
    Family {
        name: "agentrt_mcp_forwarded_total",
        kind: Kind::Counter,
        help: "Other requests forwarded (lists, reads, prompts).",
        read: |c| c.forwarded.load(Relaxed).into(),
    },
    Family {
        name: "agentrt_mcp_memo_saved_seconds_total",
        kind: Kind::Counter,
        help: "Server time saved by hits (the latency of the fetch each served result came from).",
        read: |c| (c.memo_saved_us.load(Relaxed) as f64 / 1e6).into(),
    },
    Family {
        name: "agentrt_mcp_upstream_seconds_total",
        kind: Kind::Counter,
        help: "Time spent waiting on servers for tool calls.",
        read: |c| (c.upstream_us.load(Relaxed) as f64 / 1e6).into(),
    },
    Family {
        name: "agentrt_mcp_call_timeouts_total",
        kind: Kind::Counter,
        help: "Requests a server did not answer within --mcp-call-timeout-ms (cancelled there).",
        read: |c| c.timeouts.load(Relaxed).into(),
    },
];

//! The gateway's counters per tenant and upstream server, in the Prometheus text format.
//!
//! Labels are bounded: tenants are the operator's, servers are configured, tools are not labels.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

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
}

impl Refused {
    /// Every reason, in declaration order: the index of its counter and the order of its series.
    pub const ALL: [Refused; 7] = [
        Refused::Auth,
        Refused::UnknownSession,
        Refused::SessionCap,
        Refused::InFlight,
        Refused::Inexact,
        Refused::BodyTooLarge,
        Refused::TooDeep,
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

    /// Append the counters; `memo_sizes` gives (tenant, entries, bytes) of each tenant's memo,
    /// `sessions` the sessions each tenant has open.
    pub fn render(&self, memo_sizes: &[(String, usize, usize)], sessions: &SessionCounts, out: &mut String) {
        let servers = self.servers.lock().unwrap_or_else(|p| p.into_inner()).clone();
        type Field = fn(&ServerCounters) -> &AtomicU64;
        let counters: [(&str, &str, Field); 14] = [
            ("agentrt_mcp_tool_calls_total", "tools/call requests received.", |c| {
                &c.calls
            }),
            (
                "agentrt_mcp_memo_hits_total",
                "Tool calls answered from memory, without the server.",
                |c| &c.memo_hits,
            ),
            (
                "agentrt_mcp_memo_misses_total",
                "Calls of memoizable tools sent to the server.",
                |c| &c.memo_misses,
            ),
            (
                "agentrt_mcp_memo_no_answer_total",
                "Memo lookups the tool-memo policy did not answer in time (sent to the server).",
                |c| &c.memo_no_answer,
            ),
            (
                "agentrt_mcp_memo_stored_total",
                "Fetched results kept in memory.",
                |c| &c.memo_stored,
            ),
            (
                "agentrt_mcp_memo_expired_total",
                "Kept results the policy dropped (TTL).",
                |c| &c.memo_expired,
            ),
            (
                "agentrt_mcp_memo_evicted_total",
                "Kept results dropped to stay within the budget.",
                |c| &c.memo_evicted,
            ),
            (
                "agentrt_mcp_upstream_errors_total",
                "Requests the server failed or could not be reached for.",
                |c| &c.upstream_errors,
            ),
            (
                "agentrt_mcp_tool_errors_total",
                "Tool results the server marked isError.",
                |c| &c.tool_errors,
            ),
            (
                "agentrt_mcp_cancelled_total",
                "Calls the client cancelled while the server worked.",
                |c| &c.cancelled,
            ),
            (
                "agentrt_mcp_forwarded_total",
                "Other requests forwarded (lists, reads, prompts).",
                |c| &c.forwarded,
            ),
            (
                "agentrt_mcp_memo_saved_seconds_total",
                "Server time saved by hits (the latency of the fetch each served result came from).",
                |c| &c.memo_saved_us,
            ),
            (
                "agentrt_mcp_upstream_seconds_total",
                "Time spent waiting on servers for tool calls.",
                |c| &c.upstream_us,
            ),
            (
                "agentrt_mcp_call_timeouts_total",
                "Requests a server did not answer within --mcp-call-timeout-ms (cancelled there).",
                |c| &c.timeouts,
            ),
        ];
        for (name, help, field) in counters {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            let seconds = name.ends_with("_seconds_total");
            for ((tenant, server), c) in &servers {
                let v = field(c).load(Relaxed);
                if seconds {
                    let _ = writeln!(
                        out,
                        "{name}{{tenant=\"{tenant}\",server=\"{server}\"}} {}",
                        v as f64 / 1e6
                    );
                } else {
                    let _ = writeln!(out, "{name}{{tenant=\"{tenant}\",server=\"{server}\"}} {v}");
                }
            }
        }
        let _ = writeln!(
            out,
            "# HELP agentrt_mcp_refused_total MCP requests refused before they reached a server, by reason.\n\
             # TYPE agentrt_mcp_refused_total counter"
        );
        for why in Refused::ALL {
            let _ = writeln!(
                out,
                "agentrt_mcp_refused_total{{reason=\"{}\"}} {}",
                why.label(),
                self.refused(why)
            );
        }
        let _ = writeln!(
            out,
            "# HELP agentrt_mcp_sessions MCP sessions open now (--mcp-max-sessions per tenant).\n# TYPE agentrt_mcp_sessions gauge"
        );
        for (tenant, open) in &sessions.open {
            let _ = writeln!(out, "agentrt_mcp_sessions{{tenant=\"{tenant}\"}} {open}");
        }
        let _ = writeln!(
            out,
            "# HELP agentrt_mcp_sessions_closed_total MCP sessions that ended (closed, failed or idle past --mcp-session-idle-ms).\n\
             # TYPE agentrt_mcp_sessions_closed_total counter\nagentrt_mcp_sessions_closed_total {}",
            sessions.closed
        );
        for (name, help, pick) in [
            ("agentrt_mcp_memo_entries", "Results kept in memory now.", 0),
            ("agentrt_mcp_memo_bytes", "Bytes of results kept in memory now.", 1),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            for (tenant, entries, bytes) in memo_sizes {
                let v = if pick == 0 { entries } else { bytes };
                let _ = writeln!(out, "{name}{{tenant=\"{tenant}\"}} {v}");
            }
        }
    }
}

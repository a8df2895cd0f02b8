//! One `tools/call` through the gateway: report the call, answer from memory if the tenant's
//! policy still keeps a result for exactly these arguments, else forward it (cancellable), report
//! the return, and offer the result to the memo.
//!
//! Every call, hit or not, is a `tool-call` then a `tool-return` on the tenant's stream (the KV
//! policy's) and the tenant's tool-memo policy; a hit's return carries the time the agent actually
//! waited. Only tools the host's rule qualifies ([`crate::eligibility`]) are ever looked up or
//! kept, and only successful results (`isError` results may be transient).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult, MetaObject};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};
use serde_json::json;
use tracing::Instrument as _;

use agentrt_runtime::types::{Event, ToolCall, ToolReturn};

use crate::caller::Caller;
use crate::eligibility::Eligibility;
use crate::keys::{tool_hash, ResultKey};
use crate::memo::{Miss, TenantMemo};
use crate::memo_store::Entry;
use crate::metrics::ServerCounters;
use crate::result_type::ExplicitResultType;
use crate::server_front::ServerFront;
use crate::upstream::Connection;

/// The `_meta` key a memo hit is marked with.
pub const MEMO_META_KEY: &str = "agentrt/memo";

/// Answer one `tools/call` of `front`'s server: from the caller's tenant's memo when it keeps a
/// result for exactly these arguments, else from the server under the call deadline; the call
/// and its return are reported to the tenant's stream either way.
pub async fn call(
    front: &ServerFront,
    request: CallToolRequestParams,
    context: RequestContext<RoleServer>,
) -> Result<CallToolResponse, McpError> {
    // The tool's name and who called it; never its arguments or result.
    let span = tracing::info_span!(
        "mcp.tool_call",
        server = %front.server.name,
        tool = %request.name,
        tenant = tracing::field::Empty,
        agent = tracing::field::Empty,
        session = tracing::field::Empty,
        memo = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    if let Some(parts) = context.extensions.get::<axum::http::request::Parts>() {
        front.gateway.tenancy.adopt_trace_parent(&span, &parts.headers);
    }
    let answer = call_traced(front, request, context).instrument(span.clone()).await;
    if answer.is_err() {
        span.record("otel.status_code", "ERROR");
    }
    answer
}

async fn call_traced(
    front: &ServerFront,
    request: CallToolRequestParams,
    context: RequestContext<RoleServer>,
) -> Result<CallToolResponse, McpError> {
    let caller = Caller::of(&context, &front.gateway.metrics)?;
    tracing::Span::current()
        .record("tenant", caller.tenant.name())
        .record("agent", caller.agent)
        .record("session", caller.session);
    let tenant = caller.tenant.clone();
    let counters = front.gateway.metrics.of(tenant.name(), &front.server.name);
    counters.calls.fetch_add(1, Relaxed);
    let connection = front.connection(&caller).await?;
    let eligibility = eligibility(front, &caller, &connection, &request.name).await?;
    let key = ResultKey::of(&front.server.name, &request.name, request.arguments.as_ref());
    let started_us = tenant.now_us();
    let started = Instant::now();
    let report = Report {
        caller: &caller,
        tool: tool_hash(&request.name),
        key: key.key,
    };
    let called = report.call(started_us);
    tenant.observe(vec![called.clone()]);
    let memo = front.gateway.memo(tenant.as_ref());

    if let Some(memo) = memo.as_ref().filter(|_| eligibility.memoizable()) {
        match memo.lookup(&key, called, started_us).await {
            Ok(entry) => {
                tracing::Span::current().record("memo", "hit");
                return Ok(hit(&report, memo, &counters, entry, started, started_us));
            }
            Err(miss) => {
                tracing::Span::current().record("memo", "miss");
                counters.memo_misses.fetch_add(1, Relaxed);
                if miss == Miss::NoAnswer {
                    counters.memo_no_answer.fetch_add(1, Relaxed);
                }
                if miss == Miss::Expired {
                    counters.memo_expired.fetch_add(1, Relaxed);
                }
            }
        }
    } else if let Some(memo) = &memo {
        memo.observe(vec![called]);
    }

    let method = format!("tools/call `{}`", request.name);
    let answer = tokio::select! {
        answer = front.within_deadline(&caller, &method, connection.peer().call_tool_once(request.clone())) => answer,
        // Dropping the upstream request sends the server `notifications/cancelled`.
        () = context.ct.cancelled() => {
            counters.cancelled.fetch_add(1, Relaxed);
            report.returned(memo.as_deref(), 0, started, false);
            return Err(McpError::internal_error(
                format!("tools/call `{}` cancelled by the client", request.name),
                None,
            ));
        }
    };
    let latency_us = started.elapsed().as_micros() as u64;
    counters.upstream_us.fetch_add(latency_us, Relaxed);
    let result = match answer.map(ExplicitResultType::with_explicit_result_type) {
        Ok(CallToolResponse::Complete(result)) => result,
        // Input requests and tasks pass through unchanged; nothing of them is kept.
        Ok(other) => {
            report.returned(memo.as_deref(), 0, started, true);
            return Ok(other);
        }
        Err(error) => {
            report.returned(memo.as_deref(), 0, started, false);
            return Err(error);
        }
    };
    let bytes = serde_json::to_vec(&result).map_or(0, |b| b.len());
    let ok = result.is_error != Some(true);
    if !ok {
        counters.tool_errors.fetch_add(1, Relaxed);
    }
    let returned = report.return_event(bytes, latency_us, ok);
    tenant.observe(vec![returned.clone()]);
    match memo {
        Some(memo) if ok && eligibility.memoizable() => {
            let entry = Entry {
                key,
                result: result.clone(),
                agent: caller.agent,
                fetched_at_us: started_us,
                latency_us,
                bytes,
            };
            // Kept before the answer goes back, so the agent's next identical call finds it; the
            // wait is one policy call (bounded by the decision timeout) after a server call.
            let kept = memo.offer(entry, returned).await;
            counters.memo_stored.fetch_add(u64::from(kept.stored), Relaxed);
            counters.memo_expired.fetch_add(kept.expired as u64, Relaxed);
            counters.memo_evicted.fetch_add(kept.evicted as u64, Relaxed);
        }
        Some(memo) => memo.observe(vec![returned]),
        None => {}
    }
    Ok(CallToolResponse::Complete(result))
}

/// Whether `tool`'s results may be memoized, listing the server's tools first if this session
/// has not yet. A tool the listing does not have is refused here, naming what the server offers.
async fn eligibility(
    front: &ServerFront,
    caller: &Caller,
    connection: &Arc<Connection>,
    tool: &str,
) -> Result<Eligibility, McpError> {
    let known = match connection.tool(tool) {
        Some(Some(eligibility)) => return Ok(eligibility),
        // Listed before without it: the server may have added it since.
        Some(None) | None => {
            let tools = front
                .within_deadline(caller, "tools/list", connection.peer().list_all_tools())
                .await?;
            connection.learn_tools(&front.server.name, &tools, &front.gateway.options.rules);
            connection.tool(tool).flatten()
        }
    };
    known.ok_or_else(|| {
        McpError::invalid_params(
            format!(
                "unknown tool `{tool}`: {} (at /mcp/{}) offers {}",
                front.server.describe(),
                front.server.name,
                connection.tool_names().join(", ")
            ),
            None,
        )
    })
}

/// The result served from memory, marked in `_meta` and counted.
fn hit(
    report: &Report<'_>,
    memo: &TenantMemo,
    counters: &ServerCounters,
    entry: Entry,
    started: Instant,
    started_us: u64,
) -> CallToolResponse {
    counters.memo_hits.fetch_add(1, Relaxed);
    counters.memo_saved_us.fetch_add(entry.latency_us, Relaxed);
    let mut result: CallToolResult = entry.result;
    let meta = result.meta.get_or_insert_with(MetaObject::default);
    meta.insert(
        MEMO_META_KEY.to_string(),
        json!({
            "hit": true,
            "ageMs": started_us.saturating_sub(entry.fetched_at_us) / 1000,
            "savedMs": entry.latency_us / 1000,
        }),
    );
    report.returned(Some(memo), entry.bytes, started, true);
    CallToolResponse::Complete(result)
}

/// The events of one call.
struct Report<'a> {
    caller: &'a Caller,
    tool: u64,
    key: u64,
}

impl Report<'_> {
    fn call(&self, at_us: u64) -> Event {
        Event::ToolCall(ToolCall {
            session: self.caller.session,
            agent: self.caller.agent,
            tool: self.tool,
            args_hash: self.key,
            at_us,
        })
    }

    fn return_event(&self, bytes: usize, latency_us: u64, ok: bool) -> Event {
        Event::ToolReturn(ToolReturn {
            session: self.caller.session,
            agent: self.caller.agent,
            tool: self.tool,
            args_hash: self.key,
            result_tokens: u32::try_from(bytes / 4).unwrap_or(u32::MAX),
            latency_us,
            ok,
        })
    }

    /// Report a return to the tenant's stream and memo policy.
    fn returned(&self, memo: Option<&TenantMemo>, bytes: usize, started: Instant, ok: bool) {
        let event = self.return_event(bytes, started.elapsed().as_micros() as u64, ok);
        self.caller.tenant.observe(vec![event.clone()]);
        if let Some(memo) = memo {
            memo.observe(vec![event]);
        }
    }
}

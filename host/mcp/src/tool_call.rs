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
use crate::upstream::Connection;
use crate::upstream_handle::UpstreamHandle;

/// The `_meta` key a memo hit is marked with.
pub const MEMO_META_KEY: &str = "agentrt/memo";

/// Answer one `tools/call` of `upstream`'s server: from the caller's tenant's memo when it keeps a
/// result for exactly these arguments, else from the server under the call deadline; the call
/// and its return are reported to the tenant's stream either way.
pub async fn call(
    upstream: &UpstreamHandle,
    request: CallToolRequestParams,
    context: RequestContext<RoleServer>,
) -> Result<CallToolResponse, McpError> {
    // The tool's name and who called it; never its arguments or result.
    let span = tracing::info_span!(
        "mcp.tool_call",
        server = %upstream.server.name,
        tool = %request.name,
        tenant = tracing::field::Empty,
        agent = tracing::field::Empty,
        session = tracing::field::Empty,
        memo = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    if let Some(parts) = context.extensions.get::<axum::http::request::Parts>() {
        upstream.gateway.tenancy.adopt_trace_parent(&span, &parts.headers);
    }
    let answer = call_traced(upstream, request, context).instrument(span.clone()).await;
    if answer.is_err() {
        span.record("otel.status_code", "ERROR");
    }
    answer
}

async fn call_traced(
    upstream: &UpstreamHandle,
    request: CallToolRequestParams,
    context: RequestContext<RoleServer>,
) -> Result<CallToolResponse, McpError> {
    let caller = Caller::of(&context, &upstream.gateway.metrics)?;
    tracing::Span::current()
        .record("tenant", caller.tenant.name())
        .record("agent", caller.agent)
        .record("session", caller.session);
    let counters = upstream.gateway.metrics.of(caller.tenant.name(), &upstream.server.name);
    counters.calls.fetch_add(1, Relaxed);
    let connection = upstream.connection(&caller).await?;
    let eligibility = eligibility(upstream, &caller, &connection, &request.name).await?;
    let key = ResultKey::of(&upstream.server.name, &request.name, request.arguments.as_ref());
    let started_us = caller.tenant.now_us();
    let started = Instant::now();
    let report = Report {
        caller: &caller,
        tool: tool_hash(&request.name),
        key: key.key,
    };
    // The tenant's stream hears of the call before the memo is consulted (or its policy started).
    let called = report.call(started_us);
    caller.tenant.observe(vec![called.clone()]);
    let call = Call {
        report,
        memo: upstream.gateway.memo(caller.tenant.as_ref()),
        memoizable: eligibility.memoizable(),
        counters,
        started_us,
        started,
    };
    if let Some(hit) = call.consult_memo(&key, called).await {
        return Ok(hit);
    }
    let (result, latency_us) = match call.forward(upstream, request, &context, &connection).await? {
        Forwarded::Complete(result, latency_us) => (result, latency_us),
        Forwarded::Other(other) => return Ok(other),
    };
    call.finish(key, &result, latency_us).await;
    Ok(CallToolResponse::Complete(result))
}

/// One call in flight: what its steps (consult the memo, forward, finish) share.
struct Call<'a> {
    report: Report<'a>,
    /// The tenant's memo, if the gateway runs a memo policy.
    memo: Option<Arc<TenantMemo>>,
    /// Whether the host's rule lets this tool's results be looked up and kept.
    memoizable: bool,
    counters: Arc<ServerCounters>,
    started_us: u64,
    started: Instant,
}

/// What the server answered, when it answered.
enum Forwarded {
    /// A result, and how long the server took to give it.
    Complete(CallToolResult, u64),
    /// An input request or a task: passed through unchanged, nothing of it kept.
    Other(CallToolResponse),
}

impl Call<'_> {
    /// The answer from the memo, if it still keeps a result for exactly `key`'s arguments. A tool
    /// the host's rule does not qualify is never looked up, but its call (`called`) is still shown
    /// to the memo policy.
    async fn consult_memo(&self, key: &ResultKey, called: Event) -> Option<CallToolResponse> {
        let memo = self.memo.as_deref()?;
        if !self.memoizable {
            memo.observe(vec![called]);
            return None;
        }
        match memo.lookup(key, called, self.started_us).await {
            Ok(entry) => {
                tracing::Span::current().record("memo", "hit");
                let counters = &self.counters;
                Some(hit(&self.report, memo, counters, entry, self.started, self.started_us))
            }
            Err(miss) => {
                tracing::Span::current().record("memo", "miss");
                self.count_miss(miss);
                None
            }
        }
    }

    fn count_miss(&self, miss: Miss) {
        self.counters.memo_misses.fetch_add(1, Relaxed);
        if miss == Miss::NoAnswer {
            self.counters.memo_no_answer.fetch_add(1, Relaxed);
        }
        if miss == Miss::Expired {
            self.counters.memo_expired.fetch_add(1, Relaxed);
        }
    }

    /// Send the call to the server under the call deadline, unless the client cancels first. A
    /// call that ends without a result (cancelled, failed, or not a result) has its return
    /// reported here; a result's return is reported by [`Call::finish`], which knows its size.
    async fn forward(
        &self,
        upstream: &UpstreamHandle,
        request: CallToolRequestParams,
        context: &RequestContext<RoleServer>,
        connection: &Connection,
    ) -> Result<Forwarded, McpError> {
        let memo = self.memo.as_deref();
        let method = format!("tools/call `{}`", request.name);
        let caller = self.report.caller;
        let answer = tokio::select! {
            answer = upstream.within_deadline(caller, &method, connection.peer().call_tool_once(request.clone())) => answer,
            // Dropping the upstream request sends the server `notifications/cancelled`.
            () = context.ct.cancelled() => {
                self.counters.cancelled.fetch_add(1, Relaxed);
                self.report.returned(memo, 0, self.started, false);
                return Err(McpError::internal_error(
                    format!("tools/call `{}` cancelled by the client", request.name),
                    None,
                ));
            }
        };
        let latency_us = self.started.elapsed().as_micros() as u64;
        self.counters.upstream_us.fetch_add(latency_us, Relaxed);
        match answer.map(ExplicitResultType::with_explicit_result_type) {
            Ok(CallToolResponse::Complete(result)) => Ok(Forwarded::Complete(result, latency_us)),
            Ok(other) => {
                self.report.returned(memo, 0, self.started, true);
                Ok(Forwarded::Other(other))
            }
            Err(error) => {
                self.report.returned(memo, 0, self.started, false);
                Err(error)
            }
        }
    }

    /// Report the result's return, and offer a successful result of a qualifying tool to the
    /// memo (`isError` results may be transient, so they are only shown to the policy).
    async fn finish(self, key: ResultKey, result: &CallToolResult, latency_us: u64) {
        let bytes = serde_json::to_vec(result).map_or(0, |b| b.len());
        let ok = result.is_error != Some(true);
        if !ok {
            self.counters.tool_errors.fetch_add(1, Relaxed);
        }
        let returned = self.report.return_event(bytes, latency_us, ok);
        self.report.caller.tenant.observe(vec![returned.clone()]);
        let Some(memo) = self.memo else { return };
        if !(ok && self.memoizable) {
            memo.observe(vec![returned]);
            return;
        }
        let entry = Entry {
            key,
            result: result.clone(),
            agent: self.report.caller.agent,
            fetched_at_us: self.started_us,
            latency_us,
            bytes,
        };
        // Kept before the answer goes back, so the agent's next identical call finds it; the
        // wait is one policy call (bounded by the decision timeout) after a server call.
        let kept = memo.offer(entry, returned).await;
        self.counters.memo_stored.fetch_add(u64::from(kept.stored), Relaxed);
        self.counters.memo_expired.fetch_add(kept.expired as u64, Relaxed);
        self.counters.memo_evicted.fetch_add(kept.evicted as u64, Relaxed);
    }
}

/// Whether `tool`'s results may be memoized, listing the server's tools first if this session
/// has not yet. A tool the listing does not have is refused here, naming what the server offers.
async fn eligibility(
    upstream: &UpstreamHandle,
    caller: &Caller,
    connection: &Arc<Connection>,
    tool: &str,
) -> Result<Eligibility, McpError> {
    let known = match connection.tool(tool) {
        Some(Some(eligibility)) => return Ok(eligibility),
        // Listed before without it: the server may have added it since.
        Some(None) | None => {
            let tools = upstream
                .within_deadline(caller, "tools/list", connection.peer().list_all_tools())
                .await?;
            connection.learn_tools(&upstream.server.name, &tools, &upstream.gateway.options.rules);
            connection.tool(tool).flatten()
        }
    };
    known.ok_or_else(|| {
        McpError::invalid_params(
            format!(
                "unknown tool `{tool}`: {} (at /mcp/{}) offers {}",
                upstream.server.describe(),
                upstream.server.name,
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

//! Sending a prepared call on: `request-arrival` to the tenant's policies, its session's turn
//! under working-set admission (`--session-admission`: a held session's call waits), a place in the
//! admission queue (`--upstream-max-in-flight`; the tenant's `admission` slot scores the request
//! while it waits; a held stream kept alive meanwhile: [`super::held_stream`]), a replica
//! (several replicas: once more elsewhere if the first refuses the connection), the upstream, and
//! the answer back — whole, or relayed as it streams.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use agentrt_runtime::types::{Continuation, EndReason, Event, Item, ItemKind, RequestArrival, RequestFinish};

use super::finish::{FinishGuard, FinishHints};
use super::prepare::Prepared;
use super::state::{failed, revoked_error, unless_revoked, ProxyState};
use crate::engine::admission::Applicant;
use crate::engine::replicas::{Lease, RouteInput};
use crate::engine::upstream;
use crate::engine::working_set::HeldCall;
use crate::front::error::ApiError;
use crate::hints::parse::RequestHints;
use crate::hints::tool_wait::tools_in_reply;
use crate::identity::agent_api::AgentApi;
use crate::identity::Identity;
use crate::names::ADMISSION_SLOT;
use crate::policy::feed::session_end;
use crate::telemetry;
use crate::tenant::{Tenant, TenantPermit};

/// A request that must wait for a place upstream, as its tenant's `admission` slot scores it (a
/// `request` item; higher goes first among the tenant's own waiting requests), with its tenant's
/// admission weight and the bytes of its body. Without the slot, or when it fails, every request
/// of the tenant scores the same: arrival order.
async fn applicant(tenant: &Arc<Tenant>, demotion: u32, waiting: Item, bytes: usize) -> Applicant {
    let unscored = Applicant {
        weight: tenant.quotas.get().admission_weight,
        bytes,
        ..Applicant::unscored(demotion, &tenant.name)
    };
    let Some(slot) = tenant.slot(ADMISSION_SLOT).cloned() else {
        return unscored;
    };
    // A policy call, off the async workers; the request waits for a place anyway.
    let span = tracing::info_span!("policy.score", tenant = %tenant.name, slot = ADMISSION_SLOT);
    let scored = tokio::task::spawn_blocking(move || span.in_scope(|| slot.score(&[waiting]))).await;
    let score = match scored {
        Ok(Ok(scores)) => scores.first().copied().unwrap_or(0.0),
        _ => 0.0,
    };
    Applicant { score, ..unscored }
}

pub(super) async fn forward(
    state: ProxyState,
    path: &str,
    api: AgentApi,
    prepared: Prepared,
    (permit, said): (TenantPermit, RequestHints),
    received: Instant,
) -> Response {
    let Prepared {
        tenant,
        body,
        identity,
        agent,
        registration,
        continues,
        ended,
        route,
        strip_usage,
        streams,
        hints: _,
    } = prepared;
    let request_id = state.request_ids.fetch_add(1, Relaxed);
    // On the request's span (current here).
    tracing::Span::current()
        .record("agent", identity.agent_name.as_str())
        .record("session", identity.session)
        .record("request_id", request_id);
    announce(
        &state,
        &tenant,
        &identity,
        agent,
        request_id,
        (ended, registration, continues),
    );
    let template = finish_template(request_id, agent, &identity);
    let hints = FinishHints::new(said, &identity.agent_name);
    let mut guard = FinishGuard::new(state.clone(), tenant.clone(), permit, template, hints);
    // The policy's next move does not wait for the upstream.
    state.effects.carry_out(tenant.clone());
    // A place upstream; the wait is not the proxy's overhead.
    let queued = Instant::now();
    let revoked = guard.permit.revocation();
    let held = join_ledger(&state, &tenant, &identity, agent, &mut guard);
    // A held stream is kept alive, and counted by the working set that holds it.
    let keepalive = match (&state.working_set, &held) {
        (Some(working_set), Some(_)) if streams => working_set.keepalive().map(|every| (every, working_set.clone())),
        _ => None,
    };
    let waiting = waiting_item(request_id, agent, &identity);
    let path = path.to_string();
    let onward = async move {
        let place = (&identity, held, waiting, body.len());
        if let Err(e) = wait_for_place(&state, &tenant, place, &revoked, &mut guard).await {
            guard.finish(false, None);
            return failed(&state, e.shaped(api.error_shape()));
        }
        let queue_wait = queued.elapsed();
        let body = Bytes::from(body);
        state
            .metrics
            .observe_overhead(received.elapsed().saturating_sub(queue_wait));
        let outbound = Outbound {
            path: &path,
            body: &body,
            session: identity.session,
            agent,
        };
        if let Some(call) = &mut guard.working_set {
            call.sent();
        }
        match send_placed(&state, &revoked, route, outbound).await {
            Ok((reply, lease)) => {
                guard.lease = lease.map(|mut lease| {
                    lease.prefill_complete();
                    lease
                });
                respond(&state, api, &tenant, guard, reply, &revoked, strip_usage).await
            }
            Err(e) => {
                guard.finish(false, None);
                failed(&state, e.shaped(api.error_shape()))
            }
        }
    };
    match keepalive {
        Some((every, working_set)) => {
            let counted = move || working_set.count_kept_alive();
            // It may finish on a task of its own: still on the request's span.
            let onward = onward.instrument(tracing::Span::current());
            super::held_stream::kept_alive(onward, every, counted).await
        }
        None => onward.await,
    }
}

/// The `request-finish` the finish guard completes (tokens, outcome, time) when the call ends.
fn finish_template(request_id: u64, agent: u32, identity: &Identity) -> RequestFinish {
    RequestFinish {
        request_id,
        agent,
        session: identity.session,
        prompt_tokens: identity.prompt_tokens,
        cached_tokens: 0,
        output_tokens: 0,
        warmup: false,
        ok: false,
        at_us: 0,
    }
}

/// The request as the `admission` slot scores it while it waits for a place: a `request` item,
/// keyed and aged by its id.
fn waiting_item(request_id: u64, agent: u32, identity: &Identity) -> Item {
    Item {
        kind: ItemKind::Request,
        key: request_id,
        agent,
        session: identity.session,
        last_access: request_id,
        tokens: identity.prompt_tokens,
        position: 0,
        tier: agentrt_runtime::types::Tier::Gpu,
    }
}

/// Tell the tenant's policies the request arrived: the sessions its table let go of (evicted),
/// the agent's registration when it is new, then `request-arrival`.
fn announce(
    state: &ProxyState,
    tenant: &Arc<Tenant>,
    identity: &Identity,
    agent: u32,
    request_id: u64,
    (ended, registration, continues): (Vec<u64>, Option<Event>, Option<Continuation>),
) {
    state.metrics.sessions_ended.fetch_add(ended.len() as u64, Relaxed);
    let at_us = state.clock.now_us();
    let mut events: Vec<Event> = ended
        .into_iter()
        .map(|session| session_end(session, EndReason::Evicted, at_us))
        .collect();
    events.extend(registration);
    // A closed session that calls again is open again; a session waiting for a tool has its result.
    state.hints.arrived(tenant, identity.session);
    events.push(Event::RequestArrival(RequestArrival {
        request_id,
        agent,
        session: identity.session,
        anchor_hash: identity.anchor_hash,
        prompt_tokens: identity.prompt_tokens,
        continues,
        warmup: false,
        at_us,
    }));
    state.feed.tell(tenant, events);
    state.metrics.in_flight.fetch_add(1, Relaxed);
}

/// With `--session-admission working-set`, the call joins the ledger (its end goes with
/// `guard`): the hold it waits on when its session is held.
fn join_ledger(
    state: &ProxyState,
    tenant: &Arc<Tenant>,
    identity: &Identity,
    agent: u32,
    guard: &mut FinishGuard,
) -> Option<HeldCall> {
    let (call, held) = state.working_set.as_ref()?.arrive(tenant, identity, agent);
    guard.working_set = Some(call);
    held
}

/// A place upstream for the call: its session let go when `held` (until a rebalance does — at
/// most its bound), then a place among `--upstream-max-in-flight`, least-demoted first. A revoked
/// key stops either wait.
async fn wait_for_place(
    state: &ProxyState,
    tenant: &Arc<Tenant>,
    (identity, held, waiting, bytes): (&Identity, Option<HeldCall>, Item, usize),
    revoked: &CancellationToken,
    guard: &mut FinishGuard,
) -> Result<(), ApiError> {
    if let Some(held) = held {
        let span = tracing::info_span!("session_hold", tenant = %tenant.name, session = identity.session);
        let waited = async {
            held.wait().await;
            Ok(())
        };
        unless_revoked(state, revoked, waited).instrument(span).await?;
    }
    wait_for_admission(state, tenant, revoked, guard, waiting, bytes).await
}

/// With `--upstream-max-in-flight`, a place upstream for `waiting` (a body of `bytes`): at once
/// when one is free, else in the admission queue, least-demoted first, the tenant's `admission`
/// slot ordering its own; the place goes into `guard`. A revoked key stops the wait.
async fn wait_for_admission(
    state: &ProxyState,
    tenant: &Arc<Tenant>,
    revoked: &CancellationToken,
    guard: &mut FinishGuard,
    waiting: Item,
    bytes: usize,
) -> Result<(), ApiError> {
    let Some(queue) = &state.admission else {
        return Ok(());
    };
    // Its span lasts from here to the place; the waits run inside it.
    let admission = tracing::info_span!("admission", tenant = %tenant.name, waited = tracing::field::Empty);
    let place = match queue.try_admit() {
        Some(place) => place,
        None => {
            admission.record("waited", true);
            let demotion = tenant.verdicts.priority(waiting.session).min(0).unsigned_abs();
            let applicant = applicant(tenant, demotion, waiting, bytes)
                .instrument(admission.clone())
                .await;
            unless_revoked(state, revoked, queue.admit(applicant))
                .instrument(admission.clone())
                .await?
        }
    };
    guard.admission = Some(place);
    Ok(())
}

/// What goes upstream: the route's path, the body, and who sends it.
struct Outbound<'a> {
    path: &'a str,
    body: &'a Bytes,
    session: u64,
    agent: u32,
}

/// Send to the replica the router places the request on (several replicas: once more elsewhere
/// when the first refuses the connection), else the upstream; the reply's head and the lease.
/// On failure the upstream's failure is counted and the replica told, unless the key's revocation
/// cut it.
async fn send_placed(
    state: &ProxyState,
    revoked: &CancellationToken,
    mut route: Option<RouteInput>,
    out: Outbound<'_>,
) -> Result<(reqwest::Response, Option<Lease>), ApiError> {
    let mut lease = match (&state.replicas, route.as_mut()) {
        (Some(replicas), Some(input)) => Some(replicas.place(out.agent, input).await),
        _ => None,
    };
    let mut sent = send_unless_revoked(state, revoked, lease.as_ref(), out.path, out.body, out.session).await;
    // A replica that refused the connection got nothing: the request is placed once more.
    if let (Err((_, true)), Some(replicas), Some(input)) = (&sent, &state.replicas, route.as_mut()) {
        if let Some(refused) = lease.take_if(|_| replicas.replicas().len() > 1) {
            lease = Some(replicas.retry(out.agent, input, refused).await);
            sent = send_unless_revoked(state, revoked, lease.as_ref(), out.path, out.body, out.session).await;
        }
    }
    match sent.map_err(|(e, _)| e) {
        Ok(response) => Ok((response, lease)),
        Err(e) => {
            state.upstream_failed(&e);
            // A revoked key is no fault of the replica's.
            let cut_by_revocation = e.status == StatusCode::UNAUTHORIZED;
            if let (Some(lease), false) = (&lease, cut_by_revocation) {
                lease.failed();
            }
            Err(e)
        }
    }
}

/// The upstream's answer to the client: relayed as it streams, or read whole (its usage, stored
/// response id and the tools it asks for taken on the way); the finish guard goes with it.
async fn respond(
    state: &ProxyState,
    api: AgentApi,
    tenant: &Arc<Tenant>,
    mut guard: FinishGuard,
    reply: reqwest::Response,
    revoked: &CancellationToken,
    strip_usage: bool,
) -> Response {
    let status = StatusCode::from_u16(reply.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let content_type = reply
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    if !status.is_success() {
        state.metrics.requests_failed.fetch_add(1, Relaxed);
    }
    let is_stream = content_type
        .as_deref()
        .is_some_and(|c| c.starts_with("text/event-stream"));
    let mut response = if is_stream {
        let relay = tracing::info_span!(
            "relay",
            streamed = true,
            chunks = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        let options = super::relay::RelayOptions {
            ok_status: status.is_success(),
            api,
            strip_usage,
        };
        Response::new(Body::from_stream(super::relay::relay_stream(
            reply, guard, options, relay,
        )))
    } else {
        let relay = tracing::info_span!("relay", streamed = false);
        let read = upstream::read_reply(reply, state.upstream.limits());
        match unless_revoked(state, revoked, read).instrument(relay).await {
            Ok(bytes) => {
                let reply = serde_json::from_slice::<Value>(&bytes).ok();
                let usage = reply.as_ref().and_then(|v| api.usage(v));
                if let Some(id) = reply.as_ref().and_then(|v| api.response_id(v)) {
                    tenant.responses.record(id);
                }
                if let (Some(reply), true) = (&reply, status.is_success()) {
                    guard.hints.tools = tools_in_reply(api, reply);
                }
                guard.finish(status.is_success(), usage);
                Response::new(Body::from(bytes))
            }
            Err(e) => {
                state.upstream_failed(&e);
                guard.finish(false, None);
                return failed(state, e.shaped(api.error_shape()));
            }
        }
    };
    *response.status_mut() = status;
    if let Some(ct) = content_type.and_then(|c| HeaderValue::from_str(&c).ok()) {
        response.headers_mut().insert(header::CONTENT_TYPE, ct);
    }
    response
}

/// [`send_to`], unless the request's key is revoked first (a 401; nothing more is sent).
async fn send_unless_revoked(
    state: &ProxyState,
    revoked: &CancellationToken,
    lease: Option<&Lease>,
    path: &str,
    body: &Bytes,
    session: u64,
) -> Result<reqwest::Response, (ApiError, bool)> {
    tokio::select! {
        biased;
        () = revoked.cancelled() => Err((revoked_error(state), false)),
        sent = send_to(state, lease, path, body, session) => sent,
    }
}

/// Send the request's `body` to its replica (`lease`), else the upstream (with `session` for the
/// router the upstream is, if one); on failure, whether the connection was refused (nothing sent).
async fn send_to(
    state: &ProxyState,
    lease: Option<&Lease>,
    path: &str,
    body: &Bytes,
    session: u64,
) -> Result<reqwest::Response, (ApiError, bool)> {
    let base = lease.map_or(state.upstream.base(), |l| l.url());
    // OpenTelemetry's client span, until the upstream's response head; its context goes upstream
    // as `traceparent`, so the engine's spans are its children.
    let span = tracing::info_span!(
        "upstream",
        otel.name = %format_args!("POST {path}"),
        otel.kind = "client",
        http.request.method = "POST",
        // Exported to the tracing backend: never the URL's credentials.
        server.address = %agentrt_guards::shown_url::shown(base),
        http.response.status_code = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    let mut request = state.upstream.post_to(base, path).body(body.clone());
    if let Some((name, value)) = state.body.upstream_router.session_header(session) {
        request = request.header(name, value);
    }
    let request = telemetry::propagation::inject_into(&span, request);
    let sent = state
        .upstream
        .send_bounded(request, base)
        .instrument(span.clone())
        .await;
    match &sent {
        Ok(response) => {
            span.record("http.response.status_code", i64::from(response.status().as_u16()));
        }
        Err(_) => {
            span.record("otel.status_code", "ERROR");
        }
    }
    sent
}

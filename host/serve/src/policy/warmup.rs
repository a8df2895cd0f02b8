//! Warm-ups: a policy's `warm-prefix`, carried out off the critical path ([`crate::policy::effects`]).
//!
//! A `warm-prefix` becomes a real upstream request: the agent's recorded anchor (system/developer
//! messages + tools) with a one-character user message and `max_tokens: 1`, marked as a warm-up
//! (header `x-agentrt-warmup: 1`, `vllm_xargs.agentrt_warmup: true`) so that the engine adapter and
//! the policy do not take it for user traffic. Warm-ups are bounded in concurrency and rate,
//! skipped when the engine is busy or their tenant has spent its warm-up tokens for the second
//! (`warmup_tokens_per_s`), de-duplicated per anchor, and never retried.

use std::collections::HashSet;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::body::Bytes;
use serde_json::{json, Value};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::Instrument as _;

use agentrt_runtime::types::{Event, RequestArrival, RequestFinish, WarmPrefix};

use crate::clock::Clock;
use crate::engine::kind::EngineKind;
use crate::engine::replicas::ReplicaRouting;
use crate::engine::upstream::{self, Upstream};
use crate::identity::Anchor;
use crate::metrics::ProxyMetrics;
use crate::policy::feed::PolicyFeed;
use crate::telemetry;
use crate::tenant::Tenant;

/// How many warm-ups the proxy sends, and when it holds them back
/// (`--warmup-concurrency`, `--warmup-rate`).
#[derive(Debug, Clone)]
pub struct WarmupOptions {
    /// Warm-ups in flight at once.
    pub max_concurrent: usize,
    /// Sustained warm-ups per second (token bucket, burst = `max_concurrent`).
    pub per_second: f64,
    /// Skip warm-ups while this many user requests are in flight: the engine is busy enough.
    pub busy_in_flight: u64,
}

impl Default for WarmupOptions {
    fn default() -> Self {
        Self {
            max_concurrent: 2,
            per_second: 20.0,
            busy_in_flight: 32,
        }
    }
}

/// The warm-ups in flight and the limits on them, shared by every tenant: concurrency, rate
/// (a token bucket), one per (tenant, anchor) at a time.
pub struct Warmups {
    options: WarmupOptions,
    slots: Arc<Semaphore>,
    bucket: Mutex<(f64, Instant)>,
    /// (tenant, anchor hash) of warm-ups in flight.
    in_flight: Mutex<HashSet<(String, u64)>>,
    upstream: Upstream,
    /// Where a warm-up goes when there are several replicas.
    replicas: Option<Arc<ReplicaRouting>>,
    /// Warm-ups are requests the tenant's policies hear of too (marked as such).
    feed: PolicyFeed,
    clock: Clock,
    metrics: Arc<ProxyMetrics>,
    /// Tag warm-ups (off with `--no-engine-tags`).
    engine_tags: bool,
    /// Which field the tags go into.
    engine: EngineKind,
}

/// What a warm-up needs besides its options: where it goes and whom it tells.
pub struct WarmupDeps {
    /// The upstream client and its limits; a warm-up goes to its base URL unless `replicas`
    /// route it.
    pub upstream: Upstream,
    /// The replicas a warm-up is routed among, when there are several.
    pub replicas: Option<Arc<ReplicaRouting>>,
    /// Where the warm-up's own arrival and finish events go (marked as warm-ups).
    pub feed: PolicyFeed,
    /// The clock the warm-up's events are stamped with.
    pub clock: Clock,
    /// Where warm-ups sent, skipped and failed are counted.
    pub metrics: Arc<ProxyMetrics>,
    /// Tag warm-ups for the engine plugin (off with `--no-engine-tags`).
    pub engine_tags: bool,
    /// The engine behind the upstream: which field the tags go into.
    pub engine: EngineKind,
}

impl Warmups {
    /// Warm-ups under `options`, sent and told of through `deps`; the rate's bucket starts full
    /// (`max_concurrent` tokens).
    pub fn new(options: WarmupOptions, deps: WarmupDeps) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(options.max_concurrent)),
            bucket: Mutex::new((options.max_concurrent as f64, Instant::now())),
            in_flight: Mutex::new(HashSet::new()),
            options,
            upstream: deps.upstream,
            replicas: deps.replicas,
            feed: deps.feed,
            clock: deps.clock,
            metrics: deps.metrics,
            engine_tags: deps.engine_tags,
            engine: deps.engine,
        }
    }

    fn take_token(&self) -> bool {
        let mut bucket = self.bucket.lock().unwrap_or_else(|p| p.into_inner());
        let (tokens, last) = &mut *bucket;
        let now = Instant::now();
        *tokens = (*tokens + now.duration_since(*last).as_secs_f64() * self.options.per_second)
            .min(self.options.max_concurrent as f64);
        *last = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Send one warm-up for `warm`'s anchor of `tenant`, unless something says not to now.
    pub async fn warm(&self, tenant: &Arc<Tenant>, warm: WarmPrefix) {
        // The child of the request whose `act` asked for it; why it was skipped, if it was.
        let span = tracing::info_span!(
            "warmup",
            tenant = %tenant.name,
            anchor = warm.anchor_hash,
            skipped = tracing::field::Empty,
            ok = tracing::field::Empty,
        );
        self.warm_traced(tenant, warm).instrument(span).await
    }

    async fn warm_traced(&self, tenant: &Arc<Tenant>, warm: WarmPrefix) {
        let admitted = match self.admit(tenant, warm.anchor_hash) {
            Ok(admitted) => admitted,
            Err(why) => {
                tracing::Span::current().record("skipped", why);
                self.metrics.warmups_skipped.fetch_add(1, Relaxed);
                tracing::debug!(tenant = %tenant.name, anchor = warm.anchor_hash, why, "warm-up skipped");
                return;
            }
        };
        let (agent, anchor) = (admitted.agent, &admitted.anchor);
        let body = self.body(agent, anchor);
        // With several replicas: where the router says the agent's next call will go.
        let base = match &self.replicas {
            Some(replicas) => replicas.warm_target(agent, &body).await,
            None => self.upstream.base().to_string(),
        };
        let body = serde_json::to_vec(&body).expect("values serialize");
        // Paid up front at ~4 bytes per token (the JSON's punctuation makes it an overestimate),
        // then corrected to the prompt tokens the engine reports.
        let estimate = (body.len() / 4) as i64;
        tenant.warmups.pay(estimate);
        let request_id = u64::MAX - self.metrics.warmups_sent.load(Relaxed);
        self.tell_arrival(tenant, request_id, agent, warm.anchor_hash);
        self.metrics.warmups_sent.fetch_add(1, Relaxed);
        let reply = self.send(&base, anchor, body).await;
        let ok = reply.is_some();
        tracing::Span::current().record("ok", ok);
        let usage = reply
            .as_deref()
            .and_then(|r| serde_json::from_slice::<Value>(r).ok())
            .and_then(|r| anchor.api.usage(&r));
        if let Some(tokens) = usage.and_then(|u| u.prompt_tokens) {
            tenant.warmups.pay(i64::from(tokens) - estimate);
        }
        if !ok {
            // Never retried: a warm-up is a guess, and retries would compete with user traffic.
            self.metrics.warmups_failed.fetch_add(1, Relaxed);
            tracing::debug!(tenant = %tenant.name, "warm-up failed upstream");
        }
        self.tell_finish(tenant, request_id, agent, ok);
    }

    /// Every reason not to warm now, in order (the tenant's own quota before the shared limits);
    /// its own step so that a skip is counted and traced in one place, whichever check said no.
    fn admit(&self, tenant: &Tenant, anchor_hash: u64) -> Result<Admitted<'_>, &'static str> {
        let Some((agent, anchor)) = tenant.agents.anchor(anchor_hash) else {
            return Err("anchor never seen");
        };
        if self.metrics.in_flight.load(Relaxed) >= self.options.busy_in_flight {
            return Err("engine busy");
        }
        // The tenant's own quota first: a throttled tenant takes none of the shared capacity.
        if !tenant.may_warm_up() {
            return Err("tenant's warm-up quota");
        }
        let key = (tenant.name.clone(), anchor_hash);
        if !self
            .in_flight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.clone())
        {
            return Err("already warming");
        }
        let release = InFlight {
            set: &self.in_flight,
            key,
        };
        if !self.take_token() {
            return Err("rate limit");
        }
        let Ok(slot) = self.slots.clone().try_acquire_owned() else {
            return Err("concurrency limit");
        };
        Ok(Admitted {
            agent,
            anchor,
            _release: release,
            _slot: slot,
        })
    }

    /// The warm-up's request body; its own step because it must be the prefix the agent's own
    /// requests will render: the agent's API, its engine tags and its tenant's cache salt.
    fn body(&self, agent: u32, anchor: &Anchor) -> Value {
        // Through the agent's own API: another would render another prefix.
        let mut body = anchor.api.warmup_body(
            &anchor.model,
            &anchor.messages,
            anchor.tools.as_ref(),
            anchor.fields.as_ref(),
        );
        if self.engine_tags {
            self.engine.tag_warmup(&mut body, agent);
        }
        // The blocks the agent's requests will look for are salted with its tenant's salt.
        if let Some(salt) = &anchor.cache_salt {
            body[crate::tenant::cache_salt::FIELD] = json!(salt);
        }
        body
    }

    /// Posts the warm-up to `base` and reads the whole reply, `None` on any failure; its own
    /// step because a warm-up has exactly one try, bounded like any upstream call.
    async fn send(&self, base: &str, anchor: &Anchor, body: Vec<u8>) -> Option<Bytes> {
        let request = self
            .upstream
            .post_to(base, anchor.api.path())
            .header("x-agentrt-warmup", "1")
            .body(body);
        // The engine's span of the warm-up joins the trace of the request that caused it.
        let request = telemetry::propagation::inject_into(&tracing::Span::current(), request);
        // Under the first-byte timeout: a hanging upstream must not hold a warm-up slot forever.
        let limits = self.upstream.limits();
        match upstream::send(request, base, limits).await {
            Ok(r) if r.status().is_success() => upstream::read_reply(r, limits).await.ok(),
            _ => None,
        }
    }

    /// Tells the tenant's policies a warm-up arrived; its own step so that the event's fixed
    /// fields (marked a warm-up, no session, no tokens yet) are written down once.
    fn tell_arrival(&self, tenant: &Arc<Tenant>, request_id: u64, agent: u32, anchor_hash: u64) {
        let arrival = RequestArrival {
            request_id,
            agent,
            session: 0,
            anchor_hash,
            prompt_tokens: 0,
            continues: None,
            warmup: true,
            at_us: self.clock.now_us(),
        };
        self.feed.tell(tenant, vec![Event::RequestArrival(arrival)]);
    }

    /// Tells the tenant's policies the warm-up ended and whether it succeeded; its own step for
    /// the same reason as [`Self::tell_arrival`].
    fn tell_finish(&self, tenant: &Arc<Tenant>, request_id: u64, agent: u32, ok: bool) {
        let finish = RequestFinish {
            request_id,
            agent,
            session: 0,
            prompt_tokens: 0,
            cached_tokens: 0,
            output_tokens: 0,
            warmup: true,
            ok,
            at_us: self.clock.now_us(),
        };
        self.feed.tell(tenant, vec![Event::RequestFinish(finish)]);
    }
}

/// A warm-up every limit let through: what it warms, and the holds it keeps until it ends.
struct Admitted<'a> {
    agent: u32,
    anchor: Anchor,
    /// Takes the anchor out of the in-flight set when the warm-up ends, however it ends.
    _release: InFlight<'a>,
    /// One of the `max_concurrent` warm-up slots.
    _slot: OwnedSemaphorePermit,
}

/// Removes an anchor from the in-flight set when the warm-up ends, however it ends.
struct InFlight<'a> {
    set: &'a Mutex<HashSet<(String, u64)>>,
    key: (String, u64),
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.set.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.key);
    }
}

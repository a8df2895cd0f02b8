//! Several upstream replicas behind a KV-aware router (`--replica NAME=URL`, `--router URL`).
//!
//! Per request: the prompt's token ids from a replica's `/tokenize` (what the router hashes into
//! blocks), agentrt's placement hints ([`agentrt_router::hints`]: the replica that last received this
//! agent's anchor), then the router's choice — Dynamo's selection service under a deadline, or
//! session-sticky hashing when it is absent, down or slow ([`agentrt_router::FallbackRouter`]).
//! The request goes to the chosen replica; its booking is completed when the replica's response
//! starts and released when the response ends (a [`Lease`] dropped with the request).
//! Warm-ups go where the router says the agent's next call will go ([`ReplicaRouting::warm_target`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentrt_router::{
    Decider, FallbackRouter, HintRule, Placement, Replica, ReplicaId, Replicas, Route, RouteRequest, Router,
    SelectionClient, SessionSticky,
};
use anyhow::Context;
use serde_json::Value;

use crate::engine::tokenize::Tokenizer;

mod args;
mod lease;
mod metrics;
mod route_input;

pub use args::ReplicaArgs;
pub use lease::Lease;
pub use route_input::RouteInput;

/// Counters of replica routing, for `/metrics`.
#[derive(Default)]
struct Counts {
    tokenize_failed: AtomicU64,
    warmups_placed: AtomicU64,
    hinted: AtomicU64,
    replica_failures: AtomicU64,
    anchor_evictions: AtomicU64,
    retried: AtomicU64,
}

/// Where each request and warm-up goes among several replicas: the replicas, the router (with
/// its fallback), agentrt's placement hints, each replica's requests in flight and the replicas
/// left out for failing.
pub struct ReplicaRouting {
    replicas: Replicas,
    router: Arc<FallbackRouter>,
    placement: Mutex<Placement>,
    rule: HintRule,
    in_flight: HashMap<ReplicaId, AtomicU32>,
    /// Replicas that failed a request lately, and until when they are left out.
    down_until: Mutex<HashMap<ReplicaId, Instant>>,
    bookings: AtomicU64,
    booking_prefix: String,
    counts: Counts,
    /// Each replica's eviction service counters, once started ([`ReplicaRouting::start_engines`]).
    engine_metrics: Mutex<Vec<(String, Arc<agentrt_eviction::EvictionMetrics>)>>,
    /// The replicas' `/tokenize`, for prompts' token ids.
    tokenizer: Tokenizer,
}

impl ReplicaRouting {
    /// `None` without `--replica`. With `--router`, registers the replicas in the background
    /// (retrying while the router is down: until then, and whenever it fails, the fallback routes).
    pub fn from_args(args: &ReplicaArgs, tokenizer: Tokenizer) -> anyhow::Result<Option<Arc<Self>>> {
        if args.replicas.is_empty() {
            anyhow::ensure!(
                args.router.is_none() && args.kv_events.is_empty() && args.eviction_sockets.is_empty(),
                "--router, --replica-kv-events and --replica-eviction-socket need at least one --replica NAME=URL"
            );
            return Ok(None);
        }
        let parsed = args
            .replicas
            .iter()
            .map(|r| Replica::parse(r))
            .collect::<Result<Vec<_>, _>>()
            .map_err(anyhow::Error::msg)?;
        let mut replicas = Replicas::new(parsed).map_err(anyhow::Error::msg)?;
        for endpoint in &args.kv_events {
            replicas.set_kv_events(endpoint).map_err(anyhow::Error::msg)?;
        }
        args::eviction_sockets(&replicas, &args.eviction_sockets)?;
        let deadline = Duration::from_millis(args.router_deadline_ms);
        let client = args.router.as_deref().map(|url| {
            // The deadline bounds what a request waits; the client's own timeout bounds the
            // background calls (registration, releases).
            SelectionClient::new(
                url,
                &args.router_model,
                replicas.clone(),
                deadline.max(Duration::from_secs(2)),
            )
        });
        let primary = client.clone().map(|c| Arc::new(c) as Arc<dyn Router>);
        let router = Arc::new(FallbackRouter::new(
            primary,
            SessionSticky::new(&replicas),
            deadline,
            Duration::from_millis(args.router_retry_ms),
        ));
        if let Some(client) = client {
            let block_size = args.router_block_size;
            tokio::spawn(register_until_done(client, block_size));
        }
        Ok(Some(Arc::new(Self {
            in_flight: replicas.ids().map(|id| (id, AtomicU32::new(0))).collect(),
            replicas,
            router,
            placement: Mutex::default(),
            down_until: Mutex::default(),
            rule: HintRule::default(),
            bookings: AtomicU64::new(0),
            booking_prefix: format!("agentrt-{}-{:x}", std::process::id(), crate_start_nanos()),
            counts: Counts::default(),
            engine_metrics: Mutex::default(),
            tokenizer,
        })))
    }

    /// The replicas, as `--replica NAME=URL` gave them.
    pub fn replicas(&self) -> &Replicas {
        &self.replicas
    }

    /// Choose the replica for one request of `agent` and take a lease on it. `input` keeps the
    /// prompt's token ids, so a second placement ([`ReplicaRouting::retry`]) counts none again.
    pub async fn place(self: &Arc<Self>, agent: u32, input: &mut RouteInput) -> Lease {
        let token_ids = self.tokens(input).await;
        input.token_ids = Some(token_ids.clone());
        let request = RouteRequest {
            token_ids,
            cache_salt: input.cache_salt.clone(),
            session: Some(format!("{:016x}", input.session)),
            expected_output_tokens: input.max_tokens,
            booking_id: format!("{}-{}", self.booking_prefix, self.bookings.fetch_add(1, Relaxed)),
            hints: self.placement_hints(agent, Some(input.session)),
        };
        let routed = self.router.route(&request).await;
        let route = match routed {
            Ok(routed) => {
                if routed.decided_by != Decider::Router {
                    tracing::debug!(decided_by = ?routed.decided_by, "request placed by the fallback");
                }
                routed.route
            }
            // Only when no replica is eligible at all, which the proxy's requests never ask for.
            Err(_) => Route {
                replica: self.replicas.all()[0].id,
                booking: None,
                cached_tokens: None,
            },
        };
        self.placement
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .placed(agent, route.replica, Instant::now());
        self.placement.lock().unwrap_or_else(|p| p.into_inner()).session_placed(
            input.session,
            route.replica,
            Instant::now(),
        );
        self.in_flight[&route.replica].fetch_add(1, Relaxed);
        Lease {
            routing: self.clone(),
            url: self
                .replicas
                .get(route.replica)
                .expect("routes name known replicas")
                .url
                .clone(),
            route,
            prefilled: false,
        }
    }

    /// `failed` refused the connection, so nothing of the request was sent: leave that replica
    /// out and place the request again (once: the caller does not retry a retry).
    pub async fn retry(self: &Arc<Self>, agent: u32, input: &mut RouteInput, failed: Lease) -> Lease {
        failed.failed();
        drop(failed);
        self.counts.retried.fetch_add(1, Relaxed);
        self.place(agent, input).await
    }

    /// Sessions ended (idle, or pushed out of their tenant's table): forget where they went.
    pub fn sessions_ended(&self, sessions: impl IntoIterator<Item = u64>) {
        let mut placement = self.placement.lock().unwrap_or_else(|p| p.into_inner());
        for session in sessions {
            placement.session_ended(session);
        }
    }

    /// Start each replica's engine adapter: its plugin's eviction socket
    /// (`--replica-eviction-socket`) and a subscriber of its KV events (`--replica-kv-events`),
    /// both through a [`ReplicaView`](agentrt_eviction::ReplicaView) of `ranker` — one policy view
    /// across the replicas, each replica's blocks its own — which also tells this routing where
    /// agents' anchors are cached and evicted. `options` (agents, pins) are shared by every socket.
    pub fn start_engines(
        self: &Arc<Self>,
        args: &ReplicaArgs,
        ranker: Arc<dyn agentrt_eviction::EngineRanker>,
        options: &agentrt_eviction::EvictionOptions,
    ) -> anyhow::Result<ReplicaEngines> {
        let sockets = args::eviction_sockets(&self.replicas, &args.eviction_sockets)?;
        let mut engines = ReplicaEngines::default();
        for replica in self.replicas.all() {
            let view = Arc::new(
                agentrt_eviction::ReplicaView::new(&replica.name, replica.id.0, ranker.clone())
                    .with_anchor_events(self.clone()),
            );
            let socket = sockets.get(replica.name.as_str());
            if let Some(path) = socket {
                let service = self.bind_eviction_socket(&replica.name, path, view.clone(), options)?;
                engines.services.push(service);
            }
            if let Some(endpoint) = &replica.kv_events {
                subscribe_kv_events(&replica.name, endpoint, view, socket.is_some(), &engines);
            }
        }
        Ok(engines)
    }

    /// Replica `name`'s plugin's eviction socket at `path`, answered by `view`; its figures join
    /// `/metrics`.
    fn bind_eviction_socket(
        &self,
        name: &str,
        path: &std::path::Path,
        view: Arc<agentrt_eviction::ReplicaView>,
        options: &agentrt_eviction::EvictionOptions,
    ) -> anyhow::Result<agentrt_eviction::EvictionService> {
        let service = agentrt_eviction::EvictionService::bind_with(path, view, options.clone())
            .with_context(|| format!("replica {name}: binding the eviction socket {}", path.display()))?;
        tracing::info!(replica = %name, socket = %path.display(), "eviction service listening");
        self.engine_metrics
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((name.to_string(), service.metrics()));
        Ok(service)
    }

    /// Where a warm-up of `agent` with `body` (a chat completion) goes: where the router says
    /// the agent's next call would go. Recorded as the agent's anchor placement.
    pub async fn warm_target(&self, agent: u32, body: &Value) -> String {
        let input = RouteInput::chat(body);
        let request = RouteRequest {
            token_ids: self.tokens(&input).await,
            cache_salt: input.cache_salt,
            hints: self.placement_hints(agent, None),
            ..Default::default()
        };
        let replica = match self.router.peek(&request).await {
            Ok((replica, _)) => replica,
            Err(_) => self.replicas.all()[0].id,
        };
        self.counts.warmups_placed.fetch_add(1, Relaxed);
        self.placement
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .placed(agent, replica, Instant::now());
        self.replicas
            .get(replica)
            .expect("routes name known replicas")
            .url
            .clone()
    }

    /// agentrt's placement hints for a call of `agent`: the replica that last got its anchor (unless it is
    /// much busier than the rest), and — while some replica is left out after a failure — the
    /// ones still usable.
    fn placement_hints(&self, agent: u32, session: Option<u64>) -> agentrt_router::Hints {
        let now = Instant::now();
        let up = self.usable(now);
        let loads: HashMap<ReplicaId, u32> = up.iter().map(|id| (*id, self.in_flight[id].load(Relaxed))).collect();
        let placement = self.placement.lock().unwrap_or_else(|p| p.into_inner());
        let mut hints = self.rule.hints(&placement, agent, session, &loads, now);
        if hints.affinity.is_some() {
            self.counts.hinted.fetch_add(1, Relaxed);
        }
        if up.len() < self.replicas.len() {
            hints.allowed = Some(up);
        }
        hints
    }

    /// Replicas not left out after a failure; all of them when every one is (better a retry of
    /// a replica that may be back than no answer).
    fn usable(&self, now: Instant) -> Vec<ReplicaId> {
        let down = self.down_until.lock().unwrap_or_else(|p| p.into_inner());
        let up: Vec<ReplicaId> = self
            .replicas
            .ids()
            .filter(|id| down.get(id).is_none_or(|until| *until <= now))
            .collect();
        if up.is_empty() {
            self.replicas.ids().collect()
        } else {
            up
        }
    }

    /// `replica` failed a request (no connection, or no answer in time): leave it out of routing
    /// for [`REPLICA_DOWN`], and forget the anchors it held.
    fn replica_failed(&self, replica: ReplicaId) {
        self.counts.replica_failures.fetch_add(1, Relaxed);
        self.down_until
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(replica, Instant::now() + REPLICA_DOWN);
        self.placement
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .replica_lost(replica);
        tracing::warn!(replica = %self.replicas.get(replica).map_or("?", |r| r.name.as_str()),
            "replica failed a request; left out of routing for {REPLICA_DOWN:?}");
    }

    /// The prompt's token ids, counted by the first replica's `/tokenize` (every replica serves
    /// the same model, so any one counts alike). Empty when it cannot: the router then places
    /// the request by session alone.
    async fn tokens(&self, input: &RouteInput) -> Vec<u32> {
        if let Some(ids) = &input.token_ids {
            return ids.clone();
        }
        let Some(tokenize) = &input.tokenize else {
            return Vec::new();
        };
        let base = &self.replicas.all()[0].url;
        self.tokenizer.token_ids(base, tokenize).await.unwrap_or_else(|| {
            self.counts.tokenize_failed.fetch_add(1, Relaxed);
            tracing::debug!(replica = %base, "no token ids from /tokenize; routing by session");
            Vec::new()
        })
    }
}

/// The engine adapters of the replicas; dropping them closes the sockets and subscriptions.
#[derive(Default)]
pub struct ReplicaEngines {
    services: Vec<agentrt_eviction::EvictionService>,
    subscribers: Arc<Mutex<Vec<agentrt_eviction::KvEventSubscriber>>>,
}

impl ReplicaEngines {
    /// Each eviction socket's path, in the replicas' order.
    pub fn sockets(&self) -> Vec<&std::path::Path> {
        self.services.iter().map(|s| s.path()).collect()
    }
}

impl agentrt_eviction::AnchorEvents for ReplicaRouting {
    fn anchor_cached(&self, replica: u64, agent: u32) {
        self.placement
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .cached(agent, ReplicaId(replica), Instant::now());
    }

    fn anchor_removed(&self, replica: u64, agent: u32) {
        self.counts.anchor_evictions.fetch_add(1, Relaxed);
        self.placement
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .removed(agent, ReplicaId(replica));
    }
}

/// How long a replica that failed a request is left out of routing.
const REPLICA_DOWN: Duration = Duration::from_secs(5);

async fn register_until_done(client: SelectionClient, block_size: u32) {
    let mut logged = false;
    loop {
        match client.register(block_size, None).await {
            Ok(()) => {
                tracing::info!(router = client.url(), "replicas registered with the router");
                return;
            }
            Err(e) if !logged => {
                tracing::warn!("registering the replicas failed ({e}); routing by session hash, retrying every 5 s");
                logged = true;
            }
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

fn crate_start_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// Subscribes `view` to replica `name`'s KV events at `endpoint`, retrying every second until the
/// engine publishes; with the plugin's eviction socket (`plugin_reports`), the plugin already
/// reports every store, removal and clear with agent tags, so only the rest is taken from here.
fn subscribe_kv_events(
    name: &str,
    endpoint: &str,
    view: Arc<agentrt_eviction::ReplicaView>,
    plugin_reports: bool,
    engines: &ReplicaEngines,
) {
    let mut config = agentrt_eviction::KvEventsConfig::for_vllm(endpoint, None, "kv");
    if config.mode == agentrt_eviction::SocketMode::Bind {
        // vLLM connects to one subscriber that binds: that is the router's.
        tracing::warn!(replica = %name, endpoint = %endpoint,
            "vLLM connects to this endpoint rather than binding it; agentrt does not subscribe (use ipc:// or tcp://*:PORT)");
        return;
    }
    if plugin_reports {
        config.forward = agentrt_eviction::Forward {
            stored: false,
            removed: false,
            cleared: false,
        };
    }
    let subscribers = engines.subscribers.clone();
    let name = name.to_string();
    tokio::spawn(async move {
        let mut logged = false;
        loop {
            match agentrt_eviction::KvEventSubscriber::spawn(config.clone(), view.clone()).await {
                Ok(subscriber) => {
                    subscribers.lock().unwrap_or_else(|p| p.into_inner()).push(subscriber);
                    return;
                }
                Err(e) if !logged => {
                    tracing::warn!(replica = %name, "KV events: {e}; retrying every second");
                    logged = true;
                }
                Err(_) => {}
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokenizer() -> Tokenizer {
        let upstream = crate::engine::upstream::Upstream::new("http://127.0.0.1:9", None, Default::default());
        Tokenizer::new(upstream)
    }

    #[test]
    fn flags_without_replicas_are_refused_and_bad_replicas_named() {
        let lone_router = ReplicaArgs {
            router: Some("http://x".into()),
            ..Default::default()
        };
        let error = ReplicaRouting::from_args(&lone_router, tokenizer())
            .err()
            .unwrap()
            .to_string();
        assert!(error.contains("--replica NAME=URL"), "{error}");
        let bad = ReplicaArgs {
            replicas: vec!["a=ftp://x".into()],
            ..Default::default()
        };
        assert!(ReplicaRouting::from_args(&bad, tokenizer())
            .err()
            .unwrap()
            .to_string()
            .contains("not an http"));
        assert!(ReplicaRouting::from_args(&ReplicaArgs::default(), tokenizer())
            .unwrap()
            .is_none());
    }
}

//! Several upstream replicas behind a KV-aware router (`--replica NAME=URL`, `--router URL`).
//!
//! Per request: the prompt's token ids from a replica's `/tokenize` (what the router hashes into
//! blocks), agentrt's hints ([`agentrt_router::hints`]: the replica that last received this
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
use serde_json::{json, Value};

use crate::request::AppState;

/// The flags of several replicas.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ReplicaArgs {
    /// `NAME=URL` (repeatable): an upstream replica. With any, requests go to the replica the
    /// router (or its fallback, session-sticky hashing) chooses; `--upstream` still answers
    /// `/v1/models` and counts anchors' tokens.
    #[arg(long = "replica", value_name = "NAME=URL")]
    pub replicas: Vec<String>,
    /// `NAME=ENDPOINT` (repeatable): where replica NAME publishes KV events (vLLM's
    /// `--kv-events-config` endpoint); the router subscribes to it to see the replica's cache.
    /// agentrt subscribes to it too and feeds the replica's block events to the policy (when the
    /// publisher binds it: an `ipc://` or wildcard `tcp://*:` endpoint).
    #[arg(id = "replica_kv_events", long = "replica-kv-events", value_name = "NAME=ENDPOINT")]
    pub kv_events: Vec<String>,
    /// `NAME=PATH` (repeatable): the Unix socket replica NAME's vLLM plugin connects to
    /// (`AGENTRT_EVICTION_SOCKET` in that vLLM's env). Each replica's plugin gets a socket of its
    /// own; one policy view spans them, in which each replica's blocks are its own.
    #[arg(long = "replica-eviction-socket", value_name = "NAME=PATH")]
    pub eviction_sockets: Vec<String>,
    /// NVIDIA Dynamo's selection service (`python -m dynamo.select_service`), e.g.
    /// http://127.0.0.1:8092. Without it: session-sticky hashing only.
    #[arg(long)]
    pub router: Option<String>,
    /// The model name the replicas are registered under at the router.
    #[arg(long, default_value = "default")]
    pub router_model: String,
    /// The replicas' KV block size (vLLM's `--block-size`): the router hashes prompts in blocks of it.
    #[arg(long, default_value_t = 16)]
    pub router_block_size: u32,
    /// How long a request waits for the router before session-sticky hashing places it.
    #[arg(long, default_value_t = 50)]
    pub router_deadline_ms: u64,
    /// After a router failure, how long requests skip it (and pay no deadline) before it is asked again.
    #[arg(long, default_value_t = 2000)]
    pub router_retry_ms: u64,
}

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
    engine_metrics: Mutex<Vec<(String, Arc<agentrt_vllm::EvictionMetrics>)>>,
}

impl ReplicaRouting {
    /// `None` without `--replica`. With `--router`, registers the replicas in the background
    /// (retrying while the router is down: until then, and whenever it fails, the fallback routes).
    pub fn from_args(args: &ReplicaArgs) -> anyhow::Result<Option<Arc<Self>>> {
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
        eviction_sockets(&replicas, &args.eviction_sockets)?;
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
        })))
    }

    pub fn replicas(&self) -> &Replicas {
        &self.replicas
    }

    /// Choose the replica for one request of `agent` and take a lease on it. `input` keeps the
    /// prompt's token ids, so a second placement ([`ReplicaRouting::retry`]) counts none again.
    pub async fn place(self: &Arc<Self>, state: &AppState, agent: u32, input: &mut RouteInput) -> Lease {
        let token_ids = self.tokens(state, input).await;
        input.token_ids = Some(token_ids.clone());
        let request = RouteRequest {
            token_ids,
            cache_salt: input.cache_salt.clone(),
            session: Some(format!("{:016x}", input.session)),
            expected_output_tokens: input.max_tokens,
            booking_id: format!("{}-{}", self.booking_prefix, self.bookings.fetch_add(1, Relaxed)),
            hints: self.hints(agent, Some(input.session)),
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
    pub async fn retry(self: &Arc<Self>, state: &AppState, agent: u32, input: &mut RouteInput, failed: Lease) -> Lease {
        failed.failed();
        drop(failed);
        self.counts.retried.fetch_add(1, Relaxed);
        self.place(state, agent, input).await
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
    /// both through a [`ReplicaView`](agentrt_vllm::ReplicaView) of `ranker` — one policy view
    /// across the replicas, each replica's blocks its own — which also tells this routing where
    /// agents' anchors are cached and evicted. `options` (agents, pins) are shared by every socket.
    pub fn start_engines(
        self: &Arc<Self>,
        args: &ReplicaArgs,
        ranker: Arc<dyn agentrt_vllm::EngineRanker>,
        options: &agentrt_vllm::EvictionOptions,
    ) -> anyhow::Result<ReplicaEngines> {
        let sockets = eviction_sockets(&self.replicas, &args.eviction_sockets)?;
        let mut engines = ReplicaEngines::default();
        for replica in self.replicas.all() {
            let view = Arc::new(
                agentrt_vllm::ReplicaView::new(&replica.name, replica.id.0, ranker.clone())
                    .with_anchor_events(self.clone()),
            );
            let socket = sockets.get(replica.name.as_str());
            if let Some(path) = socket {
                let service = agentrt_vllm::EvictionService::bind_with(
                    path,
                    view.clone(),
                    agentrt_vllm::EvictionOptions {
                        agents: options.agents.clone(),
                        pins: options.pins.clone(),
                    },
                )
                .with_context(|| {
                    format!(
                        "replica {}: binding the eviction socket {}",
                        replica.name,
                        path.display()
                    )
                })?;
                tracing::info!(replica = %replica.name, socket = %path.display(), "eviction service listening");
                self.engine_metrics
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((replica.name.clone(), service.metrics()));
                engines.services.push(service);
            }
            let Some(endpoint) = &replica.kv_events else {
                continue;
            };
            let mut config = agentrt_vllm::KvEventsConfig::for_vllm(endpoint, None, "kv");
            if config.mode == agentrt_vllm::SocketMode::Bind {
                // vLLM connects to one subscriber that binds: that is the router's.
                tracing::warn!(replica = %replica.name, endpoint = %endpoint,
                    "vLLM connects to this endpoint rather than binding it; agentrt does not subscribe (use ipc:// or tcp://*:PORT)");
                continue;
            }
            if socket.is_some() {
                // The plugin reports every store, removal and clear with agent tags already.
                config.forward = agentrt_vllm::Forward {
                    stored: false,
                    removed: false,
                    cleared: false,
                };
            }
            let subscribers = engines.subscribers.clone();
            let name = replica.name.clone();
            tokio::spawn(async move {
                let mut logged = false;
                loop {
                    match agentrt_vllm::KvEventSubscriber::spawn(config.clone(), view.clone()).await {
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
        Ok(engines)
    }

    /// Where a warm-up of `agent` with `body` (a chat completion) goes: where the router says
    /// the agent's next call would go. Recorded as the agent's anchor placement.
    pub async fn warm_target(&self, state: &AppState, agent: u32, body: &Value) -> String {
        let input = RouteInput::chat(body);
        let request = RouteRequest {
            token_ids: self.tokens(state, &input).await,
            cache_salt: input.cache_salt,
            hints: self.hints(agent, None),
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

    /// agentrt's hints for a call of `agent`: the replica that last got its anchor (unless it is
    /// much busier than the rest), and — while some replica is left out after a failure — the
    /// ones still usable.
    fn hints(&self, agent: u32, session: Option<u64>) -> agentrt_router::Hints {
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
    async fn tokens(&self, state: &AppState, input: &RouteInput) -> Vec<u32> {
        if let Some(ids) = &input.token_ids {
            return ids.clone();
        }
        let Some(tokenize) = &input.tokenize else {
            return Vec::new();
        };
        let base = &self.replicas.all()[0].url;
        let request = state
            .upstream_request_to(base, "/tokenize")
            .timeout(TOKENIZE_TIMEOUT)
            .body(serde_json::to_vec(tokenize).expect("values serialize"));
        let counted = async {
            let reply = request.send().await.ok()?;
            if !reply.status().is_success() {
                return None;
            }
            let answer: Value = serde_json::from_slice(&reply.bytes().await.ok()?).ok()?;
            answer
                .get("tokens")?
                .as_array()?
                .iter()
                .map(|t| t.as_u64().and_then(|n| u32::try_from(n).ok()))
                .collect::<Option<Vec<u32>>>()
        }
        .await;
        counted.unwrap_or_else(|| {
            self.counts.tokenize_failed.fetch_add(1, Relaxed);
            tracing::debug!(replica = %base, "no token ids from /tokenize; routing by session");
            Vec::new()
        })
    }

    /// Prometheus text of the routing counters and each replica's requests in flight.
    pub fn render(&self, out: &mut String) {
        use std::fmt::Write;
        let c = &self.router.counters;
        crate::metrics::render_counters(
            out,
            &[
                (
                    "agentrt_router_routed_total",
                    "Requests placed by the router.",
                    &c.by_router,
                ),
                (
                    "agentrt_router_fallback_total",
                    "Requests placed by session-sticky hashing (no router, or it failed or was slow).",
                    &c.by_fallback,
                ),
                (
                    "agentrt_router_errors_total",
                    "Router calls that failed.",
                    &c.router_errors,
                ),
                (
                    "agentrt_router_deadlines_total",
                    "Router calls past the deadline.",
                    &c.router_deadlines,
                ),
                (
                    "agentrt_router_lifecycle_errors_total",
                    "Booking updates (prefill complete, release) the router did not take.",
                    &c.lifecycle_errors,
                ),
                (
                    "agentrt_router_hinted_total",
                    "Placements given an affinity hint (the replica that last got the agent's anchor).",
                    &self.counts.hinted,
                ),
                (
                    "agentrt_router_tokenize_failed_total",
                    "Requests routed without token ids (the replica's /tokenize did not answer).",
                    &self.counts.tokenize_failed,
                ),
                (
                    "agentrt_replica_failures_total",
                    "Requests a replica failed (no connection or no answer in time); it is left out for 5 s.",
                    &self.counts.replica_failures,
                ),
                (
                    "agentrt_router_anchor_evictions_total",
                    "Agents' anchors evicted from a replica (the block starting their prompt), as its plugin reported; that replica is no longer hinted for them.",
                    &self.counts.anchor_evictions,
                ),
                (
                    "agentrt_replica_retried_total",
                    "Requests placed again because their replica refused the connection (nothing was sent).",
                    &self.counts.retried,
                ),
                (
                    "agentrt_router_warmups_placed_total",
                    "Warm-ups sent where the router expects the agent's next call.",
                    &self.counts.warmups_placed,
                ),
            ],
        );
        let _ = writeln!(
            out,
            "# HELP agentrt_replica_in_flight Requests in flight per replica.\n# TYPE agentrt_replica_in_flight gauge"
        );
        for replica in self.replicas.all() {
            let _ = writeln!(
                out,
                "agentrt_replica_in_flight{{replica=\"{}\"}} {}",
                replica.name,
                self.in_flight[&replica.id].load(Relaxed)
            );
        }
        let engines = self.engine_metrics.lock().unwrap_or_else(|p| p.into_inner());
        if engines.is_empty() {
            return;
        }
        let counts: Vec<(&str, agentrt_vllm::EvictionCounts)> =
            engines.iter().map(|(name, m)| (name.as_str(), m.counts())).collect();
        type Pick = fn(&agentrt_vllm::EvictionCounts) -> u64;
        let series: [(&str, &str, Pick); 4] = [
            (
                "agentrt_replica_plugin_connections_total",
                "Plugin connections each replica's eviction socket accepted.",
                |c| c.connections,
            ),
            (
                "agentrt_replica_block_events_total",
                "Block events each replica's plugin reported.",
                |c| c.block_events,
            ),
            (
                "agentrt_replica_rank_requests_total",
                "Eviction rankings each replica's plugin asked for.",
                |c| c.rank_requests,
            ),
            (
                "agentrt_replica_rank_fallbacks_total",
                "Rankings answered in LRU order because the policy failed, per replica.",
                |c| c.policy_fallbacks,
            ),
        ];
        for (name, help, pick) in series {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for (replica, c) in &counts {
                let _ = writeln!(out, "{name}{{replica=\"{replica}\"}} {}", pick(c));
            }
        }
    }
}

/// The engine adapters of the replicas; dropping them closes the sockets and subscriptions.
#[derive(Default)]
pub struct ReplicaEngines {
    services: Vec<agentrt_vllm::EvictionService>,
    subscribers: Arc<Mutex<Vec<agentrt_vllm::KvEventSubscriber>>>,
}

impl ReplicaEngines {
    /// Each eviction socket's path, in the replicas' order.
    pub fn sockets(&self) -> Vec<&std::path::Path> {
        self.services.iter().map(|s| s.path()).collect()
    }
}

impl agentrt_vllm::AnchorEvents for ReplicaRouting {
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

/// `--replica-eviction-socket NAME=PATH`s by replica name; every name a `--replica`, none twice.
fn eviction_sockets<'a>(
    replicas: &Replicas,
    flags: &'a [String],
) -> anyhow::Result<HashMap<&'a str, std::path::PathBuf>> {
    let mut sockets = HashMap::new();
    for flag in flags {
        let (name, path) = flag
            .split_once('=')
            .filter(|(n, p)| !n.is_empty() && !p.is_empty())
            .ok_or_else(|| anyhow::anyhow!("--replica-eviction-socket {flag:?}: expected NAME=PATH"))?;
        anyhow::ensure!(
            replicas.all().iter().any(|r| r.name == name),
            "--replica-eviction-socket {flag:?}: no --replica is named {name:?}"
        );
        anyhow::ensure!(
            sockets.insert(name, std::path::PathBuf::from(path)).is_none(),
            "--replica-eviction-socket: replica {name:?} is given two sockets"
        );
    }
    Ok(sockets)
}

/// How long a replica that failed a request is left out of routing.
const REPLICA_DOWN: Duration = Duration::from_secs(5);

/// How long a request waits for its token ids.
const TOKENIZE_TIMEOUT: Duration = Duration::from_millis(500);

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

/// What routing needs of a request, taken from its body while the proxy parses it.
#[derive(Debug, Clone, Default)]
pub struct RouteInput {
    /// The body for the replica's `/tokenize`.
    tokenize: Option<Value>,
    /// The prompt's token ids when the client sent them (`/v1/completions` with ids).
    token_ids: Option<Vec<u32>>,
    cache_salt: Option<String>,
    max_tokens: Option<u32>,
    /// The request's session (agentrt's tenant-scoped 64-bit id).
    session: u64,
}

impl RouteInput {
    /// From a chat completion's body: its messages and tools, rendered as the replica will.
    pub fn chat(body: &Value) -> Self {
        let mut tokenize = json!({
            "model": body.get("model").cloned().unwrap_or(Value::Null),
            "messages": body.get("messages").cloned().unwrap_or_else(|| json!([])),
            "add_generation_prompt": body.get("add_generation_prompt").cloned().unwrap_or(json!(true)),
        });
        if let Some(tools) = body.get("tools") {
            tokenize["tools"] = tools.clone();
        }
        Self {
            tokenize: Some(tokenize),
            ..Self::common(body)
        }
    }

    /// From a completion's body: its prompt (text is tokenized; ids are used as they are).
    pub fn completion(body: &Value) -> Self {
        let prompt = body.get("prompt");
        let ids = prompt.and_then(Value::as_array).and_then(|items| {
            items
                .iter()
                .map(|t| t.as_u64().and_then(|n| u32::try_from(n).ok()))
                .collect::<Option<Vec<u32>>>()
        });
        let tokenize = prompt
            .filter(|p| p.is_string())
            .map(|p| json!({"model": body.get("model").cloned().unwrap_or(Value::Null), "prompt": p}));
        Self {
            tokenize,
            token_ids: ids,
            ..Self::common(body)
        }
    }

    fn common(body: &Value) -> Self {
        Self {
            cache_salt: body
                .get(crate::tenant::cache_salt::FIELD)
                .and_then(Value::as_str)
                .map(str::to_string),
            max_tokens: body
                .get("max_completion_tokens")
                .or_else(|| body.get("max_tokens"))
                .and_then(Value::as_u64)
                .and_then(|n| u32::try_from(n).ok()),
            ..Self::default()
        }
    }

    /// From either route's body: a chat completion has `messages`.
    pub fn of_body(body: &Value) -> Self {
        if body.get("messages").is_some() {
            Self::chat(body)
        } else {
            Self::completion(body)
        }
    }

    pub fn with_session(mut self, session: u64) -> Self {
        self.session = session;
        self
    }
}

/// A request's place on a replica: completes its booking when the replica starts answering,
/// releases it (and the replica's in-flight count) when dropped.
pub struct Lease {
    routing: Arc<ReplicaRouting>,
    route: Route,
    url: String,
    prefilled: bool,
}

impl Lease {
    /// The replica's base URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn replica(&self) -> ReplicaId {
        self.route.replica
    }

    /// The replica did not answer the request.
    pub fn failed(&self) {
        self.routing.replica_failed(self.route.replica);
    }

    /// The replica started answering: its prompt is processed.
    pub fn prefill_complete(&mut self) {
        if !self.prefilled {
            self.prefilled = true;
            self.routing.router.prefill_complete(&self.route);
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.routing.in_flight[&self.route.replica].fetch_sub(1, Relaxed);
        self.routing.router.release(&self.route);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_input_takes_what_the_router_needs_from_a_chat_body() {
        let body = json!({
            "model": "tiny", "max_tokens": 12, "cache_salt": "s1",
            "messages": [{"role": "system", "content": "planner"}, {"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "f"}}]
        });
        let input = RouteInput::chat(&body).with_session(7);
        let tokenize = input.tokenize.unwrap();
        assert_eq!(tokenize["messages"], body["messages"]);
        assert_eq!(tokenize["tools"], body["tools"]);
        assert_eq!(tokenize["add_generation_prompt"], json!(true));
        assert_eq!(input.max_tokens, Some(12));
        assert_eq!(input.cache_salt.as_deref(), Some("s1"));
        assert_eq!(input.session, 7);
    }

    #[test]
    fn a_completion_with_token_ids_needs_no_tokenize() {
        let input = RouteInput::completion(&json!({"model": "m", "prompt": [1, 2, 3], "max_completion_tokens": 5}));
        assert_eq!(input.token_ids, Some(vec![1, 2, 3]));
        assert!(input.tokenize.is_none());
        assert_eq!(input.max_tokens, Some(5));
        let text = RouteInput::completion(&json!({"model": "m", "prompt": "hello"}));
        assert_eq!(text.tokenize.unwrap()["prompt"], json!("hello"));
    }

    #[test]
    fn flags_without_replicas_are_refused_and_bad_replicas_named() {
        let lone_router = ReplicaArgs {
            router: Some("http://x".into()),
            ..Default::default()
        };
        let error = ReplicaRouting::from_args(&lone_router).err().unwrap().to_string();
        assert!(error.contains("--replica NAME=URL"), "{error}");
        let bad = ReplicaArgs {
            replicas: vec!["a=ftp://x".into()],
            ..Default::default()
        };
        assert!(ReplicaRouting::from_args(&bad)
            .err()
            .unwrap()
            .to_string()
            .contains("not an http"));
        assert!(ReplicaRouting::from_args(&ReplicaArgs::default()).unwrap().is_none());
    }

    #[test]
    fn each_eviction_socket_names_one_replica_once() {
        let replicas = Replicas::new(vec![
            Replica::parse("a=http://x").unwrap(),
            Replica::parse("b=http://y").unwrap(),
        ])
        .unwrap();
        let flags = |f: &[&str]| f.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let ok = flags(&["a=/tmp/a.sock", "b=/tmp/b.sock"]);
        let sockets = eviction_sockets(&replicas, &ok).unwrap();
        assert_eq!(sockets["b"], std::path::PathBuf::from("/tmp/b.sock"));
        let unknown = eviction_sockets(&replicas, &flags(&["c=/tmp/c.sock"]))
            .unwrap_err()
            .to_string();
        assert!(unknown.contains("no --replica is named \"c\""), "{unknown}");
        let twice = eviction_sockets(&replicas, &flags(&["a=/1", "a=/2"]))
            .unwrap_err()
            .to_string();
        assert!(twice.contains("two sockets"), "{twice}");
        assert!(eviction_sockets(&replicas, &flags(&["a"])).is_err());
    }
}

//! The composition root: the one place that sees every capability. [`App::build`] builds them
//! in dependency order — the upstream, the replicas, the engine adapters, the policy feed and
//! side effects, the gateway, the reloader — hands each only what it uses, and merges the
//! routers, each finished with its own state. `agentrt serve` (`cli.rs`), the tests and the
//! benches all assemble the proxy through it.

use std::sync::Arc;

use agentrt_exposition::Report;
use std::time::Duration;

use axum::routing::get;
use axum::Router;

use crate::clock::Clock;
use crate::engine::adapters::{EngineAdapters, EngineCacheReport, EngineConfig};
use crate::engine::admission::{AdmissionQueue, WorkingSetOptions};
use crate::engine::kind::EngineKind;
use crate::engine::replicas::{ReplicaArgs, ReplicaRouting};
use crate::engine::tokenize::Tokenizer;
use crate::engine::upstream::Upstream;
use crate::engine::upstream_router::UpstreamRouter;
use crate::engine::working_set::SessionAdmission;
use crate::front::body::BodyReading;
use crate::front::connections::ConnectionMetrics;
use crate::front::limits::Limits;
use crate::front::overload::{shed, Overload, SchedulingLag};
use crate::front::tcp_memory::TcpMemory;
use crate::hints::route::HintsState;
use crate::hints::Hints;
use crate::metrics::{MetricsState, ProxyMetrics};
use crate::policy::effects::Effects;
use crate::policy::feed::PolicyFeed;
use crate::policy::warmup::{WarmupDeps, WarmupOptions, Warmups};
use crate::request::engine_fields::ClientEngineFields;
use crate::request::{BodyOptions, ProxyState};
use crate::tenant::cache_salt::CacheSalts;
use crate::tenant::metrics::{RegistryReport, TenantsReport};
use crate::tenant::reload::{CacheShares, Reloader, Reloads};
use crate::tenant::Tenants;

/// Everything the proxy is built from. [`AppConfig::new`] gives the defaults of `agentrt serve`
/// without flags; `cli.rs` fills it from the flags.
pub struct AppConfig {
    /// The tenants, with their registry, default policy and settings (the caller loads the
    /// components).
    pub tenants: Tenants,
    /// The upstream's base URL (`--upstream`).
    pub upstream: String,
    /// The API key agentrt sends the upstream as its bearer token; clients' keys are never
    /// forwarded.
    pub upstream_api_key: Option<String>,
    /// The front door's limits.
    pub limits: Limits,
    /// Add agentrt's tags and `cache_salt` (`--no-engine-tags` turns it off).
    pub engine_tags: bool,
    /// The engine behind the upstream (`--engine`): which request fields carry the tags.
    pub engine_kind: EngineKind,
    /// `--engine-priorities`.
    pub engine_priorities: bool,
    /// The key of the tenants' cache salts (`--cache-salt-secret`; random per process when `None`).
    pub cache_salt_secret: Option<String>,
    /// `--client-engine-field`.
    pub client_engine_fields: ClientEngineFields,
    /// `--upstream-router`: the router `--upstream` is, if one.
    pub upstream_router: UpstreamRouter,
    /// How many warm-ups go upstream, and how fast (`--warmup-concurrency`, `--warmup-rate`).
    pub warmup: WarmupOptions,
    /// `--metrics-token`.
    pub metrics_token: Option<String>,
    /// Re-reads `--config` (on SIGHUP and `POST /admin/reload`).
    pub reloader: Option<Reloader>,
    /// Several replicas (`--replica`, `--router`, …).
    pub replicas: ReplicaArgs,
    /// The admission queue (`--upstream-max-in-flight`).
    pub admission: Option<Arc<AdmissionQueue>>,
    /// Working-set admission (`--session-admission working-set`).
    pub working_set: Option<WorkingSetOptions>,
    /// The engine adapters (eviction socket, KV events, shares).
    pub engine: EngineConfig,
    /// The MCP gateway (`--mcp-server`).
    pub mcp: Option<crate::mcp::GatewayOptions>,
    /// Lifecycle hints per second per tenant (`--hint-rate`; a burst of twice that).
    pub hint_rate: f64,
    /// Where the admin API finds a policy an upload names (`--policy`'s lookup); `None`: uploads
    /// must carry the component's bytes.
    pub components: Option<Arc<agentrt_runtime::ComponentLookup>>,
}

impl AppConfig {
    /// `tenants` in front of `upstream`, everything else as `agentrt serve` has it without flags.
    pub fn new(tenants: Tenants, upstream: &str) -> Self {
        Self {
            tenants,
            upstream: upstream.to_string(),
            upstream_api_key: None,
            limits: Limits::default(),
            engine_tags: true,
            engine_kind: EngineKind::Vllm,
            engine_priorities: false,
            cache_salt_secret: None,
            client_engine_fields: ClientEngineFields::default(),
            upstream_router: UpstreamRouter::None,
            warmup: WarmupOptions::default(),
            metrics_token: None,
            reloader: None,
            replicas: ReplicaArgs::default(),
            admission: None,
            working_set: None,
            engine: EngineConfig::default(),
            mcp: None,
            hint_rate: crate::tenant::hint_rate::DEFAULT_HINT_RATE,
            components: None,
        }
    }
}

impl AppConfig {
    /// What every forwarded request's body is rewritten with; its own step because it is the
    /// request path's whole share of the configuration, read before the rest is taken apart.
    fn body_options(&self) -> BodyOptions {
        BodyOptions {
            engine_tags: self.engine_tags,
            engine: self.engine_kind,
            engine_priorities: self.engine_priorities,
            cache_salts: CacheSalts::new(self.cache_salt_secret.as_deref()),
            client_engine_fields: self.client_engine_fields.clone(),
            upstream_router: self.upstream_router,
        }
    }
}

/// The assembled proxy: its router, and the parts the binary, the tests and the benches look at.
/// Cheap to clone.
#[derive(Clone)]
pub struct App(Arc<Parts>);

struct Parts {
    router: Router,
    tenants: Arc<Tenants>,
    metrics: Arc<ProxyMetrics>,
    connections: Arc<ConnectionMetrics>,
    feed: PolicyFeed,
    replicas: Option<Arc<ReplicaRouting>>,
    admission: Option<Arc<AdmissionQueue>>,
    working_set: Option<Arc<SessionAdmission>>,
    gateway: Option<Arc<agentrt_mcp::Gateway>>,
    reloads: Option<Arc<Reloads>>,
    engine: EngineAdapters,
    limits: Limits,
    /// The shedding rule (`--shed-lag-ms`), when on.
    overload: Option<Arc<Overload>>,
    /// How every request body is read (deadline, budgets).
    reading: Arc<BodyReading>,
    /// The kernel's TCP memory, shed under pressure.
    tcp_memory: Arc<TcpMemory>,
}

impl Parts {
    /// The series `/metrics` shows, in the order it shows them; its own step because that order
    /// is part of the page, and each optional part adds its report only when it is there.
    fn reports(&self, hints: &Arc<Hints>) -> Vec<Arc<dyn Report>> {
        let mut reports: Vec<Arc<dyn Report>> = vec![
            Arc::new(ProxyReport {
                metrics: self.metrics.clone(),
                tenants: self.tenants.clone(),
            }),
            self.connections.clone(),
            self.reading.clone(),
            self.tcp_memory.clone(),
        ];
        if let Some(overload) = &self.overload {
            reports.push(overload.clone());
        }
        reports.extend([
            Arc::new(TenantsReport(self.tenants.clone())) as Arc<dyn Report>,
            hints.clone(),
        ]);
        if let Some(eviction) = self.engine.eviction_metrics() {
            reports.push(Arc::new(crate::engine::plugin_metrics::EngineEvictionReport(eviction)));
        }
        if let Some(cache) = &self.engine.cache {
            reports.push(Arc::new(EngineCacheReport(cache.clone())));
        }
        if let Some(replicas) = &self.replicas {
            reports.push(replicas.clone());
        }
        if let Some(queue) = &self.admission {
            reports.push(queue.clone());
        }
        if let Some(working_set) = &self.working_set {
            reports.push(working_set.clone());
        }
        reports.push(Arc::new(RegistryReport(self.tenants.clone())));
        if let Some(gateway) = &self.gateway {
            reports.push(Arc::new(crate::mcp::McpReport(gateway.clone())));
        }
        reports
    }

    /// Every room's routes merged into one router, each finished with its own state; its own
    /// step so that the route table reads in one place.
    fn routes(
        &self,
        proxy: ProxyState,
        hints: Arc<Hints>,
        components: Option<Arc<agentrt_runtime::ComponentLookup>>,
        metrics: MetricsState,
    ) -> Router {
        let admin = crate::admin::AdminState {
            tenants: self.tenants.clone(),
            reloads: self.reloads.clone(),
            max_upload_bytes: self.limits.max_upload_bytes,
            uploads: crate::admin::uploads::Uploads::new(self.limits.max_uploads_per_tenant),
            reading: self.reading.clone(),
            components,
            hints: hints.clone(),
        };
        let mut model_routes = crate::request::routes(proxy).layer(axum::middleware::from_fn_with_state(
            self.tcp_memory.clone(),
            shed::<TcpMemory>,
        ));
        if let Some(overload) = &self.overload {
            model_routes = model_routes.layer(axum::middleware::from_fn_with_state(overload.clone(), shed::<Overload>));
        }
        let mut router = Router::new()
            .merge(model_routes)
            .merge(crate::hints::route::routes(HintsState {
                tenants: self.tenants.clone(),
                hints,
                reading: self.reading.clone(),
            }))
            .merge(crate::admin::routes(admin))
            .merge(crate::metrics::routes(metrics))
            .route("/healthz", get(|| async { "ok" }));
        if let Some(gateway) = &self.gateway {
            router = router.merge(agentrt_mcp::routes::router(gateway));
        }
        router
    }
}

/// The proxy's own series, with whether it serves unauthenticated now (the tenants' settings).
struct ProxyReport {
    metrics: Arc<ProxyMetrics>,
    tenants: Arc<Tenants>,
}

impl Report for ProxyReport {
    fn report(&self, out: &mut agentrt_exposition::Exposition<'_>) -> std::fmt::Result {
        self.metrics.report(out, self.tenants.settings().keys.is_empty())
    }
}

impl App {
    /// Build every part from `config` and the router over them.
    pub async fn build(config: AppConfig) -> anyhow::Result<Self> {
        let body = Arc::new(config.body_options());
        let clock = Clock::start();
        let metrics = Arc::new(ProxyMetrics::default());
        let connections = Arc::new(ConnectionMetrics::default());
        let upstream = Upstream::new(&config.upstream, config.upstream_api_key, config.limits.clone());
        let tenants = Arc::new(config.tenants);
        let replicas = ReplicaRouting::from_args(&config.replicas, Tokenizer::new(upstream.clone()))?;
        let working_set = config.working_set.map(|options| SessionAdmission::new(options, clock));
        let engine = EngineAdapters::start(
            &config.engine,
            &tenants,
            replicas.as_ref(),
            &config.replicas,
            working_set.as_ref(),
        )
        .await?;
        if let Some(working_set) = &working_set {
            working_set.start(tenants.clone(), upstream.clone(), metrics.clone());
        }
        let feed = PolicyFeed::new(tenants.clone(), replicas.clone(), metrics.clone(), clock)
            .with_working_set(working_set.clone());
        let warmups = Arc::new(Warmups::new(
            config.warmup,
            WarmupDeps {
                upstream: upstream.clone(),
                replicas: replicas.clone(),
                feed: feed.clone(),
                clock,
                metrics: metrics.clone(),
                engine_tags: config.engine_tags,
                engine: config.engine_kind,
            },
        ));
        let hints = Arc::new(Hints::new(config.hint_rate, feed.clone(), clock, tenants.clone()));
        let effects = Arc::new(Effects::new(warmups, engine.pins.clone(), metrics.clone()));
        let limits = &config.limits;
        let reading = BodyReading::new(
            agentrt_guards::body_read::BodyBudget::new(limits.max_reading_bytes, limits.max_reading_bytes_per_tenant),
            limits.body_timing,
        );
        // The gateway's bodies count against the same budget, under the same deadline.
        let gateway = config.mcp.map(|options| {
            let options = agentrt_mcp::GatewayOptions {
                body_budget: reading.budget.clone(),
                body_timing: reading.timing,
                ..options
            };
            crate::mcp::gateway(tenants.clone(), clock, options)
        });
        let reloads = config.reloader.map(|reloader| {
            Reloads::new(
                reloader,
                tenants.clone(),
                engine.cache.clone().map(|c| c as Arc<dyn CacheShares>),
                metrics.clone(),
            )
        });

        let proxy = ProxyState {
            tenants: tenants.clone(),
            upstream: upstream.clone(),
            tokenizer: Tokenizer::new(upstream),
            body,
            admission: config.admission.clone(),
            working_set: working_set.clone(),
            replicas: replicas.clone(),
            feed: feed.clone(),
            effects,
            hints: hints.clone(),
            metrics: metrics.clone(),
            clock,
            request_ids: Arc::new(std::sync::atomic::AtomicU64::new(1)),
            reading: reading.clone(),
        };
        let mut parts = Parts {
            router: Router::new(),
            tenants,
            metrics,
            connections,
            feed,
            replicas,
            admission: config.admission,
            working_set,
            gateway,
            reloads,
            engine,
            overload: config
                .limits
                .shed_lag
                .map(|threshold| Overload::new(SchedulingLag::start(), threshold)),
            limits: config.limits,
            reading,
            tcp_memory: TcpMemory::start(),
        };
        let metrics = MetricsState::new(config.metrics_token, parts.reports(&hints));
        parts.router = parts.routes(proxy, hints, config.components, metrics);
        Ok(Self(Arc::new(parts)))
    }

    /// Serve on `listener` through the accept loop (its connection cap and header timeout,
    /// [`crate::front::connections`]) until `shutdown` completes.
    pub async fn serve(
        &self,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> std::io::Result<()> {
        let parts = &self.0;
        crate::front::connections::serve(
            listener,
            parts.router.clone(),
            &parts.limits,
            parts.connections.clone(),
            shutdown,
        )
        .await
    }

    /// Reload `--config` on every SIGHUP (a SIGHUP without one is logged and changes nothing).
    #[cfg(unix)]
    pub fn reload_on_sighup(&self) -> std::io::Result<()> {
        crate::tenant::reload::reload_on_sighup(self.0.reloads.clone())
    }

    /// Report sessions silent for `idle` as ended, checking a few times per `idle`, for as long
    /// as the process runs.
    pub fn end_idle_sessions_every(&self, idle: Duration) {
        let feed = self.0.feed.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval((idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(5)));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let ended = feed.end_idle_sessions(idle);
                if ended > 0 {
                    tracing::debug!(ended, "idle sessions reported ended");
                }
            }
        });
    }

    /// The router, every capability's routes merged.
    pub fn router(&self) -> Router {
        self.0.router.clone()
    }

    /// The tenants: their settings, and those started so far.
    pub fn tenants(&self) -> &Arc<Tenants> {
        &self.0.tenants
    }

    /// The proxy's own counters.
    pub fn metrics(&self) -> &Arc<ProxyMetrics> {
        &self.0.metrics
    }

    /// The accept loop's counters.
    pub fn connections(&self) -> &Arc<ConnectionMetrics> {
        &self.0.connections
    }

    /// What tells policies (and ends idle sessions).
    pub fn feed(&self) -> &PolicyFeed {
        &self.0.feed
    }

    /// The replica routing, when `--replica` gives several upstreams.
    pub fn replicas(&self) -> Option<&Arc<ReplicaRouting>> {
        self.0.replicas.as_ref()
    }

    /// The admission queue, when `--upstream-max-in-flight` sets one.
    pub fn admission(&self) -> Option<&Arc<AdmissionQueue>> {
        self.0.admission.as_ref()
    }

    /// The MCP gateway, when `--mcp-server` gives one.
    pub fn gateway(&self) -> Option<&Arc<agentrt_mcp::Gateway>> {
        self.0.gateway.as_ref()
    }

    /// The engine adapters running.
    pub fn engine(&self) -> &EngineAdapters {
        &self.0.engine
    }
}

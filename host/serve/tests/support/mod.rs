//! Shared set-up of the serve tests: a proxy on loopback — the real router behind the real accept
//! loop — in front of the stub upstream, and small request helpers.
// Each test binary uses part of this module.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use agentrt_runtime::{EngineOptions, PolicyEngine, PolicyRegistry, PoolingOptions, SlotConfig};
use agentrt_serve::table::TableLimits;
use agentrt_serve::tenant::quotas::Quotas;
use agentrt_serve::tenant::reload::initial_settings;
use agentrt_serve::tenant::settings::FlagSettings;
use agentrt_serve::tenant::Tenants;
use agentrt_serve::{App, AppConfig, Limits};
use serde_json::{json, Value};

use crate::stub_upstream;

pub type McpOptions = Box<dyn FnOnce(&PolicyEngine) -> agentrt_serve::mcp::GatewayOptions>;

pub struct Proxy {
    pub url: String,
    pub app: App,
    pub stub: stub_upstream::Stub,
    _cache: tempfile::TempDir,
    /// Ends the accept loop, as SIGTERM does `agentrt serve`'s ([`Proxy::shut_down`]).
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    served: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl Proxy {
    /// Shut the proxy down as SIGTERM does (stop accepting, drain, cut what is left): how long
    /// until its accept loop returned.
    pub async fn shut_down(&mut self) -> Duration {
        let started = std::time::Instant::now();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(served) = self.served.take() {
            served.await.unwrap().unwrap();
        }
        started.elapsed()
    }
}

/// How a test's proxy is set up: `Setup::new(policy).start()` is what most tests use.
/// A slot besides `kv`: (name, component, init).
pub type ExtraSlotSetup = (&'static str, &'static str, Vec<(&'static str, &'static str)>);

pub struct Setup {
    pub policy: &'static str,
    /// Send `set-priority` demotions upstream as `priority` (`--engine-priorities`).
    pub engine_priorities: bool,
    /// Slots besides `kv`: (name, component, init).
    pub extra_slots: Vec<ExtraSlotSetup>,
    /// API key → tenant; empty = single-tenant.
    pub keys: HashMap<String, String>,
    /// Another upstream than the stub.
    pub upstream: Option<String>,
    /// The operator's admin token ("s3cret" unless changed).
    pub admin_token: Option<String>,
    /// Tenants' admin tokens: token → tenant.
    pub tenant_admins: HashMap<String, String>,
    pub metrics_token: Option<String>,
    pub limits: Limits,
    /// `init` of every tenant's policy.
    pub init: Vec<(&'static str, &'static str)>,
    pub tables: TableLimits,
    /// Instance slots of the engine's pool (the test engine's 16 when `None`).
    pub pool_instances: Option<u32>,
    /// Jobs each tenant's policy queue holds.
    pub policy_queue_jobs: usize,
    /// Every tenant's quotas (the flags'; a config file may override them).
    pub quotas: Quotas,
    /// A config file (`--config`) read at start and by `POST /admin/reload`.
    pub config: Option<std::path::PathBuf>,
    /// Every tenant's policy call deadline (the runtime's default when `None`).
    pub policy_deadline: Option<Duration>,
    /// Several replicas behind a router (`--replica`, `--router`, …); none by default.
    pub replicas: agentrt_serve::engine::replicas::ReplicaArgs,
    /// The MCP gateway to mount at `/mcp`, its options made with the proxy's engine (its memo
    /// policy must be loaded by the engine the registry runs).
    pub mcp: Option<McpOptions>,
    /// `--upstream-max-in-flight` and `--upstream-max-wait-ms`; none by default.
    pub admission: Option<(usize, Duration)>,
    /// The admission queue's byte bounds (`--upstream-max-queued-mib[-per-tenant]`).
    pub queued_bytes: agentrt_serve::engine::admission::QueuedBytes,
    /// Working-set admission (`--session-admission working-set`); off by default.
    pub working_set: Option<agentrt_serve::engine::admission::WorkingSetOptions>,
    /// Engine-control fields clients may set (`--client-engine-field`).
    pub client_engine_fields: Vec<agentrt_serve::request::engine_fields::EngineField>,
    /// The router the upstream is (`--upstream-router`); none by default.
    pub upstream_router: agentrt_serve::engine::upstream_router::UpstreamRouter,
    /// The engine the upstream stands for (`--engine`); vLLM by default.
    pub engine: agentrt_serve::engine::kind::EngineKind,
    /// The engine plugin's eviction socket (`--eviction-socket`); none by default.
    pub eviction_socket: Option<std::path::PathBuf>,
    /// Its group and connection cap (`--eviction-socket-group`, `--eviction-max-connections`).
    pub eviction_socket_options: agentrt_serve::engine::adapters::EvictionSocketOptions,
    /// Lifecycle hints per second per tenant (`--hint-rate`).
    pub hint_rate: f64,
    /// Tenants' shares of the engine's cache (`--share`; needs `eviction_socket`); none by default.
    pub shares: HashMap<String, agentrt_runtime::Share>,
}

impl Setup {
    pub fn new(policy: &'static str) -> Self {
        Self {
            policy,
            extra_slots: Vec::new(),
            engine_priorities: false,
            keys: HashMap::new(),
            upstream: None,
            admin_token: Some("s3cret".into()),
            tenant_admins: HashMap::new(),
            metrics_token: None,
            limits: Limits::default(),
            init: Vec::new(),
            tables: TableLimits::default(),
            pool_instances: None,
            policy_queue_jobs: agentrt_serve::tenant::worker::DEFAULT_QUEUE_JOBS,
            quotas: Quotas::default(),
            config: None,
            policy_deadline: None,
            replicas: Default::default(),
            mcp: None,
            admission: None,
            queued_bytes: Default::default(),
            working_set: None,
            client_engine_fields: Vec::new(),
            upstream_router: Default::default(),
            engine: Default::default(),
            eviction_socket: None,
            eviction_socket_options: Default::default(),
            hint_rate: agentrt_serve::tenant::hint_rate::DEFAULT_HINT_RATE,
            shares: HashMap::new(),
        }
    }

    pub async fn start(self) -> Proxy {
        let (stub_url, stub) = stub_upstream::start().await;
        let (engine, cache) = match self.pool_instances {
            None => agentrt_tests::engine(),
            Some(max_instances) => {
                let cache = tempfile::tempdir().unwrap();
                let engine = PolicyEngine::new(EngineOptions {
                    pooling: Some(PoolingOptions {
                        max_instances,
                        ..PoolingOptions::default()
                    }),
                    cache_dir: Some(cache.path().to_path_buf()),
                    seed: Some(7),
                    ..EngineOptions::default()
                })
                .unwrap();
                (engine, cache)
            }
        };
        let component = agentrt_tests::load(&engine, self.policy);
        let mut slot = SlotConfig::new("").with_init(self.init.iter().copied());
        if let Some(deadline) = self.policy_deadline {
            slot.limits.call_deadline = deadline;
        }
        let flags = FlagSettings {
            keys: self.keys,
            operator_token: self.admin_token,
            tenant_admin_tokens: self.tenant_admins,
            shares: self.shares.clone(),
            defaults: self.quotas,
            public_anchors: Default::default(),
        };
        let (settings, reloader) =
            initial_settings(self.config, flags, agentrt_serve::config_flags::check_serve_table).unwrap();
        let extra_slots = self
            .extra_slots
            .iter()
            .map(|(name, policy, init)| {
                let config = SlotConfig {
                    init: init.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
                    ..slot.clone()
                };
                (name.to_string(), agentrt_tests::load(&engine, policy), config)
            })
            .collect();
        let mcp = self.mcp.map(|options| options(&engine));
        let tenants = Tenants::new(PolicyRegistry::new(engine), component, slot, settings)
            .with_extra_slots(extra_slots)
            .with_tables(self.tables)
            .with_queue_jobs(self.policy_queue_jobs);
        let queued_bytes = self.queued_bytes;
        let config = AppConfig {
            metrics_token: self.metrics_token,
            cache_salt_secret: Some("test-salt-key".into()),
            engine_priorities: self.engine_priorities,
            client_engine_fields: agentrt_serve::request::engine_fields::ClientEngineFields::allowing(
                self.client_engine_fields.iter().copied(),
            ),
            limits: self.limits,
            reloader,
            replicas: self.replicas,
            admission: self.admission.map(|(n, wait)| {
                agentrt_serve::engine::admission::AdmissionQueue::with_queued_bytes(n, wait, queued_bytes)
            }),
            working_set: self.working_set,
            mcp,
            hint_rate: self.hint_rate,
            upstream_router: self.upstream_router,
            engine_kind: self.engine,
            engine: agentrt_serve::engine::adapters::EngineConfig {
                eviction_socket: self.eviction_socket,
                eviction_socket_options: self.eviction_socket_options,
                shares: self.shares,
                ..Default::default()
            },
            components: Some(std::sync::Arc::new(agentrt_runtime::ComponentLookup::from_environment(
                agentrt_runtime::EmbeddedSet::NONE,
            ))),
            ..AppConfig::new(tenants, &self.upstream.unwrap_or(stub_url))
        };
        let app = App::build(config).await.unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let serving = app.clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        // Only a sent stop shuts it down (a dropped sender leaves it serving).
        let shutdown = async move {
            if stopped.await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        let served = tokio::spawn(async move { serving.serve(listener, shutdown).await });
        Proxy {
            url,
            app,
            stub,
            _cache: cache,
            stop: Some(stop),
            served: Some(served),
        }
    }
}

pub async fn proxy_with(policy: &'static str, keys: &[(&str, &str)], upstream: Option<String>) -> Proxy {
    Setup {
        keys: keys.iter().map(|(k, t)| (k.to_string(), t.to_string())).collect(),
        upstream,
        ..Setup::new(policy)
    }
    .start()
    .await
}

/// Tenants alpha (`key-a`) and beta (`key-b`) on `policy`.
pub fn two_tenants(policy: &'static str) -> Setup {
    Setup {
        keys: [("key-a", "alpha"), ("key-b", "beta")]
            .map(|(k, t)| (k.to_string(), t.to_string()))
            .into(),
        ..Setup::new(policy)
    }
}

/// `body` (any text) posted to `path` of the proxy at `url` as the holder of `key`: the status and
/// the JSON answer (`null` when it is not JSON).
pub async fn call_as(url: &str, path: &str, key: &str, body: String) -> (u16, Value) {
    let response = post(
        &format!("{url}{path}"),
        body,
        &[("authorization", &format!("Bearer {key}"))],
    )
    .await;
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

pub async fn proxy(policy: &'static str) -> Proxy {
    Setup::new(policy).start().await
}

pub fn chat(system: &str, task: &str, model: &str, stream: bool) -> Value {
    json!({"model": model, "stream": stream, "messages": [
        {"role": "system", "content": system},
        {"role": "user", "content": task},
    ]})
}

pub async fn post(url: &str, body: impl Into<reqwest::Body>, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(body);
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    request.send().await.unwrap()
}

pub async fn post_json(p: &Proxy, body: &Value, headers: &[(&str, &str)]) -> reqwest::Response {
    post(&format!("{}/v1/chat/completions", p.url), body.to_string(), headers).await
}

/// Install `component` (a component built from this repository) as `tenant`'s policy through
/// the admin API.
pub async fn install_policy(p: &Proxy, tenant: &str, component: &str) {
    let (status, answer) = put_policy(p, tenant, component, "s3cret", true).await;
    assert_eq!(status, 200, "{answer}");
}

/// `PUT /admin/tenants/{tenant}/policy` with `component`'s bytes under `token` (`fresh`: start the
/// new policy from scratch): the status and the JSON answer.
pub async fn put_policy(p: &Proxy, tenant: &str, component: &str, token: &str, fresh: bool) -> (u16, Value) {
    upload(
        p,
        &format!("/admin/tenants/{tenant}/policy?fresh={fresh}"),
        component,
        token,
    )
    .await
}

/// `PUT /admin/tenants/{tenant}/policy?fresh=true&slot=SLOT` with `component` under the operator's
/// token: the status and the JSON answer.
pub async fn put_policy_in_slot(p: &Proxy, tenant: &str, component: &str, slot: &str) -> (u16, Value) {
    let path = format!("/admin/tenants/{tenant}/policy?fresh=true&slot={slot}");
    upload(p, &path, component, "s3cret").await
}

async fn upload(p: &Proxy, path: &str, component: &str, token: &str) -> (u16, Value) {
    let response = reqwest::Client::new()
        .put(format!("{}{path}", p.url))
        .bearer_auth(token)
        .body(agentrt_tests::component_bytes(component))
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

/// `GET path` (e.g. `/admin/tenants`) under `token`: the status and the JSON answer.
pub async fn admin_get(p: &Proxy, path: &str, token: &str) -> (u16, Value) {
    let response = reqwest::Client::new()
        .get(format!("{}{path}", p.url))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

/// Wait until no request is in flight and every tenant's policy has been given every event.
pub async fn settle(p: &Proxy) {
    for _ in 0..1000 {
        let policies_idle = || p.app.tenants().list().iter().all(|t| t.worker.stats().queued() == 0);
        if p.app.metrics().in_flight.load(Relaxed) == 0 && policies_idle() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("requests in flight or policy calls queued after 10 s");
}

/// What `tenant`'s `probe` policy has heard (its snapshot, decoded natively), once every event
/// reached it.
pub async fn heard(p: &Proxy, tenant: &str) -> agentrt_test_probe::Probe {
    settle(p).await;
    let tenant = p.app.tenants().get_or_start(tenant).unwrap();
    let mut probe = agentrt_sdk::testing::Harness::<agentrt_test_probe::Probe>::new([]).unwrap();
    probe.restore(&tenant.policy.snapshot().unwrap()).unwrap();
    probe.policy().clone()
}

/// The proxy's `/metrics` text (no token).
pub async fn metrics_text(p: &Proxy) -> String {
    reqwest::get(format!("{}/metrics", p.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The `q`-quantile (0–1) of `samples`, which it sorts.
pub fn quantile(samples: &mut [Duration], q: f64) -> Duration {
    samples.sort();
    samples[((samples.len() - 1) as f64 * q).round() as usize]
}

//! `agentrt serve`: the proxy's command line, and starting everything it runs.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;

use agentrt_runtime::{flag_values, Share};
use agentrt_runtime::{ComponentLookup, PolicyEngine, PolicyRegistry, SlotConfig};

use crate::app::{App, AppConfig};
use crate::engine::adapters::EngineConfig;
use crate::front::limits::Limits;
use crate::names::{parse_tenant_secret, TenantSecret, API_KEY, DEFAULT_TENANT, TENANT_ADMIN_TOKEN};
use crate::policy::warmup::WarmupOptions;
use crate::request::engine_fields::{ClientEngineFields, EngineField};
use crate::tenant::reload::{initial_settings, Reloader, ServeTableCheck};
use crate::tenant::saved_state::StateDir;
use crate::tenant::settings::FlagSettings;
use crate::tenant::slots::load_extra_slots;
use crate::tenant::Tenants;

// The limit and quota flag groups live in their own module; their paths stay `cli::…`.
mod limit_flags;
pub use limit_flags::{LimitArgs, PolicyLimitArgs, QuotaArgs, TableArgs};

/// The heading `serve --help` starts with: the flags a first deployment sets (the upstream, where
/// to listen, the policy, the engine plugin's socket, the admin token, tenants or a config file);
/// every other flag is grouped by capability after them.
pub const START_HERE: &str = "Start here (a first deployment)";

/// The flags of `agentrt serve`; [`run`] starts the proxy they describe.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// The upstream OpenAI-compatible server (vLLM), e.g. http://127.0.0.1:8000.
    #[arg(help_heading = START_HERE, long)]
    pub upstream: String,
    /// Address to listen on.
    #[arg(help_heading = START_HERE, long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Several upstream replicas behind a router (`--replica`, `--router`, …).
    #[command(flatten, next_help_heading = "Replicas")]
    pub replicas: crate::engine::replicas::ReplicaArgs,
    /// Each tenant's policy: a component name (`cachesage`, `lru`, `ttl`; found in
    /// `$AGENTRT_COMPONENTS_DIR`, beside the binary, built into it, or in the source tree's build)
    /// or a path to a `.wasm` file.
    #[arg(help_heading = START_HERE, long, default_value = "cachesage")]
    pub policy: String,
    /// `key=value` passed to the policy's `init` (repeatable).
    #[arg(help_heading = "Policies", long = "policy-config", value_name = "KEY=VALUE")]
    pub policy_config: Vec<String>,
    /// `NAME=COMPONENT` (repeatable): a policy slot every tenant runs besides `kv` — e.g.
    /// `guard=guard` — fed the same events, with its own instance and limits, swappable alone
    /// (`PUT /admin/tenants/{tenant}/policy?slot=NAME`). Side effects of all slots are merged:
    /// `deny` wins, one warm-up per anchor (docs/policy-slots.md).
    #[arg(help_heading = "Policies", long = "slot", value_name = "NAME=COMPONENT")]
    pub slots: Vec<String>,
    /// A folder (made 0700 if missing) where every tenant's policy state — each slot's snapshot
    /// and the agents it refers to — is saved when `serve` shuts down (SIGTERM, Ctrl-C), and
    /// restored from when the tenant starts again, into a policy of the same name
    /// (docs/deploy.md, "Restarts"). Without it, a restart starts every policy fresh.
    #[arg(help_heading = "Policies", long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// `NAME:KEY=VALUE` (repeatable): passed to slot NAME's `init`.
    #[arg(help_heading = "Policies", long = "slot-config", value_name = "NAME:KEY=VALUE")]
    pub slot_configs: Vec<String>,
    /// The operator's bearer token for the admin API (or env AGENTRT_ADMIN_TOKEN): every route,
    /// every tenant. Without it (and without --tenant-admin) the admin API is disabled.
    #[arg(
        help_heading = START_HERE,
        long,
        env = "AGENTRT_ADMIN_TOKEN",
        hide_env_values = true
    )]
    pub admin_token: Option<String>,
    /// `TOKEN=TENANT` (repeatable): a bearer token for the admin API that acts only on that
    /// tenant's routes (`/admin/tenants/TENANT/…`: its policy, stats and forecasts). Split at the
    /// last `=` like --tenant; the tenant must be one --tenant names (`default` without any).
    #[arg(
        help_heading = "Tenants and admin",
        long = "tenant-admin",
        value_name = "TOKEN=TENANT"
    )]
    pub tenant_admins: Vec<String>,
    /// `API_KEY=TENANT` (repeatable): requests carrying the key belong to the tenant. Without any,
    /// every request belongs to `default`. Split at the last `=`, so keys may end in `=` (base64
    /// padding); tenant names are 1–64 letters, digits, `-`, `_` or `.`.
    #[arg(help_heading = START_HERE, long = "tenant", value_name = "KEY=TENANT")]
    pub tenants: Vec<String>,
    /// API key to send upstream.
    #[arg(
        help_heading = "Upstream",
        long,
        env = "AGENTRT_UPSTREAM_API_KEY",
        hide_env_values = true
    )]
    pub upstream_api_key: Option<String>,
    /// The engine behind `--upstream`: which request fields carry agentrt's tags (agent,
    /// session, warm-up flag) for its plugin — vLLM's `vllm_xargs`, or SGLang's `custom_params`
    /// and `session_id` (adapters/sglang/README.md).
    #[arg(help_heading = "Upstream", long, value_enum, default_value = "vllm")]
    pub engine: crate::engine::kind::EngineKind,
    /// Do not add agentrt's tags or `cache_salt` to forwarded requests (for upstreams that are
    /// no engine agentrt knows, and refuse unknown fields). `--no-vllm-xargs` is its old name.
    #[arg(help_heading = "Upstream", long, alias = "no-vllm-xargs")]
    pub no_engine_tags: bool,
    /// The router `--upstream` is, if one: `vllm-router` (vLLM's router) gets each call's session
    /// as `x-session-id` and its program as `vllm_xargs.agentic_context` (docs/replicas.md).
    #[arg(help_heading = "Upstream", long, value_enum, default_value = "none")]
    pub upstream_router: crate::engine::upstream_router::UpstreamRouter,
    /// vLLM's KV-event publisher (its `--kv-events-config` endpoint), e.g. tcp://127.0.0.1:5557.
    #[arg(help_heading = "Engine adapters", long)]
    pub kv_events: Option<String>,
    /// vLLM's KV-event replay endpoint, for filling sequence gaps.
    #[arg(help_heading = "Engine adapters", long)]
    pub kv_events_replay: Option<String>,
    /// Unix socket for the vLLM plugin's eviction requests (`AGENTRT_EVICTION_SOCKET` in vLLM's env).
    #[arg(help_heading = START_HERE, long)]
    pub eviction_socket: Option<PathBuf>,
    /// A group whose members may connect to the eviction sockets too (a name or a numeric id):
    /// the socket files are made 0660 and given to it. Without it they are 0600: only agentrt's
    /// user, so the plugin's process must run as the same user.
    #[arg(help_heading = "Engine adapters", long, value_name = "GROUP")]
    pub eviction_socket_group: Option<String>,
    /// Connections each eviction socket holds open at once (an engine opens one per engine core
    /// process); more are closed as soon as they are accepted and counted.
    #[arg(help_heading = "Engine adapters", long, default_value_t = agentrt_eviction::eviction::DEFAULT_MAX_CONNECTIONS)]
    pub eviction_max_connections: usize,
    /// Warm-ups in flight at once.
    #[arg(help_heading = "Policies", long, default_value_t = WarmupOptions::default().max_concurrent)]
    pub warmup_concurrency: usize,
    /// Sustained warm-ups per second: a number above 0 (NaN, infinities, 0 and negatives are
    /// refused; to send no warm-ups, use a policy that asks for none).
    #[arg(help_heading = "Policies", long, value_parser = flag_values::positive_rate, default_value_t = WarmupOptions::default().per_second)]
    pub warmup_rate: f64,
    /// Lifecycle hints per second per tenant (`POST /v1/agentrt/hints`), with a burst of twice
    /// that; a call past it gets 429 with Retry-After.
    #[arg(help_heading = "Tenants and admin", long, value_parser = flag_values::positive_rate, default_value_t = crate::tenant::hint_rate::DEFAULT_HINT_RATE)]
    pub hint_rate: f64,
    /// A session with no request for this long is reported ended (`session-end`) to its policy;
    /// 0 = never. Clients send no "done" signal, so silence is the proxy's only sign that a
    /// workflow finished; size it above the longest pause between two steps of one workflow.
    #[arg(help_heading = "Tenants and admin", long, default_value_t = 60_000)]
    pub session_idle_ms: u64,
    /// Bearer token `/metrics` requires (or env AGENTRT_METRICS_TOKEN). Without one `/metrics` is
    /// open to anyone who can connect, and it names every tenant.
    #[arg(
        help_heading = "Observability",
        long,
        env = "AGENTRT_METRICS_TOKEN",
        hide_env_values = true
    )]
    pub metrics_token: Option<String>,
    /// Key of the tenants' `cache_salt`s (or env AGENTRT_CACHE_SALT_SECRET): every named tenant's
    /// requests carry a salt of their own, so tenants never share prefix-cache blocks. Give every
    /// proxy in front of one engine the same key; without one it is random per process.
    #[arg(
        help_heading = "Tenants and admin",
        long,
        env = "AGENTRT_CACHE_SALT_SECRET",
        hide_env_values = true
    )]
    pub cache_salt_secret: Option<String>,
    /// Send policies' `set-priority` demotions upstream as the request's `priority` (start vLLM
    /// with `--scheduling-policy priority`: it refuses a non-zero priority otherwise). A policy
    /// may only demote its own tenant's sessions.
    #[arg(help_heading = "Upstream", long)]
    pub engine_priorities: bool,
    /// An engine-control field (`priority`, `kv_transfer_params`, `request_id`; repeatable)
    /// clients may set themselves. By default a client's non-default value is refused with 400:
    /// such fields act on the engine for every tenant (docs/security.md).
    #[arg(help_heading = "Upstream", long = "client-engine-field", value_name = "FIELD", value_parser = EngineField::parse)]
    pub client_engine_fields: Vec<EngineField>,
    /// The admission queue in front of the upstream (`--upstream-max-in-flight`, …).
    #[command(flatten, next_help_heading = "Admission queue")]
    pub admission: crate::engine::admission::AdmissionArgs,
    /// The front door's limits: connections, timeouts, bytes, request cost.
    #[command(flatten, next_help_heading = "Limits")]
    pub limits: LimitArgs,
    /// Every policy slot's memory and time limits.
    #[command(flatten, next_help_heading = "Policy limits")]
    pub policy_limits: PolicyLimitArgs,
    /// The sizes of each tenant's tables and policy queue.
    #[command(flatten, next_help_heading = "Limits")]
    pub tables: TableArgs,
    /// Every tenant's quotas, unless `--config` gives its own.
    #[command(flatten, next_help_heading = "Tenants and admin")]
    pub quotas: QuotaArgs,
    /// The MCP gateway at `/mcp/SERVER` (docs/mcp.md).
    #[command(flatten, next_help_heading = "MCP gateway")]
    pub mcp: agentrt_mcp::McpArgs,
    /// `TENANT=MIN_BLOCKS[:MAX_BLOCKS]` (repeatable): the tenant's share of the engine's KV cache
    /// — a guarantee and a limit, in blocks. With any share, each tenant's own policy ranks its
    /// own blocks, and when vLLM must evict, the victim comes from the tenant furthest past its
    /// limit, else above its guarantee (docs/multi-tenant.md). Needs `--eviction-socket`.
    #[arg(help_heading = "Engine adapters", long = "share", value_name = "TENANT=MIN[:MAX]", value_parser = agentrt_runtime::parse_tenant_share)]
    pub shares: Vec<(String, Share)>,
    /// A TOML file: any of these flags in its `[serve]` table (keys are the flags' names without
    /// `--`; the command line and the flags' environment variables win over it), and tenants —
    /// API keys, admin tokens, shares, quotas — in its `[tenants.*]`, `[defaults]` and `[public]`
    /// tables (docs/multi-tenant.md). SIGHUP or `POST /admin/reload` re-reads the tenants' tables;
    /// `[serve]` needs a restart (a reload that finds it changed is refused). A file that does
    /// not parse or validate changes nothing.
    #[arg(help_heading = START_HERE, long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// An anchor hash (16 hex digits, as `GET /admin/tenants/{tenant}/stats` lists them;
    /// repeatable) whose requests every tenant shares cache blocks for: they carry one public
    /// cache salt instead of their tenant's. The whole request is shared, the conversation after
    /// the anchor included (docs/multi-tenant.md).
    #[arg(help_heading = "Tenants and admin", long = "public-anchor", value_name = "HASH", value_parser = crate::tenant::settings::parse_anchor_hash)]
    pub public_anchors: Vec<u64>,
}

fn pairs(raw: &[String], what: &str) -> anyhow::Result<Vec<(String, String)>> {
    raw.iter()
        .map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .with_context(|| format!("{what} {kv:?}: expected A=B"))
        })
        .collect()
}

/// The `--tenant API_KEY=TENANT` options as API key → tenant name.
pub fn tenant_keys(raw: &[String]) -> anyhow::Result<HashMap<String, String>> {
    secrets_by_tenant(raw, API_KEY)
}

/// The `--tenant-admin TOKEN=TENANT` options as token → tenant name.
pub fn tenant_admin_tokens(raw: &[String]) -> anyhow::Result<HashMap<String, String>> {
    secrets_by_tenant(raw, TENANT_ADMIN_TOKEN)
}

/// `SECRET=TENANT` options as secret → tenant name. A secret given twice is refused: which tenant
/// it selects would depend on the order of the options. Errors never repeat a secret.
fn secrets_by_tenant(raw: &[String], secret: TenantSecret) -> anyhow::Result<HashMap<String, String>> {
    let mut secrets = HashMap::new();
    for option in raw {
        let (key, tenant) = parse_tenant_secret(option, secret).map_err(|e| anyhow::anyhow!("{}: {e}", secret.flag))?;
        if secrets.insert(key, tenant).is_some() {
            anyhow::bail!("{}: an {} is given more than once", secret.flag, secret.noun);
        }
    }
    Ok(secrets)
}

/// Run the proxy until Ctrl-C / SIGTERM; `components` finds `--policy` by name, `check_serve`
/// checks the config file's `[serve]` table on every read.
pub fn run(args: ServeArgs, components: &ComponentLookup, check_serve: ServeTableCheck) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let served = runtime.block_on(serve(args, components, check_serve));
    // The drain is over: what still runs (a policy call, a warm-up) does not hold the exit.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    served
}

async fn serve(args: ServeArgs, components: &ComponentLookup, check_serve: ServeTableCheck) -> anyhow::Result<()> {
    let limits = args.limits.limits()?;
    let loaded = load_tenants(&args, &limits, components, check_serve)?;
    let checked_upstream =
        crate::engine::upstream::Upstream::new(&args.upstream, args.upstream_api_key.clone(), limits.clone());
    let (eviction_socket, replica_sockets) = (args.eviction_socket.clone(), !args.replicas.eviction_sockets.is_empty());
    let (listen, session_idle_ms, engine) = (args.listen, args.session_idle_ms, args.engine);
    let (upstream, policy) = (args.upstream.clone(), args.policy.clone());
    let app = App::build(app_config(args, limits, loaded, components)?).await?;

    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    // Before saying we listen: SIGHUP's default action would end the process.
    #[cfg(unix)]
    app.reload_on_sighup().context("installing the SIGHUP handler")?;
    eprintln!(
        "agentrt serve: listening on http://{} → {} (policy {})",
        listener.local_addr()?,
        upstream,
        policy
    );
    use crate::engine::startup_checks::{self, EvictionPath};
    let eviction = match (eviction_socket, app.engine().eviction_metrics()) {
        (Some(path), Some(metrics)) => EvictionPath::Socket(path, metrics),
        _ if replica_sockets => EvictionPath::Replicas,
        _ => EvictionPath::None,
    };
    startup_checks::spawn(engine, eviction, checked_upstream);
    if session_idle_ms > 0 {
        app.end_idle_sessions_every(std::time::Duration::from_millis(session_idle_ms));
    }
    app.serve(listener, shutdown_signal()).await?;
    save_state(&app).await;
    eprintln!("agentrt serve: stopped");
    Ok(())
}

/// Save the tenants' state to `--state-dir`, if given: the policies' snapshots are policy calls,
/// made on a blocking thread.
async fn save_state(app: &App) {
    let tenants = app.tenants().clone();
    match tokio::task::spawn_blocking(move || tenants.save_state()).await {
        Ok(Some(saved)) => tracing::info!(
            tenants = saved.tenants,
            snapshots = saved.snapshots,
            failed = saved.failed,
            "tenant state saved (--state-dir)"
        ),
        Ok(None) => {}
        Err(e) => tracing::warn!(error = %e, "saving the tenants' state did not finish"),
    }
}

/// The tenants, with what the engine adapters and the MCP gateway take from their loading.
struct LoadedTenants {
    tenants: Tenants,
    reloader: Option<Reloader>,
    /// The settings' cache shares, which the engine adapters enforce.
    shares: HashMap<String, Share>,
    mcp: Option<crate::mcp::GatewayOptions>,
}

/// Loads `--policy`, the settings (flags and `--config`), the extra slots and the MCP gateway's
/// policies into the tenants; its own step because every component and file is read and checked
/// here, so that a bad one fails `serve` before the proxy is assembled.
fn load_tenants(
    args: &ServeArgs,
    limits: &Limits,
    components: &ComponentLookup,
    check_serve: ServeTableCheck,
) -> anyhow::Result<LoadedTenants> {
    let slot = args.policy_limits.slot_config()?;
    let engine = PolicyEngine::new(args.policy_limits.engine_options(&slot))?;
    let source = components.resolve(&args.policy)?;
    tracing::info!(policy = %args.policy, source = %source, "policy component");
    let component = Arc::new(source.load(&engine)?);
    let slot = SlotConfig {
        init: pairs(&args.policy_config, "--policy-config")?,
        ..slot
    };
    let flags = FlagSettings {
        keys: tenant_keys(&args.tenants)?,
        operator_token: args.admin_token.clone(),
        tenant_admin_tokens: tenant_admin_tokens(&args.tenant_admins)?,
        shares: args.shares.iter().cloned().collect(),
        defaults: args.quotas.quotas(),
        public_anchors: args.public_anchors.iter().copied().collect(),
    };
    let (settings, reloader) =
        initial_settings(args.config.clone(), flags, check_serve).map_err(|e| anyhow::anyhow!(e))?;
    if settings.keys.is_empty() {
        eprintln!(
            "agentrt serve: no API keys (--tenant, or api-keys in --config): every request is served \
             unauthenticated as tenant `{DEFAULT_TENANT}`, and its cache_salt goes upstream as the client sent it"
        );
    }
    let shares = settings.shares.clone();
    let extra_slots = load_extra_slots(&args.slots, &args.slot_configs, &slot, &engine, components)?;
    let mcp = args.mcp.options(
        |name| Ok(Arc::new(components.resolve(name)?.load(&engine)?)),
        &slot,
        limits.max_body_bytes,
        limits.budget.max_json_depth,
    )?;
    let mut tenants = Tenants::new(PolicyRegistry::new(engine), component, slot, settings)
        .with_tables(args.tables.limits()?)
        .with_queue_jobs(args.tables.policy_queue_jobs)
        .with_extra_slots(extra_slots);
    if let Some(dir) = &args.state_dir {
        let dir = StateDir::open(dir).with_context(|| format!("--state-dir {}", dir.display()))?;
        tenants = tenants.with_state_dir(dir);
    }
    if let Some(options) = &mcp {
        let servers: Vec<&str> = options.servers.iter().map(|s| s.name.as_str()).collect();
        eprintln!("agentrt serve: MCP gateway at /mcp/{{{}}}", servers.join(","));
    }
    Ok(LoadedTenants {
        tenants,
        reloader,
        shares,
        mcp,
    })
}

/// The flags and the loaded tenants as the proxy's configuration; its own step because it is the
/// one place where each remaining flag becomes a field of [`AppConfig`].
fn app_config(
    args: ServeArgs,
    limits: Limits,
    loaded: LoadedTenants,
    components: &ComponentLookup,
) -> anyhow::Result<AppConfig> {
    Ok(AppConfig {
        upstream_api_key: args.upstream_api_key,
        limits,
        engine_tags: !args.no_engine_tags,
        engine_kind: args.engine,
        engine_priorities: args.engine_priorities,
        cache_salt_secret: args.cache_salt_secret,
        client_engine_fields: ClientEngineFields::allowing(args.client_engine_fields.iter().copied()),
        upstream_router: args.upstream_router,
        warmup: WarmupOptions {
            max_concurrent: args.warmup_concurrency,
            per_second: args.warmup_rate,
            ..WarmupOptions::default()
        },
        metrics_token: args.metrics_token,
        hint_rate: args.hint_rate,
        reloader: loaded.reloader,
        admission: args.admission.queue(!args.replicas.replicas.is_empty())?,
        working_set: args.admission.working_set(!args.replicas.replicas.is_empty())?,
        replicas: args.replicas,
        engine: EngineConfig {
            eviction_socket: args.eviction_socket,
            kv_events: args.kv_events,
            kv_events_replay: args.kv_events_replay,
            shares: loaded.shares,
            eviction_socket_options: agentrt_eviction::SocketOptions {
                access: agentrt_eviction::SocketAccess {
                    group: args.eviction_socket_group,
                },
                max_connections: args.eviction_max_connections,
            },
        },
        mcp: loaded.mcp,
        components: Some(Arc::new(components.clone())),
        ..AppConfig::new(loaded.tenants, &args.upstream)
    })
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
        tokio::select! { _ = ctrl_c => {}, _ = term.recv() => {} }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Serve {
        #[command(flatten)]
        args: ServeArgs,
    }

    #[test]
    fn every_flag_of_serve_has_a_name_of_its_own() {
        // clap checks the whole command here (two flags with one id, e.g. from a flattened group).
        use clap::CommandFactory;
        Serve::command().debug_assert();
    }

    #[test]
    fn every_flag_of_serve_is_listed_under_its_capability() {
        // `serve --help` groups flags by capability; a flag added without a heading would land in
        // an unnamed list at the top.
        use clap::CommandFactory;
        let command = Serve::command();
        let loose: Vec<String> = command
            .get_arguments()
            .filter(|a| a.get_help_heading().is_none())
            .map(|a| a.get_id().to_string())
            .collect();
        assert!(loose.is_empty(), "flags without a help heading: {loose:?}");
        let headings: std::collections::BTreeSet<&str> =
            command.get_arguments().filter_map(|a| a.get_help_heading()).collect();
        for expected in [
            START_HERE,
            "Upstream",
            "Replicas",
            "Tenants and admin",
            "Policies",
            "Limits",
            "MCP gateway",
            "Observability",
        ] {
            assert!(headings.contains(expected), "no `{expected}` heading in {headings:?}");
        }
    }

    #[test]
    fn serve_help_starts_with_the_flags_a_first_deployment_needs() {
        use clap::CommandFactory;
        let command = Serve::command();
        let first_heading = command.get_arguments().find_map(|a| a.get_help_heading());
        assert_eq!(first_heading, Some(START_HERE), "the first heading of `serve --help`");
        let first: Vec<&str> = command
            .get_arguments()
            .filter(|a| a.get_help_heading() == Some(START_HERE))
            .filter_map(|a| a.get_long())
            .collect();
        assert_eq!(
            first,
            [
                "upstream",
                "listen",
                "policy",
                "admin-token",
                "tenant",
                "eviction-socket",
                "config"
            ]
        );
    }
}

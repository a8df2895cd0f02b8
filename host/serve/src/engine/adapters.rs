//! The engine adapters `agentrt serve` runs beside the proxy: the vLLM plugin's eviction socket
//! (`--eviction-socket`; several replicas' sockets through [`ReplicaRouting::start_engines`]),
//! vLLM's KV events (`--kv-events`), and — under cache shares (`--share`) — the engine's cache
//! divided among the tenants ([`agentrt_eviction::SharedCache`]), each tenant's policy ranking its
//! own blocks. Without shares one policy ranks the whole engine: the engine tenant's (`default`).

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;

use agentrt_exposition::{Exposition, Family, Kind, Report};
use agentrt_runtime::{PolicyHandle, PolicyRegistry, Share};

use crate::engine::held_first::HeldFirst;
use crate::engine::replicas::{ReplicaArgs, ReplicaEngines, ReplicaRouting};
use crate::engine::working_set::SessionAdmission;
use crate::identity::Identity;
use crate::names::{DEFAULT_TENANT, KV_SLOT};
use crate::tenant::agents::AgentDirectory;
use crate::tenant::handles::Handles;
use crate::tenant::reload::CacheShares;
use crate::tenant::Tenants;

/// The eviction sockets' options, named here for whoever builds an [`EngineConfig`].
pub use agentrt_eviction::{SocketAccess as EvictionSocketAccess, SocketOptions as EvictionSocketOptions};

/// Which engine adapters to run. The default runs none (what the proxy's tests use).
#[derive(Debug, Clone, Default)]
pub struct EngineConfig {
    /// The vLLM plugin's Unix socket (`--eviction-socket`).
    pub eviction_socket: Option<PathBuf>,
    /// vLLM's KV-event publisher (`--kv-events`).
    pub kv_events: Option<String>,
    /// vLLM's KV-event replay endpoint, for filling sequence gaps (`--kv-events-replay`).
    pub kv_events_replay: Option<String>,
    /// Cache shares by tenant (`--share`, or the config file's); empty: one policy ranks all.
    pub shares: HashMap<String, Share>,
    /// Every eviction socket's group and connection cap (`--eviction-socket-group`,
    /// `--eviction-max-connections`), the replicas' included.
    pub eviction_socket_options: agentrt_eviction::SocketOptions,
}

/// The running adapters; dropping them closes the sockets and subscriptions.
pub struct EngineAdapters {
    /// The engine's cache divided among tenants, under shares.
    pub cache: Option<Arc<agentrt_eviction::SharedCache>>,
    /// Where `pin`/`unpin` side effects go, when an eviction service runs.
    pub pins: Option<Arc<agentrt_eviction::PinTable>>,
    _eviction: Option<agentrt_eviction::EvictionService>,
    _replica_engines: Option<ReplicaEngines>,
    _kv_events: Option<agentrt_eviction::KvEventSubscriber>,
}

impl EngineAdapters {
    /// Start what `config` asks for over `tenants` (the engine tenant, `default`, starts here
    /// when any adapter runs: its policy is the engine-wide one), with several replicas' adapters
    /// when `replicas` runs.
    pub async fn start(
        config: &EngineConfig,
        tenants: &Arc<Tenants>,
        replicas: Option<&Arc<ReplicaRouting>>,
        replica_args: &ReplicaArgs,
        working_set: Option<&Arc<SessionAdmission>>,
    ) -> anyhow::Result<Self> {
        let replica_sockets = !replica_args.eviction_sockets.is_empty();
        check_sockets(config, replica_sockets)?;
        let replica_events = replicas.is_some_and(|r| r.replicas().all().iter().any(|r| r.kv_events.is_some()));
        if config.eviction_socket.is_none() && config.kv_events.is_none() && !replica_sockets && !replica_events {
            // Nothing of the engine's reaches a policy: no engine tenant to start.
            return Ok(Self {
                cache: None,
                pins: None,
                _eviction: None,
                _replica_engines: None,
                _kv_events: None,
            });
        }
        // The engine adapter feeds the engine tenant's policy: one vLLM, one eviction order —
        // unless shares divide the cache, and each tenant's policy ranks its own blocks.
        let engine_tenant = tenants
            .get_or_start(DEFAULT_TENANT)
            .map_err(|e| anyhow::anyhow!(e.message))?;
        let options = agentrt_eviction::EvictionOptions {
            agents: engine_tenant.agents.clone(),
            socket: config.eviction_socket_options.clone(),
            ..agentrt_eviction::EvictionOptions::default()
        };
        let (ranker, cache) = engine_ranker(config, tenants, &engine_tenant.policy);
        // Working-set admission: held sessions' blocks are offered first, whoever ranks.
        let ranker: Arc<dyn agentrt_eviction::EngineRanker> = match working_set {
            Some(working_set) => Arc::new(HeldFirst::new(ranker, working_set.clone())),
            None => ranker,
        };
        let pins = (config.eviction_socket.is_some() || replica_sockets).then(|| options.pins.clone());
        let eviction = match &config.eviction_socket {
            Some(path) => Some(bind_eviction(path, &ranker, &options)?),
            None => None,
        };
        // Several replicas: each one's plugin socket and KV events, into one policy view.
        let replica_engines = match replicas {
            Some(replicas) => Some(replicas.start_engines(replica_args, ranker.clone(), &options)?),
            None => None,
        };
        let kv_events = match &config.kv_events {
            Some(endpoint) => Some(subscribe_kv_events(config, endpoint, &engine_tenant.policy).await?),
            None => None,
        };
        Ok(Self {
            cache,
            pins,
            _eviction: eviction,
            _replica_engines: replica_engines,
            _kv_events: kv_events,
        })
    }

    /// The counters of the one engine's eviction socket (`--eviction-socket`), when it runs.
    pub fn eviction_metrics(&self) -> Option<Arc<agentrt_eviction::EvictionMetrics>> {
        self._eviction.as_ref().map(agentrt_eviction::EvictionService::metrics)
    }

    /// Each replica's eviction socket's path, when several replicas' adapters run.
    pub fn replica_sockets(&self) -> Vec<&std::path::Path> {
        self._replica_engines.as_ref().map(|e| e.sockets()).unwrap_or_default()
    }
}

/// Refuses the socket flags that cannot work together; its own step so that a bad combination
/// fails before the engine tenant starts.
fn check_sockets(config: &EngineConfig, replica_sockets: bool) -> anyhow::Result<()> {
    anyhow::ensure!(
        config.shares.is_empty() || config.eviction_socket.is_some() || replica_sockets,
        "cache shares (--share, or share = … in --config) need --eviction-socket (or \
         --replica-eviction-socket): shares act when vLLM's plugin asks which blocks to evict"
    );
    anyhow::ensure!(
        !(config.eviction_socket.is_some() && replica_sockets),
        "--eviction-socket serves one engine; with --replica-eviction-socket give each replica's plugin its own"
    );
    Ok(())
}

/// Who ranks the engine's blocks: the engine tenant's policy, or under shares the cache divided
/// among the tenants (returned too, for the reloads and `/metrics`); its own step because it is
/// the one choice between the two modes.
fn engine_ranker(
    config: &EngineConfig,
    tenants: &Tenants,
    engine_policy: &Arc<PolicyHandle>,
) -> (
    Arc<dyn agentrt_eviction::EngineRanker>,
    Option<Arc<agentrt_eviction::SharedCache>>,
) {
    if config.shares.is_empty() {
        return (engine_policy.clone(), None);
    }
    let owners = EngineTenants {
        handles: tenants.handles(),
        registry: tenants.shared_registry(),
    };
    let cache = Arc::new(agentrt_eviction::SharedCache::new(
        Arc::new(owners),
        DEFAULT_TENANT,
        config.shares.clone(),
    ));
    (cache.clone(), Some(cache))
}

/// The one engine's eviction socket (`--eviction-socket`), listening; its own step because the
/// bind is where a bad path fails, with the path in the error.
fn bind_eviction(
    path: &std::path::Path,
    ranker: &Arc<dyn agentrt_eviction::EngineRanker>,
    options: &agentrt_eviction::EvictionOptions,
) -> anyhow::Result<agentrt_eviction::EvictionService> {
    let service = agentrt_eviction::EvictionService::bind_with(path, ranker.clone(), options.clone())
        .with_context(|| format!("binding the eviction socket {}", path.display()))?;
    tracing::info!(socket = %path.display(), "eviction service listening");
    Ok(service)
}

/// vLLM's KV events (`--kv-events`) into the engine tenant's policy; its own step because, beside
/// the plugin's socket, the subscription must forward nothing (see below).
async fn subscribe_kv_events(
    config: &EngineConfig,
    endpoint: &str,
    engine_policy: &Arc<PolicyHandle>,
) -> anyhow::Result<agentrt_eviction::KvEventSubscriber> {
    let mut events = agentrt_eviction::KvEventsConfig::for_vllm(endpoint, config.kv_events_replay.as_deref(), "kv");
    if config.eviction_socket.is_some() {
        // The plugin already reports every store, removal and clear, with agent tags;
        // forwarding vLLM's events too would count each block twice. Keep the
        // subscription for its counters (gaps, restarts).
        events.forward = agentrt_eviction::Forward {
            stored: false,
            removed: false,
            cleared: false,
        };
    }
    agentrt_eviction::KvEventSubscriber::spawn(events, engine_policy.clone()).await
}

/// The proxy's answer to the eviction service's question under cache shares: which tenant owns a
/// block's agent (the shared handle source), and which policy ranks that tenant's blocks (the
/// registry's KV slots).
struct EngineTenants {
    handles: Handles,
    registry: Arc<PolicyRegistry>,
}

impl agentrt_eviction::TenantDirectory for EngineTenants {
    fn tenant_of(&self, handle: u32) -> Option<Arc<str>> {
        self.handles.owner(handle)
    }

    fn policy_of(&self, tenant: &str) -> Option<Arc<PolicyHandle>> {
        self.registry.get(tenant, KV_SLOT)
    }
}

/// The engine's cache under shares, for `/metrics`.
pub struct EngineCacheReport(pub Arc<agentrt_eviction::SharedCache>);

impl Report for EngineCacheReport {
    /// Each tenant's part of the engine's cache under `--share`: blocks held, its guarantee and
    /// limit, its blocks the engine evicted, and the evictions its requests caused.
    fn report(&self, out: &mut Exposition<'_>) -> fmt::Result {
        let tenants = self.0.tenants();
        let rows: Vec<_> = tenants.iter().map(|row| ([("tenant", &*row.0)], row)).collect();
        out.table(&CACHE_FAMILIES, &rows)
    }
}

/// A tenant, its figures in the engine's cache, and its share.
type CacheRow = (Arc<str>, agentrt_eviction::TenantCache, Share);

const CACHE_FAMILIES: [Family<CacheRow>; 5] = [
    Family {
        name: "agentrt_tenant_cache_blocks",
        kind: Kind::Gauge,
        help: "Blocks the tenant holds in the engine's KV cache.",
        read: |row| row.1.blocks.into(),
    },
    Family {
        name: "agentrt_tenant_cache_guarantee_blocks",
        kind: Kind::Gauge,
        help: "The tenant's guaranteed share of the cache (--share).",
        read: |row| row.2.min_blocks.into(),
    },
    Family {
        name: "agentrt_tenant_cache_limit_blocks",
        kind: Kind::Gauge,
        help: "The tenant's limit (--share; 18446744073709551615 = none).",
        read: |row| row.2.max_blocks.into(),
    },
    Family {
        name: "agentrt_tenant_cache_evictions_total",
        kind: Kind::Counter,
        help: "The tenant's blocks the engine evicted.",
        read: |row| row.1.evicted.into(),
    },
    Family {
        name: "agentrt_tenant_cache_evictions_caused_total",
        kind: Kind::Counter,
        help: "Blocks (any tenant's) the engine evicted to make room for the tenant's requests.",
        read: |row| row.1.caused.into(),
    },
];

/// A reload sets the shares of the cache the tenants' policies rank (the tenant layer knows the
/// cache only as [`CacheShares`]).
impl CacheShares for agentrt_eviction::SharedCache {
    fn set_shares(&self, shares: HashMap<String, Share>) {
        agentrt_eviction::SharedCache::set_shares(self, shares);
    }
}

/// The vLLM plugin may name agents by string (clients that bypass the proxy); resolve them in the
/// tenant's directory so both paths agree on handles.
impl agentrt_eviction::AgentResolver for AgentDirectory {
    fn resolve(&self, name: &str, policy: &dyn agentrt_eviction::EngineRanker) -> u32 {
        let identity = Identity {
            agent_name: name.to_string(),
            anchor_hash: 0,
            anchor_tokens: 0,
            session_key: String::new(),
            session: 0,
            prompt_tokens: 0,
        };
        let (handle, registration) = self.intern(&identity);
        if let Some(event) = registration {
            if let Err(e) = policy.announce(&[event]) {
                tracing::warn!(agent = name, error = %e, "policy refused agent-registered");
            }
        }
        handle
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(socket: bool, share: bool) -> EngineConfig {
        let mut config = EngineConfig {
            eviction_socket: socket.then(|| PathBuf::from("/run/agentrt/evict.sock")),
            ..EngineConfig::default()
        };
        if share {
            config.shares.insert(
                "alpha".to_string(),
                Share {
                    min_blocks: 10,
                    max_blocks: 20,
                },
            );
        }
        config
    }

    #[test]
    fn shares_need_a_socket_and_one_engine_takes_one_socket() {
        let no_socket = check_sockets(&config(false, true), false).unwrap_err().to_string();
        assert!(no_socket.contains("need --eviction-socket"), "{no_socket}");
        let both = check_sockets(&config(true, false), true).unwrap_err().to_string();
        assert!(both.contains("--eviction-socket serves one engine"), "{both}");
        for (socket, share, replica_sockets) in [(true, true, false), (false, true, true), (false, false, false)] {
            assert!(check_sockets(&config(socket, share), replica_sockets).is_ok());
        }
    }
}

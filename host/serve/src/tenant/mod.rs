//! Tenants: who a request belongs to, and that tenant's policy and agents.
//!
//! With `--tenant KEY=NAME` options, a request's `Authorization: Bearer KEY` selects its tenant and
//! an unknown key is refused; without them every request belongs to `default`. Each tenant gets
//! its own policy instance (its own memory, state, limits and metrics) in the registry slot
//! `NAME/kv`, and its own agent directory: tenants cannot see or touch each other's policies,
//! state or requests.
//!
//! **Revocation.** A reload that removes an API key (or moves it to another tenant) cancels
//! every request made with it that is still in flight: one waiting ends with 401, a stream ends
//! with an SSE error event. A tenant that no key reaches any more is stopped: it leaves the
//! admin listing and `/metrics`, and its policies give back their instances (its learned state
//! goes with them). Moving from unauthenticated to keyed serving revokes the unauthenticated
//! requests the same way.

pub mod admit;
pub mod agents;
pub mod cache_salt;
pub mod config_file;
pub mod config_warnings;
pub mod continuation;
pub mod handles;
pub mod hint_rate;
pub mod hint_state;
pub mod metrics;
pub mod quotas;
pub mod reload;
pub mod reload_changes;
pub mod report;
pub mod responses;
pub mod return_times;
pub mod saved_state;
pub mod settings;
pub mod slots;
pub mod verdicts;
pub mod worker;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};

use arc_swap::ArcSwap;
use axum::http::HeaderMap;
use tokio_util::sync::CancellationToken;

use agentrt_runtime::types::Event;
use agentrt_runtime::{PolicyComponent, PolicyError, PolicyHandle, PolicyRegistry, RegistryError, SlotConfig};

use crate::auth::{ApiKeys, Caller, KeyTable};
use crate::front::error::ApiError;
use crate::names::{DEFAULT_TENANT, KV_SLOT};
use crate::table::TableLimits;
use crate::tenant::agents::AgentDirectory;
use crate::tenant::continuation::Continuations;
use crate::tenant::handles::Handles;
use crate::tenant::hint_state::HintState;
use crate::tenant::quotas::{LiveQuotas, WarmupBudget};
use crate::tenant::responses::StoredResponses;
use crate::tenant::saved_state::{Pending, StateDir, TenantState};
use crate::tenant::settings::TenantSettings;
use crate::tenant::slots::ExtraSlot;
use crate::tenant::verdicts::Verdicts;
use crate::tenant::worker::{PolicyWorker, DEFAULT_QUEUE_JOBS};

/// One tenant's share of the proxy, by concern: its policies (the `kv` slot and the others, each
/// behind its worker), what it knows of its clients (agents, prompt shapes, stored responses),
/// what its policies decided (verdicts), and its quotas with what they count.
pub struct Tenant {
    /// The tenant's name, as `--tenant KEY=NAME` (or the config file) gives it; `default` when
    /// serving without keys. Also the namespace of its slots in the registry.
    pub name: String,
    /// Its KV-cache policy, in the `kv` slot. The engine tenant's (`default`) also ranks the
    /// engine's blocks for eviction, as does every tenant's under cache shares.
    pub policy: Arc<PolicyHandle>,
    /// The thread that makes the request path's calls to `policy`: a request never waits on it.
    pub worker: PolicyWorker,
    /// Its other slots, in configured order (the side-effect merge order after `kv`).
    pub extra_slots: Vec<ExtraSlot>,
    /// Its agents (their handles, sessions and anchors); the engine tenant's is shared with the
    /// eviction service, which resolves the agent names vLLM's plugin sends through it.
    pub agents: Arc<AgentDirectory>,
    /// The last prompt shape of each (session, agent): whether a call carries its history forward.
    pub continuations: Continuations,
    /// The Responses API's stored responses it may continue.
    pub responses: StoredResponses,
    /// Sessions its policies denied, and the priorities they set.
    pub verdicts: Verdicts,
    /// Its quotas, as the last reload set them.
    pub quotas: Arc<LiveQuotas>,
    /// Its warm-up quota at work.
    pub warmups: WarmupBudget,
    /// Its lifecycle hints' state: rate, closed sessions, tool waits, counters.
    pub hints: HintState,
    /// Requests of this tenant between authentication and their end.
    in_flight: AtomicU64,
    /// Requests refused for `--tenant-max-in-flight`.
    refused: AtomicU64,
    /// Prompt tokens of the tenant's finished requests, and how many of them the engine had
    /// cached (vLLM's `usage.prompt_tokens_details.cached_tokens`): its hit rate.
    prompt_tokens: AtomicU64,
    cached_tokens: AtomicU64,
    /// One large body parsed at a time ([`crate::front::request_budget::HEAVY_BODY_BYTES`]).
    heavy_parse: tokio::sync::Semaphore,
}

impl Tenant {
    /// What of the tenant `--state-dir` saves and restores.
    fn saved_state(&self) -> TenantState<'_> {
        TenantState {
            name: &self.name,
            slots: self.slots().collect(),
            agents: &self.agents,
        }
    }

    /// Every slot with its policy: `kv`, then the others in configured order.
    pub fn slots(&self) -> impl Iterator<Item = (&str, &PolicyHandle)> {
        std::iter::once((KV_SLOT, &*self.policy)).chain(self.extra_slots.iter().map(|s| (s.name.as_str(), &*s.policy)))
    }

    /// A turn to parse a large body: one at a time per tenant, so a tenant's heavy requests
    /// queue behind each other rather than taking every core from other tenants.
    pub async fn heavy_parse(&self) -> tokio::sync::SemaphorePermit<'_> {
        self.heavy_parse.acquire().await.expect("the semaphore is never closed")
    }

    /// Count a request in, unless the tenant already has its `max_in_flight` quota in flight
    /// (0: no limit). The permit counts it out when dropped, however the request ends.
    pub fn admit(self: &Arc<Self>) -> Result<TenantPermit, ApiError> {
        self.admit_as(CancellationToken::new())
    }

    /// [`Self::admit`] for a request authenticated with a key whose revocation is `revoked`.
    pub fn admit_as(self: &Arc<Self>, revoked: CancellationToken) -> Result<TenantPermit, ApiError> {
        let quotas = self.quotas.get();
        let limit = quotas.max_in_flight;
        let admitted = self
            .in_flight
            .fetch_update(Relaxed, Relaxed, |n| (limit == 0 || n < limit).then_some(n + 1));
        match admitted {
            Ok(_) => Ok(TenantPermit {
                tenant: self.clone(),
                revoked,
            }),
            Err(n) => {
                self.refused.fetch_add(1, Relaxed);
                Err(ApiError::too_many_requests(format!(
                    "tenant {} has {n} requests in flight, its limit ({}); retry when one ends",
                    self.name,
                    quotas.max_in_flight_from.describe(&self.name)
                )))
            }
        }
    }

    /// Whether a warm-up may go upstream now under the tenant's `warmup_tokens_per_s`.
    pub fn may_warm_up(&self) -> bool {
        self.warmups.may_warm_up(self.quotas.get().warmup_tokens_per_s)
    }

    /// Give `events` to every slot's worker (never waits; a full queue drops and counts).
    pub fn observe(&self, events: Vec<Event>) {
        for slot in &self.extra_slots {
            slot.worker.observe(events.clone());
        }
        self.worker.observe(events);
    }

    /// The policy of slot `name` (`kv` or an extra slot).
    pub fn slot(&self, name: &str) -> Option<&Arc<PolicyHandle>> {
        if name == KV_SLOT {
            return Some(&self.policy);
        }
        self.extra_slots.iter().find(|s| s.name == name).map(|s| &s.policy)
    }

    /// Requests of this tenant admitted and not yet ended.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Relaxed)
    }

    /// Requests refused since start because the tenant had its `--tenant-max-in-flight` in flight.
    pub fn refused(&self) -> u64 {
        self.refused.load(Relaxed)
    }

    /// Count a finished request's prompt and its cached part.
    pub fn record_usage(&self, prompt_tokens: u32, cached_tokens: u32) {
        self.prompt_tokens.fetch_add(u64::from(prompt_tokens), Relaxed);
        self.cached_tokens.fetch_add(u64::from(cached_tokens), Relaxed);
    }

    /// Prompt tokens of the tenant's finished requests, as the engine's `usage` reported them.
    pub fn prompt_tokens(&self) -> u64 {
        self.prompt_tokens.load(Relaxed)
    }

    /// How many of [`Self::prompt_tokens`] the engine found in its prefix cache.
    pub fn cached_tokens(&self) -> u64 {
        self.cached_tokens.load(Relaxed)
    }
}

/// One admitted request of a tenant; counted out when dropped.
pub struct TenantPermit {
    tenant: Arc<Tenant>,
    /// Cancelled when the key the request was made with is revoked.
    revoked: CancellationToken,
}

impl TenantPermit {
    /// Completes when the request's key is revoked (a reload): the request must end then.
    pub fn revoked(&self) -> tokio_util::sync::WaitForCancellationFuture<'_> {
        self.revoked.cancelled()
    }

    /// The revocation itself, for a task that outlives a borrow of the permit.
    pub fn revocation(&self) -> CancellationToken {
        self.revoked.clone()
    }
}

impl Drop for TenantPermit {
    fn drop(&mut self) {
        self.tenant.in_flight.fetch_sub(1, Relaxed);
    }
}

/// Every tenant of the proxy: the settings that map keys to tenants (replaced whole by a reload),
/// the tenants started so far, and the policy registry their slots live in. A tenant starts on
/// its first request, with the default policy component.
pub struct Tenants {
    registry: Arc<PolicyRegistry>,
    default_policy: Arc<PolicyComponent>,
    default_config: SlotConfig,
    /// Keys, admin tokens, shares and quotas: replaced whole by a reload.
    settings: ArcSwap<TenantSettings>,
    live: RwLock<HashMap<String, Arc<Tenant>>>,
    /// Held while a tenant starts.
    starting: Mutex<()>,
    /// Caps on each tenant's tables.
    tables: TableLimits,
    /// Agent handles, unique across tenants.
    handles: Handles,
    /// Jobs each tenant's policy worker holds at most.
    queue_jobs: usize,
    /// Slots every tenant runs besides `kv`: name, component, settings.
    extra_slots: Vec<(String, Arc<PolicyComponent>, SlotConfig)>,
    /// The revocations of the API keys in use ([`crate::auth`] checks the keys `settings` give).
    api_keys: ApiKeys,
    /// `--state-dir`: where tenants' state is saved at shutdown, and the saved directories not
    /// yet taken back by their tenants.
    state: Option<(StateDir, Pending)>,
}

impl Tenants {
    /// Tenants under `settings`, whose `kv` slots start from `default_policy` with
    /// `default_config` in `registry`; none starts until it is asked for.
    pub fn new(
        registry: PolicyRegistry,
        default_policy: Arc<PolicyComponent>,
        default_config: SlotConfig,
        settings: TenantSettings,
    ) -> Self {
        Self {
            registry: Arc::new(registry),
            default_policy,
            default_config,
            settings: ArcSwap::from_pointee(settings),
            live: RwLock::new(HashMap::new()),
            starting: Mutex::new(()),
            tables: TableLimits::default(),
            handles: Handles::default(),
            queue_jobs: DEFAULT_QUEUE_JOBS,
            extra_slots: Vec::new(),
            api_keys: ApiKeys::default(),
            state: None,
        }
    }

    /// Keep tenants' state in `dir` across restarts (before any tenant starts): the saved
    /// tenants' handles are reserved now, their state restored when each starts
    /// ([`saved_state`]).
    pub fn with_state_dir(mut self, dir: StateDir) -> Self {
        let pending = dir.load(&self.handles);
        self.state = Some((dir, pending));
        self
    }

    /// Save every started tenant's state to the state directory, if there is one.
    pub fn save_state(&self) -> Option<saved_state::Saved> {
        let (dir, _) = self.state.as_ref()?;
        Some(dir.save(self.list().iter().map(|t| t.saved_state()), &self.handles))
    }

    /// Run these slots besides `kv` in every tenant (before any tenant starts), in this order.
    pub fn with_extra_slots(mut self, slots: Vec<(String, Arc<PolicyComponent>, SlotConfig)>) -> Self {
        self.extra_slots = slots;
        self
    }

    /// The names of the slots every tenant runs: `kv`, then the extra ones.
    pub fn slot_names(&self) -> Vec<&str> {
        std::iter::once(KV_SLOT)
            .chain(self.extra_slots.iter().map(|(n, _, _)| n.as_str()))
            .collect()
    }

    /// Let each tenant's policy worker hold at most `jobs` (before any tenant starts).
    pub fn with_queue_jobs(mut self, jobs: usize) -> Self {
        self.queue_jobs = jobs;
        self
    }

    /// The settings now. Hold it only as long as one request needs it: a reload replaces it.
    pub fn settings(&self) -> Arc<TenantSettings> {
        self.settings.load_full()
    }

    /// Replace the settings (a reload): requests from now on see the new keys and tokens, and
    /// every live tenant's quotas change in place. Requests in flight under a key the new
    /// settings no longer give (to the same tenant) are cancelled, and a tenant that keys
    /// reached before and none reaches now is stopped (`stop`); returns those tenants.
    pub fn replace_settings(&self, settings: TenantSettings) -> Vec<String> {
        // No tenant starts meanwhile with the old quotas.
        let _starting = self.starting.lock().unwrap_or_else(|p| p.into_inner());
        let settings = Arc::new(settings);
        let old = self.settings.swap(settings.clone());
        self.api_keys.revoke_changed(&old, &settings);
        let mut stopped = Vec::new();
        for tenant in self.list() {
            let cut_off = old.reachable(&tenant.name) && !settings.reachable(&tenant.name);
            // The engine-wide policy is `default`'s, reachable by requests or not.
            if cut_off && tenant.name != DEFAULT_TENANT {
                self.stop(&tenant.name);
                stopped.push(tenant.name.clone());
            } else {
                tenant.quotas.set(settings.quotas_of(&tenant.name));
            }
        }
        stopped
    }

    /// Stop tenant `name`: it leaves the table (the admin listing, `/metrics`) and its slots
    /// leave the registry, giving back their instances once the requests still holding the
    /// tenant end; its worker threads exit with it.
    fn stop(&self, name: &str) {
        self.live.write().unwrap_or_else(|p| p.into_inner()).remove(name);
        for (slot, _) in self.registry.slots_of(name) {
            self.registry.remove(name, slot.as_str());
        }
    }

    /// Cap every tenant's tables at `tables` (before any tenant starts).
    pub fn with_tables(mut self, tables: TableLimits) -> Self {
        self.tables = tables;
        self
    }

    /// The policy registry every tenant's slots are installed in.
    pub fn registry(&self) -> &PolicyRegistry {
        &self.registry
    }

    /// The registry, shared: the MCP gateway installs each tenant's `tools` slot in it.
    pub fn shared_registry(&self) -> Arc<PolicyRegistry> {
        self.registry.clone()
    }

    /// The source of agent handles, shared by every tenant (owners of the engine's blocks).
    pub fn handles(&self) -> Handles {
        self.handles.clone()
    }

    /// The name of the tenant a request belongs to, from its headers alone.
    pub fn name_for(&self, headers: &HeaderMap) -> Result<String, ApiError> {
        self.authenticate(headers).map(|caller| caller.tenant)
    }

    /// The tenant a request belongs to, from its headers alone, and the revocation of the key it
    /// carries ([`ApiKeys::caller`] under the keys of the settings now).
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<Caller, ApiError> {
        self.api_keys.caller(headers, || self.settings.load())
    }

    /// The tenant `name` if it has started.
    pub fn get(&self, name: &str) -> Option<Arc<Tenant>> {
        self.live.read().unwrap_or_else(|p| p.into_inner()).get(name).cloned()
    }

    /// The tenant `name`, starting its policy from the default component if it is new.
    pub fn get_or_start(&self, name: &str) -> Result<Arc<Tenant>, ApiError> {
        self.get_or_start_with(name, self.default_policy.clone())
            .map(|(t, _)| t)
            .map_err(|e| {
                // The configured default not starting is the server's fault, not the client's.
                if e.status == axum::http::StatusCode::BAD_REQUEST {
                    ApiError::internal(e.message)
                } else {
                    e
                }
            })
    }

    /// The tenant `name`; if it is new, it starts with `component` (not the default) and the
    /// second value is true. A policy that does not start leaves no tenant behind.
    pub fn get_or_start_with(
        &self,
        name: &str,
        component: Arc<PolicyComponent>,
    ) -> Result<(Arc<Tenant>, bool), ApiError> {
        if let Some(t) = self.get(name) {
            return Ok((t, false));
        }
        // Starting a policy takes milliseconds (more for a Python one): tenants start one at a
        // time, while requests of started tenants read the table without waiting.
        let _starting = self.starting.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = self.get(name) {
            return Ok((t, false));
        }
        let policy = self
            .registry
            .install(name, KV_SLOT, component, self.default_config.clone())
            .map_err(|e| policy_did_not_start(name, &e))?;
        let quotas = self.settings.load().quotas_of(name);
        let live_quotas = Arc::new(LiveQuotas::new(quotas));
        let worker = match PolicyWorker::spawn(name, policy.clone(), self.queue_jobs, live_quotas.clone()) {
            Ok(worker) => worker,
            Err(e) => {
                // No thread, no tenant: its slot is given back.
                self.registry.remove(name, KV_SLOT);
                return Err(ApiError::unavailable(format!(
                    "tenant {name}: no thread for its policy ({e}); the tenant was not started"
                )));
            }
        };
        let extra_slots = match self.start_extra_slots(name, &live_quotas) {
            Ok(slots) => slots,
            Err(e) => {
                self.registry.remove(name, KV_SLOT);
                return Err(e);
            }
        };
        let tenant = Arc::new(Tenant {
            name: name.to_string(),
            policy,
            worker,
            extra_slots,
            agents: Arc::new(AgentDirectory::new(name, self.tables, self.handles.clone())),
            continuations: Continuations::new(&self.tables),
            responses: StoredResponses::new(self.tables.max_sessions),
            verdicts: Verdicts::new(self.tables.max_sessions),
            quotas: live_quotas,
            warmups: WarmupBudget::new(quotas.warmup_tokens_per_s),
            hints: HintState::default(),
            in_flight: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            prompt_tokens: AtomicU64::new(0),
            cached_tokens: AtomicU64::new(0),
            heavy_parse: tokio::sync::Semaphore::new(1),
        });
        if let Some((dir, pending)) = &self.state {
            dir.restore(pending, tenant.saved_state());
        }
        self.live
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string(), tenant.clone());
        Ok((tenant, true))
    }

    /// Start `tenant`'s extra slots; if one fails, none is left installed.
    fn start_extra_slots(&self, tenant: &str, quotas: &Arc<LiveQuotas>) -> Result<Vec<ExtraSlot>, ApiError> {
        let mut started: Vec<ExtraSlot> = Vec::new();
        for (slot, component, config) in &self.extra_slots {
            let installed = self
                .registry
                .install(tenant, slot, component.clone(), config.clone())
                .map_err(|e| policy_did_not_start(tenant, &e));
            let result = installed.and_then(|policy| {
                PolicyWorker::spawn(tenant, policy.clone(), self.queue_jobs, quotas.clone())
                    .map(|worker| ExtraSlot {
                        name: slot.clone(),
                        policy,
                        worker,
                    })
                    .map_err(|e| {
                        self.registry.remove(tenant, slot);
                        ApiError::unavailable(format!("tenant {tenant}: no thread for its {slot} policy ({e})"))
                    })
            });
            match result {
                Ok(extra) => started.push(extra),
                Err(e) => {
                    for s in &started {
                        self.registry.remove(tenant, &s.name);
                    }
                    return Err(e);
                }
            }
        }
        Ok(started)
    }

    /// Tenants started so far.
    pub fn list(&self) -> Vec<Arc<Tenant>> {
        let mut all: Vec<_> = self
            .live
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }
}

/// Requests authenticate against the settings' keys: a reload's new settings are the new table.
impl KeyTable for TenantSettings {
    fn tenant_of(&self, key: &str) -> Option<&str> {
        self.keys.tenant_of(key)
    }

    fn is_keyless(&self) -> bool {
        self.keys.is_keyless()
    }
}

/// Why a tenant's policy did not start, said so that an operator can act: a full instance pool
/// (every pre-allocated instance slot is in use: one per tenant, two during a swap) is 503 and
/// names the pool; a component or configuration that does not start is 400.
fn policy_did_not_start(name: &str, e: &RegistryError) -> ApiError {
    match e {
        RegistryError::Policy(PolicyError::PoolFull { .. }) => ApiError::unavailable(format!(
            "tenant {name}: no policy instance is free (the instance pool is full: every slot runs a tenant's \
             policy); the tenant was not started: {e}"
        )),
        _ => ApiError::bad_request(format!(
            "tenant {name}: the policy did not start, the tenant was not created: {e}"
        )),
    }
}

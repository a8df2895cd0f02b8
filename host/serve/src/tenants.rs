//! Tenants: who a request belongs to, and that tenant's policy and agents.
//!
//! With `--tenant KEY=NAME` options, a request's `Authorization: Bearer KEY` selects its tenant and
//! an unknown key is refused; without them every request belongs to `default`. Each tenant gets
//! its own policy instance (its own memory, state, limits and metrics) in the registry slot
//! `NAME/kv`, and its own agent directory: tenants cannot see or touch each other's policies,
//! state or requests.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use axum::http::HeaderMap;

use agentrt_runtime::{PolicyComponent, PolicyHandle, PolicyRegistry, SlotConfig};

use crate::continuation::Continuations;
use crate::error::ApiError;
use crate::identity::AgentDirectory;

/// The registry slot every tenant's KV-cache policy runs in.
pub const KV_SLOT: &str = "kv";
pub const DEFAULT_TENANT: &str = "default";

/// One tenant's share of the proxy.
pub struct Tenant {
    pub name: String,
    pub policy: Arc<PolicyHandle>,
    pub agents: Arc<AgentDirectory>,
    /// The last prompt shape of each (session, agent): whether a call carries its history forward.
    pub continuations: Continuations,
}

pub struct Tenants {
    registry: PolicyRegistry,
    default_policy: Arc<PolicyComponent>,
    default_config: SlotConfig,
    /// API key → tenant name; empty = single-tenant mode.
    keys: HashMap<String, String>,
    live: RwLock<HashMap<String, Arc<Tenant>>>,
}

impl Tenants {
    pub fn new(
        registry: PolicyRegistry,
        default_policy: Arc<PolicyComponent>,
        default_config: SlotConfig,
        keys: HashMap<String, String>,
    ) -> Self {
        Self {
            registry,
            default_policy,
            default_config,
            keys,
            live: RwLock::new(HashMap::new()),
        }
    }

    pub fn registry(&self) -> &PolicyRegistry {
        &self.registry
    }

    /// The tenant a request belongs to, started on first use.
    pub fn for_request(&self, headers: &HeaderMap) -> Result<Arc<Tenant>, ApiError> {
        let name = if self.keys.is_empty() {
            DEFAULT_TENANT
        } else {
            let key = bearer(headers).ok_or_else(|| ApiError::unauthorized("missing `Authorization: Bearer <key>`"))?;
            self.keys
                .get(key)
                .map(String::as_str)
                .ok_or_else(|| ApiError::unauthorized("unknown API key"))?
        };
        self.get_or_start(name)
    }

    /// The tenant `name`, starting its policy from the default component if it is new.
    pub fn get_or_start(&self, name: &str) -> Result<Arc<Tenant>, ApiError> {
        if let Some(t) = self.live.read().unwrap_or_else(|p| p.into_inner()).get(name) {
            return Ok(t.clone());
        }
        let mut live = self.live.write().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = live.get(name) {
            return Ok(t.clone());
        }
        let policy = self
            .registry
            .install(name, KV_SLOT, self.default_policy.clone(), self.default_config.clone())
            .map_err(|e| ApiError::upstream(format!("tenant {name}: policy did not start: {e}")))?;
        let tenant = Arc::new(Tenant {
            name: name.to_string(),
            policy,
            agents: Arc::new(AgentDirectory::default()),
            continuations: Continuations::default(),
        });
        live.insert(name.to_string(), tenant.clone());
        Ok(tenant)
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

/// The token of an `Authorization: Bearer …` header.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get("authorization")?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
}

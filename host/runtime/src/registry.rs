//! Which policy runs where: (tenant, slot) → [`PolicyHandle`].
//!
//! Tenants are isolated by construction: each slot has its own instance (its own linear memory
//! and state), its own limits and its own metrics, and a caller reaches a slot only by naming its
//! tenant. Hot swap and per-tenant limits act on one entry at a time.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use crate::component::PolicyComponent;
use crate::error::PolicyError;
use crate::handle::{PolicyHandle, SlotConfig, SwapReport};
use crate::metrics::report_slots;
use crate::PolicyEngine;

/// A tenant's name ([`validate_tenant_name`] says which names are tenants').
pub type TenantId = String;

/// The longest tenant name: names become registry slots (`NAME/kv`) and metric labels.
pub const MAX_TENANT_NAME: usize = 64;

/// A tenant name is 1–64 ASCII letters, digits, `-`, `_` or `.`.
pub fn validate_tenant_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("the tenant name is empty".into());
    }
    if name.len() > MAX_TENANT_NAME {
        return Err(format!("the tenant name is longer than {MAX_TENANT_NAME} characters"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(format!(
            "the tenant name {name:?} contains {c:?}; use letters, digits, `-`, `_` or `.`"
        ));
    }
    Ok(())
}
/// A policy slot within a tenant (e.g. `kv-cache`, `admission`).
pub type SlotName = String;

/// One `--slot-config NAME:KEY=VALUE` flag (`serve` and `sim` both take it) as (slot, key,
/// value); the error quotes the flag and says the expected shape.
pub fn parse_slot_config(option: &str) -> Result<(&str, &str, &str), String> {
    let expected = || format!("--slot-config {option:?}: expected NAME:KEY=VALUE");
    let (slot, pair) = option.split_once(':').ok_or_else(expected)?;
    let (key, value) = pair.split_once('=').ok_or_else(expected)?;
    Ok((slot, key, value))
}

/// The policies a host runs.
pub struct PolicyRegistry {
    engine: PolicyEngine,
    slots: RwLock<BTreeMap<(TenantId, SlotName), Arc<PolicyHandle>>>,
}

impl PolicyRegistry {
    /// An empty registry whose slots run on `engine`.
    pub fn new(engine: PolicyEngine) -> Self {
        Self {
            engine,
            slots: RwLock::new(BTreeMap::new()),
        }
    }

    /// The engine every slot runs on; components installed here must be loaded by it.
    pub fn engine(&self) -> &PolicyEngine {
        &self.engine
    }

    /// Start `component` in `tenant/slot`, replacing nothing: fails if the slot is taken.
    pub fn install(
        &self,
        tenant: &str,
        slot: &str,
        component: Arc<PolicyComponent>,
        mut config: SlotConfig,
    ) -> Result<Arc<PolicyHandle>, RegistryError> {
        let key = (tenant.to_string(), slot.to_string());
        if self.slots.read().unwrap_or_else(|p| p.into_inner()).contains_key(&key) {
            return Err(RegistryError::SlotTaken {
                tenant: key.0,
                slot: key.1,
            });
        }
        config.label = format!("{tenant}/{slot}");
        let handle = Arc::new(PolicyHandle::start(&self.engine, component, config)?);
        let mut slots = self.slots.write().unwrap_or_else(|p| p.into_inner());
        if slots.contains_key(&key) {
            return Err(RegistryError::SlotTaken {
                tenant: key.0,
                slot: key.1,
            });
        }
        slots.insert(key, handle.clone());
        Ok(handle)
    }

    /// The handle in `tenant/slot`.
    pub fn get(&self, tenant: &str, slot: &str) -> Option<Arc<PolicyHandle>> {
        self.slots
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(tenant.to_string(), slot.to_string()))
            .cloned()
    }

    /// Hot-swap `tenant/slot` to `component`, carrying state over when `carry_state`.
    pub fn swap(
        &self,
        tenant: &str,
        slot: &str,
        component: Arc<PolicyComponent>,
        carry_state: bool,
    ) -> Result<SwapReport, RegistryError> {
        let handle = self.get(tenant, slot).ok_or_else(|| RegistryError::NoSuchSlot {
            tenant: tenant.to_string(),
            slot: slot.to_string(),
        })?;
        Ok(if carry_state {
            handle.swap(component)?
        } else {
            handle.swap_fresh(component)?
        })
    }

    /// Stop and remove `tenant/slot`.
    pub fn remove(&self, tenant: &str, slot: &str) -> Option<Arc<PolicyHandle>> {
        self.slots
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&(tenant.to_string(), slot.to_string()))
    }

    /// The slots of one tenant.
    pub fn slots_of(&self, tenant: &str) -> Vec<(SlotName, Arc<PolicyHandle>)> {
        self.slots
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|((t, _), _)| t == tenant)
            .map(|((_, s), h)| (s.clone(), h.clone()))
            .collect()
    }
}

/// Every slot's series on `/metrics` ([`crate::metrics::report_slots`]), labelled with its tenant
/// and name (the text's writer escapes them).
impl agentrt_exposition::Report for PolicyRegistry {
    fn report(&self, out: &mut agentrt_exposition::Exposition<'_>) -> std::fmt::Result {
        let slots: Vec<_> = self
            .slots
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|((tenant, slot), handle)| (tenant.clone(), slot.clone(), handle.clone()))
            .collect();
        let rows: Vec<_> = slots
            .iter()
            .map(|(tenant, slot, handle)| ([("tenant", tenant.as_str()), ("slot", slot.as_ref())], handle.metrics()))
            .collect();
        report_slots(out, &rows)
    }
}

/// Why an install or a swap did not happen; each names the slot.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// [`PolicyRegistry::install`] into a slot that already runs a policy.
    #[error("slot {tenant}/{slot} already runs a policy; swap it instead")]
    SlotTaken {
        /// The tenant named.
        tenant: String,
        /// The slot named.
        slot: String,
    },
    /// [`PolicyRegistry::swap`] of a slot nothing is installed in.
    #[error("no policy in slot {tenant}/{slot}")]
    NoSuchSlot {
        /// The tenant named.
        tenant: String,
        /// The slot named.
        slot: String,
    },
    /// The policy could not start in the slot (install) or take over from the old one (swap).
    #[error(transparent)]
    Policy(#[from] PolicyError),
}

#[cfg(test)]
mod tests {
    #[test]
    fn slot_config_flags_split_into_slot_key_and_value() {
        assert_eq!(
            super::parse_slot_config("guard:max-repeats=3"),
            Ok(("guard", "max-repeats", "3"))
        );
        assert_eq!(super::parse_slot_config("guard:url=a=b"), Ok(("guard", "url", "a=b")));
        let err = super::parse_slot_config("guard-max").unwrap_err();
        assert!(err.contains("expected NAME:KEY=VALUE"), "{err}");
        assert!(super::parse_slot_config("guard:novalue").is_err());
    }
}

//! A tenant's policy slots besides `kv` (`--slot NAME=COMPONENT`, `--slot-config NAME:KEY=VALUE`):
//! the same events, an instance, worker and limits of their own, swappable alone. Every tenant
//! runs the same slots, started with it; if one does not start, none is left installed.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::Context;

use agentrt_runtime::{ComponentLookup, PolicyComponent, PolicyEngine, PolicyHandle, SlotConfig};

use crate::names::{validate_tenant_name, KV_SLOT};
use crate::tenant::worker::PolicyWorker;

/// A policy slot of a tenant besides `kv` (`--slot NAME=COMPONENT`): the same events, its own
/// instance, worker and limits, swappable alone.
pub struct ExtraSlot {
    /// The slot's name: the `NAME` of `--slot NAME=COMPONENT`, under which the registry holds it.
    pub name: String,
    /// The slot's running policy.
    pub policy: Arc<PolicyHandle>,
    /// The thread that makes the request path's calls to `policy`, with its own queue.
    pub worker: PolicyWorker,
}

/// The `--slot NAME=COMPONENT` options with their `--slot-config NAME:KEY=VALUE`, loaded, each
/// with `base`'s limits.
pub fn load_extra_slots(
    slots: &[String],
    configs: &[String],
    base: &SlotConfig,
    engine: &PolicyEngine,
    components: &ComponentLookup,
) -> anyhow::Result<Vec<(String, Arc<PolicyComponent>, SlotConfig)>> {
    let mut init: HashMap<String, Vec<(String, String)>> = HashMap::new();
    for option in configs {
        let (slot, key, value) = agentrt_runtime::parse_slot_config(option).map_err(anyhow::Error::msg)?;
        init.entry(slot.to_string())
            .or_default()
            .push((key.to_string(), value.to_string()));
    }
    let mut loaded: Vec<(String, Arc<PolicyComponent>, SlotConfig)> = Vec::new();
    for option in slots {
        let (name, policy) = option
            .split_once('=')
            .with_context(|| format!("--slot {option:?}: expected NAME=COMPONENT"))?;
        validate_tenant_name(name).map_err(|e| anyhow::anyhow!("--slot {option:?}: the slot {e}"))?;
        anyhow::ensure!(
            name != KV_SLOT,
            "--slot {option:?}: `{KV_SLOT}` is the cache policy's slot; set it with --policy"
        );
        anyhow::ensure!(
            loaded.iter().all(|(n, _, _)| n != name),
            "--slot: slot `{name}` is given twice"
        );
        let source = components.resolve(policy)?;
        tracing::info!(slot = name, policy, source = %source, "policy slot component");
        let component = Arc::new(source.load(engine)?);
        let config = SlotConfig {
            init: init.remove(name).unwrap_or_default(),
            ..base.clone()
        };
        loaded.push((name.to_string(), component, config));
    }
    if let Some(unknown) = init.keys().next() {
        anyhow::bail!("--slot-config names slot `{unknown}`, which no --slot gives");
    }
    Ok(loaded)
}

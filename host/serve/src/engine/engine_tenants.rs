//! The proxy's answer to the eviction service's question under cache shares: which tenant owns a
//! block's agent, and which policy ranks that tenant's blocks (see `agentrt_vllm::SharedCache`).

use std::sync::Arc;

use agentrt_runtime::{PolicyHandle, PolicyRegistry};

use crate::names::KV_SLOT;
use crate::tenant::handles::Handles;

/// Agent owners from the shared handle source; policies from the registry's KV slots.
pub struct EngineTenants {
    pub(crate) handles: Handles,
    pub(crate) registry: Arc<PolicyRegistry>,
}

impl agentrt_vllm::TenantDirectory for EngineTenants {
    fn tenant_of(&self, handle: u32) -> Option<Arc<str>> {
        self.handles.owner(handle)
    }

    fn policy_of(&self, tenant: &str) -> Option<Arc<PolicyHandle>> {
        self.registry.get(tenant, KV_SLOT)
    }
}

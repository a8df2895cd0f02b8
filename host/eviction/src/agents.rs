//! Agent names → agent handles for requests that reach vLLM without a handle.
//!
//! The proxy (`agentrt serve`) owns agent identity: it interns names into handles and announces
//! each with an `agent-registered` event. When it puts the handle into `vllm_xargs.agentrt_agent`
//! the plugin sends it straight through and no resolution happens here. A caller that talks to
//! vLLM directly names agents by string; the eviction service then asks an [`AgentResolver`].
//! `agentrt serve` should pass its own registry so both paths agree; [`InternedAgents`] is the
//! stand-alone default.

use std::collections::HashMap;
use std::sync::Mutex;

use agentrt_runtime::types::{AgentRegistered, Event};

use crate::ranker::EngineRanker;

/// Resolves an agent name to a handle, registering it with the policy if it is new.
pub trait AgentResolver: Send + Sync {
    /// The handle for `name`; a new name is announced to `policy` before its handle is returned.
    /// Never 0 (0 is the unknown agent).
    fn resolve(&self, name: &str, policy: &dyn EngineRanker) -> u32;
}

/// Interns names in this process, starting at `first` (kept apart from the proxy's handles), and
/// announces each new one to the policy with an `agent-registered` event (anchor unknown: 0).
pub struct InternedAgents {
    first: u32,
    names: Mutex<HashMap<String, u32>>,
}

impl InternedAgents {
    /// No names yet; the first new name gets handle `first` (1 when `first` is 0: 0 means
    /// "unknown agent"), the next `first + 1`, and so on.
    pub fn new(first: u32) -> Self {
        Self {
            first: first.max(1),
            names: Mutex::new(HashMap::new()),
        }
    }
}

impl Default for InternedAgents {
    /// Handles from 1 << 20: the proxy is expected to hand out small ones.
    fn default() -> Self {
        Self::new(1 << 20)
    }
}

impl AgentResolver for InternedAgents {
    fn resolve(&self, name: &str, policy: &dyn EngineRanker) -> u32 {
        let mut names = self.names.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(handle) = names.get(name) {
            return *handle;
        }
        let handle = self.first + names.len() as u32;
        names.insert(name.to_string(), handle);
        drop(names);
        let announce = Event::AgentRegistered(AgentRegistered {
            agent: handle,
            name: name.to_string(),
            anchor_hash: 0,
            anchor_tokens: 0,
        });
        if let Err(e) = policy.announce(&[announce]) {
            tracing::warn!(agent = name, handle, error = %e, "policy refused agent-registered");
        }
        handle
    }
}

//! # agentrt-runtime — the policy host
//!
//! Loads policy components (WebAssembly, component model) that implement `wit/policy.wit`, runs
//! each in a sandbox with a memory cap, a CPU deadline per call and no capability beyond the host's
//! clock, log and seed, and gives the rest of agentrt a typed API to their four primitives.
//!
//! ```no_run
//! use std::sync::Arc;
//! use agentrt_runtime::{EngineOptions, PolicyEngine, PolicyHandle, SlotConfig};
//!
//! let engine = PolicyEngine::new(EngineOptions::default())?;
//! let lru = Arc::new(engine.load_file("target/components/lru.wasm".as_ref())?);
//! let policy = PolicyHandle::start(&engine, lru, SlotConfig::new("demo/kv"))?;
//! let ranking = policy.rank(&[]); // never fails: falls back to LRU order
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Module map: [`engine`] (wasmtime setup, epoch ticker, artifact cache) → [`component`] (load and
//! validate) → `instance` (one sandboxed Store; internal) → [`handle`] (containment, fallback,
//! checkpoints, hot swap, rollback) → [`registry`] (tenant × slot). [`sandbox`] holds the limits
//! and the host imports; [`breaker`] suspends a slot whose policy keeps failing; [`journal`] keeps
//! what a slot observed since its last checkpoint, for restarts; [`metrics`] the counters;
//! [`component_file`] reads component files under a size limit; [`component_lookup`] finds a
//! component by name (environment, beside the binary, built in, the source tree's build);
//! [`policy_log`] escapes, truncates and rate-limits what policies log.

mod artifact_cache;
mod bindings;
pub mod breaker;
pub mod component;
pub mod component_file;
pub mod component_lookup;
pub mod engine;
pub mod error;
pub mod handle;
mod instance;
pub mod journal;
pub mod metrics;
pub mod policy_log;
pub mod registry;
pub mod results;
pub mod sandbox;
pub mod shares;
pub mod side_effects;

pub use artifact_cache::ArtifactCache;
pub use breaker::BreakerConfig;
pub use component::{LoadStats, PolicyComponent, WorldShape, CONTRACT};
pub use component_file::{read_component_file, DEFAULT_MAX_COMPONENT_BYTES};
pub use component_lookup::{ComponentLookup, ComponentNotFound, ComponentSource, EmbeddedComponent, EmbeddedSet};
pub use engine::{CpuBound, EngineOptions, PolicyEngine, PoolingOptions, SlowCompileNotice};
pub use error::{LoadError, PolicyError, Primitive};
pub use handle::{keep_order, lru_order, PolicyHandle, Ranking, SlotConfig, SwapReport};
pub use registry::{parse_slot_config, PolicyRegistry, RegistryError};
pub use sandbox::{SandboxLimits, DEFAULT_MEMORY_BYTES};
pub use shares::{Share, Usage};
pub use side_effects::merge_side_effects;

/// The WIT types as the host sees them.
pub mod types {
    pub use crate::bindings::agentrt::policy::types::*;
}

/// Packing of block events for [`PolicyHandle::observe_blocks`].
pub mod packed {
    use crate::types::{BlockEvent, BlockOp};
    pub use agentrt_sdk::packed::WORDS_PER_EVENT;

    /// Append one block event's words.
    pub fn encode(event: &BlockEvent, out: &mut Vec<u64>) {
        out.extend_from_slice(&agentrt_sdk::packed::words(
            event.op as u8,
            event.agent,
            event.position,
            event.block_hash,
            event.parent_hash,
        ));
    }

    /// The op and agent of one packed event (its words), for routing events without decoding them
    /// all; `None` for an op this host does not know.
    pub fn op_and_agent(event: &[u64]) -> Option<(BlockOp, u32)> {
        use agentrt_sdk::BlockOp as Guest;
        let block = agentrt_sdk::packed::decode(event).next()?;
        let op = match block.op {
            Guest::Stored => BlockOp::Stored,
            Guest::Touched => BlockOp::Touched,
            Guest::Removed => BlockOp::Removed,
            Guest::AllCleared => BlockOp::AllCleared,
        };
        Some((op, block.agent))
    }
}

//! vLLM's host-memory KV tier (the `OffloadingConnector` with `CPUOffloadingSpec`, vLLM 0.32):
//! [`host_pool`] is its `CPUOffloadingManager` (chunks, reference counts, stores, loads, events)
//! and [`host_policy`] its cache policies (`lru`, `arc`); [`ranked`] is agentrt's: the replay's
//! policy ranks the host tier as it ranks the GPU's. docs/hierarchy.md says rule by rule what is
//! modelled and from which vLLM file.

pub mod connector;
pub mod host_policy;
pub mod host_pool;
pub mod ranked;

pub use connector::{Connector, HostTierConfig, HostTierFigures};

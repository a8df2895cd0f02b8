//! # agentrt-eviction — the engine-neutral eviction service
//!
//! What `agentrt serve` runs beside an inference engine, whichever it is (`--engine vllm` or
//! `--engine sglang`), all feeding the same [`PolicyHandle`](agentrt_runtime::PolicyHandle) the
//! proxy feeds with request events, so one policy instance sees the framework's view and the
//! engine's:
//!
//! - [`EvictionService`]: a Unix-socket server for the engine plugins (vLLM's
//!   `adapters/vllm/agentrt_vllm`, which patches vLLM's block pool; SGLang's
//!   `adapters/sglang/agentrt_sglang`, which patches its radix cache). A plugin tags cached blocks
//!   with their agent, reports touches, and asks — at most once per scheduler step — which cached
//!   blocks to evict first; the service answers with
//!   [`PolicyHandle::rank`](agentrt_runtime::PolicyHandle::rank). vLLM's host-memory-tier
//!   manager (its offloading connector) asks the same way about host-tier candidates: which
//!   copies to drop first, which blocks not to store ([`EngineRanker::rank_host`]). Protocol:
//!   [`wire`]; one policy or cache shares among tenants: [`ranker`]; pinned agents: [`pins`].
//! - [`ReplicaView`]: with several replicas, one per replica between its plugin connection (and
//!   KV events) and the ranker they share, so the policy sees each replica's blocks as its own.
//! - [`KvEventSubscriber`]: subscribes to vLLM's ZMQ KV-event publisher, decodes its msgpack
//!   batches, fills sequence gaps from the replay socket and forwards block events through
//!   `observe-blocks`. It needs no plugin, so it also works against an unmodified vLLM. This
//!   module ([`kv_events`]) is the crate's one vLLM-specific part: the format is vLLM's.
//!
//! The binary `agentrt-eviction-host` runs the same services for one policy without the proxy,
//! whatever the engine (the vLLM and SGLang plugins' tests run it).
//!
//! ```no_run
//! # async fn demo(policy: std::sync::Arc<agentrt_runtime::PolicyHandle>) -> anyhow::Result<()> {
//! use agentrt_eviction::{EvictionService, KvEventSubscriber, KvEventsConfig};
//! let eviction = EvictionService::bind("/tmp/agentrt-evict.sock", policy.clone())?;
//! let events = KvEventSubscriber::spawn(
//!     KvEventsConfig::for_vllm("tcp://127.0.0.1:5557", Some("tcp://127.0.0.1:5558"), "kv"),
//!     policy,
//! )
//! .await?;
//! # Ok(()) }
//! ```
//!
//! ## Modules in detail
//!
//! The engine-neutral eviction service, for `--engine vllm` and `--engine sglang` alike:
//! `kv_events` (vLLM's KV events — the one vLLM-specific module: ZMQ subscriber, msgpack decode,
//! gap replay), `eviction` (Unix-socket rank service for the engine plugins: a connection cap,
//! garbage frames close their connection, a mixed-tier RANK ranked per tier), `socket_file` (the
//! socket's file: 0600 or 0660 with a group, bound privately, never over anything but a stale
//! socket; a missing folder on its way created 0700, or 0750 and the group's), `log_gate` (a log
//! line per cause per interval, counting those held back), `wire` (its protocol, v2: a RANK item's
//! tier, host-tier answers with the stores a policy declines), `pins`, `blocking` (policy calls
//! from async tasks, off the async workers), `ranker` (what ranks the engine's candidates: one
//! policy, or `SharedCache` — each tenant's policy over its own blocks under cache shares, counted
//! per replica; `rank_host` for the host-memory tier, outside the shares), `replica_view` (several
//! replicas: one replica's plugin and KV events into the shared ranker, block hashes folded with
//! the replica, a clear told as that replica's removals, anchors' blocks reported to the router's
//! hints).

#![warn(missing_docs)]

pub mod agents;
mod blocking;
pub mod eviction;
pub mod kv_events;
pub mod log_gate;
pub mod metrics;
pub mod pins;
pub mod ranker;
pub mod replica_view;
pub mod socket_file;
pub mod wire;

pub use agents::{AgentResolver, InternedAgents};
pub use eviction::{EvictionOptions, EvictionService, SocketOptions};
pub use kv_events::{BlockSink, Forward, KvEventSubscriber, KvEventsConfig, SocketMode};
pub use metrics::{EvictionCounts, EvictionMetrics, KvEventCounts, KvEventMetrics};
pub use pins::PinTable;
pub use ranker::{EngineRanker, HostRanking, SharedCache, TenantCache, TenantDirectory};
pub use replica_view::{AnchorEvents, ReplicaView};
pub use socket_file::SocketAccess;

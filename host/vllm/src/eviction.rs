//! The eviction-ranking service: a Unix-socket server that the vLLM plugin asks, once per
//! scheduler step at most, which cached blocks to evict first. It answers with
//! [`PolicyHandle::rank`](agentrt_runtime::PolicyHandle::rank) and forwards the plugin's block
//! tags and touches to the same policy with
//! [`PolicyHandle::observe_blocks`](agentrt_runtime::PolicyHandle::observe_blocks), so one policy
//! instance sees both.
//!
//! The plugin holds the deadline (2 ms by default) and falls back to vLLM's own order when an
//! answer is late, so this side never needs one: a slow policy costs hit rate, never a stalled
//! scheduler. Malformed frames are logged with the connection, kind and reason and skipped; a
//! frame whose length prefix cannot be trusted closes that connection only.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentrt_runtime::packed::{op_and_agent, WORDS_PER_EVENT};
use agentrt_runtime::types::{BlockOp, Item, ItemKind, SideEffect, Tier};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::task::{JoinHandle, JoinSet};
use tracing::Instrument;

use crate::agents::{AgentResolver, InternedAgents};
use crate::metrics::{add, EvictionCounts, EvictionMetrics};
use crate::pins::PinTable;
use crate::ranker::EngineRanker;
use crate::wire::{self, Reply, Request, WireItem};

/// How the service runs.
pub struct EvictionOptions {
    /// Resolves string agent names the plugin defines. `agentrt serve` should pass its registry.
    pub agents: Arc<dyn AgentResolver>,
    /// Pins applied to every ranking (see [`EvictionService::apply`]).
    pub pins: Arc<PinTable>,
}

impl Default for EvictionOptions {
    fn default() -> Self {
        Self {
            agents: Arc::new(InternedAgents::default()),
            pins: Arc::new(PinTable::default()),
        }
    }
}

/// A running eviction-ranking service. Dropping it stops accepting, closes every connection and
/// removes the socket file.
pub struct EvictionService {
    path: PathBuf,
    metrics: Arc<EvictionMetrics>,
    pins: Arc<PinTable>,
    task: JoinHandle<()>,
}

impl EvictionService {
    /// Listen on `path` (a stale socket file there is replaced) and answer with `policy`.
    /// Must be called from within a Tokio runtime.
    pub fn bind(path: impl AsRef<Path>, policy: Arc<dyn EngineRanker>) -> io::Result<Self> {
        Self::bind_with(path, policy, EvictionOptions::default())
    }

    /// As [`EvictionService::bind`]; `policy` is one policy
    /// ([`PolicyHandle`](agentrt_runtime::PolicyHandle)) or several tenants' under cache shares
    /// ([`crate::SharedCache`]).
    pub fn bind_with(
        path: impl AsRef<Path>,
        policy: Arc<dyn EngineRanker>,
        options: EvictionOptions,
    ) -> io::Result<Self> {
        let path = path.as_ref().to_path_buf();
        match std::fs::remove_file(&path) {
            Ok(()) => tracing::debug!(path = %path.display(), "removed a stale socket file"),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let listener = UnixListener::bind(&path)?;
        let metrics = Arc::new(EvictionMetrics::default());
        let span = tracing::info_span!("vllm.eviction", path = %path.display(), policy = %policy.label());
        let shared = Shared {
            policy,
            agents: options.agents,
            pins: options.pins.clone(),
            metrics: metrics.clone(),
        };
        let task = tokio::spawn(accept_loop(listener, shared).instrument(span));
        tracing::info!(path = %path.display(), "eviction service listening");
        Ok(Self {
            path,
            metrics,
            pins: options.pins,
            task,
        })
    }

    /// The pins every ranking honours.
    pub fn pins(&self) -> Arc<PinTable> {
        self.pins.clone()
    }

    /// Carry out a policy side effect that belongs to the engine (`pin`, `unpin`). Returns false
    /// for the others, which are the proxy's to carry out.
    pub fn apply(&self, effect: &SideEffect) -> bool {
        match effect {
            SideEffect::Pin(pin) => self.pins.pin(pin),
            SideEffect::Unpin(pin) => self.pins.unpin(pin),
            _ => return false,
        }
        true
    }

    /// The socket the service listens on (removed when the service is dropped).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The service's counters now.
    pub fn counts(&self) -> EvictionCounts {
        self.metrics.counts()
    }

    /// The live counters, shared: whoever holds them (a `/metrics` page) reads them without
    /// holding the service.
    pub fn metrics(&self) -> Arc<EvictionMetrics> {
        self.metrics.clone()
    }
}

impl Drop for EvictionService {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// What every connection shares.
#[derive(Clone)]
struct Shared {
    policy: Arc<dyn EngineRanker>,
    agents: Arc<dyn AgentResolver>,
    pins: Arc<PinTable>,
    metrics: Arc<EvictionMetrics>,
}

async fn accept_loop(listener: UnixListener, shared: Shared) {
    // Connection tasks live in the set, so aborting this task (dropping the set) ends them all.
    let mut connections = JoinSet::new();
    let mut next_id: u64 = 0;
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    next_id += 1;
                    add(&shared.metrics.connections, 1);
                    let conn = Connection {
                        id: next_id,
                        shared: shared.clone(),
                        defined: HashMap::new(),
                        warned: Default::default(),
                    };
                    let span = tracing::info_span!("conn", id = next_id);
                    let metrics = shared.metrics.clone();
                    add(&metrics.open_connections, 1);
                    connections.spawn(
                        async move {
                            conn.run(stream).await;
                            metrics.open_connections.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        .instrument(span),
                    );
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// One plugin connection (one vLLM engine core process).
struct Connection {
    id: u64,
    shared: Shared,
    /// Wire agent ids defined by AGENT frames → handles.
    defined: HashMap<u32, u32>,
    /// Undefined wire ids already warned about (once each, not per event).
    warned: std::collections::HashSet<u32>,
}

impl Connection {
    async fn run(mut self, stream: UnixStream) {
        tracing::info!("plugin connected");
        let (reader, mut writer) = stream.into_split();
        let mut reader = BufReader::with_capacity(64 << 10, reader);
        let mut body = Vec::new();
        let mut out = Vec::new();
        loop {
            let len = match reader.read_u32_le().await {
                Ok(len) => len as usize,
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => break,
                Err(e) => {
                    tracing::warn!(error = %e, "read failed; closing");
                    break;
                }
            };
            if len == 0 || len > wire::MAX_FRAME {
                add(&self.shared.metrics.malformed, 1);
                tracing::error!(
                    len,
                    max = wire::MAX_FRAME,
                    "frame length out of range; framing lost, closing this connection"
                );
                break;
            }
            body.resize(len, 0);
            if let Err(e) = reader.read_exact(&mut body).await {
                tracing::warn!(error = %e, len, "connection ended inside a frame");
                break;
            }
            add(&self.shared.metrics.frames, 1);
            out.clear();
            // Frames call the policy (rank, observe-blocks, agent registration).
            crate::blocking::policy_call(|| self.handle(body[0], &body[1..], &mut out));
            if !out.is_empty() {
                if let Err(e) = writer.write_all(&out).await {
                    tracing::warn!(error = %e, "write failed; closing");
                    break;
                }
            }
        }
        tracing::info!(conn = self.id, "plugin disconnected");
    }

    /// Act on one frame; replies go to `out`.
    fn handle(&mut self, kind: u8, body: &[u8], out: &mut Vec<u8>) {
        let request = match wire::decode_request(kind, body) {
            Ok(r) => r,
            Err(e) => {
                add(&self.shared.metrics.malformed, 1);
                tracing::warn!(error = %e, bytes = body.len(), "malformed frame skipped");
                return;
            }
        };
        match request {
            Request::Hello { protocol, vllm_version } => {
                // The highest version both speak: a protocol-1 plugin (GPU only) gets 1.
                let agreed = protocol.min(wire::PROTOCOL_VERSION);
                if agreed < wire::MIN_PROTOCOL_VERSION {
                    tracing::warn!(
                        plugin = protocol,
                        host = wire::PROTOCOL_VERSION,
                        "plugin speaks a protocol version this host does not; it will refuse to use us"
                    );
                }
                tracing::info!(vllm = %vllm_version, protocol, agreed, "plugin hello");
                wire::encode_reply(&Reply::HelloOk { protocol: agreed }, out);
            }
            Request::Agent { wire_agent, name } => {
                let handle = self.shared.agents.resolve(&name, self.shared.policy.as_ref());
                add(&self.shared.metrics.agents_defined, 1);
                tracing::debug!(agent = %name, wire_agent, handle, "agent defined");
                self.defined.insert(wire_agent, handle);
            }
            Request::Blocks(mut words) => {
                let mut evictors = Vec::new();
                for event in words.chunks_exact_mut(WORDS_PER_EVENT) {
                    let handle = self.handle_of((event[0] >> 32) as u32);
                    event[0] = (event[0] & 0xffff_ffff) | (u64::from(handle) << 32);
                    // A removal's third word names the request that evicted it (the wire
                    // protocol's one departure from `observe-blocks`); policies get 0 there.
                    if matches!(op_and_agent(event), Some((BlockOp::Removed, _))) {
                        evictors.push(self.handle_of(event[2] as u32));
                        event[2] = 0;
                    }
                }
                add(
                    &self.shared.metrics.block_events,
                    (words.len() / WORDS_PER_EVENT) as u64,
                );
                if let Err(e) = self.shared.policy.observe_blocks(&words) {
                    tracing::warn!(error = %e, events = words.len() / WORDS_PER_EVENT, "policy observe-blocks failed");
                }
                if !evictors.is_empty() {
                    self.shared.policy.count_evictors(&evictors);
                }
            }
            Request::Rank {
                request_id,
                want,
                missed,
                items,
            } => {
                add(&self.shared.metrics.rank_requests, 1);
                add(&self.shared.metrics.rank_items, items.len() as u64);
                if missed > 0 {
                    add(&self.shared.metrics.plugin_missed, u64::from(missed));
                    tracing::debug!(missed, "plugin reports missed deadlines");
                }
                let reply = self.rank(request_id, want, &items);
                wire::encode_reply(&reply, out);
            }
        }
    }

    fn handle_of(&mut self, wire_agent: u32) -> u32 {
        if wire_agent & wire::DEFINED_AGENT_BIT == 0 {
            return wire_agent;
        }
        match self.defined.get(&wire_agent) {
            Some(handle) => *handle,
            None => {
                if self.warned.insert(wire_agent) {
                    add(&self.shared.metrics.malformed, 1);
                    tracing::warn!(wire_agent, "agent id used before its AGENT frame; treated as unknown");
                }
                0
            }
        }
    }

    fn rank(&mut self, request_id: u32, want: u32, items: &[WireItem]) -> Reply {
        let items: Vec<Item> = items
            .iter()
            .map(|w| Item {
                kind: ItemKind::KvBlock,
                key: w.block_hash,
                agent: self.handle_of(w.wire_agent),
                session: w.session,
                last_access: w.last_access,
                tokens: w.tokens,
                position: w.position,
                tier: w.tier,
            })
            .collect();
        if items.iter().any(|i| i.tier == Tier::Host) {
            return self.rank_host(request_id, want, &items);
        }
        let ranking = self.shared.policy.rank(&items);
        if let Some(e) = &ranking.fallback {
            add(&self.shared.metrics.policy_fallbacks, 1);
            // A suspended policy was reported once when its circuit opened; not once per step.
            if !e.is_circuit_open() {
                tracing::warn!(error = %e, items = items.len(), "policy failed; answering in LRU order");
            }
        }
        let mut order = ranking.order;
        self.shared.pins.apply(&items, &mut order);
        // `order` runs keep-most → evict-first; the plugin wants the evict-first end.
        let evict_first = order.iter().rev().take(want as usize).map(|&i| i as u32).collect();
        Reply::Ranked {
            request_id,
            fallback: ranking.fallback.is_some(),
            evict_first,
            declined: None,
        }
    }

    /// Host-memory-tier candidates: the host pool's eviction order (`want` of them) and the
    /// stores the policy declines. Pins are not applied: they protect GPU residency, and a pinned
    /// agent's blocks stay on the GPU whatever the host pool keeps.
    fn rank_host(&mut self, request_id: u32, want: u32, items: &[Item]) -> Reply {
        add(&self.shared.metrics.host_tier_ranks, 1);
        let ranked = self.shared.policy.rank_host(items);
        if let Some(e) = &ranked.ranking.fallback {
            add(&self.shared.metrics.policy_fallbacks, 1);
            if !e.is_circuit_open() {
                tracing::warn!(error = %e, items = items.len(), "policy failed on the host tier; answering in LRU order, storing everything");
            }
        }
        // Declines are acted on in admission asks (`want` 0); an eviction's RANK carries them too
        // but only its order is used, so only the former count.
        if want == 0 {
            add(&self.shared.metrics.host_tier_declined, ranked.declined.len() as u64);
        }
        let evict_first = ranked
            .ranking
            .order
            .iter()
            .rev()
            .take(want as usize)
            .map(|&i| i as u32)
            .collect();
        Reply::Ranked {
            request_id,
            fallback: ranked.ranking.fallback.is_some(),
            evict_first,
            declined: Some(ranked.declined.iter().map(|&i| i as u32).collect()),
        }
    }
}

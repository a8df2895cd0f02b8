//! The eviction-ranking service: a Unix-socket server that the vLLM plugin asks, once per
//! scheduler step at most, which cached blocks to evict first. It answers with
//! [`PolicyHandle::rank`](agentrt_runtime::PolicyHandle::rank) and forwards the plugin's block
//! tags and touches to the same policy with
//! [`PolicyHandle::observe_blocks`](agentrt_runtime::PolicyHandle::observe_blocks), so one policy
//! instance sees both.
//!
//! The plugin holds the deadline (2 ms by default) and falls back to vLLM's own order when an
//! answer is late, so this side never needs one: a slow policy costs hit rate, never a stalled
//! scheduler.
//!
//! The socket is a private channel ([`crate::socket_file`]: mode 0600, or 0660 with a group the
//! operator names; never bound over a file that is not a stale socket). A plugin opens a handful
//! of connections (one per engine core process); past [`EvictionOptions::max_connections`] a
//! connection is closed as soon as it is accepted, so a flood of peers cannot take the proxy's
//! descriptors. A frame that cannot be decoded (an unknown kind, a length out of range, a body
//! that is not what its kind says) closes its connection: a plugin never sends one, and what
//! follows it cannot be trusted. What peers can make the host log goes through one
//! [`LogGate`] per cause: a line per 10 s at most, counting those held back.

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
use crate::log_gate::LogGate;
use crate::metrics::{add, EvictionCounts, EvictionMetrics};
use crate::pins::PinTable;
use crate::ranker::EngineRanker;
use crate::socket_file::{self, SocketAccess};
use crate::wire::{self, Reply, Request, WireItem};

/// Connections the service holds open at once by default (`--eviction-max-connections`): an
/// engine opens one per engine core process (one per data-parallel rank), a handful.
pub const DEFAULT_MAX_CONNECTIONS: usize = 64;

/// How the service runs. A clone shares the resolver and the pins.
#[derive(Clone)]
pub struct EvictionOptions {
    /// Resolves string agent names the plugin defines. `agentrt serve` should pass its registry.
    pub agents: Arc<dyn AgentResolver>,
    /// Pins applied to every ranking (see [`EvictionService::apply`]).
    pub pins: Arc<PinTable>,
    /// Who may connect, and how many at once.
    pub socket: SocketOptions,
}

impl Default for EvictionOptions {
    fn default() -> Self {
        Self {
            agents: Arc::new(InternedAgents::default()),
            pins: Arc::new(PinTable::default()),
            socket: SocketOptions::default(),
        }
    }
}

/// The socket's own limits: who may connect, how many at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketOptions {
    /// Who may connect besides agentrt's user (the socket file's mode and group).
    pub access: SocketAccess,
    /// Connections held open at once; more are closed as soon as they are accepted
    /// (`--eviction-max-connections`; 0 counts as 1).
    pub max_connections: usize,
}

impl Default for SocketOptions {
    fn default() -> Self {
        Self {
            access: SocketAccess::default(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
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
    /// Listen on `path` (a stale socket file there is replaced; anything else there is refused:
    /// [`crate::socket_file`]) and answer with `policy`. Must be called from within a Tokio
    /// runtime.
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
        let listener = socket_file::bind_private(&path, &options.socket.access)?;
        listener.set_nonblocking(true)?;
        let listener = UnixListener::from_std(listener)?;
        let metrics = Arc::new(EvictionMetrics::default());
        let span = tracing::info_span!("eviction", path = %path.display(), policy = %policy.label());
        let shared = Shared {
            policy,
            agents: options.agents,
            pins: options.pins.clone(),
            metrics: metrics.clone(),
            logs: Arc::new(PeerLogs::default()),
        };
        let task = tokio::spawn(accept_loop(listener, shared, options.socket.max_connections.max(1)).instrument(span));
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
    logs: Arc<PeerLogs>,
}

/// The log lines a peer can cause, one gate per cause, shared by every connection: a peer that
/// reconnects after each garbage frame meets the same gates.
#[derive(Default)]
struct PeerLogs {
    over_cap: LogGate,
    accept_failed: LogGate,
    malformed: LogGate,
    broken: LogGate,
    undefined_agent: LogGate,
    hello: LogGate,
    disconnected: LogGate,
}

async fn accept_loop(listener: UnixListener, shared: Shared, max_connections: usize) {
    // Connection tasks live in the set, so aborting this task (dropping the set) ends them all.
    let mut connections = JoinSet::new();
    let mut next_id: u64 = 0;
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    while connections.try_join_next().is_some() {}
                    if connections.len() >= max_connections {
                        refuse_over_cap(stream, &shared, max_connections);
                        continue;
                    }
                    next_id += 1;
                    spawn_connection(&mut connections, stream, &shared, next_id);
                }
                Err(e) => {
                    // Out of descriptors, most likely: a line per 10 s, not one per retry.
                    if let Some(more_since_last) = shared.logs.accept_failed.admit() {
                        tracing::warn!(error = %e, more_since_last, "eviction socket: accept failed; retrying");
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// A connection past the cap: closed at once (its descriptor freed), counted, logged rarely.
fn refuse_over_cap(stream: UnixStream, shared: &Shared, max_connections: usize) {
    drop(stream);
    add(&shared.metrics.refused_connections, 1);
    if let Some(more_since_last) = shared.logs.over_cap.admit() {
        tracing::warn!(
            max_connections,
            more_since_last,
            "eviction socket: a connection past the cap was closed at once (an engine opens a \
             handful; raise --eviction-max-connections if yours needs more)"
        );
    }
}

fn spawn_connection(connections: &mut JoinSet<()>, stream: UnixStream, shared: &Shared, id: u64) {
    add(&shared.metrics.connections, 1);
    add(&shared.metrics.open_connections, 1);
    let conn = Connection {
        id,
        shared: shared.clone(),
        defined: HashMap::new(),
    };
    let span = tracing::info_span!("conn", id);
    let metrics = shared.metrics.clone();
    connections.spawn(
        async move {
            conn.run(stream).await;
            metrics
                .open_connections
                .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        }
        .instrument(span),
    );
}

/// One plugin connection (one vLLM engine core process).
struct Connection {
    id: u64,
    shared: Shared,
    /// Wire agent ids defined by AGENT frames → handles.
    defined: HashMap<u32, u32>,
}

/// Why a connection ends.
enum Closed {
    /// The peer closed it, or a read or write failed.
    Ended,
    /// The peer sent what no plugin sends; the rest of its stream cannot be trusted.
    Garbage,
}

impl Connection {
    async fn run(mut self, stream: UnixStream) {
        tracing::debug!("plugin connected");
        let (reader, mut writer) = stream.into_split();
        let mut reader = BufReader::with_capacity(64 << 10, reader);
        let closed = self.serve_frames(&mut reader, &mut writer).await;
        if matches!(closed, Closed::Garbage) {
            add(&self.shared.metrics.malformed, 1);
        }
        if let Some(more_since_last) = self.shared.logs.disconnected.admit() {
            tracing::info!(conn = self.id, more_since_last, "plugin disconnected");
        }
    }

    async fn serve_frames(
        &mut self,
        reader: &mut BufReader<tokio::net::unix::OwnedReadHalf>,
        writer: &mut tokio::net::unix::OwnedWriteHalf,
    ) -> Closed {
        let mut body = Vec::new();
        let mut out = Vec::new();
        loop {
            let len = match reader.read_u32_le().await {
                Ok(len) => len as usize,
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Closed::Ended,
                Err(e) => return self.broken("read failed", &e),
            };
            if len == 0 || len > wire::MAX_FRAME {
                if let Some(more_since_last) = self.shared.logs.malformed.admit() {
                    tracing::warn!(
                        len,
                        max = wire::MAX_FRAME,
                        more_since_last,
                        "eviction socket: frame length out of range; closing this connection"
                    );
                }
                return Closed::Garbage;
            }
            body.resize(len, 0);
            if let Err(e) = reader.read_exact(&mut body).await {
                return self.broken("connection ended inside a frame", &e);
            }
            add(&self.shared.metrics.frames, 1);
            out.clear();
            // Frames call the policy (rank, observe-blocks, agent registration).
            let decoded = crate::blocking::policy_call(|| self.handle(body[0], &body[1..], &mut out));
            if decoded.is_err() {
                return Closed::Garbage;
            }
            if !out.is_empty() {
                if let Err(e) = writer.write_all(&out).await {
                    return self.broken("write failed", &e);
                }
            }
        }
    }

    fn broken(&self, what: &str, error: &io::Error) -> Closed {
        if let Some(more_since_last) = self.shared.logs.broken.admit() {
            tracing::warn!(error = %error, more_since_last, "eviction socket: {what}; closing");
        }
        Closed::Ended
    }

    /// Act on one frame; replies go to `out`. `Err` when it cannot be decoded (logged here):
    /// the connection is to be closed.
    fn handle(&mut self, kind: u8, body: &[u8], out: &mut Vec<u8>) -> Result<(), ()> {
        let request = match wire::decode_request(kind, body) {
            Ok(r) => r,
            Err(e) => {
                if let Some(more_since_last) = self.shared.logs.malformed.admit() {
                    tracing::warn!(
                        error = %e,
                        bytes = body.len(),
                        more_since_last,
                        "eviction socket: malformed frame; closing this connection"
                    );
                }
                return Err(());
            }
        };
        match request {
            Request::Hello {
                protocol,
                engine_version,
            } => self.hello(protocol, &engine_version, out),
            Request::Agent { wire_agent, name } => {
                let handle = self.shared.agents.resolve(&name, self.shared.policy.as_ref());
                add(&self.shared.metrics.agents_defined, 1);
                tracing::debug!(agent = %name, wire_agent, handle, "agent defined");
                self.defined.insert(wire_agent, handle);
            }
            Request::Blocks(words) => self.blocks(words),
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
        Ok(())
    }

    /// The plugin's hello: agree on the highest protocol version both speak (a protocol-1 plugin,
    /// GPU only, gets 1), and say so.
    fn hello(&mut self, protocol: u16, engine_version: &str, out: &mut Vec<u8>) {
        let agreed = protocol.min(wire::PROTOCOL_VERSION);
        if agreed < wire::MIN_PROTOCOL_VERSION {
            tracing::warn!(
                plugin = protocol,
                host = wire::PROTOCOL_VERSION,
                "plugin speaks a protocol version this host does not; it will refuse to use us"
            );
        }
        if let Some(more_since_last) = self.shared.logs.hello.admit() {
            tracing::info!(engine = %engine_version, protocol, agreed, more_since_last, "plugin hello");
        }
        wire::encode_reply(&Reply::HelloOk { protocol: agreed }, out);
    }

    /// Block events: the plugin's agent ids made policy handles, the evicting requests counted
    /// apart (the policy hears 0 there), then the events to the policy.
    fn blocks(&mut self, mut words: Vec<u64>) {
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

    fn handle_of(&mut self, wire_agent: u32) -> u32 {
        if wire_agent & wire::DEFINED_AGENT_BIT == 0 {
            return wire_agent;
        }
        match self.defined.get(&wire_agent) {
            Some(handle) => *handle,
            None => {
                add(&self.shared.metrics.malformed, 1);
                if let Some(more_since_last) = self.shared.logs.undefined_agent.admit() {
                    tracing::warn!(
                        wire_agent,
                        more_since_last,
                        "agent id used before its AGENT frame; treated as unknown"
                    );
                }
                0
            }
        }
    }

    /// A RANK's answer. Each tier is ranked by its own rule — the GPU's with pins kept, the host
    /// tier's with the stores the policy declines — and a batch that mixes them (no plugin this
    /// repository ships sends one: each asks about one tier at a time) is answered host-tier
    /// items first, then GPU items, each part in its own evict-first order: dropping a host-memory
    /// copy loses less than evicting a block the GPU serves from, and pinned GPU blocks stay at
    /// the very end. A batch with any host-tier item carries the declined list (wire flag bit 1).
    fn rank(&mut self, request_id: u32, want: u32, wire_items: &[WireItem]) -> Reply {
        let items: Vec<Item> = wire_items.iter().map(|w| self.item_of(w)).collect();
        let (gpu, host): (Vec<usize>, Vec<usize>) = (0..items.len()).partition(|&i| items[i].tier == Tier::Gpu);
        let gpu_answer = self.rank_gpu(&items, &gpu);
        if host.is_empty() {
            return Reply::Ranked {
                request_id,
                fallback: gpu_answer.fallback,
                evict_first: first(gpu_answer.evict_first, want),
                declined: None,
            };
        }
        let host_answer = self.rank_host(want, &items, &host);
        let evict_first = host_answer.evict_first.into_iter().chain(gpu_answer.evict_first);
        Reply::Ranked {
            request_id,
            fallback: host_answer.fallback || gpu_answer.fallback,
            evict_first: first(evict_first, want),
            declined: Some(host_answer.declined.iter().map(|&i| i as u32).collect()),
        }
    }

    fn item_of(&mut self, w: &WireItem) -> Item {
        Item {
            kind: ItemKind::KvBlock,
            key: w.block_hash,
            agent: self.handle_of(w.wire_agent),
            session: w.session,
            last_access: w.last_access,
            tokens: w.tokens,
            position: w.position,
            tier: w.tier,
        }
    }

    /// GPU candidates (`items` at `indices`): the policy's order with pinned items moved to the
    /// keep end.
    fn rank_gpu(&mut self, items: &[Item], indices: &[usize]) -> TierAnswer {
        if indices.is_empty() {
            return TierAnswer::default();
        }
        let tier_items = tier_items(items, indices);
        let tier_items = &tier_items[..];
        let ranking = self.shared.policy.rank(tier_items);
        if let Some(e) = &ranking.fallback {
            add(&self.shared.metrics.policy_fallbacks, 1);
            // A suspended policy was reported once when its circuit opened; not once per step.
            if !e.is_circuit_open() {
                tracing::warn!(error = %e, items = tier_items.len(), "policy failed; answering in LRU order");
            }
        }
        let mut order = ranking.order;
        self.shared.pins.apply(tier_items, &mut order);
        TierAnswer {
            // `order` runs keep-most → evict-first; the plugin wants the evict-first end.
            evict_first: order.iter().rev().map(|&i| indices[i]).collect(),
            declined: Vec::new(),
            fallback: ranking.fallback.is_some(),
        }
    }

    /// Host-memory-tier candidates (`items` at `indices`): the host pool's eviction order and the
    /// stores the policy declines. Pins are not applied: they protect GPU residency, and a pinned
    /// agent's blocks stay on the GPU whatever the host pool keeps.
    fn rank_host(&mut self, want: u32, items: &[Item], indices: &[usize]) -> TierAnswer {
        add(&self.shared.metrics.host_tier_ranks, 1);
        let tier_items = tier_items(items, indices);
        let tier_items = &tier_items[..];
        let ranked = self.shared.policy.rank_host(tier_items);
        if let Some(e) = &ranked.ranking.fallback {
            add(&self.shared.metrics.policy_fallbacks, 1);
            if !e.is_circuit_open() {
                tracing::warn!(error = %e, items = tier_items.len(), "policy failed on the host tier; answering in LRU order, storing everything");
            }
        }
        // Declines are acted on in admission asks (`want` 0); an eviction's RANK carries them too
        // but only its order is used, so only the former count.
        if want == 0 {
            add(&self.shared.metrics.host_tier_declined, ranked.declined.len() as u64);
        }
        TierAnswer {
            evict_first: ranked.ranking.order.iter().rev().map(|&i| indices[i]).collect(),
            declined: ranked.declined.iter().map(|&i| indices[i]).collect(),
            fallback: ranked.ranking.fallback.is_some(),
        }
    }
}

/// One tier's part of a RANK's answer, in the batch's indices.
#[derive(Default)]
struct TierAnswer {
    /// Every item of the tier, evict-first first.
    evict_first: Vec<usize>,
    /// Host tier: the items the policy declines to store.
    declined: Vec<usize>,
    /// The policy failed and this part is in LRU order.
    fallback: bool,
}

/// The items of one tier (`items` at `indices`): the batch itself when it is all one tier
/// (`indices` is then 0..n), so a single-tier batch is not copied.
fn tier_items<'a>(items: &'a [Item], indices: &[usize]) -> std::borrow::Cow<'a, [Item]> {
    match indices.len() == items.len() {
        true => std::borrow::Cow::Borrowed(items),
        false => std::borrow::Cow::Owned(indices.iter().map(|&i| items[i]).collect()),
    }
}

/// The first `want` indices, as the wire sends them.
fn first(evict_first: impl IntoIterator<Item = usize>, want: u32) -> Vec<u32> {
    evict_first.into_iter().take(want as usize).map(|i| i as u32).collect()
}

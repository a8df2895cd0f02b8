//! The KV-cache event subscriber: a ZMQ SUB socket on vLLM's publisher, sequence tracking with
//! replay over vLLM's ROUTER replay socket, and delivery of block events to a [`BlockSink`].
//!
//! vLLM sends three frames per batch: topic, an 8-byte big-endian sequence number (0 at engine
//! start) and the msgpack payload. Sequence numbers let us see what a PUB/SUB link silently drops
//! (a slow joiner, a full high-water mark): on a jump we ask the replay socket for the missing
//! batches — request `[b"", start_seq]` from a DEALER, answered with `[b"", topic, seq, payload]`
//! per buffered batch and `[b"", b"", -1, b""]` at the end — and apply them in order before the
//! batch that revealed the gap. A sequence that goes backwards means the engine restarted (the
//! exact last message seen again is a duplicate, not a restart).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::Instrument;
use zeromq::{DealerSocket, Socket, SocketRecv, SocketSend, SubSocket, ZmqMessage};

use super::decode::decode_batch;
use super::sink::{pack_event, BlockSink, Forward};
use crate::metrics::{add, KvEventCounts, KvEventMetrics};

/// Whether the subscriber binds its endpoint or connects to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketMode {
    /// Bind the endpoint: vLLM's publisher connects to it.
    Bind,
    /// Connect to the endpoint: vLLM's publisher bound it.
    Connect,
}

/// How to reach vLLM's publisher.
#[derive(Debug, Clone)]
pub struct KvEventsConfig {
    /// The subscriber's endpoint (see [`KvEventsConfig::for_vllm`] to derive it from vLLM's).
    pub endpoint: String,
    /// Whether to bind [`Self::endpoint`] or connect to it: the opposite of what vLLM does.
    pub mode: SocketMode,
    /// vLLM's replay endpoint (`replay_endpoint` in `--kv-events-config`), always connected to;
    /// `None` disables gap filling (gaps are then counted as lost).
    pub replay_endpoint: Option<String>,
    /// vLLM's `topic` ("" = all).
    pub topic: String,
    /// How long one replay may take before the gap is given up as lost.
    pub replay_timeout: Duration,
    /// Which event kinds reach the sink.
    pub forward: Forward,
}

impl KvEventsConfig {
    /// The subscriber's side of vLLM's `--kv-events-config` endpoint. vLLM's publisher binds
    /// wildcard (`*`, `::`) and ipc/inproc endpoints and *connects* to any other, so: for
    /// `tcp://127.0.0.1:5557` we bind that address; for `tcp://*:5557` we connect to
    /// `tcp://127.0.0.1:5557`; for `ipc://…` we connect to it.
    pub fn for_vllm(vllm_endpoint: &str, replay_endpoint: Option<&str>, topic: &str) -> Self {
        let publisher_binds = vllm_endpoint.contains('*')
            || vllm_endpoint.contains("::")
            || vllm_endpoint.starts_with("ipc://")
            || vllm_endpoint.starts_with("inproc://");
        let (endpoint, mode) = if publisher_binds {
            (loopback(vllm_endpoint), SocketMode::Connect)
        } else {
            (vllm_endpoint.to_string(), SocketMode::Bind)
        };
        Self {
            endpoint,
            mode,
            replay_endpoint: replay_endpoint.map(loopback),
            topic: topic.to_string(),
            replay_timeout: Duration::from_millis(500),
            forward: Forward::default(),
        }
    }
}

/// A wildcard endpoint as something to connect to on this machine.
fn loopback(endpoint: &str) -> String {
    endpoint
        .replace("tcp://*:", "tcp://127.0.0.1:")
        .replace("tcp://[::]:", "tcp://127.0.0.1:")
}

/// A running subscriber. Dropping it stops the task and closes the sockets.
pub struct KvEventSubscriber {
    metrics: Arc<KvEventMetrics>,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl KvEventSubscriber {
    /// Start subscribing and feeding `sink` (usually an `Arc<PolicyHandle>`). Returns once the
    /// socket is bound or connected. Must be called from within a Tokio runtime.
    pub async fn spawn<S: BlockSink + ?Sized>(config: KvEventsConfig, sink: Arc<S>) -> anyhow::Result<Self> {
        let mut sub = SubSocket::new();
        match config.mode {
            SocketMode::Bind => sub.bind(&config.endpoint).await.map(|_| ()),
            SocketMode::Connect => sub.connect(&config.endpoint).await,
        }
        .map_err(|e| anyhow::anyhow!("KV events: cannot {:?} {}: {e}", config.mode, config.endpoint))?;
        sub.subscribe(&config.topic)
            .await
            .map_err(|e| anyhow::anyhow!("KV events: subscribe {:?}: {e}", config.topic))?;
        let metrics = Arc::new(KvEventMetrics::default());
        let (stop, stopped) = watch::channel(false);
        let span = tracing::info_span!("vllm.kv_events", endpoint = %config.endpoint);
        tracing::info!(endpoint = %config.endpoint, mode = ?config.mode, replay = ?config.replay_endpoint, "KV-event subscriber started");
        let state = Tracker {
            config,
            sink,
            metrics: metrics.clone(),
            expected: 0,
            last: None,
            replay: None,
            packed: Vec::new(),
        };
        let task = tokio::spawn(state.run(sub, stopped).instrument(span));
        Ok(Self {
            metrics,
            stop,
            task: Some(task),
        })
    }

    /// The subscriber's counters now.
    pub fn counts(&self) -> KvEventCounts {
        self.metrics.counts()
    }

    /// The live counters, shared: a `/metrics` page reads them without holding the subscriber.
    pub fn metrics(&self) -> Arc<KvEventMetrics> {
        self.metrics.clone()
    }

    /// Stop and wait for the task to end.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for KvEventSubscriber {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// One message as it came off a socket, split into its parts.
struct Batch {
    seq: u64,
    payload: Bytes,
}

/// Split `[topic, seq, payload]`; `None` (logged) for anything else.
fn split_message(frames: &[Bytes], metrics: &KvEventMetrics) -> Option<Batch> {
    if frames.len() != 3 || frames[1].len() != 8 {
        add(&metrics.malformed, 1);
        tracing::warn!(
            frames = frames.len(),
            seq_bytes = frames.get(1).map(|f| f.len()),
            "KV-event message is not [topic, 8-byte seq, payload]; skipped"
        );
        return None;
    }
    Some(Batch {
        seq: u64::from_be_bytes(frames[1][..].try_into().unwrap()),
        payload: frames[2].clone(),
    })
}

/// Sequence state and delivery.
struct Tracker<S: ?Sized> {
    config: KvEventsConfig,
    sink: Arc<S>,
    metrics: Arc<KvEventMetrics>,
    /// The next sequence number we have not applied.
    expected: u64,
    /// The last batch applied, to tell a repeated message from a restart.
    last: Option<(u64, Bytes)>,
    /// Connected lazily, dropped after a failed replay so late answers cannot mix with the next.
    replay: Option<DealerSocket>,
    packed: Vec<u64>,
}

impl<S: BlockSink + ?Sized> Tracker<S> {
    async fn run(mut self, mut sub: SubSocket, mut stopped: watch::Receiver<bool>) {
        loop {
            let message = tokio::select! {
                m = sub.recv() => m,
                _ = stopped.changed() => break,
            };
            match message {
                Ok(m) => {
                    let frames = m.into_vec();
                    if let Some(batch) = split_message(&frames, &self.metrics) {
                        self.on_live(batch).await;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "KV-event receive failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        tracing::info!(counts = ?self.metrics.counts(), "KV-event subscriber stopped");
    }

    /// A batch from the live stream.
    async fn on_live(&mut self, batch: Batch) {
        if self
            .last
            .as_ref()
            .is_some_and(|(seq, payload)| *seq == batch.seq && *payload == batch.payload)
        {
            // The same message again (a reconnecting peer resent it): not a restart.
            add(&self.metrics.duplicates, 1);
            return;
        }
        if batch.seq < self.expected {
            // PUB never repeats itself, so backwards means a new publisher numbering from 0.
            add(&self.metrics.restarts, 1);
            tracing::warn!(
                seq = batch.seq,
                expected = self.expected,
                "KV-event sequence went back: engine restarted"
            );
            self.expected = 0;
        }
        if batch.seq > self.expected {
            add(&self.metrics.gaps, 1);
            tracing::info!(from = self.expected, to = batch.seq, "KV-event gap");
            self.fill_gap(batch.seq).await;
        }
        self.apply(&batch);
    }

    /// Recover `[expected, until)` from the replay socket, applying what arrives in order.
    async fn fill_gap(&mut self, until: u64) {
        if self.config.replay_endpoint.is_some() {
            add(&self.metrics.replays, 1);
            let timeout = self.config.replay_timeout;
            match tokio::time::timeout(timeout, self.replay_from(self.expected)).await {
                Ok(Ok(batches)) => {
                    for batch in batches {
                        if batch.seq >= until {
                            break; // the live stream delivers these itself
                        }
                        if batch.seq < self.expected {
                            add(&self.metrics.duplicates, 1);
                            continue;
                        }
                        if batch.seq > self.expected {
                            break; // the buffer no longer holds what we need
                        }
                        add(&self.metrics.replayed_batches, 1);
                        self.apply(&batch);
                    }
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "KV-event replay failed");
                    self.replay = None;
                }
                Err(_) => {
                    tracing::warn!(?timeout, "KV-event replay timed out");
                    self.replay = None;
                }
            }
        }
        if self.expected < until {
            let lost = until - self.expected;
            add(&self.metrics.lost_batches, lost);
            tracing::warn!(from = self.expected, to = until, lost, "KV-event batches lost");
            self.expected = until;
        }
    }

    /// Ask for everything buffered from `start` on; collect until the end marker.
    async fn replay_from(&mut self, start: u64) -> anyhow::Result<Vec<Batch>> {
        if self.replay.is_none() {
            let endpoint = self.config.replay_endpoint.as_deref().expect("checked by caller");
            let mut dealer = DealerSocket::new();
            dealer
                .connect(endpoint)
                .await
                .map_err(|e| anyhow::anyhow!("connect {endpoint}: {e}"))?;
            self.replay = Some(dealer);
        }
        let dealer = self.replay.as_mut().expect("just set");
        let request: ZmqMessage = vec![Bytes::new(), Bytes::copy_from_slice(&start.to_be_bytes())]
            .try_into()
            .expect("two frames");
        dealer.send(request).await?;
        let mut batches = Vec::new();
        loop {
            let mut frames = dealer.recv().await?.into_vec();
            // A DEALER sees the ROUTER's empty delimiter frame first.
            if frames.first().is_some_and(|f| f.is_empty()) {
                frames.remove(0);
            }
            if frames.len() == 3 && frames[1][..] == (-1i64).to_be_bytes() {
                return Ok(batches);
            }
            if let Some(batch) = split_message(&frames, &self.metrics) {
                batches.push(batch);
            }
        }
    }

    /// Decode and deliver one in-order batch.
    fn apply(&mut self, batch: &Batch) {
        self.expected = batch.seq + 1;
        self.last = Some((batch.seq, batch.payload.clone()));
        let decoded = match decode_batch(&batch.payload) {
            Ok(d) => d,
            Err(e) => {
                add(&self.metrics.malformed, 1);
                tracing::warn!(seq = batch.seq, bytes = batch.payload.len(), error = %e, "undecodable KV-event batch skipped");
                return;
            }
        };
        add(&self.metrics.batches, 1);
        add(&self.metrics.events, decoded.events.len() as u64);
        self.packed.clear();
        let mut blocks = 0;
        for event in &decoded.events {
            blocks += pack_event(event, self.config.forward, &mut self.packed);
        }
        if blocks == 0 {
            return;
        }
        add(&self.metrics.blocks_forwarded, blocks as u64);
        if let Err(e) = crate::blocking::policy_call(|| self.sink.observe_blocks(&self.packed)) {
            add(&self.metrics.policy_errors, 1);
            tracing::warn!(seq = batch.seq, blocks, error = %e, "policy observe-blocks failed");
        }
    }
}

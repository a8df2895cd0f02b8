//! The KV-event subscriber over real ZMQ sockets, feeding a real policy (the `probe` fixture
//! component, which counts the block events it observes).
//!
//! Two publishers: vLLM's own `ZmqEventPublisher` run from the vLLM venv (skipped, with the reason
//! printed, when `.venv-vllm` is absent), and — for faults the real one cannot be made to
//! produce on cue (a batch lost mid-stream, an engine restart) — `StandInPublisher`, a PUB +
//! ROUTER pair in this file that speaks vLLM's wire format and replay protocol and replays the
//! payloads captured from a real vLLM.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentrt_eviction::kv_events::decode_batch;
use agentrt_eviction::{KvEventCounts, KvEventSubscriber, KvEventsConfig, SocketMode};
use agentrt_runtime::PolicyHandle;
use agentrt_tests::{engine, start};
use bytes::Bytes;
use zeromq::{PubSocket, RouterSocket, Socket, SocketRecv, SocketSend, ZmqMessage};

/// Block events (stored, removed) in `payloads`, as the subscriber forwards them.
fn block_totals(payloads: &[Vec<u8>]) -> (u64, u64) {
    let (mut stored, mut removed) = (0, 0);
    for p in payloads {
        for e in decode_batch(p).unwrap().events {
            match e {
                agentrt_eviction::kv_events::KvEvent::BlockStored { block_hashes, .. } => {
                    stored += block_hashes.len() as u64
                }
                agentrt_eviction::kv_events::KvEvent::BlockRemoved { block_hashes, .. } => {
                    removed += block_hashes.len() as u64
                }
                _ => {}
            }
        }
    }
    (stored, removed)
}

/// Wait (bounded) until `done` holds for the subscriber's counts.
async fn wait_for(sub: &KvEventSubscriber, what: &str, done: impl Fn(&KvEventCounts) -> bool) -> KvEventCounts {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let c = sub.counts();
        if done(&c) {
            return c;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}: {c:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn probe_blocks(policy: &PolicyHandle) -> [u64; 4] {
    common::probe_seen(&policy.snapshot().unwrap()).blocks
}

/// Stand-in for vLLM's publisher (see the module docs): PUB for the live stream, ROUTER for
/// replay, a buffer of everything "published".
struct StandInPublisher {
    publisher: PubSocket,
    endpoint: String,
    replay_endpoint: String,
    buffer: Arc<tokio::sync::Mutex<Vec<(u64, Bytes)>>>,
    replay_task: tokio::task::JoinHandle<()>,
}

impl StandInPublisher {
    async fn bind() -> Self {
        let mut publisher = PubSocket::new();
        let endpoint = publisher.bind("tcp://127.0.0.1:0").await.unwrap().to_string();
        let mut router = RouterSocket::new();
        let replay_endpoint = router.bind("tcp://127.0.0.1:0").await.unwrap().to_string();
        let buffer: Arc<tokio::sync::Mutex<Vec<(u64, Bytes)>>> = Arc::default();
        let served = buffer.clone();
        let replay_task = tokio::spawn(async move {
            // vLLM's protocol: [id, "", start_seq] in; [id, "", topic, seq, payload]* then
            // [id, "", "", -1, ""] out.
            while let Ok(request) = router.recv().await {
                let frames = request.into_vec();
                let id = frames[0].clone();
                let start = u64::from_be_bytes(frames[2][..].try_into().unwrap());
                let batches: Vec<_> = served
                    .lock()
                    .await
                    .iter()
                    .filter(|(s, _)| *s >= start)
                    .cloned()
                    .collect();
                for (seq, payload) in batches {
                    let reply = vec![
                        id.clone(),
                        Bytes::new(),
                        Bytes::from_static(b"kv"),
                        Bytes::copy_from_slice(&seq.to_be_bytes()),
                        payload,
                    ];
                    router.send(ZmqMessage::try_from(reply).unwrap()).await.unwrap();
                }
                let end = vec![
                    id,
                    Bytes::new(),
                    Bytes::new(),
                    Bytes::copy_from_slice(&(-1i64).to_be_bytes()),
                    Bytes::new(),
                ];
                router.send(ZmqMessage::try_from(end).unwrap()).await.unwrap();
            }
        });
        Self {
            publisher,
            endpoint,
            replay_endpoint,
            buffer,
            replay_task,
        }
    }

    /// Record `seq` for replay and, unless `drop_live`, send it on the live stream.
    async fn publish(&mut self, seq: u64, payload: &[u8], drop_live: bool) {
        let payload = Bytes::copy_from_slice(payload);
        self.buffer.lock().await.push((seq, payload.clone()));
        if !drop_live {
            let frames = vec![
                Bytes::from_static(b"kv"),
                Bytes::copy_from_slice(&seq.to_be_bytes()),
                payload,
            ];
            self.publisher
                .send(ZmqMessage::try_from(frames).unwrap())
                .await
                .unwrap();
        }
    }

    fn config(&self, with_replay: bool) -> KvEventsConfig {
        KvEventsConfig {
            endpoint: self.endpoint.clone(),
            mode: SocketMode::Connect,
            replay_endpoint: with_replay.then(|| self.replay_endpoint.clone()),
            topic: "kv".into(),
            replay_timeout: Duration::from_secs(5),
            forward: Default::default(),
        }
    }
}

impl Drop for StandInPublisher {
    fn drop(&mut self) {
        self.replay_task.abort();
    }
}

/// Publish the first batch until the subscriber has it, so that later sends are not lost to ZMQ's
/// slow-joiner window (which would add gaps this test does not plan).
async fn connect_with_first_batch(publisher: &mut StandInPublisher, sub: &KvEventSubscriber, first: &[u8]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let frames = vec![
            Bytes::from_static(b"kv"),
            Bytes::copy_from_slice(&0u64.to_be_bytes()),
            Bytes::copy_from_slice(first),
        ];
        publisher
            .publisher
            .send(ZmqMessage::try_from(frames).unwrap())
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        if sub.counts().batches > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "subscriber never connected");
    }
    publisher.buffer.lock().await.push((0, Bytes::copy_from_slice(first)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_lost_mid_stream_is_replayed_in_order() {
    let (engine, _cache) = engine();
    let policy = Arc::new(start(&engine, "probe", &[]));
    let payloads = common::captured_batches();
    let mut publisher = StandInPublisher::bind().await;
    let sub = KvEventSubscriber::spawn(publisher.config(true), policy.clone())
        .await
        .unwrap();
    connect_with_first_batch(&mut publisher, &sub, &payloads[0]).await;
    for (seq, payload) in payloads.iter().enumerate().skip(1) {
        // Batches 3 and 4 never reach the live stream (a full high-water mark, say).
        publisher.publish(seq as u64, payload, seq == 3 || seq == 4).await;
    }
    let counts = wait_for(&sub, "all batches", |c| c.batches == payloads.len() as u64).await;
    assert_eq!(counts.gaps, 1);
    assert_eq!(counts.replays, 1);
    assert_eq!(counts.replayed_batches, 2);
    assert_eq!(counts.lost_batches, 0);
    assert_eq!(counts.malformed, 0);
    let (stored, removed) = block_totals(&payloads);
    assert_eq!(counts.blocks_forwarded, stored + removed);
    let blocks = probe_blocks(&policy);
    assert_eq!(
        (blocks[0], blocks[2]),
        (stored, removed),
        "the policy saw every block event"
    );
    sub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_replay_a_gap_is_counted_as_lost_and_malformed_batches_are_skipped() {
    let (engine, _cache) = engine();
    let policy = Arc::new(start(&engine, "probe", &[]));
    let payloads = common::captured_batches();
    let mut publisher = StandInPublisher::bind().await;
    let sub = KvEventSubscriber::spawn(publisher.config(false), policy.clone())
        .await
        .unwrap();
    connect_with_first_batch(&mut publisher, &sub, &payloads[0]).await;
    publisher.publish(1, &payloads[1], false).await;
    publisher.publish(2, &payloads[2], true).await; // lost, and no replay socket
    publisher.publish(3, b"\xc1 not msgpack", false).await;
    publisher.publish(4, &payloads[4], false).await;
    let counts = wait_for(&sub, "batch 4", |c| c.batches + c.malformed >= 4).await;
    assert_eq!(counts.gaps, 1);
    assert_eq!(counts.lost_batches, 1);
    assert_eq!(counts.malformed, 1);
    assert_eq!(counts.batches, 3, "0, 1 and 4 applied");
    let (stored, removed) = block_totals(&[payloads[0].clone(), payloads[1].clone(), payloads[4].clone()]);
    let blocks = probe_blocks(&policy);
    assert_eq!((blocks[0], blocks[2]), (stored, removed));
    sub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_restart_is_recognised_by_the_sequence_going_back() {
    let (engine, _cache) = engine();
    let policy = Arc::new(start(&engine, "probe", &[]));
    let payloads = common::captured_batches();
    let mut publisher = StandInPublisher::bind().await;
    let sub = KvEventSubscriber::spawn(publisher.config(true), policy.clone())
        .await
        .unwrap();
    connect_with_first_batch(&mut publisher, &sub, &payloads[0]).await;
    for seq in 1..5 {
        publisher.publish(seq, &payloads[seq as usize], false).await;
    }
    wait_for(&sub, "first life", |c| c.batches == 5).await;
    // The engine restarts: numbering begins again at 0 (and its replay buffer is new).
    publisher.buffer.lock().await.clear();
    for seq in 0..3 {
        publisher.publish(seq, &payloads[10 + seq as usize], false).await;
    }
    let counts = wait_for(&sub, "second life", |c| c.batches == 8).await;
    assert_eq!(counts.restarts, 1);
    assert_eq!(counts.gaps, 0);
    assert_eq!(counts.lost_batches, 0);
    sub.shutdown().await;
}

fn vllm_python() -> Option<PathBuf> {
    let venv = std::env::var_os("AGENTRT_VLLM_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.venv-vllm"));
    let python = venv.join("bin/python");
    python.is_file().then_some(python)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// vLLM's real `ZmqEventPublisher` publishes batches before the subscriber exists (so the first
/// ones are lost for certain), then more; the subscriber must recover the first ones over vLLM's
/// real ROUTER replay socket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovers_from_vllms_own_publisher_over_its_replay_socket() {
    let Some(python) = vllm_python() else {
        eprintln!("SKIPPED: no .venv-vllm (run adapters/vllm/setup-venv.sh) — vLLM's publisher not tested");
        return;
    };
    let (port, replay_port) = (free_port(), free_port());
    const SCRIPT: &str = r#"
import sys, time
from vllm.distributed.kv_events import ZmqEventPublisher, EventBatch, BlockStored, BlockRemoved
port, replay, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
pub = ZmqEventPublisher(0, endpoint=f"tcp://127.0.0.1:{port}", replay_endpoint=f"tcp://127.0.0.1:{replay}", topic="kv")
def batch(i):
    stored = BlockStored(block_hashes=[1000 + 2 * i, 1001 + 2 * i], parent_block_hash=None if i == 0 else 999 + 2 * i,
                         token_ids=list(range(64)), block_size=32, lora_id=None, medium="GPU", lora_name=None)
    return EventBatch(ts=time.time(), events=[stored, BlockRemoved(block_hashes=[7 + i], medium="GPU")])
for i in range(n):
    pub.publish(batch(i))
time.sleep(0.5)
print("half", flush=True)
sys.stdin.readline()
for i in range(n, 2 * n):
    pub.publish(batch(i))
print("done", flush=True)
sys.stdin.readline()
pub.shutdown()
"#;
    let mut child = Command::new(&python)
        .args(["-c", SCRIPT, &port.to_string(), &replay_port.to_string(), "5"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting the vLLM venv's python");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "half", "publisher did not start");

    let (engine, _cache) = engine();
    let policy = Arc::new(start(&engine, "probe", &[]));
    let config = KvEventsConfig::for_vllm(
        &format!("tcp://127.0.0.1:{port}"),
        Some(&format!("tcp://127.0.0.1:{replay_port}")),
        "kv",
    );
    assert_eq!(
        config.mode,
        SocketMode::Bind,
        "vLLM connects to a non-wildcard tcp endpoint"
    );
    let sub = KvEventSubscriber::spawn(config, policy.clone()).await.unwrap();
    // Give vLLM's PUB (reconnecting every 100 ms) time to attach before the second half; if it
    // misses some, replay covers them too — the assertions below hold either way.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin).unwrap();
    line.clear();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "done");
    let counts = wait_for(&sub, "all 10 batches", |c| c.batches == 10).await;
    writeln!(stdin).unwrap();
    let _ = child.wait();
    assert!(counts.gaps >= 1 && counts.replays >= 1, "{counts:?}");
    assert!(
        counts.replayed_batches >= 5,
        "the first five came by replay: {counts:?}"
    );
    assert_eq!(counts.lost_batches, 0);
    assert_eq!(counts.malformed, 0);
    let blocks = probe_blocks(&policy);
    assert_eq!((blocks[0], blocks[2]), (20, 10));
    sub.shutdown().await;
}

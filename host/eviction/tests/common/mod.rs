//! Shared by the integration tests: captured vLLM payloads, the probe policy's snapshot, and the
//! plugin's side of the eviction protocol.

#![allow(dead_code)]

use std::path::PathBuf;

use agentrt_eviction::wire::{self, Reply, Request, WireItem};
use agentrt_eviction::EvictionService;
use agentrt_sdk::state::Reader;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// The payloads captured from a real vLLM (see tests/fixtures/README.md), by sequence number.
pub fn captured_batches() -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/vllm-0.32.0-cpu");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "msgpack"))
        .collect();
    files.sort();
    for (i, f) in files.iter().enumerate() {
        assert_eq!(
            f.file_stem().unwrap().to_str().unwrap(),
            format!("{i:04}"),
            "fixtures must be numbered 0000.. without holes"
        );
    }
    files.iter().map(|f| std::fs::read(f).unwrap()).collect()
}

/// What the probe fixture policy has seen, from its snapshot.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ProbeSeen {
    pub agents: Vec<(u32, u64)>,
    pub events: u64,
    /// Stored, touched, removed, cleared.
    pub blocks: [u64; 4],
    pub block_hash_sum: u64,
}

pub fn probe_seen(snapshot: &[u8]) -> ProbeSeen {
    let (mut r, _) = Reader::new(snapshot, *b"PRB1").expect("probe snapshot");
    let mut seen = ProbeSeen::default();
    for _ in 0..r.u32().unwrap() {
        seen.agents.push((r.u32().unwrap(), r.u64().unwrap()));
    }
    seen.events = r.u64().unwrap();
    let _prompt_tokens = r.u64().unwrap();
    for b in &mut seen.blocks {
        *b = r.u64().unwrap();
    }
    seen.block_hash_sum = r.u64().unwrap();
    seen
}

/// The plugin's side of the protocol, in Rust.
pub struct Plugin {
    /// The raw connection, for tests that write malformed frames.
    pub stream: UnixStream,
}

impl Plugin {
    pub async fn connect(service: &EvictionService) -> Self {
        Self::connect_to(service.path()).await
    }

    /// Connect to the socket at `path` (a service `agentrt serve` started) and say HELLO.
    pub async fn connect_to(path: &std::path::Path) -> Self {
        let mut plugin = Self {
            stream: UnixStream::connect(path).await.unwrap(),
        };
        plugin
            .send(&Request::Hello {
                protocol: wire::PROTOCOL_VERSION,
                engine_version: "0.32.0+cpu".into(),
            })
            .await;
        assert_eq!(
            plugin.recv().await,
            Reply::HelloOk {
                protocol: wire::PROTOCOL_VERSION
            }
        );
        plugin
    }

    pub async fn send(&mut self, request: &Request) {
        let mut buf = Vec::new();
        wire::encode_request(request, &mut buf);
        self.stream.write_all(&buf).await.unwrap();
    }

    pub async fn recv(&mut self) -> Reply {
        let len = self.stream.read_u32_le().await.unwrap() as usize;
        let mut body = vec![0; len];
        self.stream.read_exact(&mut body).await.unwrap();
        wire::decode_reply(body[0], &body[1..]).unwrap()
    }

    pub async fn rank(&mut self, request_id: u32, want: u32, items: Vec<WireItem>) -> (bool, Vec<u32>) {
        self.send(&Request::Rank {
            request_id,
            want,
            missed: 0,
            items,
        })
        .await;
        match self.recv().await {
            Reply::Ranked {
                request_id: got,
                fallback,
                evict_first,
                ..
            } => {
                assert_eq!(got, request_id);
                (fallback, evict_first)
            }
            other => panic!("expected RANKED, got {other:?}"),
        }
    }
}

pub fn item(block_hash: u64, wire_agent: u32, last_access: u64) -> WireItem {
    WireItem {
        block_hash,
        session: 0,
        last_access,
        wire_agent,
        tokens: 32,
        position: 0,
        tier: agentrt_runtime::types::Tier::Gpu,
    }
}

pub fn socket_path(dir: &tempfile::TempDir) -> std::path::PathBuf {
    dir.path().join("evict.sock")
}

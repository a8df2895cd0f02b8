//! Shared by the integration tests: captured vLLM payloads and the probe policy's snapshot.

#![allow(dead_code)]

use std::path::PathBuf;

use agentrt_sdk::state::Reader;

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

//! Decoding vLLM's KV-event batches: payloads captured from a real vLLM 0.32 (CPU), plus
//! hand-built payloads in the same layout for the cases the capture does not contain.

mod common;

use std::collections::HashSet;

use agentrt_eviction::kv_events::{decode_batch, pack_event, Forward, KvEvent};
use rmpv::Value;

fn stored(e: &KvEvent) -> Option<&Vec<u64>> {
    match e {
        KvEvent::BlockStored { block_hashes, .. } => Some(block_hashes),
        _ => None,
    }
}

fn removed(e: &KvEvent) -> Option<&Vec<u64>> {
    match e {
        KvEvent::BlockRemoved { block_hashes, .. } => Some(block_hashes),
        _ => None,
    }
}

#[test]
fn decodes_every_captured_batch() {
    let batches: Vec<_> = common::captured_batches()
        .iter()
        .map(|p| decode_batch(p).expect("captured batch decodes"))
        .collect();
    assert_eq!(batches.len(), 19);
    for b in &batches {
        assert_eq!(b.data_parallel_rank, Some(0));
        assert!(b.ts > 1.0e9, "ts is wall-clock seconds");
        for e in &b.events {
            assert!(e.is_gpu());
            assert!(!matches!(e, KvEvent::Unknown(_)), "{e:?}");
        }
    }
    // Batch 0: the planner's 512-token prefix, 16 full blocks from the prompt start.
    match &batches[0].events[..] {
        [KvEvent::BlockStored {
            block_hashes,
            parent_block_hash,
            block_size,
            tokens,
            medium,
            group_idx,
            session_id,
        }] => {
            assert_eq!(block_hashes.len(), 16);
            assert_eq!(*parent_block_hash, None);
            assert_eq!(*block_size, 32);
            assert_eq!(*tokens, 16 * 32);
            assert_eq!(medium.as_deref(), Some("GPU"));
            assert_eq!(*group_idx, Some(0));
            assert_eq!(*session_id, None);
        }
        other => panic!("batch 0: {other:?}"),
    }
    let stored_count: usize = batches
        .iter()
        .flat_map(|b| &b.events)
        .filter_map(stored)
        .map(Vec::len)
        .sum();
    let removed_count: usize = batches
        .iter()
        .flat_map(|b| &b.events)
        .filter_map(removed)
        .map(Vec::len)
        .sum();
    assert_eq!(stored_count, 16 + 8 * 10 + 16 + 16 + 8 * 10);
    assert_eq!(removed_count, 8 + 10 + 16 + 16 + 10 * 8);
}

/// The capture doubles as evidence of what the plugin did in the real engine: under LRU the
/// planner's blocks were evicted by the flood; pinned, none of them was.
#[test]
fn captured_run_shows_lru_evicting_and_the_pin_protecting() {
    let batches: Vec<_> = common::captured_batches()
        .iter()
        .map(|p| decode_batch(p).unwrap())
        .collect();
    let hashes = |range: std::ops::Range<usize>, pick: fn(&KvEvent) -> Option<&Vec<u64>>| -> HashSet<u64> {
        batches[range]
            .iter()
            .flat_map(|b| &b.events)
            .filter_map(pick)
            .flatten()
            .copied()
            .collect()
    };
    let planner_lru = hashes(0..1, stored);
    let removed_lru = hashes(1..10, removed);
    assert!(
        planner_lru.is_subset(&removed_lru),
        "LRU run: the flood evicted the whole planner prefix"
    );
    let planner_pinned = hashes(10..11, stored);
    let removed_pinned = hashes(11..19, removed);
    assert_eq!(planner_pinned.len(), 16);
    assert!(
        planner_pinned.is_disjoint(&removed_pinned),
        "pinned run: no planner block evicted"
    );
    assert_eq!(removed_pinned.len(), 80, "the flood still evicted (other blocks)");
}

#[test]
fn packs_stored_runs_as_chains_with_positions() {
    let batch = decode_batch(&common::captured_batches()[0]).unwrap();
    let mut out = Vec::new();
    let n = pack_event(&batch.events[0], Forward::default(), &mut out);
    assert_eq!(n, 16);
    let hashes = stored(&batch.events[0]).unwrap();
    let events: Vec<_> = agentrt_sdk::packed::decode(&out).collect();
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e.block_hash, hashes[i]);
        assert_eq!(e.parent_hash, if i == 0 { 0 } else { hashes[i - 1] });
        assert_eq!(e.position, 32 * i as u32);
        assert_eq!(e.agent, 0);
    }
    let off = Forward {
        stored: false,
        ..Forward::default()
    };
    assert_eq!(pack_event(&batch.events[0], off, &mut out), 0);
}

fn encode(v: &Value) -> Vec<u8> {
    let mut buf = Vec::new();
    rmpv::encode::write_value(&mut buf, v).unwrap();
    buf
}

fn map(entries: Vec<(&str, Value)>) -> Value {
    Value::Map(entries.into_iter().map(|(k, v)| (Value::from(k), v)).collect())
}

/// Layouts the capture lacks: bytes hashes (`VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0`), a chained
/// run, a CPU-tier event, AllBlocksCleared, an unknown type, unknown fields, no dp rank.
#[test]
fn decodes_the_other_layouts_vllm_can_send() {
    let mut raw = vec![0u8; 32];
    raw[24..].copy_from_slice(&0x0102_0304_0506_0708u64.to_be_bytes());
    let batch = Value::Array(vec![
        Value::F64(1.5),
        Value::Array(vec![
            map(vec![
                ("type", "BlockStored".into()),
                ("block_hashes", Value::Array(vec![Value::Binary(raw), 9u64.into()])),
                ("parent_block_hash", 7u64.into()),
                ("token_ids", Value::Array(vec![1.into(); 64])),
                ("block_size", 32.into()),
                ("lora_id", Value::Nil),
                ("medium", "GPU".into()),
                ("lora_name", Value::Nil),
                ("some_future_field", "ignored".into()),
                ("session_id", "sess-1".into()),
            ]),
            map(vec![
                ("type", "BlockRemoved".into()),
                ("block_hashes", Value::Array(vec![5u64.into()])),
                ("medium", "CPU".into()),
            ]),
            map(vec![("type", "AllBlocksCleared".into())]),
            map(vec![("type", "SomethingNew".into()), ("x", 1.into())]),
        ]),
    ]);
    let decoded = decode_batch(&encode(&batch)).unwrap();
    assert_eq!(decoded.data_parallel_rank, None);
    assert_eq!(
        decoded.events[0],
        KvEvent::BlockStored {
            block_hashes: vec![0x0102_0304_0506_0708, 9],
            parent_block_hash: Some(7),
            block_size: 32,
            tokens: 64,
            medium: Some("GPU".into()),
            group_idx: None,
            session_id: Some("sess-1".into()),
        }
    );
    assert!(
        !decoded.events[1].is_gpu(),
        "CPU-tier events are not eviction candidates"
    );
    assert_eq!(decoded.events[2], KvEvent::AllBlocksCleared);
    assert_eq!(decoded.events[3], KvEvent::Unknown("SomethingNew".into()));

    let mut out = Vec::new();
    let mut n = 0;
    for e in &decoded.events {
        n += pack_event(e, Forward::default(), &mut out);
    }
    assert_eq!(
        n, 3,
        "two stored + cleared; the CPU removal and the unknown event are skipped"
    );
    let events: Vec<_> = agentrt_sdk::packed::decode(&out).collect();
    assert_eq!(events[1].parent_hash, 0x0102_0304_0506_0708, "a run chains");
    assert_eq!(
        events[0].position, 0,
        "a run with a parent starts at an unknown position"
    );
}

#[test]
fn malformed_batches_name_what_and_where() {
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (vec![0xc1], "batch"),
        (encode(&Value::from(3)), "batch"),
        (
            encode(&Value::Array(vec![Value::from("x"), Value::Array(vec![])])),
            "ts",
        ),
        (
            encode(&Value::Array(vec![
                Value::F64(0.0),
                Value::Array(vec![map(vec![
                    ("type", "BlockRemoved".into()),
                    ("block_hashes", Value::Array(vec![1.into(), "nope".into()])),
                ])]),
            ])),
            "events[0].block_hashes[1]",
        ),
        (
            encode(&Value::Array(vec![
                Value::F64(0.0),
                Value::Array(vec![Value::from(1), map(vec![("block_hashes", Value::Array(vec![]))])]),
            ])),
            "events[0]",
        ),
        (
            encode(&Value::Array(vec![
                Value::F64(0.0),
                Value::Array(vec![map(vec![("block_hashes", Value::Array(vec![]))])]),
            ])),
            "events[0].type",
        ),
    ];
    for (payload, path) in cases {
        let e = decode_batch(&payload).unwrap_err();
        assert_eq!(e.path, path, "{e}");
    }
    // Trailing garbage after a valid batch.
    let mut payload = common::captured_batches()[0].clone();
    payload.push(0);
    assert!(decode_batch(&payload).unwrap_err().what.contains("trailing"));
}

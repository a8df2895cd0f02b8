//! The packed form of KV-block events used by `observe-blocks`: 3 `u64` words per event.
//!
//! ```text
//! word 0: bits 0..8 = block-op ordinal, bits 8..32 = position (token offset, saturating at
//!         2^24 - 1), bits 32..64 = agent handle
//! word 1: block hash
//! word 2: parent hash (0 = none)
//! ```
//!
//! Crossing the Wasm boundary as `list<u64>` costs a few ns per event against ~20 ns for a
//! `list<block-event>`, because the host copies the words with one memcpy instead of lowering a
//! record per event (docs/background.md §9). The host encodes with [`words`]; the SDK decodes with [`decode`].

use crate::{BlockEvent, BlockOp, Item, ItemKind};

/// Words per packed event.
pub const WORDS_PER_EVENT: usize = 3;

/// Largest position the packed form carries; larger ones saturate to it.
pub const MAX_POSITION: u32 = (1 << 24) - 1;

fn op_ordinal(op: BlockOp) -> u8 {
    match op {
        BlockOp::Stored => 0,
        BlockOp::Touched => 1,
        BlockOp::Removed => 2,
        BlockOp::AllCleared => 3,
    }
}

fn op_from_ordinal(ordinal: u64) -> Option<BlockOp> {
    match ordinal {
        0 => Some(BlockOp::Stored),
        1 => Some(BlockOp::Touched),
        2 => Some(BlockOp::Removed),
        3 => Some(BlockOp::AllCleared),
        _ => None,
    }
}

/// The words of one event. `op_ordinal` is the `block-op` case's position in the WIT enum
/// (stored = 0, touched = 1, removed = 2, all-cleared = 3); hosts with their own generated types
/// call this directly.
pub fn words(op_ordinal: u8, agent: u32, position: u32, block_hash: u64, parent_hash: u64) -> [u64; WORDS_PER_EVENT] {
    let position = u64::from(position.min(MAX_POSITION));
    [
        u64::from(op_ordinal) | (position << 8) | (u64::from(agent) << 32),
        block_hash,
        parent_hash,
    ]
}

/// Append one event's words to `out`.
pub fn encode(event: &BlockEvent, out: &mut Vec<u64>) {
    out.extend_from_slice(&words(
        op_ordinal(event.op),
        event.agent,
        event.position,
        event.block_hash,
        event.parent_hash,
    ));
}

/// Decode packed words. Trailing words that do not make a whole event, and ops this SDK does not
/// know (a newer host), are skipped: an old policy keeps working against a newer host.
pub fn decode(words: &[u64]) -> impl Iterator<Item = BlockEvent> + '_ {
    words.chunks_exact(WORDS_PER_EVENT).filter_map(|w| {
        Some(BlockEvent {
            op: op_from_ordinal(w[0] & 0xff)?,
            agent: (w[0] >> 32) as u32,
            position: ((w[0] >> 8) & u64::from(MAX_POSITION)) as u32,
            block_hash: w[1],
            parent_hash: w[2],
        })
    })
}

/// Words per packed score item.
pub const ITEM_WORDS: usize = 5;

/// The words of one score item (layout in `wit/policy.wit`, `score-packed`). `kind_ordinal` is the
/// `item-kind` case's position in the WIT enum (kv-block = 0, request = 1, tool-result = 2).
#[allow(clippy::too_many_arguments)]
pub fn item_words(
    kind_ordinal: u8,
    key: u64,
    agent: u32,
    session: u64,
    last_access: u64,
    tokens: u32,
    position: u32,
) -> [u64; ITEM_WORDS] {
    [
        key,
        session,
        last_access,
        u64::from(tokens) | (u64::from(agent) << 32),
        u64::from(position) | (u64::from(kind_ordinal) << 32),
    ]
}

/// Append one item's words to `out`.
pub fn encode_item(item: &Item, out: &mut Vec<u64>) {
    let kind = match item.kind {
        ItemKind::KvBlock => 0,
        ItemKind::Request => 1,
        ItemKind::ToolResult => 2,
    };
    out.extend_from_slice(&item_words(
        kind,
        item.key,
        item.agent,
        item.session,
        item.last_access,
        item.tokens,
        item.position,
    ));
}

/// Decode packed items. Unknown kinds (a newer host) decode as `kv-block`; trailing words that do
/// not make a whole item are ignored — the host checks that one score comes back per item.
pub fn decode_items(words: &[u64]) -> Vec<Item> {
    words
        .chunks_exact(ITEM_WORDS)
        .map(|w| Item {
            kind: match (w[4] >> 32) & 0xff {
                1 => ItemKind::Request,
                2 => ItemKind::ToolResult,
                _ => ItemKind::KvBlock,
            },
            key: w[0],
            session: w[1],
            last_access: w[2],
            tokens: w[3] as u32,
            agent: (w[3] >> 32) as u32,
            position: w[4] as u32,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_round_trips_with_its_fields() {
        let ops = [BlockOp::Stored, BlockOp::Touched, BlockOp::Removed, BlockOp::AllCleared];
        let positions = [0, 16, MAX_POSITION, u32::MAX];
        let events: Vec<BlockEvent> = ops
            .into_iter()
            .enumerate()
            .map(|(i, op)| BlockEvent {
                op,
                agent: u32::MAX - i as u32,
                block_hash: u64::MAX - i as u64,
                parent_hash: i as u64,
                position: positions[i],
            })
            .collect();
        let mut words = Vec::new();
        for e in &events {
            encode(e, &mut words);
        }
        assert_eq!(words.len(), events.len() * WORDS_PER_EVENT);
        let decoded: Vec<BlockEvent> = decode(&words).collect();
        assert_eq!(decoded.len(), events.len());
        for (a, b) in decoded.iter().zip(&events) {
            assert_eq!(
                (a.op, a.agent, a.block_hash, a.parent_hash),
                (b.op, b.agent, b.block_hash, b.parent_hash)
            );
            assert_eq!(a.position, b.position.min(MAX_POSITION), "positions saturate");
        }
    }

    #[test]
    fn items_round_trip() {
        let items = [
            Item {
                kind: ItemKind::ToolResult,
                key: u64::MAX,
                agent: u32::MAX,
                session: 7,
                last_access: 1 << 50,
                tokens: u32::MAX,
                position: u32::MAX,
            },
            Item {
                kind: ItemKind::KvBlock,
                key: 1,
                agent: 0,
                session: 0,
                last_access: 0,
                tokens: 16,
                position: 32,
            },
        ];
        let mut words = Vec::new();
        for i in &items {
            encode_item(i, &mut words);
        }
        assert_eq!(decode_items(&words), items);
    }

    #[test]
    fn unknown_ops_and_partial_events_are_skipped() {
        let words = [0xfe, 1, 2, 0, 7, 8, 99];
        let decoded: Vec<BlockEvent> = decode(&words).collect();
        assert_eq!(decoded.len(), 1);
        assert_eq!(decoded[0].block_hash, 7);
    }
}

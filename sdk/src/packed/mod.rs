//! The packed form of KV-block events used by `observe-blocks`: 3 `u64` words per event.
//!
//! ```text
//! word 0: bits 0..4 = block-op ordinal, bits 4..8 = tier ordinal, bits 8..32 = position (token
//!         offset, saturating at 2^24 - 1), bits 32..64 = agent handle
//! ```
//!
//! The tier (0.3.0) sits in bits that were always zero under 0.2.0, where bits 0..8 held the op:
//! a GPU-tier event packs to the same words under both contract lines.
//!
//! ```text
//! word 1: block hash
//! word 2: parent hash (0 = none)
//! ```
//!
//! Crossing the Wasm boundary as `list<u64>` costs a few ns per event against ~20 ns for a
//! `list<block-event>`, because the host copies the words with one memcpy instead of lowering a
//! record per event (docs/background.md §9). The host encodes with [`words`]; the SDK decodes with [`decode`].
//! Every other event without a string has a packed form too: [`events`] (`observe-packed`, 0.4.0).

use crate::{BlockEvent, BlockOp, Item, ItemKind, Tier};

pub mod events;

/// Words per packed event.
pub const WORDS_PER_EVENT: usize = 3;

/// Largest position the packed form carries; larger ones saturate to it.
pub const MAX_POSITION: u32 = (1 << 24) - 1;

pub(crate) fn op_ordinal(op: BlockOp) -> u8 {
    match op {
        BlockOp::Stored => 0,
        BlockOp::Touched => 1,
        BlockOp::Removed => 2,
        BlockOp::AllCleared => 3,
    }
}

/// The `tier` case's position in the WIT enum (gpu = 0, host = 1).
pub fn tier_ordinal(tier: Tier) -> u8 {
    match tier {
        Tier::Gpu => 0,
        Tier::Host => 1,
    }
}

fn tier_from_ordinal(ordinal: u64) -> Option<Tier> {
    match ordinal {
        0 => Some(Tier::Gpu),
        1 => Some(Tier::Host),
        _ => None,
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
/// (stored = 0, touched = 1, removed = 2, all-cleared = 3), `tier_ordinal` the `tier` case's
/// (gpu = 0, host = 1); hosts with their own generated types call this directly.
pub fn words(
    op_ordinal: u8,
    tier_ordinal: u8,
    agent: u32,
    position: u32,
    block_hash: u64,
    parent_hash: u64,
) -> [u64; WORDS_PER_EVENT] {
    let position = u64::from(position.min(MAX_POSITION));
    let op_and_tier = u64::from(op_ordinal & 0x0f) | (u64::from(tier_ordinal & 0x0f) << 4);
    [
        op_and_tier | (position << 8) | (u64::from(agent) << 32),
        block_hash,
        parent_hash,
    ]
}

/// Append one event's words to `out`.
pub fn encode(event: &BlockEvent, out: &mut Vec<u64>) {
    out.extend_from_slice(&words(
        op_ordinal(event.op),
        tier_ordinal(event.tier),
        event.agent,
        event.position,
        event.block_hash,
        event.parent_hash,
    ));
}

/// Decode packed words. Trailing words that do not make a whole event, and ops or tiers this SDK
/// does not know (a newer host), are skipped: an old policy keeps working against a newer host.
pub fn decode(words: &[u64]) -> impl Iterator<Item = BlockEvent> + '_ {
    words.chunks_exact(WORDS_PER_EVENT).filter_map(|w| {
        Some(BlockEvent {
            op: op_from_ordinal(w[0] & 0x0f)?,
            tier: tier_from_ordinal((w[0] >> 4) & 0x0f)?,
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
/// `item-kind` case's position in the WIT enum (kv-block = 0, request = 1, tool-result = 2),
/// `tier_ordinal` the `tier` case's (gpu = 0, host = 1).
#[allow(clippy::too_many_arguments)]
pub fn item_words(
    kind_ordinal: u8,
    tier_ordinal: u8,
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
        u64::from(position) | (u64::from(kind_ordinal) << 32) | (u64::from(tier_ordinal) << 40),
    ]
}

/// Append one item's words to `out`.
pub fn encode_item(item: &Item, out: &mut Vec<u64>) {
    let kind = match item.kind {
        ItemKind::KvBlock => 0,
        ItemKind::Request => 1,
        ItemKind::ToolResult => 2,
        ItemKind::Session => 3,
    };
    out.extend_from_slice(&item_words(
        kind,
        tier_ordinal(item.tier),
        item.key,
        item.agent,
        item.session,
        item.last_access,
        item.tokens,
        item.position,
    ));
}

/// Decode packed items. Unknown kinds (a newer host) decode as `kv-block`, unknown tiers as `host`
/// (a tier this policy cannot tell apart is not the one it ranks for free); trailing words that do
/// not make a whole item are ignored — the host checks that one score comes back per item.
pub fn decode_items(words: &[u64]) -> Vec<Item> {
    words
        .chunks_exact(ITEM_WORDS)
        .map(|w| Item {
            kind: match (w[4] >> 32) & 0xff {
                1 => ItemKind::Request,
                2 => ItemKind::ToolResult,
                3 => ItemKind::Session,
                _ => ItemKind::KvBlock,
            },
            key: w[0],
            session: w[1],
            last_access: w[2],
            tokens: w[3] as u32,
            agent: (w[3] >> 32) as u32,
            position: w[4] as u32,
            tier: tier_from_ordinal((w[4] >> 40) & 0xff).unwrap_or(Tier::Host),
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
                tier: if i % 2 == 0 { Tier::Gpu } else { Tier::Host },
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
                (a.op, a.tier, a.agent, a.block_hash, a.parent_hash),
                (b.op, b.tier, b.agent, b.block_hash, b.parent_hash)
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
                tier: Tier::Gpu,
            },
            Item {
                kind: ItemKind::KvBlock,
                key: 1,
                agent: 0,
                session: 0,
                last_access: 0,
                tokens: 16,
                position: 32,
                tier: Tier::Host,
            },
            Item {
                kind: ItemKind::Session,
                key: 9,
                agent: 3,
                session: 9,
                last_access: 1_000_000,
                tokens: 55_000,
                position: 0,
                tier: Tier::Gpu,
            },
        ];
        let mut words = Vec::new();
        for i in &items {
            encode_item(i, &mut words);
        }
        assert_eq!(decode_items(&words), items);
    }

    #[test]
    fn a_gpu_event_packs_as_it_did_under_0_2() {
        // 0.2.0 packed the op in bits 0..8; with the tier 0 the words must be the same, so a 0.2
        // guest reads what a 0.3 host sends it.
        let w = words(2, 0, 7, 64, 11, 12);
        assert_eq!(w[0], 2 | (64 << 8) | (7 << 32));
        let host = words(2, 1, 7, 64, 11, 12);
        assert_eq!(host[0] & 0xff, 2 | (1 << 4), "the tier sits in bits 4..8");
    }

    #[test]
    fn unknown_ops_and_partial_events_are_skipped() {
        let words = [0xfe, 1, 2, 0, 7, 8, 99];
        let decoded: Vec<BlockEvent> = decode(&words).collect();
        assert_eq!(decoded.len(), 1);
        assert_eq!(decoded[0].block_hash, 7);
    }
}

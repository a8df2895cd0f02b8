//! What both models track about agents' anchors in the engine's cache: which block positions are
//! anchor, the engine's block size (learned, since block events do not carry it), and whether an
//! anchor is resident (so that `act` does not warm what is already cached).

use agentrt_sdk::BlockOp;

/// A block is part of the anchor only if it *ends* inside it: the block that straddles the
/// anchor's end also holds the start of one session's own content, which no other session reuses.
pub fn is_anchor_position(anchor_tokens: u32, position: u32, block_tokens: u32) -> bool {
    position.saturating_add(block_tokens.max(1)) <= anchor_tokens
}

/// The engine's block size in tokens: the smallest non-zero block position seen (one block in);
/// 0 until seen. Not in snapshots: relearned from the next events.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlockSize(u32);

impl BlockSize {
    pub fn learn(&mut self, position: u32) {
        if position > 0 && (self.0 == 0 || position < self.0) {
            self.0 = position;
        }
    }

    pub fn tokens(self) -> u32 {
        self.0
    }
}

/// An agent's anchor blocks stored and not removed since, and the most ever seen at once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Residency {
    pub blocks: u32,
    pub max: u32,
}

impl Residency {
    pub fn record(&mut self, op: BlockOp) {
        match op {
            BlockOp::Stored => {
                self.blocks += 1;
                self.max = self.max.max(self.blocks);
            }
            BlockOp::Removed => self.blocks = self.blocks.saturating_sub(1),
            BlockOp::Touched | BlockOp::AllCleared => {}
        }
    }

    /// The engine dropped every cached block.
    pub fn clear(&mut self) {
        self.blocks = 0;
    }

    /// As many anchor blocks cached as ever were: the whole anchor, as far as anyone can tell.
    pub fn resident(&self) -> bool {
        self.max > 0 && self.blocks >= self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn residency_follows_stores_and_removals() {
        let mut r = Residency::default();
        assert!(!r.resident());
        r.record(BlockOp::Stored);
        r.record(BlockOp::Stored);
        assert!(r.resident());
        r.record(BlockOp::Removed);
        assert!(!r.resident());
        r.record(BlockOp::Stored);
        r.clear();
        assert_eq!(r, Residency { blocks: 0, max: 2 });
        let mut size = BlockSize::default();
        for p in [0, 48, 16, 32] {
            size.learn(p);
        }
        assert_eq!(size.tokens(), 16);
        assert!(is_anchor_position(64, 48, 16) && !is_anchor_position(64, 56, 16));
    }
}

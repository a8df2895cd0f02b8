//! Which leading blocks of a prompt are its agent's anchor, where the source does not say.
//!
//! Mooncake and Bailian traces carry block ids and nothing about system prompts or tools, so an
//! anchor (what CacheSage protects and warms, and what names an agent when the framework does not)
//! has to be inferred. The choice is the user's (`--anchors`), and docs/workloads.md states it
//! beside every figure:
//! - `none`: no anchor; every request is one agent's;
//! - `first-block`: the prompt's first source block (a system prompt's head: Mooncake's 512-token
//!   blocks);
//! - `shared-prefix`: the leading blocks that prompts of at least two sessions contain (what a
//!   system prompt or a shared document looks like from block ids alone; ids are chained, so a
//!   block shared that way has all its predecessors shared too).

use std::collections::HashMap;

use clap::ValueEnum;

/// How an importer infers anchors from block ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AnchorRule {
    None,
    FirstBlock,
    SharedPrefix,
}

impl AnchorRule {
    pub fn name(self) -> &'static str {
        match self {
            AnchorRule::None => "none",
            AnchorRule::FirstBlock => "first-block",
            AnchorRule::SharedPrefix => "shared-prefix",
        }
    }

    /// For each prompt (its session's index and its block ids), how many leading blocks are its
    /// anchor.
    pub fn anchor_blocks(self, prompts: &[(usize, &[u64])]) -> Vec<usize> {
        match self {
            AnchorRule::None => vec![0; prompts.len()],
            AnchorRule::FirstBlock => prompts.iter().map(|(_, ids)| ids.len().min(1)).collect(),
            AnchorRule::SharedPrefix => {
                // id → (the first session seen with it, whether another session has it too).
                let mut seen: HashMap<u64, (usize, bool)> = HashMap::new();
                for &(session, ids) in prompts {
                    for &id in ids {
                        let e = seen.entry(id).or_insert((session, false));
                        if e.0 != session {
                            e.1 = true;
                        }
                    }
                }
                prompts
                    .iter()
                    .map(|(_, ids)| ids.iter().take_while(|id| seen[id].1).count())
                    .collect()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_prefix_is_what_two_sessions_contain() {
        let a: &[u64] = &[1, 2, 3, 4];
        let a2: &[u64] = &[1, 2, 3, 4, 5]; // the same session's next turn: not "shared"
        let b: &[u64] = &[1, 2, 9];
        let c: &[u64] = &[7];
        let prompts = [(0, a), (0, a2), (1, b), (2, c)];
        assert_eq!(AnchorRule::SharedPrefix.anchor_blocks(&prompts), [2, 2, 2, 0]);
        assert_eq!(AnchorRule::FirstBlock.anchor_blocks(&prompts), [1, 1, 1, 1]);
        assert_eq!(AnchorRule::None.anchor_blocks(&prompts), [0, 0, 0, 0]);
    }
}

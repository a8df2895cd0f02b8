//! The states of CacheSage's Markov chain: *where a session is*, as (the agent that ran last, how
//! many calls into the session it was).
//!
//! A first-order chain over agents alone cannot tell a session's rounds apart: in a two-turn
//! conversation `assistant → judge → assistant → judge → END`, "after the judge" is followed by the
//! assistant half the time and by the end of the session the other half, so every waiting
//! session's history looks half dead. Keying the state on the call's depth in the session as well
//! (`judge` at call 2 vs `judge` at call 4) makes both transitions certain. Depths from
//! `DEPTHS - 1` on share one state: long loops (ReAct, reflection) are where the chain is
//! stationary anyway, and the state count stays small enough for one byte per transition.

use crate::classic::agents::Slot;

/// A Markov state: `slot * DEPTHS + depth`, or the `START`/`END` terminal ([`terminal`]).
pub type Node = usize;

/// Depth buckets per agent: calls 0..DEPTHS-2 of a session each have their own state; later calls
/// share the last one.
pub const DEPTHS: usize = 6;

/// The state of a session whose call number `depth` (0 = its first) went to agent `slot`.
pub fn node(slot: Slot, depth: u32) -> Node {
    slot * DEPTHS + (depth as usize).min(DEPTHS - 1)
}

/// The agent of a non-terminal node.
pub fn slot_of(node: Node) -> Slot {
    node / DEPTHS
}

/// The nodes of `slot`, one per depth bucket.
pub fn nodes_of(slot: Slot) -> std::ops::Range<Node> {
    slot * DEPTHS..(slot + 1) * DEPTHS
}

/// Nodes for `agents` agent slots, not counting the terminal.
pub fn count(agents: usize) -> usize {
    agents * DEPTHS
}

/// The one terminal node: `START` as a source, `END` as a destination.
pub fn terminal(agents: usize) -> Node {
    count(agents)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_round_trip_and_deep_calls_share_a_bucket() {
        assert_eq!(slot_of(node(3, 0)), 3);
        assert_eq!(slot_of(node(3, 40)), 3);
        assert_eq!(node(3, DEPTHS as u32 - 1), node(3, 99));
        assert_ne!(node(3, 1), node(3, 2));
        assert!(nodes_of(3).contains(&node(3, 7)));
        assert_eq!(terminal(4), 4 * DEPTHS);
    }
}

//! The guard's two kinds of evidence. While the robust order ranks: pairs on rankings of two
//! candidates where the orders disagree — the older block `A` (the robust order evicts it) and the
//! newer `B` (the learned one would) — settled for the order that kept the block asked for first.
//! While the learned order ranks: the shadow of the robust one on the same accesses.

use agentrt_sdk::testing::gpu_block;
use agentrt_sdk::{BlockEvent, BlockOp, Tier};

use super::Guard;
use crate::classes::Order;

fn event(op: BlockOp, block_hash: u64) -> BlockEvent {
    BlockEvent {
        op,
        agent: 1,
        block_hash,
        parent_hash: 0,
        position: 0,
        tier: Tier::Gpu,
    }
}

/// A guard for a cache of `blocks`, with closings heard: the robust order ranks.
fn robust(blocks: u32) -> Guard {
    let mut g = Guard::new(true);
    g.set_total_blocks(blocks);
    g.closings_heard();
    g
}

/// One ranking of `A = base` and `B = base + 1` while the robust order ranks; the engine evicts
/// `A`, then the traffic asks for `A` when the learned order was right, else for `B`.
fn pair_round(g: &mut Guard, base: u64, learned_right: bool, traffic: bool) {
    let items = [gpu_block(base, base), gpu_block(base + 1, base + 1)];
    g.choose(&items, vec![0.0, 1.0], vec![1.0, 0.0]);
    g.observe_block(&event(BlockOp::Removed, base), true, base);
    let (op, asked) = if learned_right {
        (BlockOp::Stored, base)
    } else {
        (BlockOp::Touched, base + 1)
    };
    g.observe_block(&event(op, asked), traffic, base);
}

#[test]
fn hints_come_first_and_the_learned_order_ranks_once_its_pairs_show_it_wins() {
    let mut g = Guard::new(true);
    assert_eq!(
        g.follows(),
        Order::Learned,
        "without hints: the learned order, guarded by the shadow"
    );
    g.set_total_blocks(100);
    g.closings_heard();
    assert_eq!(
        g.follows(),
        Order::Robust,
        "closings heard: the robust order until the evidence"
    );
    for round in 0..10 {
        pair_round(&mut g, round * 10, false, true);
    }
    let e = g.evidence;
    assert_eq!((e.robust.round(), e.learned, g.follows()), (10.0, 0.0, Order::Robust));
    let mut rounds = 0;
    while g.follows() == Order::Robust {
        pair_round(&mut g, 1000 + rounds * 10, true, true);
        rounds += 1;
        assert!(rounds <= 40, "a learned order that keeps winning takes over");
    }
    let e = g.evidence;
    assert_eq!((e.learned, e.robust), (0.0, 0.0), "the learned order is judged afresh");
    // Handed back at once (as the shadow would): winning it back takes twice the pairs.
    g.switch(Order::Robust, 0);
    let mut again = 0;
    while g.follows() == Order::Robust {
        pair_round(&mut g, 5000 + again * 10, true, true);
        again += 1;
    }
    assert!(
        rounds < 32 && (20..=22).contains(&again),
        "a breaker's backoff: {rounds}, then {again}"
    );
}

/// Four new blocks stored in a cache of four: round `round`'s.
fn store_four(g: &mut Guard, round: u64) -> Vec<u64> {
    let blocks: Vec<u64> = (0..4).map(|i| 100 * round + i).collect();
    for &b in &blocks {
        g.observe_block(&event(BlockOp::Stored, b), true, 0);
    }
    blocks
}

#[test]
fn the_learned_order_hands_back_once_the_shadow_hits_more() {
    let mut g = Guard::new(true);
    g.set_total_blocks(4);
    for round in 0..20u64 {
        let blocks = store_four(&mut g, round);
        // The learned order evicts the first; LRU (the shadow) would have kept all four.
        g.observe_block(&event(BlockOp::Removed, blocks[0]), true, 0);
        g.observe_block(&event(BlockOp::Stored, blocks[0]), true, 0);
        if g.follows() == Order::Robust {
            assert!(round >= 9, "three standard deviations take ten lost blocks: {round}");
            return;
        }
    }
    panic!("the shadow's hits never counted");
}

#[test]
fn what_both_orders_evict_first_or_agree_on_settles_nothing() {
    let mut g = Guard::new(true);
    g.set_total_blocks(4);
    for round in 0..20u64 {
        let blocks = store_four(&mut g, round);
        // The first block is a closed session's: the shadow evicts it when the engine does.
        let items = [gpu_block(blocks[0], 0)];
        g.choose(&items, vec![-3.0], vec![-3.0]);
        g.observe_block(&event(BlockOp::Removed, blocks[0]), true, 0);
        g.observe_block(&event(BlockOp::Stored, blocks[0]), true, 0);
    }
    assert_eq!(g.follows(), Order::Learned);
    let mut r = robust(100);
    for base in (0..1000).step_by(10) {
        let items = [gpu_block(base, base), gpu_block(base + 1, base + 1)];
        r.choose(&items, vec![0.0, 1.0], vec![0.5, 0.9]);
        r.observe_block(&event(BlockOp::Removed, base), true, 0);
        r.observe_block(&event(BlockOp::Stored, base), true, 0);
    }
    assert_eq!(
        (r.evidence.learned + r.evidence.robust, r.follows()),
        (0.0, Order::Robust),
        "orders that agree make no pair"
    );
}

#[test]
fn warm_ups_judge_nothing_and_an_unguarded_policy_always_follows_the_model() {
    let mut g = robust(100);
    for i in 0..100 {
        pair_round(&mut g, i * 10, true, false);
    }
    assert_eq!((g.evidence.learned, g.follows()), (0.0, Order::Robust));
    let mut off = Guard::new(false);
    off.closings_heard();
    let scores = off.choose(&[gpu_block(1, 1)], vec![0.0], vec![7.0]);
    assert_eq!((scores, off.follows()), (vec![7.0], Order::Learned));
}

#[test]
fn a_pair_settles_once_after_its_ranking_is_gone_and_not_after_its_horizon() {
    let mut g = robust(100);
    g.choose(&[gpu_block(1, 1), gpu_block(2, 2)], vec![0.0, 1.0], vec![1.0, 0.0]);
    g.observe_block(&event(BlockOp::Removed, 1), true, 0);
    g.choose(&[gpu_block(3, 3)], vec![0.0], vec![0.0]);
    g.observe_block(&event(BlockOp::Stored, 1), true, 0);
    assert_eq!(g.evidence.learned, 1.0, "A asked for first: the learned order kept it");
    g.observe_block(&event(BlockOp::Touched, 2), true, 0);
    assert_eq!(g.evidence.robust, 0.0, "a pair settles once");
    g.choose(&[gpu_block(5, 5), gpu_block(6, 6)], vec![0.0, 1.0], vec![1.0, 0.0]);
    g.observe_block(&event(BlockOp::Removed, 5), true, 0);
    for h in 1000..1000 + 70_000 {
        g.observe_block(&event(BlockOp::Removed, h), true, 0);
    }
    g.observe_block(&event(BlockOp::Stored, 5), true, 0);
    let e = g.evidence;
    assert!(
        e.learned < 0.5 && e.robust == 0.0,
        "too late to say which was needed first: {e:?}"
    );
}

#[test]
fn a_block_the_learned_order_would_evict_is_its_victim_once_until_it_is_asked_for_again() {
    let mut g = robust(100);
    // Ranking after ranking, the learned order would evict the same block `B` (it stays lowest);
    // the engine evicts a different old block each time, and each is asked for again.
    const B: u64 = 1;
    let round = |g: &mut Guard, a: u64| {
        g.choose(&[gpu_block(a, a), gpu_block(B, B)], vec![0.0, 1.0], vec![1.0, 0.0]);
        g.observe_block(&event(BlockOp::Removed, a), true, 0);
        g.observe_block(&event(BlockOp::Stored, a), true, 0);
    };
    for a in (10..200).step_by(10) {
        round(&mut g, a);
    }
    assert_eq!(
        (g.evidence.learned.round(), g.follows()),
        (1.0, Order::Robust),
        "evicting B once keeps one block, not every block evicted while B stayed"
    );
    // B asked for: back in the learned order's cache, its victim again at the next ranking.
    g.observe_block(&event(BlockOp::Touched, B), true, 0);
    round(&mut g, 500);
    assert_eq!(g.evidence.learned.round(), 2.0);
}

#[test]
fn the_pairs_one_prompt_settles_count_as_one_observation() {
    // Rankings of A = 10i and B = 10i + 1: the robust order evicts every A, the learned one
    // would evict every B; then prompts ask for the A's first (the learned order was right).
    let evict_pairs = |g: &mut Guard, n: u64| {
        for i in 0..n {
            g.choose(
                &[gpu_block(10 * i, 10 * i), gpu_block(10 * i + 1, 10 * i + 1)],
                vec![0.0, 1.0],
                vec![1.0, 0.0],
            );
            g.observe_block(&event(BlockOp::Removed, 10 * i), true, 0);
        }
    };
    let block_of_prompt = |hash: u64, parent: u64| BlockEvent {
        parent_hash: parent,
        ..event(BlockOp::Stored, hash)
    };
    // One prompt of 40 blocks asks for all 40: a lead of 40, all on one prompt's say.
    let mut g = robust(100);
    evict_pairs(&mut g, 40);
    for i in 0..40 {
        let parent = if i == 0 { 0 } else { 10 * (i - 1) };
        g.observe_block(&block_of_prompt(10 * i, parent), true, 0);
    }
    assert_eq!((g.evidence.learned, g.follows()), (40.0, Order::Robust));
    // Forty prompts ask for one each: forty observations, and the learned order takes over.
    let mut g = robust(100);
    evict_pairs(&mut g, 40);
    for i in 0..40 {
        g.observe_block(&block_of_prompt(10 * i, 0), true, 0);
        if g.follows() == Order::Learned {
            return;
        }
    }
    panic!("forty prompts' wins did not count");
}

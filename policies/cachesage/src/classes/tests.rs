//! The classes through the SDK's harness (the packed paths the host uses): closed sessions'
//! blocks first in either order, a short tool wait kept and a long user wait dropped in the
//! learned one, silence a wait once closings are heard, every table bounded.

use agentrt_sdk::testing::{rank, session_end_for, Harness};
use agentrt_sdk::{
    BlockEvent, BlockOp, EndReason, EngineLoad, Event, Item, ItemKind, RequestArrival, SessionWait, Tier, WaitKind,
};

use super::{Classes, MAX_CLOSED, MAX_WAITING};
use crate::returns::MAX_TOOL_CURVES;
use crate::CacheSage;

const ANCHOR: u32 = 64;
const CACHE_BLOCKS: u32 = 100;

fn register(agent: u32) -> Event {
    crate::test_events::register(agent, ANCHOR)
}

fn arrival(session: u64, at_ms: u64) -> Event {
    Event::RequestArrival(RequestArrival {
        request_id: at_ms * 1000 + session,
        agent: 1,
        session,
        anchor_hash: 0xa001,
        prompt_tokens: 500,
        continues: None,
        warmup: false,
        at_us: at_ms * 1000,
    })
}

fn wait(session: u64, kind: WaitKind, tool: u64, at_ms: u64) -> Event {
    Event::SessionWait(SessionWait {
        session,
        agent: 1,
        kind,
        tool,
        expected_us: 0,
        hinted: true,
        at_us: at_ms * 1000,
    })
}

fn load(at_ms: u64) -> Event {
    Event::EngineLoad(EngineLoad {
        queue_depth: 0,
        running: 1,
        free_blocks: 0,
        total_blocks: CACHE_BLOCKS,
        at_us: at_ms * 1000,
    })
}

/// A block of agent 1's session `session`, past the anchor (position in tokens).
fn block(key: u64, session: u64, position: u32, last_access: u64) -> Item {
    Item {
        kind: ItemKind::KvBlock,
        key,
        agent: 1,
        session,
        last_access,
        tokens: 16,
        position,
        tier: Tier::Gpu,
    }
}

fn removed(n: u32) -> Vec<BlockEvent> {
    (0..n)
        .map(|i| BlockEvent {
            op: BlockOp::Removed,
            agent: 1,
            block_hash: 0xdead_0000 + u64::from(i),
            parent_hash: 0,
            position: 0,
            tier: Tier::Gpu,
        })
        .collect()
}

/// The keys of `items` in evict-first order.
fn eviction_order(p: &mut Harness<CacheSage>, items: &[Item]) -> Vec<u64> {
    let scores = p.score(items);
    rank(items, &scores).into_iter().rev().map(|i| items[i].key).collect()
}

/// Sessions 7 and 6 (closed by the framework, 7 first), 8 (live) and 9 (ended by silence, as
/// `serve` infers ends) of agent 1, and candidates: 9's content oldest, then 8's, 6's, 7's;
/// 7's anchor block (reported with session 7: no other session reused it).
fn closed_live_and_silent(config: &[(&'static str, &'static str)]) -> (Harness<CacheSage>, [Item; 7]) {
    let mut p = Harness::<CacheSage>::new(config.iter().copied()).unwrap();
    p.observe(&[
        register(1),
        load(0),
        arrival(9, 0),
        arrival(7, 5),
        arrival(8, 10),
        arrival(6, 12),
    ]);
    p.observe(&[
        session_end_for(9, EndReason::Idle),
        session_end_for(7, EndReason::Closed),
        session_end_for(6, EndReason::Closed),
    ]);
    let items = [
        block(1, 9, 80, 1),
        block(2, 8, 80, 10),
        block(3, 8, 96, 11),
        block(8, 6, 80, 20),
        block(4, 7, 80, 50),
        block(5, 7, 96, 51),
        block(6, 7, 0, 5),
    ];
    (p, items)
}

#[test]
fn closed_sessions_blocks_go_first_in_either_order_least_recently_used_first_as_closed_first_does() {
    let (mut plain, items) = closed_live_and_silent(&[("hints", "false")]);
    let before = eviction_order(&mut plain, &items);
    assert_eq!(before[0], 1, "without hints LRU's order: {before:?}");
    for config in [&[][..], &[("guard", "false")][..]] {
        let (mut hinted, items) = closed_live_and_silent(config);
        let order = eviction_order(&mut hinted, &items);
        assert_eq!(
            &order[..4],
            [6, 8, 4, 5],
            "{config:?}: 6's and 7's blocks, 7's anchor block too, least recently used first: {order:?}"
        );
    }
}

/// Teach `p` that tool waits (of `tool`) end after ~2 s and user waits after ~1 hour, `n` of each.
fn teach_waits(p: &mut Harness<CacheSage>, tool: u64, n: u64) {
    for i in 0..n {
        let (s_tool, s_user) = (1000 + i, 2000 + i);
        let t = i * 10;
        p.observe(&[
            arrival(s_tool, t),
            wait(s_tool, WaitKind::Tool, tool, t + 1),
            arrival(s_tool, t + 2_001),
            arrival(s_user, t),
            wait(s_user, WaitKind::User, 0, t + 1),
            arrival(s_user, t + 3_600_001),
        ]);
    }
}

#[test]
fn in_the_learned_order_a_short_tool_wait_keeps_its_context_and_a_long_user_wait_does_not() {
    let mut p = Harness::<CacheSage>::new([("guard", "false")]).unwrap();
    p.observe(&[register(1), load(0)]);
    teach_waits(&mut p, 0xb45, 16);
    // The cache turns over in ~1 minute: 100 blocks removed over 60 s.
    let now = 4_000_000;
    p.observe(&[load(now - 60_000)]);
    p.observe_blocks(&removed(1));
    p.observe(&[load(now)]);
    p.observe_blocks(&removed(CACHE_BLOCKS));
    // Session 1 waits for the tool, session 2 for its user; 3 is live. The user-waiting
    // session's blocks are the most recent.
    p.observe(&[
        arrival(3, now - 5),
        arrival(1, now - 4),
        wait(1, WaitKind::Tool, 0xb45, now - 3),
        arrival(2, now - 2),
        wait(2, WaitKind::User, 0, now - 1),
        load(now),
    ]);
    let items = [block(10, 3, 80, 1), block(11, 1, 80, 2), block(12, 2, 80, 3)];
    let order = eviction_order(&mut p, &items);
    assert_eq!(order[0], 12, "the user wait of an hour goes first: {order:?}");
    let c = &p.policy().classes;
    assert!(
        c.p_return(1, now * 1000).is_some_and(|p| p > 0.5),
        "the tool wait is back in time"
    );
    assert!(c.p_return(2, now * 1000).is_some_and(|p| p < 0.5));
    assert_eq!(c.p_return(3, now * 1000), None, "3 waits for nothing");
}

#[test]
fn every_table_stays_bounded_and_a_closed_session_that_calls_again_is_open_again() {
    let mut c = Classes::default();
    let n = 2 * MAX_CLOSED.max(MAX_WAITING) as u64;
    for s in 1..=n {
        c.observe(&wait(s, WaitKind::Tool, s % 1000 + 1, s));
        c.observe(&session_end_for(s + n, EndReason::Closed));
    }
    for s in 1..=200 {
        // Waits of 200 tools seen to their end: one curve each, at most the cap kept.
        c.observe(&wait(s, WaitKind::Tool, s, s));
        c.observe(&arrival(s, s + 5));
    }
    let (closed, waiting, tools) = (c.closed.len(), c.waiting.len(), c.curves.tools());
    assert!(closed <= MAX_CLOSED, "{closed}");
    assert!(waiting <= MAX_WAITING, "{waiting}");
    assert!(tools <= MAX_TOOL_CURVES, "{tools}");
    assert!(c.closed.queued() <= 2 * MAX_CLOSED + 1 && c.waiting.queued() <= 2 * MAX_WAITING + 1);
    assert!(c.closed.contains(2 * n));
    c.observe(&arrival(2 * n, 1)); // the last session closed calls again: a wrong hint
    assert!(!c.closed.contains(2 * n), "open again");
}

#[test]
fn once_closings_are_signalled_silence_is_a_wait_not_an_end() {
    let mut p = Harness::<CacheSage>::new([("guard", "false")]).unwrap();
    p.observe(&[register(1), load(0), arrival(9, 0), arrival(7, 5), arrival(9, 6)]);
    // The framework closes 7; then 9 falls silent past the idle time: a pause, not an end.
    p.observe(&[
        session_end_for(7, EndReason::Closed),
        session_end_for(9, EndReason::Idle),
    ]);
    assert_eq!(p.policy().classes.waiting.len(), 1, "9 waits, as for its user");
    let items = [block(1, 9, 80, 1), block(4, 7, 80, 50)];
    let scores = p.score(&items);
    assert!(scores[0] > 0.0, "the silent session's content is not dead: {scores:?}");
    assert!(scores[1] < scores[0], "{scores:?}");
}

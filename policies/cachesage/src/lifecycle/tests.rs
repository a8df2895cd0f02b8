//! Lifecycle hints through the SDK's harness (the packed paths the host uses): closed sessions'
//! blocks first, a short tool wait kept and a long user wait dropped, return curves learned from
//! waits, every table bounded.

use agentrt_sdk::testing::{rank, session_end_for, Harness};
use agentrt_sdk::{
    AgentRegistered, BlockEvent, BlockOp, EndReason, EngineLoad, Event, Item, ItemKind, RequestArrival, SessionWait,
    Tier, WaitKind,
};

use super::{Lifecycle, ReturnCurve, MAX_CLOSED, MAX_TOOL_CURVES, MAX_WAITING, MIN_RETURNS};
use crate::CacheSage;

const ANCHOR: u32 = 64;
const CACHE_BLOCKS: u32 = 100;

fn register(agent: u32) -> Event {
    Event::AgentRegistered(AgentRegistered {
        agent,
        name: format!("agent-{agent}"),
        anchor_hash: 0xa000 + u64::from(agent),
        anchor_tokens: ANCHOR,
    })
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

/// Sessions 7 (closed by the framework), 8 (live) and 9 (ended by silence, as `serve` infers
/// ends) of agent 1, and candidates: 9's content oldest, then 8's, then 7's; 7's anchor block.
fn closed_live_and_silent(config: &[(&'static str, &'static str)]) -> (Harness<CacheSage>, [Item; 6]) {
    let mut p = Harness::<CacheSage>::new(config.iter().copied()).unwrap();
    p.observe(&[register(1), load(0), arrival(9, 0), arrival(7, 5), arrival(8, 10)]);
    p.observe(&[
        session_end_for(9, EndReason::Idle),
        session_end_for(7, EndReason::Closed),
    ]);
    let items = [
        block(1, 9, 80, 1),
        block(2, 8, 80, 10),
        block(3, 8, 96, 11),
        block(4, 7, 80, 50),
        block(5, 7, 96, 51),
        block(6, 7, 0, 5),
    ];
    (p, items)
}

#[test]
fn a_closed_sessions_blocks_go_before_any_other_victim_but_not_its_anchor() {
    let (mut plain, items) = closed_live_and_silent(&[("hints", "false")]);
    let before = eviction_order(&mut plain, &items);
    assert_eq!(
        before[0], 1,
        "without hints the silent session's older block goes first: {before:?}"
    );
    let (mut hinted, items) = closed_live_and_silent(&[]);
    let order = eviction_order(&mut hinted, &items);
    assert_eq!(
        &order[..2],
        [4, 5],
        "the closed session's content first, oldest first: {order:?}"
    );
    let rest: Vec<u64> = before.into_iter().filter(|k| *k != 4 && *k != 5).collect();
    assert_eq!(
        &order[2..],
        rest.as_slice(),
        "then the model's own order, the closed session's anchor block (6) in it"
    );
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
fn a_short_tool_wait_keeps_its_context_and_a_long_user_wait_does_not() {
    let mut p = Harness::<CacheSage>::new([]).unwrap();
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
    assert_eq!(
        &order[1..],
        [10, 11],
        "the tool wait of seconds is kept as LRU keeps it: {order:?}"
    );
}

#[test]
fn return_curves_are_learned_from_waits_per_tool_and_per_kind() {
    let mut l = Lifecycle::default();
    assert!(l.curve(WaitKind::Tool, 7).is_none(), "nothing learned yet");
    for i in 0..(MIN_RETURNS as u64) {
        let s = 100 + i;
        l.observe(&arrival(s, 0));
        l.observe(&wait(s, WaitKind::Tool, 7, 0));
        l.observe(&arrival(s, 2_000));
    }
    let curve = l.curve(WaitKind::Tool, 7).expect("the tool's own curve");
    assert!(curve.p_return(0.0, 10_000.0) > 0.99, "back within 10 s");
    assert!(curve.p_return(0.0, 500.0) < 0.01, "not within 0.5 s");
    assert!(
        curve.p_return(5_000.0, 60_000.0) == 0.0,
        "waited past every return seen"
    );
    // Another tool, unseen, is timed by the kind's curve, which learned the same waits.
    assert!(l
        .curve(WaitKind::Tool, 99)
        .is_some_and(|c| c.p_return(0.0, 10_000.0) > 0.99));
    // A close while waiting is a wait that never returned.
    let mut c = ReturnCurve::default();
    c.record_return(1_000.0);
    c.record_never();
    assert!((c.p_return(0.0, 1e9) - 0.5).abs() < 1e-6);
}

#[test]
fn every_table_stays_bounded() {
    let mut l = Lifecycle::default();
    let n = 2 * MAX_CLOSED.max(MAX_WAITING) as u64;
    for s in 1..=n {
        l.observe(&wait(s, WaitKind::Tool, s % 1000 + 1, s));
        l.observe(&session_end_for(s + n, EndReason::Closed));
    }
    for s in 1..=200 {
        // Waits of 200 tools seen to their end: one curve each, at most the cap kept.
        l.observe(&wait(s, WaitKind::Tool, s, s));
        l.observe(&arrival(s, s + 5));
    }
    for s in 1..=n {
        l.observe(&arrival(s + 3 * n, s));
    }
    let (closed, waiting, tools, _, live) = l.sizes();
    assert!(live <= super::MAX_LIVE, "{live}");
    assert!(closed <= MAX_CLOSED, "{closed}");
    assert!(waiting <= MAX_WAITING, "{waiting}");
    assert!(tools <= MAX_TOOL_CURVES, "{tools}");
    assert!(l.closed_order.len() <= 2 * MAX_CLOSED + 1 && l.waiting_order.len() <= 2 * MAX_WAITING + 1);
}

#[test]
fn once_closings_are_signalled_live_sessions_outrank_what_no_live_session_owns() {
    let (mut plain, items) = closed_live_and_silent(&[("hints", "false")]);
    let (mut hinted, _) = closed_live_and_silent(&[]);
    // A block of agent 2, which no live session runs, used more recently than anything.
    let mut items = items.to_vec();
    items.push(Item {
        agent: 2,
        ..block(7, 0, 80, 60)
    });
    let before = eviction_order(&mut plain, &items);
    let order = eviction_order(&mut hinted, &items);
    let position = |order: &[u64], key: u64| order.iter().position(|k| *k == key).unwrap();
    assert!(
        position(&before, 7) > position(&before, 2),
        "without hints the recent block outlives live content: {before:?}"
    );
    assert_eq!(
        &order[..4],
        [4, 5, 1, 7],
        "closed, then what no live session owns (the silent session's, agent 2's): {order:?}"
    );
}

#[test]
fn once_closings_are_signalled_silence_is_a_wait_not_an_end() {
    let mut p = Harness::<CacheSage>::new([]).unwrap();
    p.observe(&[register(1), load(0), arrival(9, 0), arrival(7, 5), arrival(8, 10)]);
    // The framework closes 7; then 9 falls silent past the idle time: a pause, not an end.
    p.observe(&[
        session_end_for(7, EndReason::Closed),
        session_end_for(9, EndReason::Idle),
    ]);
    let items = [
        block(1, 9, 80, 1),
        Item {
            agent: 2,
            ..block(7, 0, 80, 60)
        },
        block(4, 7, 80, 50),
    ];
    let order = eviction_order(&mut p, &items);
    assert_eq!(
        order,
        [4, 7, 1],
        "closed first, then what no live session owns; the silent session stays live: {order:?}"
    );
    assert_eq!(p.policy().lifecycle.sizes().1, 1, "9 waits, as for its user");
}

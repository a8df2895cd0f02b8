//! CacheSage through the real component in the real host: its model (`guard=false`, so the
//! learned order ranks whatever the evidence) protects an application's next agent's anchor while a
//! session is live, ranks a popular application's anchors above a quiet one's, predicts the next
//! agent, and warms a missing anchor once; once closings are heard it ranks exactly like LRU (with
//! closed sessions' blocks first) until the evidence says the model wins; state stays inside its
//! budget at 10,000 agents and survives a hot swap;
//! a setting it does not know is refused by name.

use agentrt_runtime::types::*;
use agentrt_runtime::{keep_order, lru_order, packed, PolicyHandle};
use agentrt_tests::*;

const ANCHOR_TOKENS: u32 = 64; // 4 blocks of 16

fn registered(agent: u32) -> Event {
    Event::AgentRegistered(AgentRegistered {
        agent,
        name: format!("agent-{agent}"),
        anchor_hash: 0xa000 + u64::from(agent),
        anchor_tokens: ANCHOR_TOKENS,
    })
}

/// One call of `agent` in `session` at `at_ms`, finishing 500 ms later.
fn call(agent: u32, session: u64, first: bool, at_ms: u64) -> [Event; 2] {
    let at_us = at_ms * 1000;
    [
        Event::RequestArrival(RequestArrival {
            request_id: at_us + u64::from(agent),
            agent,
            session,
            anchor_hash: 0xa000 + u64::from(agent),
            prompt_tokens: 600,
            continues: (!first).then_some(Continuation {
                shared_tokens: 600,
                previous_tokens: 500,
            }),
            warmup: false,
            at_us,
        }),
        Event::RequestFinish(RequestFinish {
            request_id: at_us + u64::from(agent),
            agent,
            session,
            prompt_tokens: 600,
            cached_tokens: 0,
            output_tokens: 50,
            warmup: false,
            ok: true,
            at_us: at_us + 500_000,
        }),
    ]
}

/// A session of the pipeline `agents`, one call every 3 s (a tool runs between calls).
fn session(agents: &[u32], session: u64, start_ms: u64, ends: bool) -> Vec<Event> {
    let mut events: Vec<Event> = agents
        .iter()
        .enumerate()
        .flat_map(|(i, &a)| call(a, session, true, start_ms + i as u64 * 3_000))
        .collect();
    if ends {
        events.push(session_end(session));
    }
    events
}

/// CacheSage whose learned order always ranks: its model's own ranking.
fn unguarded(engine: &agentrt_runtime::PolicyEngine) -> PolicyHandle {
    start(engine, "cachesage", &[("guard", "false")])
}

#[test]
fn an_application_seen_once_protects_its_next_agent_while_its_session_is_live() {
    let (engine, _cache) = engine();
    let policy = unguarded(&engine);
    let mut events: Vec<Event> = (1..=6).map(registered).collect();
    events.extend(session(&[4, 5, 6], 90, 0, true)); // app B, once, long ago
    events.extend(session(&[1, 2, 3], 91, 60_000, true)); // app A, once
    events.extend(call(1, 92, true, 120_000)); // A again: agent 1 ran, its tool is running
    policy.observe(&events).unwrap();
    // Agent 2's anchor is the oldest candidate; B's anchor and the ended session's content newer.
    let items = [
        session_block(2, 91, 0, 1),
        session_block(5, 90, 0, 5),
        session_block(3, 91, 128, 9),
    ];
    let ranking = policy.rank(&items);
    assert!(ranking.fallback.is_none(), "{:?}", ranking.fallback);
    assert_eq!(
        ranking.order,
        vec![0, 1, 2],
        "keep A's next anchor, then B's, then dead content"
    );
    // Without hints the guarded default ranks as the model does; once the framework's closings
    // are heard, hints come first and the robust order ranks until the model has shown it wins:
    // here, with no closed session among the candidates, LRU.
    let guarded = start(&engine, "cachesage", &[]);
    guarded.observe(&events).unwrap();
    assert_eq!(guarded.rank(&items).order, vec![0, 1, 2]);
    guarded
        .observe(&[Event::SessionEnd(SessionEnd {
            session: 92,
            reason: EndReason::Closed,
            at_us: 121_000_000,
        })])
        .unwrap();
    assert_eq!(guarded.rank(&items).order, lru_order(&items));
    assert!(
        guarded.act().unwrap().is_empty(),
        "no warm-ups while the robust order ranks"
    );
    let forecasts = policy.predict(1).unwrap();
    let next = |agent| {
        forecasts
            .iter()
            .find(|f| f.session == 92 && f.agent == agent)
            .map(|f| f.probability)
    };
    assert_eq!(
        next(2),
        Some(0.5),
        "seen once, with a prior of one: even odds of agent 2 next"
    );
    assert_eq!(next(5), None);
}

#[test]
fn a_popular_applications_anchor_outranks_a_quiet_ones() {
    let (engine, _cache) = engine();
    let policy = unguarded(&engine);
    let mut events: Vec<Event> = (1..=6).map(registered).collect();
    events.extend(session(&[4, 5, 6], 500, 0, true));
    events.extend(session(&[4, 5, 6], 501, 100_000, true));
    for s in 0..10 {
        events.extend(session(&[1, 2, 3], s, 100_000 + s * 10_000, true));
    }
    policy.observe(&events).unwrap();
    let items = [session_block(3, 9, 0, 1), session_block(6, 501, 0, 2)];
    assert_eq!(policy.rank(&items).order, vec![0, 1]);
}

#[test]
fn cold_start_ranks_like_lru() {
    let (engine, _cache) = engine();
    let policy = unguarded(&engine);
    policy.observe(&(1..=3).map(registered).collect::<Vec<_>>()).unwrap();
    let items: Vec<Item> = (0..20)
        .map(|i| session_block(1 + i % 3, 7, (i % 5) * 16, u64::from(i * 7 % 20)))
        .collect();
    assert_eq!(keep_order(&items, &policy.score(&items).unwrap()), lru_order(&items));
}

#[test]
fn state_stays_inside_its_budget_at_ten_thousand_agents_and_survives_a_hot_swap() {
    let (engine, _cache) = engine();
    let policy = start(&engine, "cachesage", &[]);
    let mut rng = Rng::new(3);
    for batch in 0..100u64 {
        let events: Vec<Event> = (0..200u64)
            .flat_map(|i| {
                let n = batch * 200 + i;
                let agent = 1 + (n % 10_000) as u32;
                let session = rng.below(40_000);
                let mut e = vec![registered(agent)];
                e.extend(call(agent, session, true, n * 10));
                e
            })
            .collect();
        policy.observe(&events).unwrap();
    }
    let snap = policy.snapshot().unwrap();
    println!("CacheSage state at 10,000 agents: {} bytes", snap.len());
    assert!(snap.len() <= 20 * 1024 + 100 * (10_000 - 32), "{} bytes", snap.len());
    // Per-session forecasts of the most recent sessions (workload-wide shares also count the live
    // sessions past the snapshot's budget, which a restore treats as ended).
    let per_session = |f: Vec<Forecast>| f.into_iter().filter(|f| f.session != 0).collect::<Vec<_>>();
    let before = per_session(policy.predict(2).unwrap());
    assert!(!before.is_empty());
    policy.swap(load(&engine, "cachesage")).unwrap();
    assert_eq!(policy.snapshot().unwrap(), snap, "the swap carried the state");
    assert_eq!(per_session(policy.predict(2).unwrap()), before);
}

#[test]
fn warms_the_next_agents_missing_anchor_once() {
    let (engine, _cache) = engine();
    let policy = start(&engine, "cachesage", &[("guard", "false"), ("warmup-budget", "1")]);
    let mut events: Vec<Event> = (1..=3).map(registered).collect();
    for s in 0..3 {
        events.extend(session(&[1, 2, 3], s, s * 20_000, true));
    }
    events.extend(call(1, 50, true, 80_000)); // a new session called agent 1: agent 2 comes next
    policy.observe(&events).unwrap();
    let anchor_block = |op, position| BlockEvent {
        op,
        agent: 2,
        block_hash: 0x200 + u64::from(position),
        parent_hash: 0,
        position,
        tier: Tier::Gpu,
    };
    let blocks = |op| {
        let mut words = Vec::new();
        for position in (0..ANCHOR_TOKENS).step_by(16) {
            packed::encode(&anchor_block(op, position), &mut words);
        }
        words
    };
    policy.observe_blocks(&blocks(BlockOp::Stored)).unwrap();
    assert!(policy.act().unwrap().is_empty(), "the anchor is cached");
    let mut words = Vec::new();
    packed::encode(&anchor_block(BlockOp::Removed, 48), &mut words);
    policy.observe_blocks(&words).unwrap();
    let effects = policy.act().unwrap();
    assert!(
        matches!(effects.as_slice(), [SideEffect::WarmPrefix(w)] if w.agent == 2 && w.anchor_hash == 0xa002),
        "{effects:?}"
    );
    assert!(policy.act().unwrap().is_empty(), "not again within the cooldown");
    let evict_only = start(&engine, "cachesage", &[("guard", "false"), ("prefetch", "false")]);
    evict_only.observe(&events).unwrap();
    assert!(evict_only.act().unwrap().is_empty());
}

#[test]
fn a_setting_it_does_not_know_is_refused_by_name() {
    let (engine, _cache) = engine();
    let config = agentrt_runtime::SlotConfig::new("test/bad-setting").with_init([("model", "classic")]);
    match PolicyHandle::start(&engine, load(&engine, "cachesage"), config) {
        Ok(_) => panic!("model=classic was accepted"),
        Err(err) => assert!(err.to_string().contains("model"), "{err}"),
    }
}

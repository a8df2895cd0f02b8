//! CacheSage's classic model (`model=classic`, the published design) through the real component in
//! the real host (the scaled model, the default, is tested in `cachesage_scaled.rs`): it learns a multi-agent chain, predicts
//! the next agent with the right probabilities, keeps the anchors of agents about to run, warms a
//! missing anchor, ranks like LRU when there is nothing to learn, and keeps its state bounded.

use agentrt_runtime::types::*;
use agentrt_runtime::{keep_order, lru_order, packed, PolicyHandle};
use agentrt_tests::*;

const PLANNER: u32 = 1;
const CODER: u32 = 2;
const TESTER: u32 = 3;
const AUDITOR: u32 = 4;
const ANCHOR_TOKENS: u32 = 64; // 4 blocks of 16

fn anchor_hash(agent: u32) -> u64 {
    0xa000 + u64::from(agent)
}

fn registered(agent: u32) -> Event {
    Event::AgentRegistered(AgentRegistered {
        agent,
        name: format!("agent-{agent}"),
        anchor_hash: anchor_hash(agent),
        anchor_tokens: ANCHOR_TOKENS,
    })
}

fn arrival(agent: u32, session: u64) -> Event {
    Event::RequestArrival(RequestArrival {
        request_id: 0,
        agent,
        session,
        anchor_hash: anchor_hash(agent),
        prompt_tokens: 500,
        continues: None,
        warmup: false,
        at_us: 0,
    })
}

/// Sessions loop planner → coder → tester → planner → coder → tester → end, two at a time; one
/// early auditor session that ended. Leaves session 1000 at the coder.
fn learn_chain(policy: &PolicyHandle) {
    let mut events: Vec<Event> = [PLANNER, CODER, TESTER, AUDITOR].into_iter().map(registered).collect();
    events.extend([arrival(AUDITOR, 999), session_end(999)]);
    for pair in 0..10u64 {
        let (a, b) = (2 * pair, 2 * pair + 1);
        for _round in 0..2 {
            for agent in [PLANNER, CODER, TESTER] {
                events.push(arrival(agent, a));
                events.push(arrival(agent, b));
            }
        }
        events.extend([session_end(a), session_end(b)]);
    }
    events.extend([arrival(PLANNER, 1000), arrival(CODER, 1000)]);
    policy.observe(&events).unwrap();
}

/// CacheSage with `model=classic` and `extra` settings.
fn classic(engine: &agentrt_runtime::PolicyEngine, extra: &[(&str, &str)]) -> PolicyHandle {
    let init: Vec<(&str, &str)> = [("model", "classic")]
        .into_iter()
        .chain(extra.iter().copied())
        .collect();
    start(engine, "cachesage", &init)
}

fn probability_of(forecasts: &[Forecast], kind: ForecastKind, session: u64, agent: u32) -> f32 {
    forecasts
        .iter()
        .find(|f| f.kind == kind && f.session == session && f.agent == agent)
        .map_or(0.0, |f| f.probability)
}

#[test]
fn learns_a_chain_and_predicts_the_next_agent() {
    let (engine, _cache) = engine();
    let policy = classic(&engine, &[]);
    learn_chain(&policy);
    let forecasts = policy.predict(1).unwrap();
    // Session 1000 is at the coder; the coder is always followed by the tester.
    assert_eq!(probability_of(&forecasts, ForecastKind::NextAgent, 1000, TESTER), 1.0);
    assert_eq!(probability_of(&forecasts, ForecastKind::NextAgent, 1000, PLANNER), 0.0);

    // After the tester the loop goes round once more, and after the second tester the session
    // ends. A chain over agents alone would say 1/2 each both times; the state keeps the call's
    // depth in the session, so each is certain.
    policy.observe(&[arrival(TESTER, 1000)]).unwrap();
    let forecasts = policy.predict(1).unwrap();
    assert_eq!(probability_of(&forecasts, ForecastKind::NextAgent, 1000, PLANNER), 1.0);
    assert_eq!(probability_of(&forecasts, ForecastKind::SessionEnd, 1000, 0), 0.0);
    policy
        .observe(&[arrival(PLANNER, 1000), arrival(CODER, 1000), arrival(TESTER, 1000)])
        .unwrap();
    let forecasts = policy.predict(1).unwrap();
    assert_eq!(probability_of(&forecasts, ForecastKind::SessionEnd, 1000, 0), 1.0);
    assert_eq!(probability_of(&forecasts, ForecastKind::NextAgent, 1000, PLANNER), 0.0);
}

#[test]
fn anchors_of_agents_about_to_run_outrank_newer_blocks_of_agents_that_are_not() {
    let (engine, _cache) = engine();
    let policy = classic(&engine, &[]);
    learn_chain(&policy);
    let items = vec![
        session_block(TESTER, 5, 48, 10), // tester's anchor, oldest: the tester runs next in session 1000
        session_block(AUDITOR, 999, 0, 50), // auditor's anchor: nobody leads to the auditor
        session_block(CODER, 7, 200, 60), // content of an ended session: dead
        session_block(PLANNER, 3, 16, 40), // planner's anchor: new sessions start with the planner
    ];
    let ranking = policy.rank(&items);
    assert!(ranking.fallback.is_none());
    let position = |i: usize| ranking.order.iter().position(|&j| j == i).unwrap();
    assert!(
        position(0) < position(1),
        "tester's anchor is kept over the newer auditor anchor: {:?}",
        ranking.order
    );
    assert!(position(3) < position(1), "planner's anchor is kept over the auditor's");
    // Evicted first: the dead session content and the auditor's anchor (recency decides between them).
    assert_eq!(ranking.order[2..], [2, 1]);
    assert_ne!(ranking.order, lru_order(&items), "not LRU once structure is learned");
}

#[test]
fn content_shared_across_sessions_lives_as_long_as_its_agent() {
    let (engine, _cache) = engine();
    let policy = classic(&engine, &[]);
    learn_chain(&policy);
    // Past the tester's anchor, same age: a block only ended session 7 used, and one several
    // sessions used (the host reports it with session 0, e.g. a few-shot block or a question).
    // The tester runs next in session 1000, so the shared one is likely reused; the other is dead.
    let items = vec![session_block(TESTER, 7, 160, 30), session_block(TESTER, 0, 160, 30)];
    let ranking = policy.rank(&items);
    assert_eq!(ranking.order, [1, 0], "shared content is kept, dead content goes");
}

#[test]
fn ranks_exactly_like_lru_on_random_transitions() {
    let (engine, _cache) = engine();
    let policy = classic(&engine, &[]);
    let mut rng = Rng::new(42);
    let agents = 6u32;
    let mut events: Vec<Event> = (1..=agents).map(registered).collect();
    for _ in 0..3000 {
        let session = rng.below(40);
        events.push(arrival(1 + rng.below(u64::from(agents)) as u32, session));
        if rng.below(10) == 0 {
            events.push(session_end(session));
        }
    }
    policy.observe(&events).unwrap();
    for _trial in 0..20 {
        let items: Vec<Item> = (0..64)
            .map(|_| {
                let agent = rng.below(u64::from(agents) + 1) as u32;
                session_block(agent, rng.below(40), 16 * rng.below(20) as u32, rng.below(1_000_000))
            })
            .collect();
        let scores = policy.score(&items).unwrap();
        assert_eq!(keep_order(&items, &scores), lru_order(&items));
    }
    assert!(policy.act().unwrap().is_empty(), "no structure, no warm-ups");
}

#[test]
fn cold_start_ranks_like_lru() {
    let (engine, _cache) = engine();
    let policy = classic(&engine, &[]);
    let items: Vec<Item> = (0..10)
        .map(|i| session_block(1 + i % 3, 1, 0, (i as u64 * 7919) % 101))
        .collect();
    assert_eq!(policy.rank(&items).order, lru_order(&items));
}

#[test]
fn warms_the_next_agents_anchor_once_when_it_is_not_resident() {
    let (engine, _cache) = engine();
    let policy = classic(&engine, &[("warmup-cooldown", "4")]);
    learn_chain(&policy);
    // Every anchor is cached in full …
    let mut words = Vec::new();
    for agent in [PLANNER, CODER, TESTER] {
        for position in (0..ANCHOR_TOKENS).step_by(16) {
            let ev = BlockEvent {
                op: BlockOp::Stored,
                agent,
                block_hash: u64::from(agent * 100 + position),
                parent_hash: 0,
                position,
                tier: Tier::Gpu,
            };
            packed::encode(&ev, &mut words);
        }
    }
    policy.observe_blocks(&words).unwrap();
    assert!(
        policy.act().unwrap().is_empty(),
        "nothing to warm while every anchor is resident"
    );

    // … then the tester's last anchor block is evicted, and the tester runs next in session 1000.
    let mut words = Vec::new();
    let ev = BlockEvent {
        op: BlockOp::Removed,
        agent: TESTER,
        block_hash: u64::from(TESTER * 100 + 48),
        parent_hash: 0,
        position: 48,
        tier: Tier::Gpu,
    };
    packed::encode(&ev, &mut words);
    policy.observe_blocks(&words).unwrap();
    let effects = policy.act().unwrap();
    assert_eq!(
        effects,
        vec![SideEffect::WarmPrefix(WarmPrefix {
            agent: TESTER,
            anchor_hash: anchor_hash(TESTER),
            probability: 1.0
        })]
    );
    // Rate-limited: not again within the cooldown, even though the anchor is still missing …
    for _ in 0..3 {
        assert!(policy.act().unwrap().is_empty());
    }
    // … and once it is back (the warm-up ran), no more warm-ups.
    let mut words = Vec::new();
    packed::encode(
        &BlockEvent {
            op: BlockOp::Stored,
            ..ev
        },
        &mut words,
    );
    policy.observe_blocks(&words).unwrap();
    for _ in 0..8 {
        assert!(policy.act().unwrap().is_empty());
    }
    // With prefetch off, never.
    let evict_only = classic(&engine, &[("prefetch", "false")]);
    learn_chain(&evict_only);
    assert!(evict_only.act().unwrap().is_empty());
}

#[test]
fn state_stays_bounded_with_thousands_of_agents_and_sessions() {
    let (engine, _cache) = engine();
    let policy = classic(&engine, &[]);
    let mut rng = Rng::new(7);
    let mut largest = 0;
    for batch in 0..200u64 {
        let events: Vec<Event> = (0..100u64)
            .flat_map(|i| {
                let agent = 1 + ((batch * 100 + i) % 5000) as u32; // 5,000 distinct agents
                let session = rng.below(20_000); // 20,000 distinct sessions
                [registered(agent), arrival(agent, session)]
            })
            .collect();
        policy.observe(&events).unwrap();
        largest = largest.max(policy.snapshot().unwrap().len());
    }
    println!("largest CacheSage state: {largest} bytes");
    assert!(largest <= 20 * 1024, "state grew to {largest} bytes");
}

#[test]
fn snapshot_carries_the_learned_matrix_across_a_hot_swap() {
    let (engine, _cache) = engine();
    let policy = classic(&engine, &[]);
    learn_chain(&policy);
    let before = policy.predict(1).unwrap();
    policy.swap(load(&engine, "cachesage")).unwrap();
    assert_eq!(policy.predict(1).unwrap(), before);
    // From LRU (no state) to CacheSage: starts fresh rather than failing.
    let lru = start(&engine, "lru", &[]);
    lru.swap(load(&engine, "cachesage")).unwrap();
    assert_eq!(lru.info().name, "cachesage");
}

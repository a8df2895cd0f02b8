//! CacheSage's scaled model (the default) through the real component in the real host: an
//! application seen once protects its next agent's anchor while a session is live, a popular
//! application's anchors outrank a quiet one's, cold start ranks like LRU, state stays inside its
//! budget at 10,000 agents and survives a hot swap, and a bad `model` is refused by name.

use agentrt_runtime::types::*;
use agentrt_runtime::{keep_order, lru_order, PolicyHandle};
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

fn scaled(engine: &agentrt_runtime::PolicyEngine) -> PolicyHandle {
    start(engine, "cachesage", &[])
}

#[test]
fn an_application_seen_once_protects_its_next_agent_while_its_session_is_live() {
    let (engine, _cache) = engine();
    let policy = scaled(&engine);
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
}

#[test]
fn a_popular_applications_anchor_outranks_a_quiet_ones() {
    let (engine, _cache) = engine();
    let policy = scaled(&engine);
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
    let policy = scaled(&engine);
    policy.observe(&(1..=3).map(registered).collect::<Vec<_>>()).unwrap();
    let items: Vec<Item> = (0..20)
        .map(|i| session_block(1 + i % 3, 7, (i % 5) * 16, u64::from(i * 7 % 20)))
        .collect();
    assert_eq!(keep_order(&items, &policy.score(&items).unwrap()), lru_order(&items));
}

#[test]
fn state_stays_inside_its_budget_at_ten_thousand_agents_and_survives_a_hot_swap() {
    let (engine, _cache) = engine();
    let policy = scaled(&engine);
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
    println!("scaled CacheSage state at 10,000 agents: {} bytes", snap.len());
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
fn an_unknown_model_is_refused_by_name() {
    let (engine, _cache) = engine();
    let config = agentrt_runtime::SlotConfig::new("test/bad-model").with_init([("model", "quantum")]);
    match PolicyHandle::start(&engine, load(&engine, "cachesage"), config) {
        Ok(_) => panic!("model=quantum was accepted"),
        Err(err) => assert!(err.to_string().contains("model"), "{err}"),
    }
}

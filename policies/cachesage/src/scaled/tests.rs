//! Behaviour of the scaled model through its public operations.

use agentrt_sdk::{AgentRegistered, Continuation, Event, Item, ItemKind, RequestArrival, RequestFinish, SideEffect};

use super::{Params, Scaled};

const ANCHOR: u32 = 4096;

fn register(m: &mut Scaled, agent: u32) {
    m.observe(&Event::AgentRegistered(AgentRegistered {
        agent,
        name: format!("agent-{agent}"),
        anchor_hash: 0xa000 + u64::from(agent),
        anchor_tokens: ANCHOR,
    }));
}

fn call(m: &mut Scaled, session: u64, agent: u32, first: bool, at_ms: u64, took_ms: u64) {
    let id = at_ms * 1000 + u64::from(agent);
    m.observe(&Event::RequestArrival(RequestArrival {
        request_id: id,
        agent,
        session,
        anchor_hash: 0xa000 + u64::from(agent),
        prompt_tokens: ANCHOR + 500,
        continues: (!first).then_some(Continuation {
            shared_tokens: ANCHOR + 500,
            previous_tokens: ANCHOR + 400,
        }),
        warmup: false,
        at_us: at_ms * 1000,
    }));
    m.observe(&Event::RequestFinish(RequestFinish {
        request_id: id,
        agent,
        session,
        prompt_tokens: ANCHOR + 500,
        cached_tokens: 0,
        output_tokens: 100,
        warmup: false,
        ok: true,
        at_us: (at_ms + took_ms) * 1000,
    }));
}

fn block(agent: u32, session: u64, position: u32, last_access: u64) -> Item {
    Item {
        kind: ItemKind::KvBlock,
        key: u64::from(agent) << 32 | u64::from(position),
        agent,
        session,
        last_access,
        tokens: 16,
        position,
        tier: agentrt_sdk::Tier::Gpu,
    }
}

/// One session of a three-agent pipeline 1 → 2 → 3, each step after a 5 s tool wait.
fn pipeline_session(m: &mut Scaled, session: u64, start_ms: u64, agents: [u32; 3], end: bool) {
    for (i, &a) in agents.iter().enumerate() {
        call(m, session, a, true, start_ms + i as u64 * 6_000, 1_000);
    }
    if end {
        m.observe(&agentrt_sdk::testing::session_end(session));
    }
}

#[test]
fn before_anything_is_learned_the_ranking_is_exactly_lru() {
    let mut m = Scaled::default();
    register(&mut m, 1);
    let items = [block(1, 5, 0, 10), block(1, 5, 16, 30), block(2, 6, 0, 20)];
    assert_eq!(m.score(&items), agentrt_sdk::recency_scores(&items));
}

#[test]
fn an_application_seen_once_protects_its_next_agent_while_a_session_is_live() {
    let mut m = Scaled::default();
    for a in 1..=6 {
        register(&mut m, a);
    }
    // App A (agents 1 → 2 → 3) ran one session; app B (4 → 5 → 6) too, earlier.
    pipeline_session(&mut m, 200, 0, [4, 5, 6], true);
    pipeline_session(&mut m, 100, 20_000, [1, 2, 3], true);
    // A new session of A has just called agent 1 and waits on its tool.
    call(&mut m, 101, 1, true, 60_000, 1_000);
    m.observe(&Event::EngineLoad(agentrt_sdk::EngineLoad {
        queue_depth: 0,
        running: 0,
        free_blocks: 0,
        total_blocks: 0,
        at_us: 62_000_000,
    }));
    // Agent 2's anchor (A's next step) is used more recently by nobody, but it is coming; agent
    // 5's anchor (B, idle) and the ended session's content are not.
    let items = [
        block(2, 100, 0, 10),
        block(5, 200, 0, 50),
        block(3, 100, ANCHOR + 64, 60),
    ];
    let scores = m.score(&items);
    assert!(scores[0] > scores[1], "{scores:?}");
    assert!(
        scores[1] > scores[2],
        "ended session's own content goes first: {scores:?}"
    );
    assert_eq!(scores[2], 0.0);
}

#[test]
fn a_popular_applications_anchors_outrank_a_rare_ones() {
    let mut m = Scaled::default();
    for a in 1..=6 {
        register(&mut m, a);
    }
    // App A starts a session every 10 s; app B twice, 100 s apart.
    pipeline_session(&mut m, 900, 0, [4, 5, 6], true);
    pipeline_session(&mut m, 901, 100_000, [4, 5, 6], true);
    for i in 0..10 {
        pipeline_session(&mut m, i, 100_000 + i * 10_000, [1, 2, 3], true);
    }
    // Same recency: B's anchor block was used last.
    let scores = m.score(&[block(3, 9, 0, 10), block(6, 901, 0, 20)]);
    assert!(scores[0] > scores[1], "{scores:?}");
}

#[test]
fn the_next_agents_missing_anchor_is_warmed_unless_the_engine_is_busy_or_the_budget_spent() {
    let generous = Params {
        warmup_budget: 1.0,
        ..Params::default()
    };
    let mut m = Scaled::with_params(generous.clone());
    for a in 1..=3 {
        register(&mut m, a);
    }
    for s in 0..3 {
        pipeline_session(&mut m, s, s * 20_000, [1, 2, 3], true);
    }
    call(&mut m, 50, 1, true, 80_000, 1_000);
    let effects = m.act();
    assert!(
        matches!(effects.as_slice(), [SideEffect::WarmPrefix(w)] if w.agent == 2 && w.probability >= 0.5),
        "{effects:?}"
    );
    assert!(m.act().is_empty(), "cooling down");

    // Not when the blocks a warm-up would push out are wanted sooner than the anchor it brings.
    let mut crowded = Scaled::with_params(generous.clone());
    for a in 1..=3 {
        register(&mut crowded, a);
    }
    for s in 0..3 {
        pipeline_session(&mut crowded, s, s * 20_000, [1, 2, 3], true);
    }
    call(&mut crowded, 50, 1, true, 80_000, 1_000);
    // Every candidate is a block of a request in flight right now (imminent).
    call(&mut crowded, 60, 3, true, 80_500, 100_000);
    let hot: Vec<Item> = (0..400).map(|i| block(3, 60, ANCHOR + 16 * i, u64::from(i))).collect();
    crowded.observe(&Event::RequestArrival(RequestArrival {
        request_id: 9,
        agent: 3,
        session: 60,
        anchor_hash: 0xa003,
        prompt_tokens: 10_000,
        continues: None,
        warmup: false,
        at_us: 80_600_000,
    }));
    crowded.score(&hot);
    assert!(crowded.act().is_empty(), "the frontier is worth more than the anchor");

    // Ten calls of ~4.6 k tokens at the default 5 % budget do not pay for a 4 k-token anchor.
    let mut frugal = Scaled::default();
    for a in 1..=3 {
        register(&mut frugal, a);
    }
    for s in 0..3 {
        pipeline_session(&mut frugal, s, s * 20_000, [1, 2, 3], true);
    }
    call(&mut frugal, 50, 1, true, 80_000, 1_000);
    assert!(frugal.act().is_empty(), "over the warm-up budget");

    let mut busy = Scaled::with_params(generous);
    for a in 1..=3 {
        register(&mut busy, a);
    }
    for s in 0..3 {
        pipeline_session(&mut busy, s, s * 20_000, [1, 2, 3], true);
    }
    call(&mut busy, 50, 1, true, 80_000, 1_000);
    busy.observe(&Event::EngineLoad(agentrt_sdk::EngineLoad {
        queue_depth: 4,
        running: 8,
        free_blocks: 0,
        total_blocks: 100,
        at_us: 81_000_000,
    }));
    assert!(busy.act().is_empty(), "requests are waiting: no warm-up");
}

#[test]
fn snapshot_round_trips_and_stays_inside_its_budget_at_ten_thousand_agents() {
    let mut m = Scaled::with_params(Params::default());
    for a in 1..=10_000u32 {
        register(&mut m, a);
    }
    // 20,000 sessions over 10,000 agents, 2,000 of them still live.
    for s in 0..20_000u64 {
        let a = (s % 10_000) as u32 + 1;
        let b = (a % 10_000) + 1;
        call(&mut m, s, a, true, s * 10, 5);
        call(&mut m, s, b, true, s * 10 + 6, 2);
        if s < 18_000 {
            m.observe(&agentrt_sdk::testing::session_end(s));
        }
    }
    let snap = m.snapshot();
    assert!(snap.len() <= Scaled::state_budget(10_000), "{} bytes", snap.len());
    assert!(snap.len() <= 1_024 * 1_024, "{} bytes", snap.len());
    let mut restored = Scaled::with_params(Params::default());
    restored.restore(&snap).unwrap();
    assert_eq!(restored.snapshot(), snap);
    assert_eq!(restored.agents(), 10_000);

    // A small workload keeps under 20 KB whatever the number of sessions.
    let mut small = Scaled::default();
    for s in 0..5_000u64 {
        let a = (s % 32) as u32 + 1;
        call(&mut small, s, a, true, s * 10, 5);
    }
    assert!(small.live_sessions() > 1_000);
    assert!(small.snapshot().len() <= 20 * 1024, "{}", small.snapshot().len());
    assert!(Scaled::default()
        .restore(b"CSG1\x03\x00")
        .unwrap_err()
        .contains("classic"));
}

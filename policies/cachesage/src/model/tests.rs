//! Behaviour of the model through its public operations.

use agentrt_sdk::{Continuation, Event, Item, ItemKind, RequestArrival, RequestFinish};

use super::{snapshot, Model};
use crate::clock::Clock;
use crate::settings::Settings;

/// A model and the clock the policy would keep for it.
struct M {
    model: Model,
    clock: Clock,
}

impl M {
    fn new() -> Self {
        Self {
            model: Model::new(&Settings::default()),
            clock: Clock::default(),
        }
    }

    fn observe(&mut self, event: &Event) {
        if let Event::RequestArrival(RequestArrival { at_us, .. }) | Event::RequestFinish(RequestFinish { at_us, .. }) =
            event
        {
            self.clock.advance(*at_us);
        }
        self.model.observe(event);
    }

    fn score(&mut self, items: &[Item]) -> Vec<f32> {
        self.model.score(items, &mut self.clock)
    }
}

const ANCHOR: u32 = 4096;

fn register(m: &mut M, agent: u32) {
    m.observe(&crate::test_events::register(agent, ANCHOR));
}

fn call(m: &mut M, session: u64, agent: u32, first: bool, at_ms: u64, took_ms: u64) {
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
    m.observe(&crate::test_events::finish(
        id,
        session,
        agent,
        ANCHOR + 500,
        (at_ms + took_ms) * 1000,
    ));
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
fn pipeline_session(m: &mut M, session: u64, start_ms: u64, agents: [u32; 3], end: bool) {
    for (i, &a) in agents.iter().enumerate() {
        call(m, session, a, true, start_ms + i as u64 * 6_000, 1_000);
    }
    if end {
        m.observe(&agentrt_sdk::testing::session_end(session));
    }
}

#[test]
fn before_anything_is_learned_the_ranking_is_exactly_lru() {
    let mut m = M::new();
    register(&mut m, 1);
    let items = [block(1, 5, 0, 10), block(1, 5, 16, 30), block(2, 6, 0, 20)];
    assert_eq!(m.score(&items), agentrt_sdk::recency_scores(&items));
}

#[test]
fn an_application_seen_once_protects_its_next_agent_while_a_session_is_live() {
    let mut m = M::new();
    for a in 1..=6 {
        register(&mut m, a);
    }
    // App A (agents 1 → 2 → 3) ran one session; app B (4 → 5 → 6) too, earlier.
    pipeline_session(&mut m, 200, 0, [4, 5, 6], true);
    pipeline_session(&mut m, 100, 20_000, [1, 2, 3], true);
    // A new session of A has just called agent 1 and waits on its tool.
    call(&mut m, 101, 1, true, 60_000, 1_000);
    m.clock.advance(62_000_000);
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
    let mut m = M::new();
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
fn snapshot_round_trips_and_stays_inside_its_budget_at_ten_thousand_agents() {
    let mut m = M::new();
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
    let now = m.clock.now_us();
    let snap = snapshot::write(&m.model, now);
    assert!(snap.len() <= snapshot::budget(10_000), "{} bytes", snap.len());
    assert!(snap.len() <= 1_024 * 1_024, "{} bytes", snap.len());
    let (restored, at) = snapshot::read(&snap, &Settings::default()).unwrap();
    assert_eq!(at, now);
    assert_eq!(snapshot::write(&restored, at), snap);

    // A small workload keeps under 20 KB whatever the number of sessions.
    let mut small = M::new();
    for s in 0..5_000u64 {
        let a = (s % 32) as u32 + 1;
        call(&mut small, s, a, true, s * 10, 5);
    }
    let bytes = snapshot::write(&small.model, small.clock.now_us()).len();
    assert!(bytes <= 20 * 1024, "{bytes}");
    assert!(snapshot::read(b"CSG1\x03\x00", &Settings::default())
        .unwrap_err()
        .contains("classic"));
}

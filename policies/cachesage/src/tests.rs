//! The whole policy through the packed paths the host uses: hints first by construction for
//! thousands of concurrent sessions of one agent; and two tiers — host-tier events do not move
//! the model, host-tier candidates are ranked by the same model (never declined) while the learned
//! order ranks, and ranking them leaves the GPU tier's ranking as it was.

use agentrt_sdk::testing::{rank, session_end_for, Harness};
use agentrt_sdk::{AgentRegistered, BlockEvent, BlockOp, EndReason, Event, Item, ItemKind, RequestArrival, Tier};

use crate::CacheSage;

const ANCHOR: u32 = 4096;

fn register(agent: u32) -> Event {
    crate::test_events::register(agent, ANCHOR)
}

/// One call of `agent` in `session` at `at_ms`, done a second later.
fn call(session: u64, agent: u32, at_ms: u64) -> [Event; 2] {
    let request_id = at_ms * 1000 + u64::from(agent);
    [
        Event::RequestArrival(RequestArrival {
            request_id,
            agent,
            session,
            anchor_hash: 0xa000 + u64::from(agent),
            prompt_tokens: ANCHOR + 500,
            continues: None,
            warmup: false,
            at_us: at_ms * 1000,
        }),
        crate::test_events::finish(request_id, session, agent, ANCHOR + 500, (at_ms + 1000) * 1000),
    ]
}

/// Twenty sessions of a pipeline 1 → 2 → 3, each reported ended and none coming back, then a new
/// session that has just called agent 1: the model has structure and holds ended sessions dead.
fn learned(config: &[(&str, &str)]) -> Harness<CacheSage> {
    let config = config.iter().copied().chain([("guard", "false")]);
    let mut h = Harness::<CacheSage>::new(config).unwrap();
    h.observe(&[register(1), register(2), register(3)]);
    for s in 0..20u64 {
        for (i, agent) in [1, 2, 3].into_iter().enumerate() {
            h.observe(&call(100 + s, agent, s * 30_000 + i as u64 * 6_000));
        }
        h.observe(&[agentrt_sdk::testing::session_end(100 + s)]);
    }
    h.observe(&call(500, 1, 20 * 30_000));
    h
}

fn block(agent: u32, session: u64, position: u32, last_access: u64, tier: Tier) -> Item {
    Item {
        kind: ItemKind::KvBlock,
        key: u64::from(agent) << 32 | u64::from(position) | session << 40,
        agent,
        session,
        last_access,
        tokens: 16,
        position,
        tier,
    }
}

/// The next agent's anchor, an idle agent's anchor, and an ended session's own content.
fn candidates(tier: Tier) -> [Item; 3] {
    [
        block(2, 119, 0, 10, tier),
        block(3, 119, 0, 5, tier),
        block(3, 119, ANCHOR + 64, 60, tier),
    ]
}

#[test]
fn host_tier_block_events_leave_the_model_as_it_was() {
    let (plain, mut told) = (learned(&[]), learned(&[]));
    let host = |op, hash| BlockEvent {
        op,
        agent: 2,
        block_hash: hash,
        parent_hash: 0,
        position: 0,
        tier: Tier::Host,
    };
    told.observe_blocks(&[
        host(BlockOp::Stored, 7),
        host(BlockOp::Touched, 7),
        host(BlockOp::Removed, 8),
    ]);
    told.observe(&[Event::Block(host(BlockOp::Touched, 9))]);
    assert_eq!(plain.snapshot(), told.snapshot());
}

#[test]
fn the_host_tier_is_ranked_by_the_same_model_and_every_block_is_stored() {
    let mut h = learned(&[]);
    let gpu = h.score(&candidates(Tier::Gpu));
    let host = h.score(&candidates(Tier::Host));
    // Same order of preference: the coming agent's anchor above the ended session's content.
    assert!(host[0] > host[2], "{host:?}");
    assert!(gpu[0] > gpu[2], "{gpu:?}");
    assert!(host.iter().all(|s| *s >= 0.0), "CacheSage declines no store: {host:?}");
    // While the robust order ranks, the host tier gets vLLM's own order.
    let mut guarded = Harness::<CacheSage>::new([]).unwrap();
    assert_eq!(guarded.score(&candidates(Tier::Host)), [0.0; 3]);
}

#[test]
fn a_mixed_batch_scores_as_its_tiers_do_apart() {
    let (mut apart, mut mixed) = (learned(&[]), learned(&[]));
    let mut want = apart.score(&candidates(Tier::Gpu)).to_vec();
    want.extend(apart.score(&candidates(Tier::Host)));
    let batch: Vec<Item> = candidates(Tier::Gpu)
        .into_iter()
        .chain(candidates(Tier::Host))
        .collect();
    assert_eq!(mixed.score(&batch), want);
}

#[test]
fn ranking_the_host_tier_leaves_the_gpu_ranking_as_it_was() {
    // The host pool's stamps are on another clock, far from the engine's: read as times they
    // would move the model's clock and change every later GPU-tier score.
    let (mut plain, mut told) = (learned(&[]), learned(&[]));
    // Both have mapped engine stamps to times: stamp 100 now, 200 a call later.
    for h in [&mut plain, &mut told] {
        h.score(&[block(2, 500, 0, 100, Tier::Gpu)]);
        h.observe(&call(500, 2, 20 * 30_000 + 6_000));
        h.score(&[block(2, 500, 0, 200, Tier::Gpu)]);
    }
    let far: Vec<Item> = candidates(Tier::Host)
        .into_iter()
        .map(|i| Item {
            last_access: 1 << 40,
            ..i
        })
        .collect();
    told.score(&far);
    // Time goes on and the engine's stamps with it: an unknown agent's block is ranked by its age.
    let gpu = [
        block(2, 500, 0, 300, Tier::Gpu),
        block(1, 500, ANCHOR + 64, 280, Tier::Gpu),
        block(7, 0, 0, 250, Tier::Gpu),
    ];
    for h in [&mut plain, &mut told] {
        h.observe(&call(500, 3, 20 * 30_000 + 12_000));
        h.score(&gpu);
        h.observe(&call(500, 1, 20 * 30_000 + 18_000));
    }
    assert_eq!(plain.score(&gpu), told.score(&gpu));
    assert_eq!(plain.snapshot(), told.snapshot());
}

/// One agent (1, anchor of 64 tokens) serving `n` conversations at once, each with one call in
/// flight; half of them closed by the framework in an order against recency (the most recently
/// used first), and every conversation's blocks interleaved in the free queue.
#[test]
fn closed_sessions_blocks_go_first_for_thousands_of_concurrent_sessions_of_one_agent() {
    let n = 4000u64;
    for config in [&[][..], &[("guard", "false")][..]] {
        let mut p = Harness::<CacheSage>::new(config.iter().copied()).unwrap();
        p.observe(&[Event::AgentRegistered(AgentRegistered {
            agent: 1,
            name: "one".into(),
            anchor_hash: 0xa001,
            anchor_tokens: 64,
        })]);
        let arrivals: Vec<Event> = (0..n)
            .map(|s| {
                Event::RequestArrival(RequestArrival {
                    request_id: s,
                    agent: 1,
                    session: 1000 + s,
                    anchor_hash: 0xa001,
                    prompt_tokens: 200,
                    continues: None,
                    warmup: false,
                    at_us: s,
                })
            })
            .collect();
        p.observe(&arrivals);
        // Closed: every other session, the most recently used first.
        let closed: Vec<u64> = (0..n).rev().filter(|s| s % 2 == 1).map(|s| 1000 + s).collect();
        let ends: Vec<Event> = closed.iter().map(|&s| session_end_for(s, EndReason::Closed)).collect();
        p.observe(&ends);
        // Each session's two own blocks (past the anchor), an anchor block and a shared block.
        let mut items: Vec<Item> = Vec::new();
        for s in 0..n {
            for (k, position) in [(0, 64), (1, 80)] {
                items.push(Item {
                    kind: ItemKind::KvBlock,
                    key: (s << 1) | k,
                    agent: 1,
                    session: 1000 + s,
                    last_access: 2 * s + k,
                    tokens: 16,
                    position,
                    tier: Tier::Gpu,
                });
            }
        }
        items.push(Item {
            key: 1 << 40,
            session: 1001,
            position: 0,
            last_access: 0,
            ..items[0]
        });
        items.push(Item {
            key: 1 << 41,
            session: 0,
            last_access: 1,
            ..items[0]
        });
        let scores = p.score(&items);
        let order: Vec<&Item> = rank(&items, &scores).into_iter().rev().map(|i| &items[i]).collect();
        // Every block reported with a closed session, least recently used first (as closed-first
        // orders them, whatever order they were closed in): the anchor block session 1001 made
        // (used longest ago), then the closed sessions' own blocks.
        let mut expected: Vec<u64> = vec![1 << 40];
        expected.extend((0..n).filter(|s| s % 2 == 1).flat_map(|s| [s << 1, (s << 1) | 1]));
        let (first, rest) = order.split_at(expected.len());
        assert!(
            first.iter().map(|i| i.key).eq(expected.iter().copied()),
            "{config:?}: the closed sessions' blocks first, least recently used first"
        );
        assert!(
            rest.iter().all(|i| i.session == 0 || i.session % 2 == 0),
            "{config:?}: nothing of a closed session after an open one's"
        );
    }
}

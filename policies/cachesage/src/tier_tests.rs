//! CacheSage over two tiers, driven through the packed paths the host uses: host-tier events do
//! not move the model, host-tier candidates are ranked by the same model (never declined), and
//! ranking them leaves the GPU tier's ranking as it was.

use agentrt_sdk::testing::Harness;
use agentrt_sdk::{AgentRegistered, BlockEvent, BlockOp, Event, Item, ItemKind, RequestArrival, Tier};

use crate::CacheSage;

const ANCHOR: u32 = 4096;

fn register(agent: u32) -> Event {
    Event::AgentRegistered(AgentRegistered {
        agent,
        name: format!("agent-{agent}"),
        anchor_hash: 0xa000 + u64::from(agent),
        anchor_tokens: ANCHOR,
    })
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
        Event::RequestFinish(agentrt_sdk::RequestFinish {
            request_id,
            agent,
            session,
            prompt_tokens: ANCHOR + 500,
            cached_tokens: 0,
            output_tokens: 100,
            warmup: false,
            ok: true,
            at_us: (at_ms + 1000) * 1000,
        }),
    ]
}

/// Twenty sessions of a pipeline 1 → 2 → 3, each reported ended and none coming back, then a new
/// session that has just called agent 1: the model has structure and holds ended sessions dead.
fn learned(config: &[(&str, &str)]) -> Harness<CacheSage> {
    let mut h = Harness::<CacheSage>::new(config.iter().copied()).unwrap();
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
fn host_tier_block_events_leave_the_model_and_the_guard_as_they_were() {
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

//! Warm-ups: which anchor is warmed and when not, what the ledger makes of their outcomes, and
//! which block accesses are a warm-up's own.

use agentrt_sdk::testing::Harness;
use agentrt_sdk::{
    BlockEvent, BlockOp, Continuation, EngineLoad, Event, Item, ItemKind, RequestArrival, RequestFinish, SideEffect,
    Tier,
};

use super::{Outstanding, Warmups};
use crate::settings::Settings;
use crate::CacheSage;

const ANCHOR: u32 = 4096;

fn register(agent: u32) -> Event {
    crate::test_events::register(agent, ANCHOR)
}

fn arrival(session: u64, agent: u32, at_ms: u64, warmup: bool) -> Event {
    Event::RequestArrival(RequestArrival {
        request_id: at_ms * 1000 + u64::from(agent),
        agent,
        session,
        anchor_hash: 0xa000 + u64::from(agent),
        prompt_tokens: if warmup { 0 } else { ANCHOR + 500 },
        continues: None::<Continuation>,
        warmup,
        at_us: at_ms * 1000,
    })
}

fn finish(session: u64, agent: u32, at_ms: u64) -> Event {
    crate::test_events::finish(0, session, agent, ANCHOR + 500, at_ms * 1000)
}

/// A policy that learned the pipeline 1 → 2 → 3 from three sessions (a call every 6 s, each
/// taking 1 s), with a fourth session that just called agent 1.
fn pipeline(config: &[(&str, &str)]) -> Harness<CacheSage> {
    let mut p = Harness::<CacheSage>::new(config.iter().copied().chain([("guard", "false")])).unwrap();
    p.observe(&[register(1), register(2), register(3)]);
    for s in 0..3u64 {
        for (i, a) in [1, 2, 3].into_iter().enumerate() {
            let at = s * 20_000 + i as u64 * 6_000;
            p.observe(&[arrival(s, a, at, false), finish(s, a, at + 1_000)]);
        }
        p.observe(&[agentrt_sdk::testing::session_end(s)]);
    }
    p.observe(&[arrival(50, 1, 80_000, false), finish(50, 1, 81_000)]);
    p
}

fn warms(p: &mut Harness<CacheSage>) -> Option<u32> {
    match p.act().as_slice() {
        [SideEffect::WarmPrefix(w)] if w.probability >= 0.5 => Some(w.agent),
        [] => None,
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_next_agents_missing_anchor_is_warmed_unless_busy_crowded_cooling_or_over_budget() {
    let generous = [("warmup-budget", "1")];
    let mut p = pipeline(&generous);
    assert_eq!(warms(&mut p), Some(2), "agent 2 comes next");
    assert_eq!(warms(&mut p), None, "cooling down");

    // Not when the blocks a warm-up would push out are wanted sooner than the anchor it brings:
    // every candidate is a block of a request in flight right now (imminent).
    let mut crowded = pipeline(&generous);
    crowded.observe(&[arrival(60, 3, 81_500, false)]);
    let hot: Vec<Item> = (0..400)
        .map(|i| Item {
            kind: ItemKind::KvBlock,
            key: 0x60_0000 + u64::from(i),
            agent: 3,
            session: 60,
            last_access: u64::from(i),
            tokens: 16,
            position: ANCHOR + 16 * i,
            tier: Tier::Gpu,
        })
        .collect();
    crowded.score(&hot);
    assert_eq!(warms(&mut crowded), None, "the frontier is worth more than the anchor");

    // Eleven calls of ~4.6 k tokens at the default 5 % budget do not pay for a 4 k-token anchor.
    assert_eq!(warms(&mut pipeline(&[])), None, "over the warm-up budget");

    let mut busy = pipeline(&generous);
    busy.observe(&[Event::EngineLoad(EngineLoad {
        queue_depth: 4,
        running: 8,
        free_blocks: 0,
        total_blocks: 100,
        at_us: 81_500_000,
    })]);
    assert_eq!(warms(&mut busy), None, "requests are waiting: no warm-up");

    // And none while the robust order ranks (the guard's default until the model wins).
    let mut guarded = Harness::<CacheSage>::new([("warmup-budget", "1")]).unwrap();
    guarded.observe(&[register(1)]);
    assert!(guarded.act().is_empty());
}

#[test]
fn an_agent_whose_warm_up_was_lost_cools_down_twice_as_long() {
    let generous = [("warmup-budget", "1")];
    let again_after = |lost: bool| {
        let mut p = pipeline(&generous);
        assert_eq!(warms(&mut p), Some(2));
        if lost {
            // Agent 2 is called with its anchor not cached: the warm-up was lost.
            p.observe(&[arrival(50, 2, 82_000, false), finish(50, 2, 83_000)]);
        }
        // Another session calls agent 1, 3.5 s after the warm-up: agent 2 comes next.
        p.observe(&[arrival(51, 1, 83_500, false), finish(51, 1, 84_500)]);
        warms(&mut p)
    };
    assert_eq!(again_after(false), Some(2), "past the 2 s cooldown");
    assert_ne!(again_after(true), Some(2), "not agent 2 within 4 s of its lost warm-up");
}

#[test]
fn a_warm_ups_accesses_are_its_own_only_within_its_extent() {
    let mut p = pipeline(&[("warmup-budget", "1")]);
    p.observe(&[arrival(0, 2, 82_000, true)]);
    let access = |position| BlockEvent {
        op: BlockOp::Touched,
        agent: 2,
        block_hash: 7,
        parent_hash: 0,
        position,
        tier: Tier::Gpu,
    };
    let w = &p.policy().warmups;
    assert!(
        w.is_own(&access(0)) && w.is_own(&access(ANCHOR)),
        "the anchor and one block"
    );
    assert!(
        !w.is_own(&access(ANCHOR + 64)),
        "the agent's session content is the traffic's"
    );
    p.observe(&[Event::RequestFinish(RequestFinish {
        warmup: true,
        ..match finish(0, 2, 82_500) {
            Event::RequestFinish(f) => f,
            _ => unreachable!(),
        }
    })]);
    assert!(!p.policy().warmups.is_own(&access(0)), "over once it finished");
}

/// 100 warm-ups of agents 0–99, each predicted at `p` and resolved at its agent's call, the
/// anchor cached there when `cached(agent)`.
fn resolve_100(w: &mut Warmups, p: f32, cached: impl Fn(u32) -> bool) {
    for agent in 0..100 {
        w.issued(agent, p);
        w.called(agent, cached(agent));
    }
}

#[test]
fn warm_ups_that_pay_as_predicted_keep_the_models_probability() {
    let mut w = Warmups::new(&Settings::default());
    resolve_100(&mut w, 0.5, |agent| agent % 2 == 0);
    assert!((w.calibration() - 1.0).abs() < 0.01, "{}", w.calibration());
    // Bets that pay more often than predicted do not make the model bolder.
    resolve_100(&mut w, 0.2, |_| true);
    assert_eq!(w.calibration(), 1.0);
}

#[test]
fn warm_ups_whose_anchor_is_gone_at_the_call_scale_the_bets_down() {
    let mut w = Warmups::new(&Settings::default());
    // One in four finds its anchor still cached.
    resolve_100(&mut w, 0.95, |agent| agent % 4 == 0);
    let c = w.calibration();
    assert!((0.25..0.35).contains(&c), "{c}");
    // A second warm-up of an agent before it called means the first was lost.
    w.issued(7, 0.9);
    w.issued(7, 0.9);
    assert!(w.calibration() < c);
    assert_eq!(w.outstanding.len(), 1);
}

#[test]
fn missed_opportunities_age_the_evidence_back_to_the_prior() {
    let mut w = Warmups::new(&Settings::default());
    resolve_100(&mut w, 1.0, |_| false);
    assert!(w.calibration() < 0.05);
    // A call without a withheld warm-up before it ages nothing.
    w.called(1000, true);
    assert!(w.calibration() < 0.05);
    for round in 0..400 {
        w.outstanding.entry(round % 5).or_insert(Outstanding::Withheld);
        w.called(round % 5, false);
    }
    assert!(w.calibration() > 0.5, "{}", w.calibration());
    w.issued(3, 0.5);
    w.forget_agent(3);
    assert!(w.outstanding.is_empty());
}

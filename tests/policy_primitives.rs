//! Every primitive round-trips through real components: the probe fixture, whose outputs are
//! checkable functions of its inputs, and the LRU policy.

use agentrt_runtime::packed;
use agentrt_runtime::types::*;
use agentrt_runtime::{lru_order, Primitive};
use agentrt_tests::*;

fn all_event_kinds() -> Vec<Event> {
    vec![
        register(1, "planner", 0xaaaa),
        register(2, "coder", 0xbbbb),
        Event::RequestArrival(RequestArrival {
            request_id: 1,
            agent: 1,
            session: 10,
            anchor_hash: 0xaaaa,
            prompt_tokens: 1200,
            continues: None,
            warmup: false,
            at_us: 5,
        }),
        Event::RequestFinish(RequestFinish {
            request_id: 1,
            agent: 1,
            session: 10,
            prompt_tokens: 1200,
            cached_tokens: 800,
            output_tokens: 50,
            warmup: false,
            ok: true,
            at_us: 9,
        }),
        Event::ToolCall(ToolCall {
            session: 10,
            agent: 2,
            tool: 3,
            args_hash: 4,
            at_us: 10,
        }),
        Event::ToolReturn(ToolReturn {
            session: 10,
            agent: 2,
            tool: 3,
            args_hash: 4,
            result_tokens: 70,
            latency_us: 900,
            ok: true,
        }),
        Event::SessionWait(SessionWait {
            session: 10,
            agent: 2,
            kind: WaitKind::Tool,
            tool: 3,
            expected_us: 2_000_000,
            hinted: true,
            at_us: 10,
        }),
        Event::Handoff(Handoff {
            session: 10,
            from_agent: 2,
            to_agent: 1,
            at_us: 10,
        }),
        Event::SessionEnd(SessionEnd {
            session: 10,
            reason: EndReason::Closed,
            at_us: 10,
        }),
        Event::EngineLoad(EngineLoad {
            queue_depth: 3,
            running: 2,
            free_blocks: 100,
            total_blocks: 400,
            at_us: 11,
        }),
        Event::Block(BlockEvent {
            op: BlockOp::Stored,
            agent: 1,
            block_hash: 1000,
            parent_hash: 0,
            position: 0,
            tier: Tier::Gpu,
        }),
    ]
}

#[test]
fn probe_round_trips_every_primitive() {
    let (engine, _cache) = engine();
    let probe = start(&engine, "probe", &[("bias", "0.5")]);
    assert_eq!(probe.info().name, "probe");

    probe.observe(&all_event_kinds()).unwrap();
    let mut words = Vec::new();
    for (i, op) in [BlockOp::Stored, BlockOp::Touched, BlockOp::Removed, BlockOp::AllCleared]
        .into_iter()
        .enumerate()
    {
        packed::encode(
            &BlockEvent {
                op,
                agent: 2,
                block_hash: 1 + i as u64,
                parent_hash: 0,
                position: 0,
                tier: Tier::Gpu,
            },
            &mut words,
        );
    }
    probe.observe_blocks(&words).unwrap();

    // score = key + bias, in order: values and order survive the boundary, and init ran.
    let items: Vec<Item> = (0..100u64).map(|k| block_item(k * 3, 1, 1000 - k)).collect();
    let scores = probe.score(&items).unwrap();
    let expected: Vec<f32> = items.iter().map(|i| i.key as f32 + 0.5).collect();
    assert_eq!(scores, expected);

    // predict: one uniform next-agent forecast per registered agent, carrying the horizon.
    let forecasts = probe.predict(4).unwrap();
    assert_eq!(forecasts.len(), 2);
    assert_eq!(
        (forecasts[1].agent, forecasts[1].subject, forecasts[1].steps),
        (2, 0xbbbb, 4)
    );
    assert!(forecasts
        .iter()
        .all(|f| f.kind == ForecastKind::NextAgent && f.probability == 0.5));

    // act: every side-effect kind, with values derived from what was observed.
    let effects = probe.act().unwrap();
    assert_eq!(effects.len(), 7);
    assert!(matches!(&effects[0], SideEffect::WarmPrefix(w) if w.agent == 2 && w.anchor_hash == 0xbbbb));
    assert!(matches!(&effects[3], SideEffect::Preload(p) if p.model == "model-10"));
    assert!(matches!(&effects[5], SideEffect::SetPriority(p) if p.priority == -10));
    assert!(matches!(&effects[6], SideEffect::Deny(d) if d.reason == "saw 10 events"));

    // snapshot: 10 typed non-block events (waits and handoffs included: the packed path carries
    // every kind), 1 typed + 4 packed block events, 1200 prompt tokens.
    let state = probe.snapshot().unwrap();
    let fresh = start(&engine, "probe", &[]);
    fresh.restore(&state).unwrap();
    assert_eq!(fresh.snapshot().unwrap(), state);
    assert_eq!(
        fresh.score(&items[..1]).unwrap(),
        vec![0.5],
        "bias travels with the state"
    );

    for p in [
        Primitive::Observe,
        Primitive::ObserveBlocks,
        Primitive::Score,
        Primitive::Predict,
        Primitive::Act,
    ] {
        assert_eq!(probe.metrics().calls(p), 1, "{p} counted once");
    }
}

#[test]
fn lru_component_ranks_by_recency() {
    let (engine, _cache) = engine();
    let lru = start(&engine, "lru", &[]);
    assert_eq!(lru.info().name, "lru");
    let items: Vec<Item> = [5u64, 900, 17, 1 << 40, 0, 33]
        .iter()
        .enumerate()
        .map(|(i, &t)| block_item(i as u64, 1, t))
        .collect();
    let ranking = lru.rank(&items);
    assert!(ranking.fallback.is_none());
    assert_eq!(ranking.order, vec![3, 1, 5, 2, 0, 4]);
    assert_eq!(ranking.order, lru_order(&items));
    // The LRU is stateless: no config, an empty snapshot.
    assert!(lru.snapshot().unwrap().is_empty());
}

#[test]
fn registry_isolates_tenants_and_exports_metrics() {
    let (engine, _cache) = engine();
    let registry = std::sync::Arc::new(agentrt_runtime::PolicyRegistry::new(engine.clone()));
    let probe = load(&engine, "probe");
    let a = registry
        .install("tenant-a", "kv", probe.clone(), agentrt_runtime::SlotConfig::new(""))
        .unwrap();
    let b = registry
        .install("tenant-b", "kv", probe.clone(), agentrt_runtime::SlotConfig::new(""))
        .unwrap();
    assert!(registry
        .install("tenant-a", "kv", probe, agentrt_runtime::SlotConfig::new(""))
        .is_err());

    a.observe(&[register(1, "secret-agent", 0x5ec7e7)]).unwrap();
    assert_eq!(a.predict(1).unwrap().len(), 1);
    assert!(
        b.predict(1).unwrap().is_empty(),
        "tenant-b must not see tenant-a's events"
    );
    assert_eq!(registry.slots_of("tenant-b").len(), 1);

    let text = agentrt_exposition::render_one(registry.clone());
    assert!(
        text.contains("agentrt_policy_calls_total{tenant=\"tenant-a\",slot=\"kv\",primitive=\"observe\"} 1"),
        "{text}"
    );
    assert!(
        !text.contains("tenant=\"tenant-b\",slot=\"kv\",primitive=\"observe\""),
        "{text}"
    );
}

#[test]
fn packed_and_typed_scoring_agree_through_a_real_component() {
    let (engine, _cache) = engine();
    let policy = start(&engine, "cachesage", &[]);
    let mut rng = Rng::new(11);
    let mut events = vec![register(1, "a", 1), register(2, "b", 2), register(3, "c", 3)];
    for session in 0..40u64 {
        for agent in [1, 2, 3] {
            events.push(Event::RequestArrival(RequestArrival {
                request_id: 0,
                agent,
                session,
                anchor_hash: u64::from(agent),
                prompt_tokens: 10,
                continues: None,
                warmup: false,
                at_us: 0,
            }));
        }
    }
    policy.observe(&events).unwrap();
    let items: Vec<Item> = (0..200)
        .map(|_| Item {
            kind: [ItemKind::KvBlock, ItemKind::Request, ItemKind::ToolResult][rng.below(3) as usize],
            key: rng.next_u64(),
            agent: rng.below(4) as u32,
            session: rng.below(45),
            last_access: rng.below(1 << 40),
            tokens: 16,
            position: 16 * rng.below(10) as u32,
            tier: Tier::Gpu,
        })
        .collect();
    let packed = policy.score(&items).unwrap();
    assert_eq!(packed, policy.score_typed(&items).unwrap());
    assert!(
        packed.iter().any(|&s| s > 1.0),
        "structure was learned, so survival shows in scores"
    );
}

#[test]
fn the_epoch_ticker_sleeps_while_no_call_runs_and_a_loop_is_still_stopped() {
    use std::time::Duration;
    let (engine, _cache) = engine();
    let deadline = Duration::from_millis(50);
    let limits = agentrt_runtime::SandboxLimits {
        call_deadline: deadline,
        ..agentrt_runtime::SandboxLimits::default()
    };
    let config = agentrt_runtime::SlotConfig::new("test/probe").with_limits(limits);
    let probe = agentrt_runtime::PolicyHandle::start(&engine, load(&engine, "probe"), config).unwrap();
    // The start's calls are over; give the ticker its last tick, then watch it stay asleep.
    std::thread::sleep(Duration::from_millis(20));
    let idle = engine.epoch_ticks();
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(engine.epoch_ticks(), idle, "the epoch advanced with no call in flight");

    let err = probe.score(&[block_item(PROBE_LOOP_KEY, 1, 1)]).unwrap_err();
    assert!(
        matches!(err, agentrt_runtime::PolicyError::DeadlineExceeded { .. }),
        "{err}"
    );
    let ticked = engine.epoch_ticks() - idle;
    assert!(ticked >= 10, "{ticked} ticks during a 50 ms loop");
}

//! The guard once closings are heard: its robust expert is closed-first (the closed sessions'
//! blocks go first, oldest closing first, then LRU), and its shadow runs that same order, so a
//! model that uses the closings worse than the simple rule loses the engine to it. Driven through
//! the guard's own inputs (events, block events, rankings) by a small engine of 64 blocks.

use std::collections::BTreeMap;

use agentrt_sdk::{
    BlockEvent, BlockOp, EndReason, EngineLoad, Event, Item, ItemKind, RequestArrival, RequestFinish, SessionEnd, Tier,
};

use crate::guard::{Expert, Guard, GuardParams};

const BLOCKS: usize = 64;

/// An engine of `BLOCKS` blocks that evicts in the order the guard's scores say, and tells the
/// guard every event, as the host does.
struct Engine {
    guard: Guard,
    /// Cached blocks (all free between requests): hash → (session, last access).
    cached: BTreeMap<u64, (u64, u64)>,
    clock: u64,
    closed: Vec<u64>,
    hits: u32,
}

fn block(op: BlockOp, agent: u32, block_hash: u64) -> BlockEvent {
    BlockEvent {
        op,
        agent,
        block_hash,
        parent_hash: 0,
        position: 0,
        tier: Tier::Gpu,
    }
}

impl Engine {
    fn new() -> Self {
        let mut guard = Guard::new(GuardParams::default());
        guard.observe(
            &Event::EngineLoad(EngineLoad {
                queue_depth: 0,
                running: 0,
                free_blocks: 0,
                total_blocks: BLOCKS as u32,
                at_us: 0,
            }),
            |_| None,
        );
        Self {
            guard,
            cached: BTreeMap::new(),
            clock: 0,
            closed: Vec::new(),
            hits: 0,
        }
    }

    fn items(&self) -> Vec<Item> {
        self.cached
            .iter()
            .map(|(&key, &(session, last_access))| Item {
                kind: ItemKind::KvBlock,
                key,
                agent: session as u32,
                session,
                last_access,
                tokens: 16,
                position: 0,
                tier: Tier::Gpu,
            })
            .collect()
    }

    /// The guard's scores for every cached block, the model keeping closed sessions' blocks and
    /// evicting the others (the reverse of closed-first).
    fn rank(&mut self) -> (Vec<Item>, Vec<f32>) {
        let items = self.items();
        let model = items
            .iter()
            .map(|i| if self.closed.contains(&i.session) { 1.0 } else { 0.0 })
            .collect();
        let scores = self.guard.choose(&items, model);
        (items, scores)
    }

    /// One request of `session` (its agent has the session's number) for `hashes`.
    fn request(&mut self, session: u64, hashes: &[u64]) {
        let agent = session as u32;
        self.clock += 1;
        let at_us = self.clock * 1000;
        self.guard.observe(
            &Event::RequestArrival(RequestArrival {
                request_id: self.clock,
                agent,
                session,
                anchor_hash: 0,
                prompt_tokens: 16 * hashes.len() as u32,
                continues: None,
                warmup: false,
                at_us,
            }),
            |_| None,
        );
        for &h in hashes {
            if self.cached.contains_key(&h) {
                self.hits += 1;
                self.guard.observe_block(&block(BlockOp::Touched, agent, h));
            } else {
                if self.cached.len() == BLOCKS {
                    let (items, scores) = self.rank();
                    // The host keeps the highest first: the victim is the last.
                    let victim = *agentrt_sdk::testing::rank(&items, &scores)
                        .last()
                        .expect("a full cache");
                    self.cached.remove(&items[victim].key);
                    self.guard
                        .observe_block(&block(BlockOp::Removed, agent, items[victim].key));
                }
                self.guard.observe_block(&block(BlockOp::Stored, agent, h));
            }
            self.cached.insert(h, (session, self.clock));
        }
        self.guard.observe(
            &Event::RequestFinish(RequestFinish {
                request_id: self.clock,
                agent,
                session,
                prompt_tokens: 16 * hashes.len() as u32,
                cached_tokens: 0,
                output_tokens: 1,
                warmup: false,
                ok: true,
                at_us: at_us + 500,
            }),
            |_| None,
        );
    }

    fn close(&mut self, session: u64) {
        self.closed.push(session);
        self.guard.observe(
            &Event::SessionEnd(SessionEnd {
                session,
                reason: EndReason::Closed,
                at_us: self.clock * 1000 + 900,
            }),
            |_| None,
        );
    }
}

/// Round `r`: a one-turn session that is closed at once, a new two-turn session's first turn, and
/// the second turn of the one that started five rounds before (then closed). Its history is
/// asked for again after 5 × 16 new blocks: LRU over 64 blocks has evicted it; closed-first, which
/// takes the closed sessions' blocks first, has not; the model, which keeps the closed blocks, has.
fn round(e: &mut Engine, r: u64) {
    let one_turn = 1000 + r;
    e.request(one_turn, &(0..8).map(|i| one_turn * 100 + i).collect::<Vec<_>>());
    e.close(one_turn);
    let two_turn = 5000 + r;
    e.request(two_turn, &(0..8).map(|i| two_turn * 100 + i).collect::<Vec<_>>());
    if r >= 5 {
        let back = two_turn - 5;
        e.request(back, &(0..8).map(|i| back * 100 + i).collect::<Vec<_>>());
        e.close(back);
    }
}

#[test]
fn a_model_that_keeps_closed_blocks_loses_the_engine_to_closed_first() {
    let mut e = Engine::new();
    let mut rounds = 0;
    while e.guard.mode() == Expert::Model {
        round(&mut e, rounds);
        rounds += 1;
        assert!(
            rounds < 30,
            "after {rounds} rounds still following a model that misses every history closed-first keeps \
             (engine hits {})",
            e.hits
        );
    }
    assert_eq!(e.guard.stats().switches_to_lru, 1);
    // Following it, the histories begun since come back: five rounds on, every second turn hits.
    for r in rounds..rounds + 5 {
        round(&mut e, r);
    }
    let before = e.hits;
    for r in rounds + 5..rounds + 10 {
        round(&mut e, r);
    }
    assert_eq!(e.hits - before, 5 * 8, "closed-first keeps every history");
    assert_eq!(e.guard.mode(), Expert::Lru, "the model keeps losing: not given back");

    // Its ranking puts closed sessions' blocks first, the earliest closed first, then the
    // open sessions' by recency.
    let (items, scores) = e.rank();
    let order: Vec<u64> = agentrt_sdk::testing::rank(&items, &scores)
        .into_iter()
        .rev()
        .map(|i| items[i].session)
        .collect();
    let first_open = order
        .iter()
        .position(|s| !e.closed.contains(s))
        .expect("open blocks cached");
    assert!(
        order[first_open..].iter().all(|s| !e.closed.contains(s)),
        "a closed session's block ranked after an open one's: {order:?}"
    );
    let closed_rank = |s: &u64| e.closed.iter().position(|c| c == s).expect("closed");
    assert!(
        order[..first_open]
            .windows(2)
            .all(|w| closed_rank(&w[0]) <= closed_rank(&w[1])),
        "closed sessions not in the order they closed: {order:?}"
    );
}

/// The guard against plain LRU (no closings heard): a wrong model is handed back, a right one kept.
mod lru {
    use agentrt_sdk::testing::{gpu_block as item, gpu_block_event as block};
    use agentrt_sdk::{BlockEvent, BlockOp, EngineLoad, Event, Item, RequestArrival};

    use crate::guard::{Expert, Guard, GuardParams};

    fn guard() -> Guard {
        let mut g = Guard::new(GuardParams::default());
        g.observe(
            &Event::EngineLoad(EngineLoad {
                queue_depth: 0,
                running: 0,
                free_blocks: 0,
                total_blocks: 64,
                at_us: 0,
            }),
            |_| None,
        );
        g
    }

    /// A model that ranks the newest block lowest (the reverse of LRU), on 8 candidates of which
    /// the engine evicts 2 each round. `model_right`: the traffic asks for the old blocks the model
    /// kept; otherwise it asks again for the new ones the model evicted.
    fn round(g: &mut Guard, base: u64, model_right: bool) -> Vec<f32> {
        round_at(g, base, model_right, 0)
    }

    /// [`round`] with every block at token `position` of its prompt.
    fn round_at(g: &mut Guard, base: u64, model_right: bool, position: u32) -> Vec<f32> {
        let block = |op, h| BlockEvent {
            position,
            ..block(op, h)
        };
        // Eight new blocks are computed (stored), then freed: the candidates.
        for i in 0..8 {
            g.observe_block(&block(BlockOp::Stored, base + i));
        }
        let items: Vec<Item> = (0..8).map(|i| item(base + i, base + i)).collect();
        let model: Vec<f32> = (0..8).map(|i| -(i as f32)).collect(); // newest lowest
        let scores = g.choose(&items, model);
        // The engine evicts the two lowest-scored.
        let mut order: Vec<usize> = (0..8).collect();
        order.sort_by(|&a, &b| {
            scores[a]
                .total_cmp(&scores[b])
                .then(items[a].last_access.cmp(&items[b].last_access))
        });
        let victims: Vec<u64> = order[..2].iter().map(|&i| items[i].key).collect();
        for &v in &victims {
            g.observe_block(&block(BlockOp::Removed, v));
        }
        // The model is right when the old blocks are asked for, wrong when the new ones are.
        let asked: [u64; 2] = if model_right {
            [base, base + 1]
        } else {
            [base + 6, base + 7]
        };
        for h in asked {
            let op = if victims.contains(&h) {
                BlockOp::Stored
            } else {
                BlockOp::Touched
            };
            g.observe_block(&block(op, h));
        }
        scores
    }

    #[test]
    fn a_wrong_model_hands_back_to_lru_within_a_few_rankings_and_comes_back_when_right() {
        let mut g = guard();
        assert_eq!(g.mode(), Expert::Model);
        let mut rounds = 0;
        while g.mode() == Expert::Model {
            round(&mut g, 100 * rounds, false);
            rounds += 1;
            assert!(rounds < 10, "still following a model that keeps losing");
        }
        // Two misses a ranking that the shadow LRU would have hit; the sign test wants 10.
        assert!(rounds <= 6, "handed back after {rounds} rankings");
        assert_eq!(g.stats().switches_to_lru, 1);
        // In LRU mode the scores are LRU's exactly.
        let items: Vec<Item> = (0..4).map(|i| item(5000 + i, 5000 + i)).collect();
        let scores = g.choose(&items, vec![9.0, 1.0, 5.0, 0.0]);
        assert_eq!(scores, agentrt_sdk::recency_scores(&items));
        // Still scored while LRU ranks: once the traffic proves it right, the model is back.
        let mut back = 0;
        while g.mode() == Expert::Lru {
            round(&mut g, 10_000 + 100 * back, true);
            back += 1;
            assert!(back < 40, "never given back to a model that keeps winning");
        }
        assert_eq!(g.stats().switches_to_model, 1);
    }

    #[test]
    fn a_model_that_agrees_with_lru_is_never_switched_off() {
        let mut g = guard();
        for r in 0..50 {
            let items: Vec<Item> = (0..8).map(|i| item(r * 100 + i, r * 100 + i)).collect();
            let model = agentrt_sdk::recency_scores(&items);
            let scores = g.choose(&items, model.clone());
            assert_eq!(scores, model);
            for i in 0..2 {
                g.observe_block(&block(BlockOp::Removed, r * 100 + i));
                g.observe_block(&block(BlockOp::Stored, r * 100 + i));
            }
        }
        assert_eq!(g.mode(), Expert::Model);
        assert_eq!(
            (g.stats().model_wins, g.stats().lru_wins),
            (0, 0),
            "no disagreement, no evidence"
        );
    }

    #[test]
    fn a_model_that_wins_keeps_the_engine() {
        let mut g = guard();
        // The model keeps the oldest (reused) and evicts the newest (never asked for again).
        for r in 0..50 {
            round(&mut g, 100 * r, true);
        }
        assert_eq!(g.mode(), Expert::Model);
        assert!(g.stats().model_wins > 0 && g.stats().lru_wins == 0, "{:?}", g.stats());
        assert!(g.advantage() > 0.0);
    }

    /// A warm-up of agent 1 (the blocks' agent) arrives, reaching `prompt_tokens` into its prompt
    /// (0: not said, as the proxy's warm-ups); the host knows the agent's anchor as `anchor`.
    fn warm_up(g: &mut Guard, prompt_tokens: u32, anchor: Option<u32>) {
        g.observe(
            &Event::RequestArrival(RequestArrival {
                request_id: 1,
                agent: 1,
                session: 0,
                anchor_hash: 7,
                prompt_tokens,
                continues: None,
                warmup: true,
                at_us: 0,
            }),
            |_| anchor,
        );
    }

    /// Prefetching warms an agent's anchor as the agent comes back, so a warm-up is in flight
    /// while the agent's traffic arrives: the warm-up's own accesses (its anchor) are not the
    /// traffic's, and the traffic's session content past it is, and judges the model.
    #[test]
    fn a_warm_up_in_flight_hides_its_anchor_from_the_guard_and_not_the_agents_session() {
        // Session content past a warmed anchor of 64 tokens: a wrong model is handed back.
        let mut g = guard();
        warm_up(&mut g, 64, None);
        let mut rounds = 0;
        while g.mode() == Expert::Model {
            round_at(&mut g, 100 * rounds, false, 256);
            rounds += 1;
            assert!(rounds < 10, "the traffic's misses under a warm-up were not counted");
        }

        // Within the warm-up's extent, the same accesses are the warm-up's: nothing to judge by.
        let mut g = guard();
        warm_up(&mut g, 1024, None);
        for r in 0..20 {
            round_at(&mut g, 100 * r, false, 256);
        }
        assert_eq!(g.mode(), Expert::Model, "a warm-up's own accesses judged the model");

        // A warm-up that does not say its size reaches the agent's anchor (and one block more).
        let mut g = guard();
        warm_up(&mut g, 0, Some(1024));
        for r in 0..20 {
            round_at(&mut g, 100 * r, false, 1024);
        }
        assert_eq!(
            g.mode(),
            Expert::Model,
            "the anchor's straddling block judged the model"
        );
        for r in 20..40 {
            round_at(&mut g, 100 * r, false, 4096);
            if g.mode() == Expert::Lru {
                return;
            }
        }
        panic!("session content past the anchor did not judge the model");
    }
}

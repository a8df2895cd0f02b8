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
        guard.observe(&Event::EngineLoad(EngineLoad {
            queue_depth: 0,
            running: 0,
            free_blocks: 0,
            total_blocks: BLOCKS as u32,
            at_us: 0,
        }));
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
        self.guard.observe(&Event::RequestArrival(RequestArrival {
            request_id: self.clock,
            agent,
            session,
            anchor_hash: 0,
            prompt_tokens: 16 * hashes.len() as u32,
            continues: None,
            warmup: false,
            at_us,
        }));
        for &h in hashes {
            if self.cached.contains_key(&h) {
                self.hits += 1;
                self.guard.observe_block(&block(BlockOp::Touched, agent, h));
            } else {
                if self.cached.len() == BLOCKS {
                    let (items, scores) = self.rank();
                    // The host keeps the highest first: the victim is the last.
                    let victim = *agentrt_sdk::testing::rank(&items, &scores).last().expect("a full cache");
                    self.cached.remove(&items[victim].key);
                    self.guard.observe_block(&block(BlockOp::Removed, agent, items[victim].key));
                }
                self.guard.observe_block(&block(BlockOp::Stored, agent, h));
            }
            self.cached.insert(h, (session, self.clock));
        }
        self.guard.observe(&Event::RequestFinish(RequestFinish {
            request_id: self.clock,
            agent,
            session,
            prompt_tokens: 16 * hashes.len() as u32,
            cached_tokens: 0,
            output_tokens: 1,
            warmup: false,
            ok: true,
            at_us: at_us + 500,
        }));
    }

    fn close(&mut self, session: u64) {
        self.closed.push(session);
        self.guard.observe(&Event::SessionEnd(SessionEnd {
            session,
            reason: EndReason::Closed,
            at_us: self.clock * 1000 + 900,
        }));
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
    let first_open = order.iter().position(|s| !e.closed.contains(s)).expect("open blocks cached");
    assert!(
        order[first_open..].iter().all(|s| !e.closed.contains(s)),
        "a closed session's block ranked after an open one's: {order:?}"
    );
    let closed_rank = |s: &u64| e.closed.iter().position(|c| c == s).expect("closed");
    assert!(
        order[..first_open].windows(2).all(|w| closed_rank(&w[0]) <= closed_rank(&w[1])),
        "closed sessions not in the order they closed: {order:?}"
    );
}

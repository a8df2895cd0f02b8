//! CacheSage's guard judges the model against a shadow LRU fed by the block events a policy sees
//! (`policies/cachesage/src/shadow.rs`). This checks the shadow against the simulator's LRU —
//! vLLM's, rule for rule — on the same replay: the blocks the shadow says LRU would hit are the
//! blocks LRU hits, within a few percent. Once closings are heard the shadow is closed-first: the
//! same check against the simulator's `closed-first`, the shadow telling whose each block is from
//! the block events alone (no rankings correct it here).

use agentrt_policy_cachesage::shadow::{ShadowLru, Shadowed};
use agentrt_runtime::types::{BlockOp, EndReason, Event};
use agentrt_sim::block_pool::{Block, BlockId, BlockPool, PoolObserver};
use agentrt_sim::offload::ranked::HostRanker;
use agentrt_sim::policies::{ClosedFirstLru, SimPolicy};
use agentrt_sim::prepare::PreparedTrace;
use agentrt_sim::scheduler::{SessionEnds, Sim, SimConfig};
use agentrt_sim::workloads::{generate, Workload};

/// vLLM's LRU (no choice of victims), or the simulator's closed-first with `closed_first`,
/// watching with a shadow that hears what a policy hears.
#[derive(Default)]
struct Watched {
    closed_first: Option<ClosedFirstLru>,
    shadow: ShadowLru,
    now_us: u64,
    /// (engine hit, shadow hit) counts over sampled accesses.
    counts: [[u64; 2]; 2],
}

impl PoolObserver for Watched {
    fn block_event(&mut self, op: BlockOp, block: &Block) {
        if let Some(engine) = &mut self.closed_first {
            engine.block_event(op, block);
        }
        let engine_hit = match op {
            BlockOp::Stored => false,
            BlockOp::Touched => true,
            _ => return,
        };
        if let Some(outcome) = self
            .shadow
            .access(block.hash, block.parent, block.position, block.agent)
        {
            self.counts[usize::from(engine_hit)][usize::from(outcome == Shadowed::Hit)] += 1;
        }
    }

    fn freed(&mut self, pool: &BlockPool, block: BlockId) {
        if let Some(engine) = &mut self.closed_first {
            engine.freed(pool, block);
        }
    }

    fn victim(&mut self, pool: &BlockPool) -> Option<BlockId> {
        self.closed_first.as_mut().and_then(|engine| engine.victim(pool))
    }

    fn consumed(&mut self, block: BlockId) {
        if let Some(engine) = &mut self.closed_first {
            engine.consumed(block);
        }
    }
}

/// No host tier in this replay.
impl HostRanker for Watched {}

impl SimPolicy for Watched {
    fn name(&self) -> &str {
        "lru-watched"
    }
    fn event(&mut self, event: Event) {
        if let Some(engine) = &mut self.closed_first {
            engine.event(event.clone());
        }
        match event {
            Event::EngineLoad(l) => self.shadow.resize(l.total_blocks as usize),
            Event::RequestFinish(r) => {
                self.now_us = self.now_us.max(r.at_us);
                self.shadow.finished(r.agent, r.session, self.now_us);
            }
            Event::RequestArrival(r) => {
                self.now_us = self.now_us.max(r.at_us);
                self.shadow.arrived(r.agent, r.session);
            }
            Event::SessionEnd(end) if end.reason == EndReason::Closed => self.shadow.close(end.session),
            _ => {}
        }
    }
}

#[test]
fn the_shadow_hits_what_vllms_lru_hits() {
    within_five_percent(false);
}

/// With the oracle's session ends (closings, as a framework's), the shadow is closed-first.
#[test]
fn with_closings_the_shadow_hits_what_closed_first_hits() {
    within_five_percent(true);
}

fn within_five_percent(closings: bool) {
    for (workload, blocks) in [
        (Workload::Mtbench, 3540),
        (Workload::Gaia, 3540),
        (Workload::Fleet, 3540),
    ] {
        let mut p = workload.headline();
        p.sessions /= 8;
        p.concurrency /= 8.0;
        let trace = PreparedTrace::new(&generate(workload, &p), 16, false);
        let mut watched = Watched {
            closed_first: closings.then(ClosedFirstLru::default),
            ..Watched::default()
        };
        let mut cfg = SimConfig::new(blocks);
        if closings {
            cfg.session_ends = SessionEnds::Oracle;
        }
        Sim::new(cfg, &trace, &mut watched).run().unwrap();
        let [[_, shadow_only], [engine_only, both]] = watched.counts;
        let engine_hits = engine_only + both;
        let shadow_hits = shadow_only + both;
        let error = (shadow_hits as f64 - engine_hits as f64) / engine_hits as f64;
        println!(
            "{} (closings: {closings}): the engine hit {engine_hits} sampled blocks, the shadow {shadow_hits} ({:+.1} %); disagreeing {engine_only} / {shadow_only}",
            workload.name(),
            error * 100.0
        );
        assert!(
            error.abs() < 0.05,
            "{}: the shadow is off by {:.1} %",
            workload.name(),
            error * 100.0
        );
    }
}

/// The same on any trace: `AGENTRT_SHADOW_TRACE=T.jsonl AGENTRT_SHADOW_BLOCKS=N cargo test …`.
#[test]
fn the_shadow_on_a_given_trace() {
    let (Ok(path), Ok(blocks)) = (
        std::env::var("AGENTRT_SHADOW_TRACE"),
        std::env::var("AGENTRT_SHADOW_BLOCKS"),
    ) else {
        return;
    };
    let trace = agentrt_sim::trace::Trace::load(std::path::Path::new(&path)).unwrap();
    let trace = PreparedTrace::new(&trace, 16, false);
    let mut watched = Watched::default();
    Sim::new(SimConfig::new(blocks.parse().unwrap()), &trace, &mut watched)
        .run()
        .unwrap();
    println!("{path}: (engine hit, shadow hit) counts {:?}", watched.counts);
}

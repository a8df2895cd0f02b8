//! `agentrt demo`: the built-in policies on a short synthetic multi-agent trace — a
//! planner → coder → tester loop over a dozen sessions, an unrelated auditor called twice, and a new
//! session stopped just before its tester — printing what each observes, scores, predicts and acts
//! on. LRU evicts the tester's anchor (the oldest) just before it is needed; so does CacheSage as it
//! ships, whose guard keeps LRU's order until its model has beaten LRU on the traffic; its model
//! alone (`guard=false`) evicts the rarely used auditor's and asks for a warm-up of the tester's.

use std::path::PathBuf;
use std::sync::Arc;

use agentrt_runtime::types::*;
use agentrt_runtime::{
    packed, ComponentLookup, EngineOptions, PolicyEngine, PolicyHandle, SlotConfig, SlowCompileNotice,
};
use anyhow::Context;

#[derive(clap::Args)]
pub struct DemoArgs {
    /// Look for the policy components only in this folder — but for the baseline `lru`, which
    /// comes built into agentrt when the folder has none (default: `$AGENTRT_COMPONENTS_DIR`,
    /// beside the binary, built into it, then the source tree's build).
    #[arg(long)]
    components: Option<PathBuf>,
    /// Sessions to run through the loop.
    #[arg(long, default_value_t = 12)]
    sessions: u32,
}

/// The policies the demo runs, in order, when their components exist: each with its `init`
/// settings and a sentence said under its name. CacheSage runs twice: as it ships — its guard keeps
/// LRU's order until its model has beaten LRU on this traffic, which a dozen sessions are too few
/// to show — and its model alone (`guard=false`).
const DEMO_POLICIES: &[DemoPolicy] = &[
    DemoPolicy {
        name: "lru",
        init: &[],
        note: "",
    },
    DemoPolicy {
        name: "cachesage",
        init: &[],
        note: "As it ships: its guard keeps LRU's order until its model has beaten LRU on this traffic \
               (a dozen sessions are too few to tell).",
    },
    DemoPolicy {
        name: "cachesage",
        init: &[("guard", "false")],
        note: "Its model alone (guard=false): what it does once its evidence says the model wins.",
    },
];

/// A policy the demo runs: its component's name, its `init` settings, a sentence said under it.
struct DemoPolicy {
    name: &'static str,
    init: &'static [(&'static str, &'static str)],
    note: &'static str,
}
const AGENTS: [(&str, u64); 4] = [
    ("planner", 0x91a7),
    ("coder", 0xc0de),
    ("tester", 0x7e57),
    ("auditor", 0xa0d1),
];
/// The loop's agents; the auditor runs once, on its own, and is not part of it.
const LOOP: usize = 3;
const AUDITOR: usize = 3;
const ANCHOR_BLOCKS: u64 = 4;
/// A call's duration, the time between a session's calls, and between sessions' starts (ms).
const CALL_MS: u64 = 1_000;
const STEP_MS: u64 = 3_000;
const SESSION_EVERY_MS: u64 = 10_000;

pub fn run(args: DemoArgs, components: &ComponentLookup) -> anyhow::Result<()> {
    let components = match args.components {
        Some(dir) => components.given_folder(dir),
        None => components.clone(),
    };
    let engine = PolicyEngine::new(EngineOptions {
        slow_compile: Some(SlowCompileNotice::stderr()),
        ..EngineOptions::default()
    })?;
    let mut ran = 0;
    let mut last_missing = None;
    for &DemoPolicy { name, init, note } in DEMO_POLICIES {
        let source = match components.find(name) {
            Ok(source) => source,
            Err(missing) => {
                println!("({name}: no component; skipped)\n");
                last_missing = Some(missing);
                continue;
            }
        };
        let component = Arc::new(source.load(&engine)?);
        let config = SlotConfig::new(format!("demo/{name}")).with_init(init.iter().copied());
        let policy = PolicyHandle::start(&engine, component, config).with_context(|| format!("starting {name}"))?;
        run_one(&policy, init, note, args.sessions)?;
        ran += 1;
    }
    match last_missing {
        Some(missing) if ran == 0 => Err(missing.into()),
        _ => Ok(()),
    }
}

/// Block hash of an agent's i-th anchor block.
fn anchor_block(agent: usize, i: u64) -> u64 {
    AGENTS[agent].1 << 16 | i
}

fn run_one(policy: &PolicyHandle, init: &[(&str, &str)], note: &str, sessions: u32) -> anyhow::Result<()> {
    let info = policy.info();
    let settings: Vec<String> = init.iter().map(|(k, v)| format!(":{k}={v}")).collect();
    println!(
        "== {}{} {}: {}",
        info.name,
        settings.concat(),
        info.version,
        info.description
    );
    if !note.is_empty() {
        println!("{note}");
    }
    let trace = DemoTrace::new(sessions);
    policy.observe(&trace.events)?;
    policy.observe_blocks(&trace.blocks)?;
    println!(
        "It observed {} events (agents registered, requests, sessions ending, the engine's load) and {} \
         block events.",
        trace.events.len(),
        trace.blocks.len() / packed::WORDS_PER_EVENT
    );
    show_eviction(policy, &trace.last_access)?;
    show_forecasts_and_effects(policy)?;
    println!("Its learned state is {} bytes.\n", policy.snapshot()?.len());
    Ok(())
}

/// What the policy hears: the agents registered, the loop sessions' calls and their anchors'
/// block events, the auditor's calls, a loop paused before the tester, the engine's load.
struct DemoTrace {
    events: Vec<Event>,
    blocks: Vec<u64>,
    /// Each agent's last use, in the engine's stamps.
    last_access: Vec<u64>,
    stamp: u64,
    request_id: u64,
}

impl DemoTrace {
    fn new(sessions: u32) -> DemoTrace {
        let events = AGENTS
            .iter()
            .enumerate()
            .map(|(i, (name, anchor))| {
                Event::AgentRegistered(AgentRegistered {
                    agent: i as u32 + 1,
                    name: name.to_string(),
                    anchor_hash: *anchor,
                    anchor_tokens: ANCHOR_BLOCKS as u32 * 16,
                })
            })
            .collect();
        let mut trace = DemoTrace {
            events,
            blocks: Vec::new(),
            last_access: vec![0; AGENTS.len()],
            stamp: 0,
            request_id: 0,
        };
        trace.loop_sessions(sessions);
        trace.auditor_and_a_paused_loop(sessions);
        trace
    }

    /// One call of `agent` in `session` at `at_ms`: it takes 1 s, and its anchor is used (the
    /// engine's stamp ticks).
    fn call(&mut self, agent: usize, session: u64, at_ms: u64) {
        self.request_id += 1;
        self.stamp += 1;
        self.last_access[agent] = self.stamp;
        let (id, handle) = (self.request_id, agent as u32 + 1);
        self.events.push(Event::RequestArrival(RequestArrival {
            request_id: id,
            agent: handle,
            session,
            anchor_hash: AGENTS[agent].1,
            prompt_tokens: 900,
            continues: None,
            warmup: false,
            at_us: at_ms * 1000,
        }));
        self.events.push(Event::RequestFinish(RequestFinish {
            request_id: id,
            agent: handle,
            session,
            prompt_tokens: 900,
            cached_tokens: 0,
            output_tokens: 50,
            warmup: false,
            ok: true,
            at_us: (at_ms + CALL_MS) * 1000,
        }));
    }

    /// Block `i` of `agent`'s anchor: `op` on the GPU tier.
    fn anchor_block_event(&mut self, agent: usize, i: u64, op: BlockOp) {
        let parent = if i == 0 { 0 } else { anchor_block(agent, i - 1) };
        packed::encode(
            &BlockEvent {
                op,
                agent: agent as u32 + 1,
                block_hash: anchor_block(agent, i),
                parent_hash: parent,
                position: (i * 16) as u32,
                tier: Tier::Gpu,
            },
            &mut self.blocks,
        );
    }

    /// Loop sessions start every 10 s; inside one, a call every 3 s (1 s of model, 2 s of tool).
    fn loop_sessions(&mut self, sessions: u32) {
        for session in 0..sessions as u64 {
            let start_ms = session * SESSION_EVERY_MS;
            for agent in 0..LOOP {
                self.call(agent, session + 1, start_ms + agent as u64 * STEP_MS);
                let op = if session == 0 {
                    BlockOp::Stored
                } else {
                    BlockOp::Touched
                };
                for i in 0..ANCHOR_BLOCKS {
                    self.anchor_block_event(agent, i, op);
                }
            }
            self.events.push(closed(session + 1, (session + 1) * SESSION_EVERY_MS));
        }
    }

    /// The auditor runs on its own now and then: once early on, once just now. Then a new loop
    /// session stops mid-way: the planner and the coder ran; the tester is next, in a second or
    /// two. The auditor's anchor is newer than the tester's, so LRU would evict the tester's
    /// first — just before the tester needs it.
    fn auditor_and_a_paused_loop(&mut self, sessions: u32) {
        let end_ms = sessions as u64 * SESSION_EVERY_MS;
        for (n, at_ms) in [5_000, end_ms - 2_000].into_iter().enumerate() {
            let session = sessions as u64 + 1 + n as u64;
            self.call(AUDITOR, session, at_ms);
            self.events.push(closed(session, at_ms + CALL_MS));
        }
        for agent in 0..2 {
            self.call(agent, sessions as u64 + 3, end_ms + agent as u64 * STEP_MS);
        }
        // The auditor's anchor was cached; the tester's last anchor block was evicted meanwhile.
        self.anchor_block_event(AUDITOR, ANCHOR_BLOCKS - 1, BlockOp::Stored);
        self.anchor_block_event(2, ANCHOR_BLOCKS - 1, BlockOp::Removed);
        // Half a second after the coder finished.
        self.events.push(Event::EngineLoad(EngineLoad {
            queue_depth: 0,
            running: 0,
            free_blocks: 0,
            total_blocks: 64,
            at_us: (end_ms + STEP_MS + CALL_MS + 500) * 1000,
        }));
    }
}

/// The engine must evict one of the agents' last anchor blocks (the tester's is the oldest): the
/// policy's scores, and which goes first.
fn show_eviction(policy: &PolicyHandle, last_access: &[u64]) -> anyhow::Result<()> {
    let items: Vec<Item> = (0..AGENTS.len())
        .map(|a| Item {
            kind: ItemKind::KvBlock,
            key: anchor_block(a, ANCHOR_BLOCKS - 1),
            agent: a as u32 + 1,
            session: 0,
            last_access: last_access[a],
            tokens: 16,
            position: ((ANCHOR_BLOCKS - 1) * 16) as u32,
            tier: Tier::Gpu,
        })
        .collect();
    let scores = policy.score(&items)?;
    let ranking = policy.rank(&items);
    println!("The engine must evict one of the agents' anchor blocks; the policy scores them (higher is kept):");
    println!("  {:<8}  {:>10}  {:>9}  {:>9}", "agent", "block", "last used", "score");
    for (item, score) in items.iter().zip(&scores) {
        println!(
            "  {:<8}  {:>#10x}  {:>9}  {score:>9.3}",
            AGENTS[item.agent as usize - 1].0,
            item.key,
            item.last_access
        );
    }
    let evict_first = &items[*ranking.order.last().expect("four items")];
    println!(
        "So the {}'s block goes first.",
        AGENTS[evict_first.agent as usize - 1].0
    );
    Ok(())
}

/// What the policy forecasts and which side effects it asks for, in sentences.
fn show_forecasts_and_effects(policy: &PolicyHandle) -> anyhow::Result<()> {
    let name = |agent: u32| {
        AGENTS
            .get((agent as usize).wrapping_sub(1))
            .map_or_else(|| format!("agent {agent}"), |a| a.0.to_string())
    };
    let forecasts = policy.predict(3)?;
    if forecasts.is_empty() {
        println!("It forecasts nothing (this policy does not predict).");
    } else {
        println!("It forecasts:");
        for f in &forecasts {
            println!("  - {}", crate::describe::forecast(f, &name));
        }
    }
    let effects = policy.act()?;
    if effects.is_empty() {
        println!("It asks for no side effects.");
    } else {
        println!("It asks the host to:");
        for e in &effects {
            println!("  - {}", crate::describe::side_effect(e, &name));
        }
    }
    Ok(())
}

/// The framework says `session` is over (a graph run reached its end), at `at_ms`.
fn closed(session: u64, at_ms: u64) -> Event {
    Event::SessionEnd(SessionEnd {
        session,
        reason: EndReason::Closed,
        at_us: at_ms * 1000,
    })
}

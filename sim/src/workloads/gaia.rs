//! GAIA (Mialon et al. 2023) run by a Magentic-One-style team (Fourney et al. 2024): an
//! orchestrator plans and delegates; a web surfer, a coder and a file surfer act with tools in
//! ReAct loops whose observations grow their context.
//!
//! Graph: `orchestrator` (plan) → repeat 3–10 times { `orchestrator` (choose next agent; its
//! ledger grows) → the chosen agent runs 1–3 tool steps (each extends its previous prompt with its
//! tool call and the tool's observation; the tool's latency passes between steps) }. The web
//! surfer is chosen most, the file surfer least: rare agents with large anchors.

use crate::rng::Rng;
use crate::trace::Segment;
use crate::workloads::SessionBuilder;

struct Worker {
    name: &'static str,
    sys: u32,
    tools: u32,
    /// Chance the orchestrator picks it.
    weight: f64,
    /// Tool latency median (ms) and observation median (tokens).
    tool_ms: f64,
    obs: f64,
}

const WORKERS: [Worker; 3] = [
    Worker {
        name: "web-surfer",
        sys: 900,
        tools: 2600,
        weight: 0.6,
        tool_ms: 6000.0,
        obs: 900.0,
    },
    Worker {
        name: "coder",
        sys: 700,
        tools: 700,
        weight: 0.3,
        tool_ms: 2500.0,
        obs: 350.0,
    },
    Worker {
        name: "file-surfer",
        sys: 650,
        tools: 1100,
        weight: 0.1,
        tool_ms: 1200.0,
        obs: 1200.0,
    },
];

pub(super) fn session(b: &mut SessionBuilder, rng: &mut Rng) {
    // GAIA questions are short; some come with an attached file description.
    let task = b.seg("task", rng.lognormal_len(120.0, 0.7, 30, 1500));
    let orch_anchor = vec![Segment::new("sys/orchestrator", 1600), Segment::new("tools/team", 500)];
    let mut orch = orch_anchor.clone();
    orch.push(task.clone());
    let plan = b.call("orchestrator", orch.clone(), rng.lognormal_len(350.0, 0.4, 100, 900));
    orch.push(plan);
    // Each worker's conversation persists across delegations within the session.
    let mut histories: Vec<Option<Vec<Segment>>> = vec![None, None, None];
    let rounds = rng.range(3, 10);
    for round in 0..rounds {
        let instruction = b.call("orchestrator", orch.clone(), rng.lognormal_len(140.0, 0.4, 40, 400));
        orch.push(instruction.clone());
        let w = rng.weighted(&WORKERS.map(|w| w.weight));
        let worker = &WORKERS[w];
        let history = histories[w].get_or_insert_with(|| {
            vec![
                Segment::new(format!("sys/{}", worker.name), worker.sys),
                Segment::new(format!("tools/{}", worker.name), worker.tools),
                task.clone(),
            ]
        });
        history.push(instruction);
        let steps = rng.range(1, 3);
        for _ in 0..steps {
            let action = b.call(worker.name, history.clone(), rng.lognormal_len(110.0, 0.4, 30, 400));
            b.wait(rng.lognormal_len(worker.tool_ms as f32 as f64, 0.7, 200, 60000) as f64);
            let observation = b.seg(
                &format!("obs-{round}-{}", history.len()),
                rng.lognormal_len(worker.obs, 0.8, 60, 4000),
            );
            history.push(action);
            history.push(observation);
        }
        let report = b.call(worker.name, history.clone(), rng.lognormal_len(160.0, 0.4, 40, 500));
        history.push(report.clone());
        orch.push(report);
    }
    b.call("orchestrator", orch, rng.lognormal_len(120.0, 0.4, 20, 400));
}

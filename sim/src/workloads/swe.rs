//! SWE-agent-shaped programs: one agent fixing a repository issue in a ReAct loop, the workload
//! on which proxies that hold whole programs back (ThunderAgent, arXiv 2602.13692) were measured
//! past the engine's knee.
//!
//! A program is one task: its prompt starts with the agent's anchor (system prompt + the command
//! documentation of its agent–computer interface) and the issue; each call extends the previous
//! prompt with the previous answer (a thought and one shell/editor action) and the tool's
//! observation, so the context grows call after call to tens of thousands of tokens. Between two
//! calls the action runs (a command, an edit, a test run: seconds). The framework knows which
//! tool runs (`hints.wait`, the tool's name, no duration) and when the task is over (`closes` on
//! the last call); every answer but the last asks for a tool (`tool_call`).
//!
//! Sizes, call counts and tool times are taken from published trajectories before any policy ran
//! on this workload; each parameter's source is in docs/workloads.md ("SWE — programs past the
//! knee").

use crate::rng::Rng;
use crate::trace::Segment;
use crate::workloads::SessionBuilder;

/// The agent's anchor: system prompt, and the interface's command documentation.
const SYSTEM_TOKENS: u32 = 1_200;
const TOOL_DOC_TOKENS: u32 = 1_800;

/// The tools the actions call, and each one's median duration (ms): a command, an edit, a test run.
const TOOLS: [(&str, f64, f64); 3] = [("bash", 1_500.0, 0.55), ("edit", 400.0, 0.25), ("test", 6_000.0, 0.2)];

pub(super) fn session(b: &mut SessionBuilder, rng: &mut Rng) {
    let mut context = vec![
        Segment::new("sys/swe-agent", SYSTEM_TOKENS),
        Segment::new("tools/swe-agent", TOOL_DOC_TOKENS),
        b.seg("issue", rng.lognormal_len(220.0, 0.7, 40, 6_000)),
    ];
    let calls = rng.lognormal_len(34.0, 0.35, 8, 90);
    for step in 0..calls {
        let action = b.call("swe-agent", context.clone(), rng.lognormal_len(150.0, 0.5, 20, 1_500));
        if step + 1 == calls {
            break; // the last answer submits the patch: the program is over
        }
        b.asks_for_tool();
        let tool = rng.weighted(&TOOLS.map(|(_, _, share)| share));
        let (name, median_ms, _) = TOOLS[tool];
        b.tool_wait(f64::from(rng.lognormal_len(median_ms, 0.8, 100, 60_000)), name);
        let observation = b.seg(&format!("obs-{step}"), rng.lognormal_len(900.0, 0.9, 20, 8_000));
        context.push(action);
        context.push(observation);
    }
}

//! One engine shared by many agent applications: the regime where anchors are evicted between
//! uses.
//!
//! An operator's engine serves `applications` independent agent apps, each a small team (3–5
//! agents) with its own system prompts and tool definitions. Apps are drawn by popularity (Zipf
//! over apps, as invocation counts of hosted functions and deployed models are), so a few apps
//! run all the time and a long tail runs now and then. Four kinds of app, each after a published
//! design:
//!
//! - `support` — a τ-bench-style customer-service agent (Yao et al. 2024): triage → a specialist
//!   with a policy document and API tools talks with the user over several turns (user think time
//!   between turns, quick API calls within) → a summarizer writes the case notes.
//! - `pipeline` — a CrewAI / LangGraph sequential crew: researcher (search tools) → analyst (data
//!   tools, some apps) → writer → reviewer, who sends the draft back now and then.
//! - `coding` — an SWE-agent / OpenHands-style team: planner → coder in a ReAct loop over shell
//!   and editor tools → tester (runs the tests) → back to the coder on failures → reviewer.
//! - `research` — a Magentic-One-style team (Fourney et al. 2024): an orchestrator delegating to
//!   two or three tool-using workers for a few rounds.
//!
//! Anchor sizes come from measured tool schemas: a corpus of 1,659 MCP servers' `tools/list`
//! payloads has a median of ~1.1 k tokens per server, p90 ~6.1 k, and single servers up to tens
//! of thousands (GitHub's 86 tools 14.4 k, Slack's 37 k); one tool costs 60–300 tokens. A
//! tool-using agent here carries LN(1,900, 0.9) tokens of tools (clamped to 150–12,000) and a
//! system prompt of LN(900, 0.5); agents without tools carry only the system prompt. Sources and
//! the full table are in docs/workloads.md.

use crate::rng::Rng;
use crate::trace::Segment;
use crate::workloads::{GenParams, SessionBuilder};

/// Generator settings specific to the many-application workload.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FleetParams {
    /// Agent applications sharing the engine.
    pub applications: usize,
    /// Multiplier on every anchor (system prompt + tools) size.
    pub anchor_scale: f64,
    /// Zipf exponent of application popularity.
    pub zipf: f64,
}

impl Default for FleetParams {
    fn default() -> Self {
        Self {
            applications: 80,
            anchor_scale: 1.0,
            zipf: 1.0,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Support,
    Pipeline,
    Coding,
    Research,
}

/// Mix of application kinds across the fleet.
const KINDS: [(Kind, f64); 4] = [
    (Kind::Support, 0.3),
    (Kind::Pipeline, 0.3),
    (Kind::Coding, 0.2),
    (Kind::Research, 0.2),
];

/// One agent of an application: its name and anchor.
#[derive(Debug, Clone)]
struct Agent {
    name: String,
    anchor: Vec<Segment>,
    /// Median tool latency (ms) of its tool steps.
    tool_ms: f64,
    /// Median tool-observation size (tokens).
    obs: f64,
}

#[derive(Debug, Clone)]
struct App {
    kind: Kind,
    /// Roles in the order the kind's session uses them (see `session`).
    agents: Vec<Agent>,
}

/// Every application of the fleet, drawn once per trace.
#[derive(Debug, Clone)]
pub struct Catalog {
    apps: Vec<App>,
    zipf: f64,
}

impl Catalog {
    /// The catalog of a trace generated with `params`: its own stream of the seed, so that the
    /// sessions' streams do not depend on the catalog's size.
    pub fn for_params(params: &GenParams) -> Self {
        let mut rng = Rng::new(params.seed ^ crate::tokens::hash_str("fleet-catalog"));
        Self::new(&params.fleet, &mut rng)
    }

    pub fn new(params: &FleetParams, rng: &mut Rng) -> Self {
        let apps = (0..params.applications.max(1))
            .map(|i| App::draw(i, params.anchor_scale, rng))
            .collect();
        Self {
            apps,
            zipf: params.zipf,
        }
    }

    /// Total anchor tokens of every agent of every app.
    pub fn anchor_tokens(&self) -> u64 {
        self.apps
            .iter()
            .flat_map(|a| &a.agents)
            .flat_map(|a| &a.anchor)
            .map(|s| u64::from(s.tokens))
            .sum()
    }

    pub fn agents(&self) -> usize {
        self.apps.iter().map(|a| a.agents.len()).sum()
    }

    pub(super) fn session(&self, b: &mut SessionBuilder, rng: &mut Rng) {
        let app = &self.apps[rng.zipf(self.apps.len(), self.zipf)];
        match app.kind {
            Kind::Support => support(app, b, rng),
            Kind::Pipeline => pipeline(app, b, rng),
            Kind::Coding => coding(app, b, rng),
            Kind::Research => research(app, b, rng),
        }
    }
}

/// Role: (name, tool-using, system-prompt median, tool latency median ms, observation median).
type Role = (&'static str, bool, f64, f64, f64);

impl App {
    fn draw(index: usize, scale: f64, rng: &mut Rng) -> App {
        let kind = KINDS[rng.weighted(&KINDS.map(|(_, w)| w))].0;
        let roles: Vec<Role> = match kind {
            // τ-bench's policy documents run to a few thousand tokens; the specialist carries one.
            Kind::Support => vec![
                ("triage", false, 600.0, 0.0, 0.0),
                ("specialist", true, 2500.0, 800.0, 350.0),
                ("summarizer", false, 500.0, 0.0, 0.0),
            ],
            Kind::Pipeline => {
                let mut r = vec![("researcher", true, 900.0, 3000.0, 900.0)];
                if rng.chance(0.5) {
                    r.push(("analyst", true, 900.0, 2500.0, 500.0));
                }
                r.push(("writer", false, 900.0, 0.0, 0.0));
                r.push(("reviewer", false, 700.0, 0.0, 0.0));
                r
            }
            Kind::Coding => vec![
                ("planner", false, 1200.0, 0.0, 0.0),
                ("coder", true, 1500.0, 2000.0, 600.0),
                ("tester", true, 700.0, 5000.0, 500.0),
                ("reviewer", false, 800.0, 0.0, 0.0),
            ],
            Kind::Research => {
                let mut r = vec![
                    ("orchestrator", false, 1600.0, 0.0, 0.0),
                    ("web-surfer", true, 900.0, 6000.0, 900.0),
                    ("coder", true, 700.0, 2500.0, 350.0),
                ];
                if rng.chance(0.5) {
                    r.push(("file-surfer", true, 650.0, 1200.0, 1200.0));
                }
                r
            }
        };
        let agents = roles
            .into_iter()
            .map(|(role, tools, sys, tool_ms, obs)| {
                let name = format!("app{index}/{role}");
                let sys_tokens = (f64::from(rng.lognormal_len(sys, 0.5, 200, 6000)) * scale).round() as u32;
                let mut anchor = vec![Segment::new(format!("sys/{name}"), sys_tokens.max(1))];
                if tools {
                    let t = (f64::from(rng.lognormal_len(1900.0, 0.9, 150, 12000)) * scale).round() as u32;
                    anchor.push(Segment::new(format!("tools/{name}"), t.max(1)));
                }
                Agent {
                    name,
                    anchor,
                    tool_ms,
                    obs,
                }
            })
            .collect();
        App { kind, agents }
    }

    fn agent(&self, role: &str) -> &Agent {
        self.agents
            .iter()
            .find(|a| a.name.rsplit('/').next() == Some(role))
            .expect("every kind's session uses only its own roles")
    }

    fn has(&self, role: &str) -> bool {
        self.agents.iter().any(|a| a.name.rsplit('/').next() == Some(role))
    }
}

/// A ReAct loop of `steps` tool calls by `agent`, extending `history`; the tool's latency passes
/// after each call and its observation joins the history.
fn tool_steps(b: &mut SessionBuilder, rng: &mut Rng, agent: &Agent, history: &mut Vec<Segment>, steps: u64, tag: &str) {
    for step in 0..steps {
        let action = b.call(&agent.name, history.clone(), rng.lognormal_len(110.0, 0.4, 30, 400));
        b.tool_wait(
            f64::from(rng.lognormal_len(agent.tool_ms, 0.7, 100, 60_000)),
            &agent.name,
        );
        let obs = b.seg(
            &format!("{tag}-obs-{step}"),
            rng.lognormal_len(agent.obs, 0.8, 40, 4000),
        );
        history.push(action);
        history.push(obs);
    }
}

fn with_anchor(agent: &Agent, rest: &[Segment]) -> Vec<Segment> {
    let mut p = agent.anchor.clone();
    p.extend_from_slice(rest);
    p
}

fn support(app: &App, b: &mut SessionBuilder, rng: &mut Rng) {
    let (triage, specialist, summarizer) = (app.agent("triage"), app.agent("specialist"), app.agent("summarizer"));
    let first = b.seg("user-0", rng.lognormal_len(60.0, 0.7, 10, 600));
    let route = b.call(
        &triage.name,
        with_anchor(triage, std::slice::from_ref(&first)),
        rng.lognormal_len(40.0, 0.4, 10, 200),
    );
    let mut chat = with_anchor(specialist, &[first, route]);
    let turns = rng.range(2, 6);
    for turn in 0..turns {
        let steps = rng.range(0, 3);
        tool_steps(b, rng, specialist, &mut chat, steps, &format!("t{turn}"));
        let reply = b.call(&specialist.name, chat.clone(), rng.lognormal_len(120.0, 0.5, 20, 600));
        chat.push(reply);
        if turn + 1 < turns {
            // The user reads the answer and writes the next message.
            b.user_wait(f64::from(rng.lognormal_len(8000.0, 0.8, 1000, 60_000)));
            chat.push(b.seg(&format!("user-{}", turn + 1), rng.lognormal_len(50.0, 0.7, 5, 400)));
        }
    }
    let transcript: Vec<Segment> = chat[specialist.anchor.len()..].to_vec();
    b.call(
        &summarizer.name,
        with_anchor(summarizer, &transcript),
        rng.lognormal_len(150.0, 0.4, 40, 500),
    );
}

fn pipeline(app: &App, b: &mut SessionBuilder, rng: &mut Rng) {
    let task = b.seg("task", rng.lognormal_len(150.0, 0.7, 30, 1500));
    let researcher = app.agent("researcher");
    let mut notes = with_anchor(researcher, std::slice::from_ref(&task));
    let steps = rng.range(1, 4);
    tool_steps(b, rng, researcher, &mut notes, steps, "research");
    let findings = b.call(&researcher.name, notes, rng.lognormal_len(400.0, 0.4, 80, 1200));
    let mut context = vec![task, findings];
    if app.has("analyst") {
        let analyst = app.agent("analyst");
        let mut work = with_anchor(analyst, &context);
        let steps = rng.range(1, 3);
        tool_steps(b, rng, analyst, &mut work, steps, "analysis");
        context.push(b.call(&analyst.name, work, rng.lognormal_len(300.0, 0.4, 60, 1000)));
    }
    let (writer, reviewer) = (app.agent("writer"), app.agent("reviewer"));
    let mut draft_prompt = with_anchor(writer, &context);
    let mut draft = b.call(
        &writer.name,
        draft_prompt.clone(),
        rng.lognormal_len(600.0, 0.4, 100, 2000),
    );
    let mut p_reject = 0.3;
    for _ in 0..3 {
        let verdict = b.call(
            &reviewer.name,
            with_anchor(reviewer, &[context[0].clone(), draft.clone()]),
            rng.lognormal_len(150.0, 0.4, 30, 500),
        );
        if !rng.chance(p_reject) {
            break;
        }
        p_reject *= 0.5;
        // The writer's conversation continues with the reviewer's notes.
        draft_prompt.extend([draft.clone(), verdict]);
        draft = b.call(
            &writer.name,
            draft_prompt.clone(),
            rng.lognormal_len(550.0, 0.4, 100, 2000),
        );
    }
}

fn coding(app: &App, b: &mut SessionBuilder, rng: &mut Rng) {
    let issue = b.seg("issue", rng.lognormal_len(300.0, 0.8, 40, 3000));
    let planner = app.agent("planner");
    let plan = b.call(
        &planner.name,
        with_anchor(planner, std::slice::from_ref(&issue)),
        rng.lognormal_len(250.0, 0.4, 50, 800),
    );
    let (coder, tester, reviewer) = (app.agent("coder"), app.agent("tester"), app.agent("reviewer"));
    let mut work = with_anchor(coder, &[issue.clone(), plan]);
    let mut p_fail = 0.4;
    for round in 0..4 {
        let steps = rng.range(3, 12);
        tool_steps(b, rng, coder, &mut work, steps, &format!("code{round}"));
        let patch = b.call(&coder.name, work.clone(), rng.lognormal_len(300.0, 0.5, 40, 1500));
        work.push(patch.clone());
        let mut run = with_anchor(tester, &[issue.clone(), patch]);
        tool_steps(b, rng, tester, &mut run, 1, &format!("test{round}"));
        let report = b.call(&tester.name, run, rng.lognormal_len(200.0, 0.5, 40, 1000));
        if round == 3 || !rng.chance(p_fail) {
            break;
        }
        p_fail *= 0.6;
        work.push(report);
    }
    let diff: Vec<Segment> = work[coder.anchor.len()..].iter().rev().take(2).cloned().collect();
    let mut review = with_anchor(reviewer, &[issue]);
    review.extend(diff);
    b.call(&reviewer.name, review, rng.lognormal_len(200.0, 0.4, 40, 800));
}

fn research(app: &App, b: &mut SessionBuilder, rng: &mut Rng) {
    let task = b.seg("task", rng.lognormal_len(120.0, 0.7, 30, 1500));
    let orchestrator = app.agent("orchestrator");
    let mut ledger = with_anchor(orchestrator, std::slice::from_ref(&task));
    let plan = b.call(
        &orchestrator.name,
        ledger.clone(),
        rng.lognormal_len(350.0, 0.4, 100, 900),
    );
    ledger.push(plan);
    let workers: Vec<&Agent> = app.agents[1..].iter().collect();
    let weights: Vec<f64> = [0.6, 0.3, 0.1][..workers.len()].to_vec();
    let mut histories: Vec<Option<Vec<Segment>>> = vec![None; workers.len()];
    let rounds = rng.range(2, 5);
    for round in 0..rounds {
        let instruction = b.call(
            &orchestrator.name,
            ledger.clone(),
            rng.lognormal_len(140.0, 0.4, 40, 400),
        );
        ledger.push(instruction.clone());
        let w = rng.weighted(&weights);
        let worker = workers[w];
        let history = histories[w].get_or_insert_with(|| with_anchor(worker, std::slice::from_ref(&task)));
        history.push(instruction);
        let steps = rng.range(1, 3);
        tool_steps(b, rng, worker, history, steps, &format!("r{round}"));
        let report = b.call(&worker.name, history.clone(), rng.lognormal_len(160.0, 0.4, 40, 500));
        history.push(report.clone());
        ledger.push(report);
    }
    b.call(&orchestrator.name, ledger, rng.lognormal_len(120.0, 0.4, 20, 400));
}

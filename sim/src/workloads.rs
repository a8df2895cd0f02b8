//! Five multi-agent workload generators shaped after the paper's (MMLU debate, MT-Bench with a
//! judge, GAIA planner + tool agents, GSM8K solver → verifier, HumanEval coder → tester →
//! debugger), and a sixth, `fleet`: many agent applications sharing one engine ([`fleet`]). Each
//! writes the trace format ([`crate::trace`]); graphs, length distributions and
//! their sources are in docs/workloads.md.
//!
//! Common shape: every session is one task run through a graph of agents; agents start with an
//! *anchor* (system prompt, tool definitions) shared by every session; a call's prompt quotes the
//! session's earlier material (the task, earlier answers, tool observations), and a later call of
//! the same agent usually extends its previous prompt + answer (chat history, ReAct loops).
//! Sessions arrive as a Poisson process whose rate is set so that about `concurrency` sessions are
//! active at once on an unloaded server. Each session's last call carries the closing a framework
//! sends when the task ends (`hints.closes`; heard only under `--hints`).

pub mod fleet;
pub mod gaia;
pub mod gsm8k;
pub mod humaneval;
pub mod mmlu;
pub mod mtbench;
pub mod swe;

use crate::rng::Rng;
use crate::trace::{Segment, Trace, TraceRequest, WaitHint, WaitKind};

/// The workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    Mmlu,
    Mtbench,
    Gaia,
    Gsm8k,
    Humaneval,
    Fleet,
    Swe,
}

impl Workload {
    /// The six workloads of the evaluation table (`swe`, the programs of the knee sweep, is not
    /// one of them: it is run past the engine's knee, `agentrt sim knee`).
    pub const ALL: [Workload; 6] = [
        Workload::Mmlu,
        Workload::Mtbench,
        Workload::Gaia,
        Workload::Gsm8k,
        Workload::Humaneval,
        Workload::Fleet,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Workload::Mmlu => "mmlu",
            Workload::Mtbench => "mtbench",
            Workload::Gaia => "gaia",
            Workload::Gsm8k => "gsm8k",
            Workload::Humaneval => "humaneval",
            Workload::Fleet => "fleet",
            Workload::Swe => "swe",
        }
    }

    /// Build one session (its requests, `after_ms` relative within the session). `fleet` draws
    /// its application from the trace's catalog.
    fn session(self, b: &mut SessionBuilder, rng: &mut Rng, catalog: Option<&fleet::Catalog>) {
        match self {
            Workload::Mmlu => mmlu::session(b, rng),
            Workload::Mtbench => mtbench::session(b, rng),
            Workload::Gaia => gaia::session(b, rng),
            Workload::Gsm8k => gsm8k::session(b, rng),
            Workload::Humaneval => humaneval::session(b, rng),
            Workload::Fleet => catalog.expect("fleet traces draw a catalog").session(b, rng),
            Workload::Swe => swe::session(b, rng),
        }
    }

    /// Headline generator settings: enough concurrent sessions that the working set exceeds the
    /// headline cache (see docs/results.md for the measured peak).
    pub fn headline(self) -> GenParams {
        let (sessions, concurrency) = match self {
            Workload::Mmlu => (1500, 400.0),
            Workload::Mtbench => (2000, 600.0),
            Workload::Gaia => (240, 60.0),
            Workload::Gsm8k => (1600, 400.0),
            Workload::Humaneval => (900, 200.0),
            Workload::Fleet => (1200, 36.0),
            // Programs, not a Poisson rate: `sim knee --programs` runs this many at once.
            Workload::Swe => (256, 32.0),
        };
        GenParams {
            sessions,
            concurrency,
            rate: None,
            seed: 1,
            fleet: fleet::FleetParams::default(),
        }
    }
}

/// Generator parameters.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GenParams {
    pub sessions: usize,
    /// Target number of concurrently active sessions (sets the arrival rate when `rate` is unset).
    pub concurrency: f64,
    /// Session arrivals per second (Poisson); overrides `concurrency`.
    pub rate: Option<f64>,
    pub seed: u64,
    /// Settings of the `fleet` workload (ignored by the others).
    pub fleet: fleet::FleetParams,
}

/// Builds one session's requests.
pub struct SessionBuilder {
    pub name: String,
    requests: Vec<TraceRequest>,
    wait_ms: f64,
    calls: u32,
}

impl SessionBuilder {
    fn new(name: String) -> Self {
        Self {
            name,
            requests: Vec::new(),
            wait_ms: 0.0,
            calls: 0,
        }
    }

    /// A segment private to this session (`<session>/<what>`).
    pub fn seg(&self, what: &str, tokens: u32) -> Segment {
        Segment::new(format!("{}/{what}", self.name), tokens.max(1))
    }

    /// Time that passes before the next call (framework overhead, a tool running, a user thinking).
    pub fn wait(&mut self, ms: f64) {
        self.wait_ms += ms.max(0.0);
    }

    /// A tool named `tool` runs for `ms` before the next call, and the framework says so: the
    /// last call's `hints.wait` names the tool (no expected duration: a framework knows which
    /// tool it runs, not how long it will take).
    pub fn tool_wait(&mut self, ms: f64, tool: &str) {
        self.hint_wait(WaitKind::Tool, Some(tool));
        self.wait(ms);
    }

    /// The user reads the answer and writes the next message for `ms`, and the framework says
    /// the session waits for its user.
    pub fn user_wait(&mut self, ms: f64) {
        self.hint_wait(WaitKind::User, None);
        self.wait(ms);
    }

    fn hint_wait(&mut self, kind: WaitKind, tool: Option<&str>) {
        if let Some(last) = self.requests.last_mut() {
            last.hints.wait = Some(WaitHint {
                kind,
                tool: tool.map(str::to_string),
                expected_ms: None,
            });
        }
    }

    /// The last call's answer asks for a tool (`tool_call` in the trace: what a proxy reads
    /// from the response's `finish_reason`).
    pub fn asks_for_tool(&mut self) {
        if let Some(last) = self.requests.last_mut() {
            last.tool_call = true;
        }
    }

    /// One LLM call by `agent`. Returns the answer as a segment that later prompts can quote: a
    /// later prompt that extends this one with the answer reuses the generated tokens.
    pub fn call(&mut self, agent: &str, prompt: Vec<Segment>, output_tokens: u32) -> Segment {
        self.calls += 1;
        let answer = self.seg(&format!("{agent}-{}", self.calls), output_tokens);
        self.requests.push(TraceRequest {
            tenant: None,
            session: self.name.clone(),
            agent: agent.to_string(),
            after_ms: self.wait_ms,
            prompt,
            output_tokens: answer.tokens,
            tool_call: false,
            hints: Default::default(),
        });
        // Framework overhead between consecutive calls of a session.
        self.wait_ms = 20.0;
        answer
    }

    /// The session's task is over: its last call closes it (`hints.closes`), as the framework
    /// that ran the graph knows and says (the hint package's LangGraph hook closes a thread when
    /// its graph run ends). Told to policies only under `--hints closed|all`.
    fn task_over(&mut self) {
        if let Some(last) = self.requests.last_mut() {
            last.hints.closes = true;
        }
    }
}

/// Rough service time of a session on an unloaded server, for the arrival rate: prefill at
/// 20 k tok/s (about half of it cached), decode at 40 tok/s per request under batching, plus the
/// waits.
fn estimated_duration_ms(requests: &[TraceRequest]) -> f64 {
    requests
        .iter()
        .map(|r| r.after_ms + f64::from(r.prompt_tokens()) / 40.0 + f64::from(r.output_tokens) * 25.0)
        .sum()
}

/// Generate a trace.
pub fn generate(workload: Workload, params: &GenParams) -> Trace {
    let mut root = Rng::new(params.seed ^ crate::tokens::hash_str(workload.name()));
    let catalog = (workload == Workload::Fleet).then(|| fleet::Catalog::for_params(params));
    let mut sessions: Vec<Vec<TraceRequest>> = Vec::with_capacity(params.sessions);
    for i in 0..params.sessions {
        let mut rng = root.fork(i as u64);
        let mut b = SessionBuilder::new(format!("{}-{i}", workload.name()));
        workload.session(&mut b, &mut rng, catalog.as_ref());
        b.task_over();
        sessions.push(b.requests);
    }
    let mean_ms = sessions.iter().map(|s| estimated_duration_ms(s)).sum::<f64>() / sessions.len().max(1) as f64;
    let rate_per_ms = match params.rate {
        Some(r) => r / 1000.0,
        None => params.concurrency / mean_ms.max(1.0),
    };
    let mut arrivals = root.fork(u64::MAX);
    let mut t = 0.0;
    let mut requests = Vec::new();
    for (i, mut session) in sessions.into_iter().enumerate() {
        if i > 0 {
            t += arrivals.exp(1.0 / rate_per_ms);
        }
        session[0].after_ms = (t * 1000.0).round() / 1000.0;
        requests.extend(session);
    }
    Trace { requests }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_workload_generates_valid_reproducible_multi_agent_sessions() {
        for w in Workload::ALL {
            let params = GenParams {
                sessions: 6,
                concurrency: 3.0,
                rate: None,
                seed: 3,
                fleet: fleet::FleetParams::default(),
            };
            let trace = generate(w, &params);
            assert_eq!(trace, generate(w, &params), "{w:?} is not reproducible");
            assert_eq!(trace.sessions(), 6);
            let mut agents: Vec<&str> = trace.requests.iter().map(|r| r.agent.as_str()).collect();
            agents.sort_unstable();
            agents.dedup();
            assert!(agents.len() >= 2, "{w:?}: {agents:?}");
            // Every request starts with its agent's anchor.
            assert!(trace.requests.iter().all(|r| r.anchor_len() >= 1), "{w:?}");
            // Round trip through the file format.
            let mut bytes = Vec::new();
            trace.write(&mut bytes).unwrap();
            assert_eq!(Trace::parse(std::str::from_utf8(&bytes).unwrap()).unwrap(), trace);
            // Some later prompt quotes an earlier answer of the same session.
            let quotes = trace.requests.iter().any(|r| {
                r.prompt
                    .iter()
                    .any(|s| s.seg.contains('/') && !s.is_anchor() && s.seg.rsplit('/').next().unwrap().contains('-'))
            });
            assert!(quotes, "{w:?}");
            // Each session closes once, at its last call, as a framework says when the task ends.
            for session in 0..6 {
                let name = format!("{}-{session}", w.name());
                let calls: Vec<bool> = trace
                    .requests
                    .iter()
                    .filter(|r| r.session == name)
                    .map(|r| r.hints.closes)
                    .collect();
                let (last, earlier) = calls.split_last().expect("a session has calls");
                assert!(*last && !earlier.contains(&true), "{w:?} {name}: {calls:?}");
            }
        }
    }
}

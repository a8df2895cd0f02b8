//! The policy on a workload, through the simulator's replay (`agentrt sim run`'s harness, not a
//! copy of it): always a built-in one of some thousands of events — a policy that fails after a
//! while (a trap on its 300th request, a leak that reaches the memory cap) fails the kit — and with
//! `--trace` the operator's, beside vLLM's LRU and Bélády's optimum on the same cache — and, when
//! `--hints` tells the trace's lifecycle hints, beside closed-first (what the closings alone are
//! worth).
//!
//! Either way the cache is sized from the workload unless `--capacity-blocks` says otherwise: a
//! third of the distinct blocks it touches, so the engine must evict and the policy must rank. A
//! replay in which the policy ranked nothing tested no `score`, and fails as not run rather than
//! passing.

use std::path::Path;

use agentrt_runtime::ComponentLookup;
use agentrt_sim::conditions::FittedCapacity;
use agentrt_sim::harness::{run_all, PolicyHost};
use agentrt_sim::hints::{HintKinds, HintsTold};
use agentrt_sim::policies::PolicySpec;
use agentrt_sim::policies::Rerank;
use agentrt_sim::policy_limits::ReplayLimits;
use agentrt_sim::prepare::PreparedTrace;
use agentrt_sim::report::{failure_notes, summarize, PolicySummary};
use agentrt_sim::scheduler::SimConfig;
use agentrt_sim::setting::{BLOCK_SIZE, DEFAULT_RERANK_MS};
use agentrt_sim::trace::Trace;
use agentrt_sim::workloads::{generate, Workload};
use anyhow::Context;

use super::report::{Check, Line, Problem};

/// Sessions of the built-in replay (GSM8K-like multi-agent sessions, the simulator's generator with
/// a fixed seed): about 600 requests — some thousands of request events, tens of thousands of
/// block events.
pub const BUILT_IN_SESSIONS: usize = 200;

/// What the replay is of.
pub struct Replay<'a> {
    pub file: &'a Path,
    pub init: &'a [(String, String)],
    pub capacity_blocks: Option<usize>,
    pub limits: ReplayLimits,
    /// What the `--trace` replay tells of the trace's hints (the built-in workload has none).
    pub hints: HintsTold,
}

/// The built-in replay's line: the policy alone (no comparison: the point is that it lasts).
pub fn built_in_lines(replay: &Replay<'_>, sessions: usize) -> Vec<Line> {
    const PROPERTY: &str = "replay: a built-in workload";
    let trace = built_in_trace(sessions);
    match run(replay, &trace, false) {
        Ok(ran) => vec![Line::checked(PROPERTY, ran.verdict("GSM8K-like"))],
        Err(e) => vec![Line::checked(PROPERTY, Err(Problem::Fail(format!("{e:#}"))))],
    }
}

/// `--trace`'s lines: whether the policy got through it without failing, and the hit rates.
pub fn trace_lines(replay: &Replay<'_>, trace: &Path) -> Vec<Line> {
    let ran = Trace::load(trace).and_then(|t| {
        let told = replay.hints.kinds != HintKinds::None;
        let no_closings = told && !t.requests.iter().any(|r| r.hints.closes);
        let mut ran = run(replay, &t, true)?;
        if no_closings {
            ran.hit_rates = ran
                .hit_rates
                .map(|rates| format!("{rates} — the trace has no closings, so --hints told the policy none"));
        }
        Ok(ran)
    });
    match ran {
        Ok(ran) => {
            let mut lines = vec![Line::checked(
                "trace: replays without failing",
                ran.verdict("the trace"),
            )];
            lines.extend(ran.hit_rates.map(|rates| Line::info("trace: token hit rate", rates)));
            lines
        }
        Err(e) => vec![Line::checked("trace: replay", Err(Problem::Fail(format!("{e:#}"))))],
    }
}

/// The built-in workload: `sessions` GSM8K-like sessions (the simulator's headline concurrency for
/// the workload, scaled to the sessions), always the same.
pub fn built_in_trace(sessions: usize) -> Trace {
    let mut params = Workload::Gsm8k.headline();
    params.concurrency = (params.concurrency * sessions as f64 / params.sessions as f64).max(1.0);
    params.sessions = sessions;
    params.seed = 21;
    generate(Workload::Gsm8k, &params)
}

/// One replay's outcome.
struct Ran {
    requests: usize,
    blocks: usize,
    distinct_blocks: usize,
    fitted: bool,
    policy: PolicySummary,
    hit_rates: Option<String>,
}

impl Ran {
    fn verdict(&self, what: &str) -> Check {
        let p = &self.policy;
        if p.failed_calls > 0 || p.fallbacks > 0 {
            let notes = failure_notes(&[("policy".to_string(), p.clone())]);
            return Err(Problem::Fail(format!(
                "{what}, {} requests: {}",
                self.requests,
                notes.trim().trim_start_matches("! ")
            )));
        }
        if p.score_calls == 0 {
            let hint = if self.fitted {
                "the workload never filled it".to_string()
            } else {
                format!(
                    "it held all {} distinct blocks; leave --capacity-blocks out to size it from the trace",
                    self.distinct_blocks
                )
            };
            return Err(Problem::Fail(format!(
                "not run: 0 rankings in {} requests through a cache of {} blocks ({hint}), so no `score` was tested",
                self.requests, self.blocks
            )));
        }
        Ok(format!(
            "{what}, {} requests ({} events), cache {} blocks{}: {} rankings, no failure",
            self.requests,
            p.events,
            self.blocks,
            if self.fitted {
                " (a third of its distinct blocks)"
            } else {
                ""
            },
            p.score_calls
        ))
    }
}

fn run(replay: &Replay<'_>, trace: &Trace, compare: bool) -> anyhow::Result<Ran> {
    let prepared = PreparedTrace::new(trace, BLOCK_SIZE, false);
    let FittedCapacity {
        distinct_blocks,
        blocks: fitted,
    } = FittedCapacity::of(&prepared);
    let blocks = replay.capacity_blocks.unwrap_or(fitted);
    // The policy by its path; LRU is the simulator's native one, so no component is looked up.
    let host = PolicyHost::with_limits(ComponentLookup::in_folder(".".into()), replay.limits.clone(), None)?;
    let path = std::path::absolute(replay.file).with_context(|| format!("{}", replay.file.display()))?;
    let policy = PolicySpec::Wasm {
        name: "policy".into(),
        component: path.display().to_string(),
        init: replay.init.to_vec(),
    };
    let hinted = compare && replay.hints.kinds != HintKinds::None;
    let policies = match (compare, hinted) {
        (false, _) => vec![policy],
        (true, false) => vec![PolicySpec::NativeLru, policy, PolicySpec::Belady],
        (true, true) => vec![
            PolicySpec::NativeLru,
            policy,
            PolicySpec::ClosedFirst,
            PolicySpec::Belady,
        ],
    };
    let mut config = SimConfig::new(blocks);
    if compare {
        config.hints = replay.hints;
    }
    let results = run_all(
        &host,
        &prepared,
        &config,
        &policies,
        Rerank::EveryMs(DEFAULT_RERANK_MS),
        false,
        |_| {},
    )?;
    let summaries = summarize(&results);
    let pct = |p: &PolicySummary| p.hit_rate * 100.0;
    let gap = |p: &PolicySummary| {
        p.gap_closed.map_or(String::new(), |g| {
            format!(", {:.0}% of the gap to Bélády closed", g * 100.0)
        })
    };
    let (summary, hit_rates) = match &summaries[..] {
        [(_, policy)] => (policy.clone(), None),
        [(_, lru), (_, policy), (_, belady)] => {
            let rates = format!(
                "policy {:.2}% · LRU {:.2}% · Bélády {:.2}% (Δ {:+.2} pp{})",
                pct(policy),
                pct(lru),
                pct(belady),
                pct(policy) - pct(lru),
                gap(policy)
            );
            (policy.clone(), Some(rates))
        }
        [(_, lru), (_, policy), (_, closed_first), (_, belady)] => {
            let rates = format!(
                "policy {:.2}% · LRU {:.2}% · closed-first {:.2}% · Bélády {:.2}% (hints: {}; Δ {:+.2} pp over LRU, \
                 {:+.2} pp over closed-first{})",
                pct(policy),
                pct(lru),
                pct(closed_first),
                pct(belady),
                replay.hints.name(),
                pct(policy) - pct(lru),
                pct(policy) - pct(closed_first),
                gap(policy)
            );
            (policy.clone(), Some(rates))
        }
        other => anyhow::bail!("the replay ran {} policies, not {}", other.len(), policies.len()),
    };
    Ok(Ran {
        requests: prepared.requests.len(),
        blocks,
        distinct_blocks,
        fitted: replay.capacity_blocks.is_none(),
        policy: summary,
        hit_rates,
    })
}

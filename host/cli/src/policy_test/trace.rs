//! `--trace`: the policy on a real workload, through the simulator's replay (`agentrt sim run`'s
//! harness, not a copy of it), beside vLLM's LRU and Bélády's optimum on the same cache.

use std::path::Path;

use agentrt_runtime::ComponentLookup;
use agentrt_sim::cli::{headline_blocks, BLOCK_SIZE, DEFAULT_RERANK_MS};
use agentrt_sim::harness::{run_all, PolicyHost, PolicySpec};
use agentrt_sim::policies::Rerank;
use agentrt_sim::policy_limits::ReplayLimits;
use agentrt_sim::prepare::PreparedTrace;
use agentrt_sim::report::{failure_notes, summarize};
use agentrt_sim::scheduler::SimConfig;
use agentrt_sim::trace::Trace;
use anyhow::Context;

use super::report::{Check, Line, Problem};

/// What the replay is of.
pub struct Replay<'a> {
    pub file: &'a Path,
    pub init: &'a [(String, String)],
    pub trace: &'a Path,
    pub capacity_blocks: Option<usize>,
    pub limits: ReplayLimits,
}

/// The replay's lines: whether the policy got through it without failing, and the hit rates.
pub fn lines(replay: &Replay<'_>) -> Vec<Line> {
    match run(replay) {
        Ok(lines) => lines,
        Err(e) => vec![Line::checked("trace: replay", Err(Problem::Fail(format!("{e:#}"))))],
    }
}

fn run(replay: &Replay<'_>) -> anyhow::Result<Vec<Line>> {
    let trace = Trace::load(replay.trace)?;
    let prepared = PreparedTrace::new(&trace, BLOCK_SIZE, false);
    let blocks = replay.capacity_blocks.unwrap_or_else(headline_blocks);
    // The policy by its path; LRU is the simulator's native one, so no component is looked up.
    let host = PolicyHost::with_limits(ComponentLookup::in_folder(".".into()), replay.limits.clone(), None)?;
    let path = std::path::absolute(replay.file).with_context(|| format!("{}", replay.file.display()))?;
    let policy = PolicySpec::Wasm {
        name: "policy".into(),
        component: path.display().to_string(),
        init: replay.init.to_vec(),
    };
    let policies = [PolicySpec::NativeLru, policy, PolicySpec::Belady];
    let results = run_all(
        &host,
        &prepared,
        &SimConfig::new(blocks),
        &policies,
        Rerank::EveryMs(DEFAULT_RERANK_MS),
        false,
        |_| {},
    )?;
    let summaries = summarize(&results);
    let [(_, lru), (_, policy), (_, belady)] = &summaries[..] else {
        anyhow::bail!("the replay ran {} policies, not 3", summaries.len());
    };
    let replayed: Check = if policy.failed_calls == 0 && policy.fallbacks == 0 {
        Ok(format!(
            "{} requests, cache {blocks} blocks: {} rankings, no failure",
            prepared.requests.len(),
            policy.score_calls
        ))
    } else {
        Err(Problem::Fail(
            failure_notes(&summaries[1..2])
                .trim()
                .trim_start_matches("! ")
                .to_string(),
        ))
    };
    let gap = policy.gap_closed.map_or(String::new(), |g| {
        format!(", {:.0}% of the gap to Bélády closed", g * 100.0)
    });
    Ok(vec![
        Line::checked("trace: replays without failing", replayed),
        Line::info(
            "trace: token hit rate",
            format!(
                "policy {:.1}% · LRU {:.1}% · Bélády {:.1}% (Δ {:+.1} pp{gap})",
                policy.hit_rate * 100.0,
                lru.hit_rate * 100.0,
                belady.hit_rate * 100.0,
                (policy.hit_rate - lru.hit_rate) * 100.0,
            ),
        ),
    ])
}

//! `agentrt sim noisy-neighbour`: an agent application next to a tenant flooding the engine with
//! unique long prompts, with and without cache shares — table, JSON and a plot.
//!
//! The agent tenant (`agents`) replays a workload; the flood tenant (`flood`) sends unique
//! documents (LongBench-sized: 8,192 tokens by default) as an open-loop stream whose prompt-token
//! rate is a multiple of the agents' own. Three setups per flood level:
//!
//! - **alone**: the agents by themselves, at a cache of their guarantee `G` — the figure a share
//!   must protect;
//! - **shared**: both tenants on a cache of `C` blocks (default `2G`), one policy instance ranking
//!   every block (vLLM's situation today);
//! - **shares**: the same cache with `agents=G` guaranteed; each tenant's own policy instance
//!   ranks its own blocks and the flood, above its (zero) guarantee, gives up blocks first.
//!
//! The target: with shares, the agents' hit rate is within 1 pp of alone-at-`G`.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::Args;

use agentrt_runtime::{ComponentLookup, Share};

use crate::harness::run_all;
use crate::options::ReplayOptions;
use crate::policies::{policies_help, PolicySpec};
use crate::prepare::PreparedTrace;
use crate::progress::Progress;
use crate::report::{summarize, PolicySummary, TenantSummary};
use crate::setting::{headline_blocks, BLOCK_SIZE};
use crate::trace::{Segment, Trace, TraceRequest};
use crate::workloads::{generate, Workload};

/// How far below alone-at-its-guarantee the agents' hit rate may fall with shares (pp).
const TOLERANCE_PP: f64 = 1.0;
const AGENTS: &str = "agents";
const FLOOD: &str = "flood";

#[derive(Args, Debug)]
pub struct NoisyNeighbourArgs {
    /// The agent tenant's workload.
    #[arg(long, value_enum, default_value = "gaia")]
    pub workload: Workload,
    /// Sessions of the agent workload (default: 1/8 of its headline, as `sim table --quick`).
    #[arg(long)]
    pub sessions: Option<usize>,
    /// Target concurrently active agent sessions (default: 1/8 of the headline's).
    #[arg(long)]
    pub concurrency: Option<f64>,
    /// The agents' guaranteed share in blocks, and the cache they get alone (default: 1/16 of
    /// the headline H100 cache).
    #[arg(long)]
    pub guarantee_blocks: Option<usize>,
    /// The shared cache in blocks (default: twice the guarantee).
    #[arg(long)]
    pub cache_blocks: Option<usize>,
    /// Flood load levels, as percent of the agents' own prompt tokens per second.
    #[arg(long, value_delimiter = ',', default_value = "50,100,200,400")]
    pub flood_percent: Vec<usize>,
    /// Tokens of each unique flood prompt (LongBench's documents average ~8 k tokens).
    #[arg(long, default_value_t = 8192)]
    pub flood_prompt_tokens: u32,
    /// Tokens each flood request generates.
    #[arg(long, default_value_t = 256)]
    pub flood_output_tokens: u32,
    #[arg(long, value_delimiter = ',', default_value = "lru,cachesage", help = policies_help(
        "Comma-separated policies (each tenant runs its own instance under shares)."
    ))]
    pub policies: Vec<String>,
    /// Seed of the workload generator: the same seed gives the same traces.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Parallel replays (one per core).
    #[arg(long, default_value_t = 2)]
    pub jobs: usize,
    /// Where results.json, table.md and noisy-neighbour.svg/.png go.
    #[arg(long, default_value = "target/sim-noisy")]
    pub out: PathBuf,
    #[command(flatten)]
    pub replay: ReplayOptions,
}

/// One replay unit: a trace, a cache, shares or not.
struct Unit {
    /// Index into the flood levels; `None` = the agents alone.
    level: Option<usize>,
    shares: bool,
}

/// The agents' trace with every request tagged as theirs.
fn agents_trace(a: &NoisyNeighbourArgs) -> Trace {
    let mut p = a.workload.headline();
    p.sessions = a.sessions.unwrap_or(p.sessions / 8);
    p.concurrency = a.concurrency.unwrap_or(p.concurrency / 8.0);
    p.seed = a.seed;
    let mut trace = generate(a.workload, &p);
    for r in &mut trace.requests {
        r.tenant = Some(AGENTS.to_string());
    }
    trace
}

/// `agents` plus an open-loop stream of unique documents offering `tokens_per_s` prompt tokens per
/// second over `span_s` seconds.
pub fn with_flood(agents: &Trace, tokens_per_s: f64, span_s: f64, prompt_tokens: u32, output_tokens: u32) -> Trace {
    let mut trace = agents.clone();
    let rate = tokens_per_s / f64::from(prompt_tokens);
    let count = (rate * span_s).ceil() as usize;
    for i in 0..count {
        trace.requests.push(TraceRequest {
            tenant: Some(FLOOD.to_string()),
            session: format!("flood-{i}"),
            agent: "reader".to_string(),
            after_ms: i as f64 / rate * 1000.0,
            prompt: vec![Segment::new(format!("flood-{i}/document"), prompt_tokens)],
            output_tokens,
            tool_call: false,
            hints: Default::default(),
        });
    }
    trace
}

type UnitResult = (usize, Vec<(String, PolicySummary)>);

pub fn run(a: NoisyNeighbourArgs, components: &ComponentLookup) -> anyhow::Result<()> {
    let started = Instant::now();
    let guarantee = a.guarantee_blocks.unwrap_or_else(|| headline_blocks() / 16);
    let cache = a.cache_blocks.unwrap_or(2 * guarantee);
    anyhow::ensure!(cache > guarantee, "--cache-blocks must exceed --guarantee-blocks");
    let policies: Vec<PolicySpec> = a.policies.iter().map(|n| PolicySpec::parse(n)).collect();
    let host = a.replay.host(components)?;
    host.preload(&policies)?;
    let agents = agents_trace(&a);
    let alone = PreparedTrace::new(&agents, BLOCK_SIZE, a.replay.hide_agents);

    // The agents alone first: their figures, and their prompt-token rate the flood is sized by.
    let progress = Progress::new(((1 + 2 * a.flood_percent.len()) * policies.len()) as u64);
    let tick = |r: &crate::scheduler::RunResult| progress.replayed(&format!("the agents alone: {}", r.policy));
    let alone_runs = run_all(
        &host,
        &alone,
        &a.replay.config(guarantee)?,
        &policies,
        a.replay.rerank(),
        false,
        tick,
    )
    .context("the agents alone")?;
    let span_s = alone_runs[0].makespan_us / 1e6;
    let agents_rate = alone_runs[0].prompt_tokens as f64 / span_s.max(1e-9);
    let traces = flood_traces(&a, &agents, agents_rate, span_s);
    let units: Vec<Unit> = (0..traces.len())
        .flat_map(|level| {
            [false, true].map(|shares| Unit {
                level: Some(level),
                shares,
            })
        })
        .collect();
    let results = run_flood_units(&a, &host, &traces, &units, &policies, (cache, guarantee), &progress)?;
    progress.finish();
    let mut results = results;
    results.sort_by_key(|r| r.0);
    let report = Report {
        args: &a,
        sessions: alone.sessions.len(),
        guarantee,
        cache,
        span_s,
        agents_rate,
        alone: summarize(&alone_runs),
        units: &units,
        results: &results,
    };
    report.write(started.elapsed().as_secs_f64())
}

/// The agents' trace with a flood beside it at each of `--flood-percent` of the agents' own
/// prompt-token rate, over the agents' span.
fn flood_traces(a: &NoisyNeighbourArgs, agents: &Trace, agents_rate: f64, span_s: f64) -> Vec<PreparedTrace> {
    a.flood_percent
        .iter()
        .map(|&pct| {
            let flood = with_flood(
                agents,
                agents_rate * pct as f64 / 100.0,
                span_s,
                a.flood_prompt_tokens,
                a.flood_output_tokens,
            );
            PreparedTrace::new(&flood, BLOCK_SIZE, a.replay.hide_agents)
        })
        .collect()
}

/// Every (flood level, shares or not) unit under every policy, on `--jobs` threads; `(cache,
/// guarantee)` in blocks (the guarantee is the agents' share when a unit has shares).
fn run_flood_units(
    a: &NoisyNeighbourArgs,
    host: &crate::harness::PolicyHost,
    traces: &[PreparedTrace],
    units: &[Unit],
    policies: &[PolicySpec],
    (cache, guarantee): (usize, usize),
    progress: &Progress,
) -> anyhow::Result<Vec<UnitResult>> {
    crate::parallel::run_units(a.jobs, (0..units.len()).collect(), |i| {
        let unit = &units[i];
        let trace = &traces[unit.level.expect("flood units have a level")];
        let mut cfg = a.replay.config(cache)?;
        if unit.shares {
            cfg.shares = Some(vec![(
                AGENTS.to_string(),
                Share {
                    min_blocks: guarantee as u64,
                    max_blocks: u64::MAX,
                },
            )]);
        }
        let level = unit.level.expect("flood units have a level");
        let shares = if unit.shares { ", shares" } else { "" };
        let runs = run_all(host, trace, &cfg, policies, a.replay.rerank(), false, |r| {
            progress.replayed(&format!("flood {} %{shares}: {}", a.flood_percent[level], r.policy));
        })?;
        Ok((i, summarize(&runs)))
    })
}

struct Report<'a> {
    args: &'a NoisyNeighbourArgs,
    sessions: usize,
    guarantee: usize,
    cache: usize,
    span_s: f64,
    agents_rate: f64,
    alone: Vec<(String, PolicySummary)>,
    units: &'a [Unit],
    results: &'a [UnitResult],
}

/// A tenant's figures under `policy` in `summaries`.
fn tenant_of<'a>(summaries: &'a [(String, PolicySummary)], policy: &str, tenant: &str) -> Option<&'a TenantSummary> {
    summaries
        .iter()
        .find(|(p, _)| p == policy)
        .and_then(|(_, s)| s.tenants.get(tenant))
}

fn tenant_hit(summaries: &[(String, PolicySummary)], policy: &str, tenant: &str) -> f64 {
    tenant_of(summaries, policy, tenant).map_or(f64::NAN, |t| t.hit_rate)
}

fn tenant_turn_ms(summaries: &[(String, PolicySummary)], policy: &str, tenant: &str) -> f64 {
    tenant_of(summaries, policy, tenant).map_or(f64::NAN, |t| t.turn_ms_mean)
}

impl Report<'_> {
    fn summaries(&self, level: usize, shares: bool) -> &[(String, PolicySummary)] {
        let i = self
            .units
            .iter()
            .position(|u| u.level == Some(level) && u.shares == shares)
            .expect("every level ran with and without shares");
        &self.results[i].1
    }

    fn write(&self, wall: f64) -> anyhow::Result<()> {
        let a = self.args;
        std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
        let mut md = self.table_head();
        let mut verdicts = Vec::new();
        let mut json_levels = Vec::new();
        for (level, &pct) in a.flood_percent.iter().enumerate() {
            json_levels.push(self.level_rows(level, pct, &mut md, &mut verdicts));
        }
        let held = verdicts.iter().filter(|&&v| v).count();
        let verdict = format!(
            "\nWith shares the agents keep their alone-at-guarantee hit rate (within {TOLERANCE_PP} pp) in {held} of {} cases.\n",
            verdicts.len()
        );
        print!("{md}{verdict}");
        println!("replays in {wall:.1} s");
        std::fs::write(a.out.join("table.md"), format!("{md}{verdict}"))?;
        let json = self.results_json(wall, json_levels, held, verdicts.len());
        std::fs::write(a.out.join("results.json"), serde_json::to_string_pretty(&json)?)?;
        self.plot()?;
        println!(
            "results → {} (results.json, table.md, noisy-neighbour.svg/.png)",
            a.out.display()
        );
        let every_run = self.results.iter().flat_map(|(_, runs)| runs);
        crate::report::failed_replays(self.alone.iter().chain(every_run))
    }

    /// The table's caption and header; its own step because the caption states the setup
    /// (caches, guarantee, flood rate) every row is read against.
    fn table_head(&self) -> String {
        let a = self.args;
        format!(
            "`{}` agents ({} sessions) next to a flood of unique {}-token prompts. Agents alone: cache {} blocks \
             (their guarantee); shared and shares: cache {} blocks, shares `agents={}`. Flood load in % of the \
             agents' prompt tokens/s ({:.0} tok/s over {:.0} s). Agents' token hit %:\n\n\
             | flood % | policy | alone @ G | shared | shares | shares − alone (pp) | flood hit % (shared → shares) | agents' turn ms (alone / shares) |\n\
             |---:|---|---:|---:|---:|---:|---:|---:|\n",
            a.workload.name(),
            self.sessions,
            a.flood_prompt_tokens,
            self.guarantee,
            self.cache,
            self.guarantee,
            self.agents_rate,
            self.span_s,
        )
    }

    /// One flood level: a table row per policy into `md`, whether shares kept the agents' hit
    /// rate into `verdicts`, and the level's JSON; its own step because a level is one comparison
    /// (alone, shared, shares) made for every policy.
    fn level_rows(&self, level: usize, pct: usize, md: &mut String, verdicts: &mut Vec<bool>) -> serde_json::Value {
        let (shared, shares) = (self.summaries(level, false), self.summaries(level, true));
        let mut json_policies = serde_json::Map::new();
        for policy in &self.args.policies {
            let alone = tenant_hit(&self.alone, policy, AGENTS);
            let (with_shared, with_shares) = (tenant_hit(shared, policy, AGENTS), tenant_hit(shares, policy, AGENTS));
            let delta = (with_shares - alone) * 100.0;
            verdicts.push(delta >= -TOLERANCE_PP);
            md.push_str(&format!(
                "| {pct} | {policy} | {:.1} | {:.1} | {:.1} | {delta:+.1} | {:.1} → {:.1} | {:.0} / {:.0} |\n",
                alone * 100.0,
                with_shared * 100.0,
                with_shares * 100.0,
                tenant_hit(shared, policy, FLOOD) * 100.0,
                tenant_hit(shares, policy, FLOOD) * 100.0,
                tenant_turn_ms(&self.alone, policy, AGENTS),
                tenant_turn_ms(shares, policy, AGENTS),
            ));
            json_policies.insert(
                policy.clone(),
                serde_json::json!({
                    "agents_alone_hit_rate": alone,
                    "agents_shared_hit_rate": with_shared,
                    "agents_shares_hit_rate": with_shares,
                    "flood_shared_hit_rate": tenant_hit(shared, policy, FLOOD),
                    "flood_shares_hit_rate": tenant_hit(shares, policy, FLOOD),
                }),
            );
        }
        serde_json::json!({"flood_percent": pct, "policies": json_policies})
    }

    /// `results.json`: the setup, every level's figures and the verdict's count; its own step so
    /// that the file's fields read in one place.
    fn results_json(&self, wall: f64, levels: Vec<serde_json::Value>, held: usize, cases: usize) -> serde_json::Value {
        let a = self.args;
        serde_json::json!({
            "workload": a.workload.name(),
            "guarantee_blocks": self.guarantee,
            "cache_blocks": self.cache,
            "block_size": BLOCK_SIZE,
            "flood_prompt_tokens": a.flood_prompt_tokens,
            "flood_output_tokens": a.flood_output_tokens,
            "agents_prompt_tokens_per_s": self.agents_rate,
            "span_s": self.span_s,
            "seed": a.seed,
            "levels": levels,
            "kept_within_tolerance": held,
            "cases": cases,
            "wall_s": wall,
        })
    }

    /// The agents' hit rate against the flood load: one panel per policy, one line per setup.
    fn plot(&self) -> anyhow::Result<()> {
        let a = self.args;
        let setups = ["alone @ G".to_string(), "shared".to_string(), "shares".to_string()];
        let levels = a.flood_percent.len();
        let series: Vec<Vec<Vec<f64>>> = a
            .policies
            .iter()
            .map(|policy| {
                let alone = tenant_hit(&self.alone, policy, AGENTS);
                let line = |shares| {
                    (0..levels)
                        .map(|level| tenant_hit(self.summaries(level, shares), policy, AGENTS))
                        .collect()
                };
                vec![vec![alone; levels], line(false), line(true)]
            })
            .collect();
        let svg = crate::plot::line_panels(
            &format!("Agents' hit rate next to a flood (G = {} blocks)", self.guarantee),
            "flood, % of agents' tokens/s",
            &a.policies,
            &setups,
            &vec![a.flood_percent.clone(); a.policies.len()],
            &series,
        );
        std::fs::write(a.out.join("noisy-neighbour.svg"), &svg)?;
        crate::png::write_png(&svg, &a.out.join("noisy-neighbour.png"))
    }
}

//! `agentrt sim table`: the six workloads at the headline setting and a capacity sweep under
//! every default policy — the terminal table, results.json, table.md and the plots.

use std::path::PathBuf;
use std::time::Instant;

use agentrt_runtime::ComponentLookup;
use anyhow::Context;
use clap::Args;

use crate::harness::{default_policies, run_all};
use crate::latency::{GpuMemory, LatencyModel};
use crate::options::ReplayOptions;
use crate::policies::{policies_help, PolicySpec};
use crate::prepare::PreparedTrace;
use crate::progress::Progress;
use crate::report::{
    legend_markdown, legend_text, markdown_rows, run_json, summarize, table, PolicySummary, MARKDOWN_HEADER,
};
use crate::scheduler::SimConfig;
use crate::setting::{headline_blocks, BLOCK_SIZE};
use crate::workloads::{generate, GenParams, Workload};

#[derive(Args, Debug)]
pub struct TableArgs {
    /// The short version (1/8 of the sessions, concurrency and cache; two capacities).
    #[arg(long)]
    pub quick: bool,
    /// Workloads to run (default: all six).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub workloads: Option<Vec<Workload>>,
    /// Capacity sweep as fractions of the headline cache.
    #[arg(long, value_delimiter = ',')]
    pub sweep: Option<Vec<f64>>,
    #[arg(long, value_delimiter = ',', help = policies_help(
        "Policies to compare, comma-separated (default: the evaluation's seven); a component file \
         joins the table as its own row. Without `belady` the gap column is empty."
    ))]
    pub policies: Option<Vec<String>>,
    /// Parallel replays (one per core).
    #[arg(long, default_value_t = 2)]
    pub jobs: usize,
    /// Where results.json, the SVG plots and table.md go.
    #[arg(long, default_value = "target/sim-table")]
    pub out: PathBuf,
    #[command(flatten)]
    pub replay: ReplayOptions,
}

/// Said under a `--quick` table: its figures are not the evaluation's.
const QUICK_NOTE: &str =
    "\nNote: --quick replays 1/8 of the sessions, concurrency and cache, where shared prefixes no \
     longer fit, so its figures differ from the full table's (docs/results.md: the headline, and \
     \"The short version\" for these); the full table is `agentrt sim table` without --quick.\n";

/// The summaries of one (workload index, capacity, is-headline) unit.
type UnitResult = (usize, usize, bool, Vec<(String, PolicySummary)>);

/// One (workload, capacity) replay unit of the table.
struct Unit {
    workload: usize,
    blocks: usize,
    headline: bool,
}

/// Run the table of `a`: every workload at the headline cache and at each sweep capacity.
pub fn run(a: TableArgs, components: &ComponentLookup) -> anyhow::Result<()> {
    let started = Instant::now();
    let workloads = a.workloads.clone().unwrap_or_else(|| Workload::ALL.to_vec());
    let scale = if a.quick { 8 } else { 1 };
    let headline = headline_blocks() / scale;
    let sweep = a
        .sweep
        .clone()
        .unwrap_or_else(|| if a.quick { vec![0.5, 2.0] } else { vec![0.25, 0.5] });
    let policies: Vec<PolicySpec> = match &a.policies {
        Some(names) => names.iter().map(|n| PolicySpec::parse(n)).collect(),
        None => default_policies(),
    };
    let host = a.replay.host(components)?;
    host.preload(&policies)?;

    let mut params_used = Vec::new();
    let mut traces = Vec::new();
    for w in &workloads {
        let mut p = w.headline();
        p.sessions /= scale;
        p.concurrency /= scale as f64;
        let trace = generate(*w, &p);
        traces.push(PreparedTrace::new(&trace, BLOCK_SIZE, a.replay.hide_agents));
        params_used.push(p);
    }
    let mut units = Vec::new();
    for wi in 0..workloads.len() {
        units.push(Unit {
            workload: wi,
            blocks: headline,
            headline: true,
        });
        for f in &sweep {
            units.push(Unit {
                workload: wi,
                blocks: ((headline as f64) * f).round() as usize,
                headline: false,
            });
        }
    }
    // Largest first, so the two workers finish together.
    units.sort_by_key(|u| std::cmp::Reverse(traces[u.workload].prompt_tokens() as usize * u.blocks.max(1)));
    let progress = Progress::new((units.len() * policies.len()) as u64);
    let mut results: Vec<UnitResult> = crate::parallel::run_units(a.jobs, units, |unit| {
        let trace = &traces[unit.workload];
        let cfg = a.replay.config(unit.blocks)?;
        let name = workloads[unit.workload].name();
        let runs = run_all(&host, trace, &cfg, &policies, a.replay.rerank(), false, |r| {
            progress.replayed(&format!("{name} @ {} blocks: {}", unit.blocks, r.policy));
        })
        .with_context(|| format!("{name} @ {} blocks", unit.blocks))?;
        Ok((unit.workload, unit.blocks, unit.headline, summarize(&runs)))
    })?;
    progress.finish();
    results.sort_by_key(|(w, b, _, _)| (*w, *b));
    let wall = started.elapsed().as_secs_f64();
    TableOutputs {
        args: &a,
        workloads: &workloads,
        params: &params_used,
        traces: &traces,
        results: &results,
        policies: &policies,
        headline,
        wall,
    }
    .write()
}

/// Everything the table's replays produced, and what to write it as.
struct TableOutputs<'a> {
    args: &'a TableArgs,
    workloads: &'a [Workload],
    params: &'a [GenParams],
    traces: &'a [PreparedTrace],
    results: &'a [UnitResult],
    policies: &'a [PolicySpec],
    headline: usize,
    wall: f64,
}

/// Per workload: its Markdown rows, its JSON, and the plots' data (hit rate at the headline
/// cache; hit rate per policy at each capacity).
#[derive(Default)]
struct Collected {
    markdown: String,
    json_workloads: serde_json::Map<String, serde_json::Value>,
    bars: Vec<Vec<f64>>,
    capacities: Vec<Vec<usize>>,
    series: Vec<Vec<Vec<f64>>>,
}

impl TableOutputs<'_> {
    /// The terminal tables, then results.json, table.md and the plots in `--out`.
    fn write(&self) -> anyhow::Result<()> {
        let out = &self.args.out;
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        let collected = self.per_workload()?;
        let verdict = self.verdict();
        print!("{verdict}");
        print!("\nWhat the columns say:\n{}", legend_text());
        println!(
            "\n{} replays in {:.1} s",
            self.results.len() * self.policies.len(),
            self.wall
        );
        self.write_json(collected.json_workloads.clone())?;
        std::fs::write(
            out.join("table.md"),
            format!(
                "{}\nWhat the columns say:\n\n{}{}",
                collected.markdown,
                legend_markdown(),
                verdict.replace("\n  ", "\n    ")
            ),
        )?;
        self.write_plots(&collected)?;
        println!(
            "results → {} (results.json, table.md, hit-rate.svg/.png, capacity.svg/.png)",
            out.display()
        );
        crate::report::failed_replays(self.results.iter().flat_map(|(_, _, _, s)| s))
    }

    fn names(&self) -> Vec<String> {
        self.policies.iter().map(|p| p.name().to_string()).collect()
    }

    /// Each workload's table printed, and its rows, JSON and plot data collected.
    fn per_workload(&self) -> anyhow::Result<Collected> {
        let names = self.names();
        let headline = self.headline;
        let mut c = Collected {
            markdown: MARKDOWN_HEADER.to_string(),
            ..Collected::default()
        };
        for (wi, w) in self.workloads.iter().enumerate() {
            let trace = &self.traces[wi];
            let mine: Vec<_> = self.results.iter().filter(|r| r.0 == wi).collect();
            let head = mine
                .iter()
                .find(|r| r.2)
                .map(|r| &r.3)
                .context("headline run missing")?;
            println!(
                "\n== {} — {} sessions, {} requests, {:.1} M prompt tokens; cache {} blocks ({} k tokens)",
                w.name(),
                trace.sessions.len(),
                trace.requests.len(),
                trace.prompt_tokens() as f64 / 1e6,
                headline,
                headline * BLOCK_SIZE / 1000
            );
            print!("{}", table(head));
            c.markdown.push_str(&markdown_rows(w.name(), head));
            let hit = |s: &[(String, PolicySummary)], n: &str| {
                s.iter().find(|(p, _)| p == n).map_or(0.0, |(_, x)| x.hit_rate)
            };
            c.bars.push(names.iter().map(|n| hit(head, n)).collect());
            c.capacities.push(mine.iter().map(|r| r.1).collect());
            c.series.push(
                names
                    .iter()
                    .map(|n| mine.iter().map(|r| hit(&r.3, n)).collect())
                    .collect(),
            );
            let sweep: Vec<_> = mine.iter().map(|r| run_json(w.name(), r.1, BLOCK_SIZE, &r.3)).collect();
            c.json_workloads.insert(
                w.name().to_string(),
                serde_json::json!({
                    "generator": self.params[wi],
                    "sessions": trace.sessions.len(),
                    "requests": trace.requests.len(),
                    "prompt_tokens": trace.prompt_tokens(),
                    "headline": run_json(w.name(), headline, BLOCK_SIZE, head),
                    "sweep": sweep,
                }),
            );
        }
        Ok(c)
    }

    /// Every policy in the table but the baselines (LRU, the offline bound) against LRU, over
    /// every capacity of each workload: the headline Δ, the mean share of the gap to the bound
    /// closed, the worst Δ.
    fn verdict(&self) -> String {
        let get =
            |r: &[(String, PolicySummary)], policy: &str| r.iter().find(|(p, _)| p == policy).map(|(_, s)| s.clone());
        let mut verdict = String::from("\nEach policy against LRU (all capacities of each workload):\n");
        let contenders = self
            .names()
            .into_iter()
            .filter(|name| !matches!(name.as_str(), "lru" | "lru-native" | "belady"));
        for policy in contenders {
            verdict.push_str(&format!("  {policy}\n"));
            for (wi, w) in self.workloads.iter().enumerate() {
                let mine: Vec<_> = self.results.iter().filter(|r| r.0 == wi).collect();
                let gaps: Vec<f64> = mine
                    .iter()
                    .filter_map(|r| get(&r.3, &policy).and_then(|s| s.gap_closed))
                    .collect();
                let worst = mine
                    .iter()
                    .filter_map(|r| get(&r.3, &policy).and_then(|s| s.delta_pp_vs_lru))
                    .fold(f64::INFINITY, f64::min);
                let head = mine
                    .iter()
                    .find(|r| r.2)
                    .and_then(|r| get(&r.3, &policy))
                    .and_then(|s| s.delta_pp_vs_lru);
                verdict.push_str(&format!(
                    "    {:<10} headline Δ {:>6} pp   mean gap closed {:>5}   worst Δ {:>6} pp\n",
                    w.name(),
                    head.map_or("–".into(), |d| format!("{d:+.1}")),
                    if gaps.is_empty() {
                        "–".into()
                    } else {
                        format!("{:.0}%", gaps.iter().sum::<f64>() / gaps.len() as f64 * 100.0)
                    },
                    if worst.is_finite() {
                        format!("{worst:+.1}")
                    } else {
                        "–".into()
                    },
                ));
            }
        }
        if self.args.quick {
            verdict.push_str(QUICK_NOTE);
        }
        verdict
    }

    /// results.json: the setting (engine, memory, latency model) and every workload's figures.
    fn write_json(&self, workloads: serde_json::Map<String, serde_json::Value>) -> anyhow::Result<()> {
        let a = self.args;
        let memory = GpuMemory::h100_80gb_llama31_8b();
        let json = serde_json::json!({
            "quick": a.quick,
            "hide_agents": a.replay.hide_agents,
            "rerank_ms": a.replay.rerank_ms,
            "session_ends": a.replay.config(1)?.session_ends.name(),
            "block_size": BLOCK_SIZE,
            "headline_capacity_blocks": self.headline,
            "gpu_memory": memory,
            "kv_tokens": memory.kv_tokens(),
            "latency_model": LatencyModel::default(),
            "engine": {"max_num_seqs": SimConfig::new(1).max_num_seqs, "max_batched_tokens": SimConfig::new(1).max_batched_tokens},
            "wall_s": self.wall,
            "workloads": workloads,
        });
        std::fs::write(a.out.join("results.json"), serde_json::to_string_pretty(&json)?)?;
        Ok(())
    }

    /// hit-rate and capacity, as SVG and PNG.
    fn write_plots(&self, c: &Collected) -> anyhow::Result<()> {
        let title = format!("Token hit rate at the headline cache ({} blocks)", self.headline);
        let workloads: Vec<String> = self.workloads.iter().map(|w| w.name().to_string()).collect();
        // Bélády is the ceiling, not a contender: the plots say so in their legends.
        let names: Vec<String> = self
            .names()
            .into_iter()
            .map(|n| {
                if n == "belady" {
                    "belady (offline bound)".to_string()
                } else {
                    n
                }
            })
            .collect();
        let plots = [
            (
                "hit-rate",
                crate::plot::hit_rate_bars(&title, &workloads, &names, &c.bars),
            ),
            (
                "capacity",
                crate::plot::capacity_lines(
                    "Token hit rate against cache capacity",
                    &workloads,
                    &names,
                    &c.capacities,
                    &c.series,
                ),
            ),
        ];
        for (stem, svg) in &plots {
            std::fs::write(self.args.out.join(format!("{stem}.svg")), svg)?;
            crate::png::write_png(svg, &self.args.out.join(format!("{stem}.png")))?;
        }
        Ok(())
    }
}

//! `agentrt sim fleet-sweep`: the many-application workload over a grid of fleet sizes and anchor
//! scales at one cache, so that the result is a curve, not a point — table, JSON and a plot.

use std::path::PathBuf;
use std::time::Instant;

use agentrt_runtime::ComponentLookup;
use anyhow::Context;
use clap::Args;

use crate::harness::run_all;
use crate::options::ReplayOptions;
use crate::policies::{policies_help, PolicySpec};
use crate::prepare::PreparedTrace;
use crate::progress::Progress;
use crate::report::{run_json, summarize, PolicySummary};
use crate::setting::{headline_blocks, BLOCK_SIZE};
use crate::workloads::fleet::FleetParams;
use crate::workloads::{generate, Workload};

/// Bélády must gain at least this much over LRU (pp) for a point to count toward the
/// "share of the gap closed" target: below it the gap is noise-sized.
const MEANINGFUL_GAP_PP: f64 = 5.0;

#[derive(Args, Debug)]
pub struct FleetSweepArgs {
    /// Numbers of applications.
    #[arg(long, value_delimiter = ',', default_value = "20,40,80,160,320,500")]
    pub applications: Vec<usize>,
    /// Anchor size multipliers.
    #[arg(long, value_delimiter = ',', default_value = "0.5,1,2")]
    pub anchor_scales: Vec<f64>,
    /// Sessions per trace (default: the headline's).
    #[arg(long)]
    pub sessions: Option<usize>,
    /// Target concurrently active sessions (default: the headline's).
    #[arg(long)]
    pub concurrency: Option<f64>,
    /// Cache size in blocks (default: the headline H100 setting).
    #[arg(long)]
    pub capacity_blocks: Option<usize>,
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "lru,cachesage,cachesage-evict,belady",
        help = policies_help("Comma-separated policies.")
    )]
    pub policies: Vec<String>,
    /// Seed of the workload generator: the same seed gives the same traces.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Parallel replays (one per core).
    #[arg(long, default_value_t = 2)]
    pub jobs: usize,
    /// Where results.json, table.md and fleet-sweep.svg/.png go.
    #[arg(long, default_value = "target/sim-fleet")]
    pub out: PathBuf,
    #[command(flatten)]
    pub replay: ReplayOptions,
}

struct Point {
    applications: usize,
    anchor_scale: f64,
    agents: usize,
    anchor_tokens: u64,
    trace: PreparedTrace,
}

type PointResult = (usize, Vec<(String, PolicySummary)>);

pub fn run(a: FleetSweepArgs, components: &ComponentLookup) -> anyhow::Result<()> {
    let started = Instant::now();
    let blocks = a.capacity_blocks.unwrap_or_else(headline_blocks);
    let policies: Vec<PolicySpec> = a.policies.iter().map(|n| PolicySpec::parse(n)).collect();
    let host = a.replay.host(components)?;
    host.preload(&policies)?;
    let mut points = Vec::new();
    for &scale in &a.anchor_scales {
        for &apps in &a.applications {
            let mut p = Workload::Fleet.headline();
            p.sessions = a.sessions.unwrap_or(p.sessions);
            p.concurrency = a.concurrency.unwrap_or(p.concurrency);
            p.seed = a.seed;
            p.fleet = FleetParams {
                applications: apps,
                anchor_scale: scale,
                ..FleetParams::default()
            };
            let trace = generate(Workload::Fleet, &p);
            let catalog = crate::workloads::fleet::Catalog::for_params(&p);
            points.push(Point {
                applications: apps,
                anchor_scale: scale,
                agents: catalog.agents(),
                anchor_tokens: catalog.anchor_tokens(),
                trace: PreparedTrace::new(&trace, BLOCK_SIZE, a.replay.hide_agents),
            });
        }
    }
    let mut order: Vec<usize> = (0..points.len()).collect();
    // Largest last: workers take from the end, so the big ones start first.
    order.sort_by_key(|&i| points[i].trace.prompt_tokens());
    let progress = Progress::new((points.len() * policies.len()) as u64);
    let mut results: Vec<PointResult> = crate::parallel::run_units(a.jobs, order, |i| {
        let p = &points[i];
        let runs = run_all(
            &host,
            &p.trace,
            &a.replay.config(blocks)?,
            &policies,
            a.replay.rerank(),
            false,
            |r| progress.replayed(&format!("{} apps × {}: {}", p.applications, p.anchor_scale, r.policy)),
        )
        .with_context(|| {
            format!(
                "fleet, {} applications, anchor scale {}",
                p.applications, p.anchor_scale
            )
        })?;
        Ok((i, summarize(&runs)))
    })?;
    progress.finish();
    results.sort_by_key(|r| r.0);
    write_outputs(&a, blocks, &points, &results, started.elapsed().as_secs_f64())
}

fn write_outputs(
    a: &FleetSweepArgs,
    blocks: usize,
    points: &[Point],
    results: &[PointResult],
    wall: f64,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let (md, json_points, meaningful) = sweep_table(a, blocks, points, results);
    let worst = meaningful.iter().copied().fold(f64::INFINITY, f64::min);
    let verdict = format!(
        "\nPoints where Bélády gains ≥ {MEANINGFUL_GAP_PP} pp: {}; CacheSage closes {} of the gap at the worst of them.\n",
        meaningful.len(),
        if worst.is_finite() {
            format!("{:.0}%", worst * 100.0)
        } else {
            "–".into()
        }
    );
    print!("{md}{verdict}");
    println!("{} replays in {wall:.1} s", results.len() * a.policies.len());
    std::fs::write(a.out.join("table.md"), format!("{md}{verdict}"))?;
    let json = serde_json::json!({
        "capacity_blocks": blocks,
        "block_size": BLOCK_SIZE,
        "sessions": a.sessions.unwrap_or(Workload::Fleet.headline().sessions),
        "seed": a.seed,
        "wall_s": wall,
        "points": json_points,
    });
    std::fs::write(a.out.join("results.json"), serde_json::to_string_pretty(&json)?)?;
    write_plot(a, blocks, points, results)?;
    println!(
        "results → {} (results.json, table.md, fleet-sweep.svg/.png)",
        a.out.display()
    );
    crate::report::failed_replays(results.iter().flat_map(|(_, s)| s))
}

/// The sweep's Markdown table (a row per point: hit % per policy, CacheSage's Δ and gap), each
/// point's JSON, and the gap CacheSage closed at the points where Bélády gains enough to judge.
fn sweep_table(
    a: &FleetSweepArgs,
    blocks: usize,
    points: &[Point],
    results: &[PointResult],
) -> (String, Vec<serde_json::Value>, Vec<f64>) {
    let names = &a.policies;
    let mut md = format!(
        "Cache {blocks} blocks ({} k tokens). Hit % per policy; Δ and gap closed are `cachesage`'s.\n\n\
         | apps | anchor × | agents | anchors / cache | {} | Δ pp | gap closed | warm-up tok |\n|---:|---:|---:|---:|{}---:|---:|---:|\n",
        blocks * BLOCK_SIZE / 1000,
        names.join(" | "),
        "---:|".repeat(names.len()),
    );
    let mut json_points = Vec::new();
    let mut meaningful = Vec::new();
    for (i, summaries) in results {
        let p = &points[*i];
        let get = |n: &str| summaries.iter().find(|(name, _)| name == n).map(|(_, s)| s);
        let sage = get("cachesage");
        let hits: Vec<String> = names
            .iter()
            .map(|n| get(n).map_or("–".into(), |s| format!("{:.1}", s.hit_rate * 100.0)))
            .collect();
        let belady_gain = match (get("belady"), get("lru")) {
            (Some(b), Some(l)) => Some((b.hit_rate - l.hit_rate) * 100.0),
            _ => None,
        };
        if let (Some(g), Some(closed)) = (belady_gain, sage.and_then(|s| s.gap_closed)) {
            if g >= MEANINGFUL_GAP_PP {
                meaningful.push(closed);
            }
        }
        md.push_str(&format!(
            "| {} | {} | {} | {:.1} | {} | {} | {} | {} |\n",
            p.applications,
            p.anchor_scale,
            p.agents,
            p.anchor_tokens as f64 / (blocks * BLOCK_SIZE) as f64,
            hits.join(" | "),
            sage.and_then(|s| s.delta_pp_vs_lru)
                .map_or("–".into(), |d| format!("{d:+.1}")),
            sage.and_then(|s| s.gap_closed)
                .map_or("–".into(), |g| format!("{:.0}%", g * 100.0)),
            sage.map_or("–".into(), |s| s.warmup_tokens.to_string()),
        ));
        let mut point = run_json("fleet", blocks, BLOCK_SIZE, summaries);
        point["applications"] = p.applications.into();
        point["anchor_scale"] = p.anchor_scale.into();
        point["agents"] = p.agents.into();
        point["anchor_tokens"] = p.anchor_tokens.into();
        json_points.push(point);
    }
    (md, json_points, meaningful)
}

/// One panel per anchor scale: hit rate against the number of applications.
fn write_plot(a: &FleetSweepArgs, blocks: usize, points: &[Point], results: &[PointResult]) -> anyhow::Result<()> {
    let names = &a.policies;
    let panels: Vec<String> = a.anchor_scales.iter().map(|s| format!("anchors ×{s}")).collect();
    let mut xs = Vec::new();
    let mut series = Vec::new();
    for &scale in &a.anchor_scales {
        let mine: Vec<&PointResult> = results
            .iter()
            .filter(|(i, _)| points[*i].anchor_scale == scale)
            .collect();
        xs.push(mine.iter().map(|(i, _)| points[*i].applications).collect());
        series.push(
            names
                .iter()
                .map(|n| {
                    mine.iter()
                        .map(|(_, s)| s.iter().find(|(p, _)| p == n).map_or(0.0, |(_, x)| x.hit_rate))
                        .collect()
                })
                .collect(),
        );
    }
    let svg = crate::plot::line_panels(
        &format!("fleet: token hit rate against applications sharing the engine ({blocks} blocks)"),
        "applications",
        &panels,
        names,
        &xs,
        &series,
    );
    std::fs::write(a.out.join("fleet-sweep.svg"), &svg)?;
    crate::png::write_png(&svg, &a.out.join("fleet-sweep.png"))
}

//! `agentrt sim knee`: the engine past its knee. One workload at rising concurrency — closed-loop
//! programs, the generator's concurrency, or an imported trace's users — each point replayed
//! behind every admission arm (stock vLLM, agentrt's request cap, ThunderAgent, Continuum,
//! working-set admission), one point at a time with a progress line per replay; per point and
//! arm: LLM calls completed per minute, output tokens/s, prompt hit rate, TTFT p50/p99, session
//! completion time, a new session's first response p50/p99 and the working set against the
//! cache; where stock vLLM's calls per minute peak (its knee), and each arm against stock vLLM
//! and ThunderAgent at 2× and 4× the knee. Table, JSON and a plot of calls/min and hit rate
//! against concurrency.

use std::path::PathBuf;
use std::time::Instant;

use agentrt_runtime::ComponentLookup;
use anyhow::Context;
use clap::{Args, ValueEnum};
use serde::Serialize;

use crate::admission::AdmissionArm;
use crate::harness::replay_admitted;
use crate::latency::LatencyModel;
use crate::options::ReplayOptions;
use crate::policies::PolicySpec;
use crate::prepare::PreparedTrace;
use crate::scheduler::RunResult;
use crate::setting::{headline_blocks, BLOCK_SIZE};
use crate::trace::Trace;
use crate::workloads::{generate, Workload};

/// What the points vary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Axis {
    /// Closed-loop programs at once: each point runs N sessions side by side, the next starting
    /// when one ends (`--workload swe`).
    Programs,
    /// The generator's concurrency: sessions arrive so that about N are active on an unloaded
    /// engine, one trace per point (`--workload fleet`).
    Concurrency,
    /// An imported trace's users (`--trace`, imported with `--users BASE`): sessions start
    /// BASE / N times as far apart, as an import with `--users N` would start them.
    Users,
}

/// The engine's speed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LatencySetting {
    /// Llama-3.1-8B on one H100 (the headline model, docs/simulator.md).
    H100,
    /// The tiny CPU model's regime: prefill nearly free against a step.
    PrefillFree,
}

impl LatencySetting {
    fn model(self) -> LatencyModel {
        match self {
            LatencySetting::H100 => LatencyModel::llama31_8b_h100(),
            LatencySetting::PrefillFree => LatencyModel::prefill_nearly_free(),
        }
    }
}

#[derive(Args, Debug)]
pub struct KneeArgs {
    /// A generated workload (`swe` with `--axis programs`, `fleet` with `--axis concurrency`).
    #[arg(long, value_enum, conflicts_with = "trace", required_unless_present = "trace")]
    pub workload: Option<Workload>,
    /// An imported trace (`cc100`, with `--axis users`).
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// What the concurrency points count: closed-loop programs, the generator's concurrency, or an
    /// imported trace's users.
    #[arg(long, value_enum)]
    pub axis: Axis,
    /// The concurrency points, ascending.
    #[arg(long, value_delimiter = ',', required = true)]
    pub points: Vec<usize>,
    /// `--axis users`: the users the trace was imported with.
    #[arg(long, default_value_t = 8)]
    pub base_users: usize,
    /// Sessions per generated trace (default: the workload's headline; with `--axis programs`
    /// at least 4 × the largest point, so that every point keeps all its programs busy).
    #[arg(long)]
    pub sessions: Option<usize>,
    /// The generator's seed (every point and arm replays the same sessions).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Admission arms: vllm (stock), cap[:N] (agentrt's request cap; sized to the cache by
    /// default), thunderagent, thunderagent-decay, continuum, working-set[:KEY=VALUE…]
    /// (agentrt's working-set admission; docs/admission.md).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "vllm,cap,thunderagent,thunderagent-decay,continuum,working-set"
    )]
    pub arms: Vec<String>,
    /// The cache policy every arm runs (a policy name as for `sim run`).
    #[arg(long, default_value = "lru-native")]
    pub cache_policy: String,
    /// Cache size in blocks (default: the headline H100's).
    #[arg(long)]
    pub capacity_blocks: Option<usize>,
    /// The engine's speed: the headline H100, or the tiny CPU model's regime where prefill is
    /// nearly free (admission must then hold nothing).
    #[arg(long, value_enum, default_value = "h100")]
    pub latency: LatencySetting,
    /// Parallel replays.
    #[arg(long, default_value_t = 2)]
    pub jobs: usize,
    /// Where results.json, table.md and knee.svg/.png go.
    #[arg(long, default_value = "target/sim-knee")]
    pub out: PathBuf,
    #[command(flatten)]
    pub replay: ReplayOptions,
}

/// What one replay measured, as the sweep reports it.
#[derive(Debug, Clone, Serialize)]
pub struct Figures {
    /// Calls finished in the window (from the first call to the last session's first call:
    /// while sessions keep starting), per minute of it.
    pub calls: u64,
    pub window_s: f64,
    pub calls_per_min: f64,
    /// Output tokens of the calls finished in the window, per second of it.
    pub output_tok_s: f64,
    /// Cached prompt tokens / prompt tokens, every call of the run.
    pub hit_rate: f64,
    pub ttft_p50_ms: f64,
    pub ttft_p99_ms: f64,
    /// From a session's first call to its last answer (sessions that finished), mean.
    pub session_s_mean: f64,
    /// The first call of each session: time to its first token, from when it was issued.
    pub first_response_p50_ms: f64,
    pub first_response_p99_ms: f64,
    /// The live sessions' contexts, and what the admission stage counted resident, over the
    /// run, as a share of the cache.
    pub working_set_over_cache: f64,
    pub resident_over_cache: f64,
    pub utilisation: f64,
    pub preemptions: u64,
    pub rejected: u64,
    pub stage: Option<crate::admission::StageFigures>,
    /// Each tenant's calls per minute (in its own window: from the first call to its last
    /// session's first call) and hit rate, when the trace has more than one.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tenants: Vec<TenantCalls>,
    pub stuck_releases: u64,
    pub pins: u64,
    pub pins_expired: u64,
    pub wall_s: f64,
}

fn percentile(values: &mut Vec<f64>, p: f64) -> f64 {
    values.retain(|v| v.is_finite());
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let i = ((values.len() as f64 - 1.0) * p).round() as usize;
    values[i]
}

/// One tenant's share of a replay.
#[derive(Debug, Clone, Serialize)]
pub struct TenantCalls {
    pub tenant: String,
    pub calls_per_min: f64,
    pub hit_rate: f64,
}

/// Each tenant's calls per minute in its own window, and hit rate (nothing for one tenant).
fn tenant_calls(result: &RunResult, trace: &PreparedTrace) -> Vec<TenantCalls> {
    if trace.tenants.len() < 2 {
        return Vec::new();
    }
    (0..trace.tenants.len())
        .map(|t| {
            let mine = |u: usize| trace.requests[u].tenant as usize == t;
            let end = trace
                .sessions
                .iter()
                .filter(|s| s.tenant as usize == t)
                .map(|s| result.arrival_us[s.requests[0] as usize])
                .filter(|x| x.is_finite())
                .fold(0.0, f64::max);
            let end = if end < 1e6 { result.makespan_us } else { end };
            let calls = (0..result.finish_us.len())
                .filter(|&u| mine(u) && result.finish_us[u].is_finite() && result.finish_us[u] <= end)
                .count();
            TenantCalls {
                tenant: trace.tenants[t].clone(),
                calls_per_min: calls as f64 / (end / 60e6).max(1e-9),
                hit_rate: result.tenants[t].hit_rate(),
            }
        })
        .collect()
}

impl Figures {
    pub fn of(result: &RunResult, trace: &PreparedTrace, capacity_tokens: f64) -> Self {
        let firsts: Vec<usize> = trace.sessions.iter().map(|s| s.requests[0] as usize).collect();
        let window_end = firsts
            .iter()
            .map(|&u| result.arrival_us[u])
            .filter(|t| t.is_finite())
            .fold(0.0, f64::max);
        // All sessions start at once (programs ≥ sessions): the whole run is the window.
        let window_end = if window_end < 1e6 {
            result.makespan_us
        } else {
            window_end
        };
        let mut calls = 0u64;
        let mut output = 0u64;
        for (uid, &finish) in result.finish_us.iter().enumerate() {
            if finish.is_finite() && finish <= window_end {
                calls += 1;
                output += u64::from(trace.requests[uid].output_tokens);
            }
        }
        let window_s = window_end / 1e6;
        let mut ttft = result.ttft_us.clone();
        let mut first: Vec<f64> = firsts.iter().map(|&u| result.ttft_us[u]).collect();
        let sessions: Vec<f64> = trace
            .sessions
            .iter()
            .filter_map(|s| {
                let (a, b) = (s.requests[0] as usize, *s.requests.last().expect("non-empty") as usize);
                let d = result.finish_us[b] - result.arrival_us[a];
                d.is_finite().then_some(d / 1e6)
            })
            .collect();
        let over = |token_us: f64| token_us / (result.makespan_us.max(1.0) * capacity_tokens);
        Self {
            calls,
            window_s,
            calls_per_min: calls as f64 / (window_s / 60.0).max(1e-9),
            output_tok_s: output as f64 / window_s.max(1e-9),
            hit_rate: result.hit_rate(),
            ttft_p50_ms: percentile(&mut ttft, 0.5) / 1e3,
            ttft_p99_ms: percentile(&mut ttft, 0.99) / 1e3,
            session_s_mean: sessions.iter().sum::<f64>() / sessions.len().max(1) as f64,
            first_response_p50_ms: percentile(&mut first, 0.5) / 1e3,
            first_response_p99_ms: percentile(&mut first, 0.99) / 1e3,
            working_set_over_cache: over(result.demand_token_us),
            resident_over_cache: over(result.resident_token_us),
            utilisation: result.busy_us / result.makespan_us.max(1.0),
            preemptions: result.preemptions,
            rejected: result.rejected,
            stage: result.admission.clone(),
            tenants: tenant_calls(result, trace),
            stuck_releases: result.stuck_releases,
            pins: result.pins,
            pins_expired: result.pins_expired,
            wall_s: result.wall_s,
        }
    }
}

/// One concurrency point: its trace and how the replay runs it.
struct Point {
    concurrency: usize,
    trace: PreparedTrace,
    programs: Option<usize>,
    arrival_scale: f64,
}

fn points(a: &KneeArgs) -> anyhow::Result<(String, Vec<Point>)> {
    anyhow::ensure!(
        a.points.windows(2).all(|w| w[0] < w[1]) && a.points.first().is_some_and(|&p| p > 0),
        "--points must be positive and ascending, got {:?}",
        a.points
    );
    let loaded = match &a.trace {
        Some(path) => Some(Trace::load(path).with_context(|| format!("reading the trace {}", path.display()))?),
        None => None,
    };
    let name = match (&a.trace, a.workload) {
        (Some(path), _) => path
            .file_stem()
            .map_or("trace".into(), |s| s.to_string_lossy().into_owned()),
        (None, Some(w)) => w.name().to_string(),
        (None, None) => anyhow::bail!("name a --workload or a --trace"),
    };
    let largest = *a.points.last().expect("checked");
    let generated = |concurrency: f64| -> anyhow::Result<Trace> {
        let w = a.workload.context("this axis needs --workload")?;
        let mut p = w.headline();
        p.sessions = a.sessions.unwrap_or(match a.axis {
            Axis::Programs => p.sessions.max(4 * largest),
            _ => p.sessions,
        });
        p.concurrency = concurrency;
        p.seed = a.seed;
        Ok(generate(w, &p))
    };
    let prepare = |t: &Trace| PreparedTrace::new(t, BLOCK_SIZE, a.replay.hide_agents);
    let mut out = Vec::new();
    match a.axis {
        Axis::Programs => {
            let trace = match &loaded {
                Some(t) => t.clone(),
                None => generated(largest as f64)?,
            };
            for &n in &a.points {
                out.push(Point {
                    concurrency: n,
                    trace: prepare(&trace),
                    programs: Some(n),
                    arrival_scale: 1.0,
                });
            }
        }
        Axis::Concurrency => {
            anyhow::ensure!(
                loaded.is_none(),
                "--axis concurrency generates its traces: use --workload"
            );
            for &n in &a.points {
                out.push(Point {
                    concurrency: n,
                    trace: prepare(&generated(n as f64)?),
                    programs: None,
                    arrival_scale: 1.0,
                });
            }
        }
        Axis::Users => {
            let trace = loaded.context("--axis users replays an imported trace: give --trace")?;
            for &n in &a.points {
                out.push(Point {
                    concurrency: n,
                    trace: prepare(&trace),
                    programs: None,
                    arrival_scale: a.base_users as f64 / n as f64,
                });
            }
        }
    }
    Ok((name, out))
}

/// One replay's place in the sweep and what it measured.
#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    pub concurrency: usize,
    pub arm: String,
    #[serde(flatten)]
    pub figures: Figures,
}

pub fn run(a: KneeArgs, components: &ComponentLookup) -> anyhow::Result<()> {
    let started = Instant::now();
    let arms: Vec<AdmissionArm> = a
        .arms
        .iter()
        .map(|n| AdmissionArm::parse(n))
        .collect::<Result<_, _>>()?;
    let policy = PolicySpec::parse(&a.cache_policy);
    let host = a.replay.host(components)?;
    host.preload(std::slice::from_ref(&policy))?;
    let blocks = a.capacity_blocks.unwrap_or_else(headline_blocks);
    let (name, points) = points(&a)?;
    let total = points.len() * arms.len();
    eprintln!(
        "knee: {name}, {} points × {} arms = {total} replays, cache {blocks} blocks ({} k tokens), {:?} latency",
        points.len(),
        arms.len(),
        blocks * BLOCK_SIZE / 1000,
        a.latency
    );
    let units: Vec<(usize, usize)> = (0..points.len())
        .rev()
        .flat_map(|p| (0..arms.len()).map(move |arm| (p, arm)))
        .collect();
    let done = std::sync::atomic::AtomicUsize::new(0);
    let capacity_tokens = (blocks * BLOCK_SIZE) as f64;
    let mut cells: Vec<(usize, usize, Figures)> = crate::parallel::run_units(a.jobs, units, |(p, arm)| {
        let point = &points[p];
        let mut cfg = a.replay.config(blocks)?;
        cfg.latency = a.latency.model();
        cfg.programs = point.programs;
        cfg.arrival_scale = point.arrival_scale;
        let result = replay_admitted(&host, &point.trace, &cfg, &policy, &arms[arm], a.replay.rerank())
            .with_context(|| format!("{name} at {} {:?}, arm {}", point.concurrency, a.axis, arms[arm].name()))?;
        let figures = Figures::of(&result, &point.trace, capacity_tokens);
        let n = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        eprintln!(
            "[{n}/{total}] {name} {:?}={} {}: {:.0} calls/min, hit {:.1} %, TTFT p50 {:.2} s ({:.1} s of {:.0} s elapsed)",
            a.axis,
            point.concurrency,
            arms[arm].name(),
            figures.calls_per_min,
            figures.hit_rate * 100.0,
            figures.ttft_p50_ms / 1e3,
            figures.wall_s,
            started.elapsed().as_secs_f64()
        );
        Ok((p, arm, figures))
    })?;
    cells.sort_by_key(|(p, arm, _)| (*p, *arm));
    let cells: Vec<Cell> = cells
        .into_iter()
        .map(|(p, arm, figures)| Cell {
            concurrency: points[p].concurrency,
            arm: arms[arm].name(),
            figures,
        })
        .collect();
    let report = Report::new(&name, a.axis, blocks, &arms, &a.points, cells);
    report.write(&a, started.elapsed().as_secs_f64())
}

/// The sweep's results and what they say about the knee.
#[derive(Debug, Serialize)]
pub struct Report {
    pub workload: String,
    pub axis: Axis,
    pub capacity_blocks: usize,
    pub block_size: usize,
    pub arms: Vec<String>,
    pub points: Vec<usize>,
    /// Where stock vLLM's calls per minute peak.
    pub knee: Option<usize>,
    /// The last point where stock vLLM still hits at least 90 % of what it hits at the lowest
    /// point: where its cache still holds the working set. With sessions arriving open-loop
    /// (`--axis concurrency`, `users`) calls per minute keep creeping up with the arrivals past
    /// the cache's knee; then this is the knee the ratios below are taken at.
    pub hit_knee: Option<usize>,
    pub cells: Vec<Cell>,
    /// Each arm's calls/min and hit rate against stock vLLM's and ThunderAgent's at 2× and 4×
    /// the knee (the first point at or past each).
    pub past_knee: Vec<PastKnee>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PastKnee {
    pub times_knee: f64,
    pub concurrency: usize,
    pub arm: String,
    pub calls_vs_vllm: f64,
    pub calls_vs_thunderagent: Option<f64>,
    pub hit_rate: f64,
}

impl Report {
    fn new(
        workload: &str,
        axis: Axis,
        blocks: usize,
        arms: &[AdmissionArm],
        points: &[usize],
        cells: Vec<Cell>,
    ) -> Self {
        let get = |c: usize, arm: &str| cells.iter().find(|x| x.concurrency == c && x.arm == arm);
        let knee = points
            .iter()
            .filter_map(|&c| get(c, "vllm").map(|x| (c, x.figures.calls_per_min)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(c, _)| c);
        let plateau = points.first().and_then(|&c| get(c, "vllm")).map(|x| x.figures.hit_rate);
        let hit_knee = plateau.and_then(|plateau| {
            points
                .iter()
                .take_while(|&&c| get(c, "vllm").is_some_and(|x| x.figures.hit_rate >= 0.9 * plateau))
                .last()
                .copied()
        });
        let ratios_at = match knee {
            Some(k) if Some(&k) == points.last() => hit_knee,
            k => k,
        };
        let mut past_knee = Vec::new();
        if let Some(k) = ratios_at {
            for times in [2.0, 4.0] {
                let Some(&c) = points.iter().find(|&&c| c as f64 >= times * k as f64) else {
                    continue;
                };
                let (Some(stock), ta) = (get(c, "vllm"), get(c, "thunderagent")) else {
                    continue;
                };
                for arm in arms {
                    let Some(x) = get(c, &arm.name()) else { continue };
                    past_knee.push(PastKnee {
                        times_knee: times,
                        concurrency: c,
                        arm: arm.name(),
                        calls_vs_vllm: x.figures.calls_per_min / stock.figures.calls_per_min.max(1e-9),
                        calls_vs_thunderagent: ta.map(|t| x.figures.calls_per_min / t.figures.calls_per_min.max(1e-9)),
                        hit_rate: x.figures.hit_rate,
                    });
                }
            }
        }
        Self {
            workload: workload.to_string(),
            axis,
            capacity_blocks: blocks,
            block_size: BLOCK_SIZE,
            arms: arms.iter().map(AdmissionArm::name).collect(),
            points: points.to_vec(),
            knee,
            hit_knee,
            cells,
            past_knee,
        }
    }

    /// The Markdown table: a row per (point, arm).
    pub fn table(&self) -> String {
        let mut md = format!(
            "{}: {:?} {:?}, cache {} blocks ({} k tokens). Calls/min and output tok/s while sessions keep starting; \
             TTFT and first response from when a call is issued (proxy wait included); WS = live sessions' contexts \
             / cache, resident = what the arm kept admitted / cache.\n\n\
             | {:?} | arm | calls/min | out tok/s | hit % | TTFT p50 s | TTFT p99 s | session s | first resp. p50 s | p99 s | WS/cache | resident/cache | util | preempt. | held |\n\
             |---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
            self.workload,
            self.axis,
            self.points,
            self.capacity_blocks,
            self.capacity_blocks * self.block_size / 1000,
            self.axis
        );
        for c in &self.cells {
            let f = &c.figures;
            md.push_str(&format!(
                "| {} | {} | {:.0} | {:.0} | {:.1} | {:.2} | {:.2} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {} |\n",
                c.concurrency,
                c.arm,
                f.calls_per_min,
                f.output_tok_s,
                f.hit_rate * 100.0,
                f.ttft_p50_ms / 1e3,
                f.ttft_p99_ms / 1e3,
                f.session_s_mean,
                f.first_response_p50_ms / 1e3,
                f.first_response_p99_ms / 1e3,
                f.working_set_over_cache,
                f.resident_over_cache,
                f.utilisation,
                f.preemptions,
                f.stage.as_ref().map_or("–".into(), |s| s.sessions_held.to_string()),
            ));
        }
        match (self.knee, self.hit_knee) {
            (Some(k), Some(h)) => md.push_str(&format!(
                "\nStock vLLM's knee: calls/min peak at {k}; its hit rate holds (≥ 90 % of the first point's) up to {h}.\n"
            )),
            (Some(k), None) => md.push_str(&format!("\nStock vLLM's knee (calls/min peak): {k}.\n")),
            _ => md.push_str("\nNo stock vLLM run: no knee.\n"),
        }
        for p in &self.past_knee {
            md.push_str(&format!(
                "- {}× the knee ({}): {} {:.2}× vLLM's calls/min{}, hit {:.1} %\n",
                p.times_knee,
                p.concurrency,
                p.arm,
                p.calls_vs_vllm,
                p.calls_vs_thunderagent
                    .map_or(String::new(), |t| format!(", {t:.2}× ThunderAgent's")),
                p.hit_rate * 100.0
            ));
        }
        md
    }

    fn write(&self, a: &KneeArgs, wall_s: f64) -> anyhow::Result<()> {
        std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
        let md = self.table();
        print!("{md}");
        println!("{} replays in {wall_s:.0} s", self.cells.len());
        std::fs::write(a.out.join("table.md"), &md)?;
        std::fs::write(a.out.join("results.json"), serde_json::to_string_pretty(self)?)?;
        let svg = self.plot();
        std::fs::write(a.out.join("knee.svg"), &svg)?;
        crate::png::write_png(&svg, &a.out.join("knee.png"))?;
        println!("results → {} (results.json, table.md, knee.svg/.png)", a.out.display());
        Ok(())
    }

    /// Two panels: calls per minute and hit rate against concurrency, a line per arm.
    pub fn plot(&self) -> String {
        let series = |f: &dyn Fn(&Figures) -> f64| -> Vec<Vec<f64>> {
            self.arms
                .iter()
                .map(|arm| {
                    self.points
                        .iter()
                        .map(|&c| {
                            self.cells
                                .iter()
                                .find(|x| x.concurrency == c && &x.arm == arm)
                                .map_or(0.0, |x| f(&x.figures))
                        })
                        .collect()
                })
                .collect()
        };
        let calls = series(&|f| f.calls_per_min);
        let hits = series(&|f| f.hit_rate);
        let top = calls.iter().flatten().copied().fold(0.0, f64::max);
        let axes = [
            crate::plot::YAxis::up_to("LLM calls per minute", top),
            crate::plot::YAxis::hit_rate(),
        ];
        crate::plot::measure_panels(
            &format!(
                "{}: past the knee ({} k-token cache)",
                self.workload,
                self.capacity_blocks * self.block_size / 1000
            ),
            &format!("{:?}", self.axis).to_lowercase(),
            &["calls per minute".to_string(), "prompt hit rate".to_string()],
            &axes,
            &self.arms,
            &[self.points.clone(), self.points.clone()],
            &[calls, hits],
        )
    }
}

//! `agentrt sim`: generate traces, replay one under every policy, or run the whole evaluation
//! table. The `agentrt` binary only forwards to [`run`].

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use agentrt_runtime::{ComponentLookup, Share, SlowCompileNotice};
use anyhow::Context;
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};

use crate::audit::EvictionAudit;
use crate::harness::{default_policies, run_all, PolicyHost, PolicySpec};
use crate::latency::{GpuMemory, LatencyModel};
use crate::policies::Rerank;
use crate::policy_limits::PolicyLimitArgs;
use crate::prepare::PreparedTrace;
use crate::report::{markdown_rows, regret_table, run_json, summarize, table, PolicySummary, MARKDOWN_HEADER};
use crate::scheduler::{OpLog, Sim, SimConfig};
use crate::trace::Trace;
use crate::workloads::fleet::FleetParams;
use crate::workloads::{generate, GenParams, Workload};

/// Default ranking refresh period (ms of simulated time).
pub const DEFAULT_RERANK_MS: f64 = 100.0;

/// vLLM's default block size on CUDA.
pub const BLOCK_SIZE: usize = 16;

/// The simulator: a vLLM-faithful prefix-cache model, multi-agent workloads, the evaluation table.
#[derive(Args, Debug)]
pub struct SimArgs {
    #[command(subcommand)]
    pub command: SimCommand,
}

#[derive(Subcommand, Debug)]
pub enum SimCommand {
    /// Generate a workload trace (JSON Lines).
    Gen(GenArgs),
    /// Convert a public trace (kv-cache-tester, Mooncake, Bailian) to the trace format.
    Import(crate::import::ImportArgs),
    /// Replay one trace under every policy and report.
    Run(RunArgs),
    /// All six workloads at the headline setting plus a capacity sweep: table, JSON, plots.
    Table(TableArgs),
    /// The many-application workload over fleet sizes and anchor scales: table, JSON, plot.
    FleetSweep(crate::fleet_sweep::FleetSweepArgs),
    /// An agent tenant next to a tenant flooding unique long prompts, with and without cache
    /// shares: table, JSON, plot.
    NoisyNeighbour(crate::noisy_neighbour::NoisyNeighbourArgs),
    /// One session flooding from several clients next to a session of short calls, without and
    /// with a fair-share slot under vLLM's priority scheduling: the light session's TTFT.
    SessionFlood(crate::session_flood::SessionFloodArgs),
}

#[derive(Args, Debug)]
pub struct GenArgs {
    #[arg(long, value_enum)]
    pub workload: Workload,
    /// Sessions (default: the headline setting's).
    #[arg(long)]
    pub sessions: Option<usize>,
    /// Target concurrently active sessions (sets the arrival rate).
    #[arg(long)]
    pub concurrency: Option<f64>,
    /// Session arrivals per second (overrides --concurrency).
    #[arg(long)]
    pub rate: Option<f64>,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    #[command(flatten)]
    pub fleet: FleetArgs,
    #[arg(long)]
    pub out: PathBuf,
}

/// Settings of the `fleet` workload (many agent applications sharing one engine).
#[derive(Args, Debug, Clone)]
pub struct FleetArgs {
    /// fleet: agent applications sharing the engine.
    #[arg(long, default_value_t = FleetParams::default().applications)]
    pub applications: usize,
    /// fleet: multiplier on every anchor's size.
    #[arg(long, default_value_t = FleetParams::default().anchor_scale)]
    pub anchor_scale: f64,
    /// fleet: Zipf exponent of application popularity.
    #[arg(long, default_value_t = FleetParams::default().zipf)]
    pub zipf: f64,
}

impl FleetArgs {
    pub fn params(&self) -> FleetParams {
        FleetParams {
            applications: self.applications,
            anchor_scale: self.anchor_scale,
            zipf: self.zipf,
        }
    }
}

#[derive(Args, Debug)]
pub struct ReplayOptions {
    /// Identify agents by anchor hashing alone (hide the trace's `agent` field).
    #[arg(long)]
    pub hide_agents: bool,
    /// Refresh a Wasm policy's ranking of the free queue at most every this many milliseconds of
    /// simulated time (0 = every scheduler step). See docs/simulator.md for the measured effect.
    #[arg(long, default_value_t = DEFAULT_RERANK_MS)]
    pub rerank_ms: f64,
    /// Look for policy components only in this folder — but for the baseline `lru`, which comes
    /// built into agentrt when the folder has none (default: `$AGENTRT_COMPONENTS_DIR`, beside the
    /// binary, built into it, then the source tree's build). A policy may also be named by a path
    /// ending in `.wasm`.
    #[arg(long)]
    pub components: Option<PathBuf>,
    #[command(flatten)]
    pub limits: PolicyLimitArgs,
    #[command(flatten)]
    pub session_ends: crate::conditions::SessionEndArgs,
}

impl ReplayOptions {
    /// The engine settings of a replay of `blocks` blocks under these options.
    pub fn config(&self, blocks: usize) -> anyhow::Result<SimConfig> {
        let mut cfg = SimConfig::new(blocks);
        cfg.session_ends = self.session_ends.rule()?;
        Ok(cfg)
    }

    /// Where components are found: `--components` (and the built-in baseline) when given, else
    /// `default`.
    pub(crate) fn components(&self, default: &ComponentLookup) -> ComponentLookup {
        match &self.components {
            Some(dir) => default.given_folder(dir.clone()),
            None => default.clone(),
        }
    }

    /// The host that loads and starts the replay's policies, under the limits of the flags; a
    /// long first compile is announced on stderr.
    pub(crate) fn host(&self, default: &ComponentLookup) -> anyhow::Result<PolicyHost> {
        PolicyHost::with_limits(
            self.components(default),
            self.limits.limits()?,
            Some(SlowCompileNotice::stderr()),
        )
    }

    pub(crate) fn rerank(&self) -> Rerank {
        if self.rerank_ms <= 0.0 {
            Rerank::EveryStep
        } else {
            Rerank::EveryMs(self.rerank_ms)
        }
    }
}

#[derive(Args, Debug)]
pub struct RunArgs {
    #[arg(long)]
    pub trace: PathBuf,
    /// Cache size in blocks (vLLM's num_gpu_blocks; default: the headline H100 setting).
    #[arg(long, conflicts_with = "capacity_fraction")]
    pub capacity_blocks: Option<usize>,
    /// Cache size as a fraction of the trace's distinct prompt blocks (e.g. 0.05).
    #[arg(long)]
    pub capacity_fraction: Option<f64>,
    #[command(flatten)]
    pub load: crate::conditions::LoadArgs,
    /// Comma-separated policies (lru, ttl, cachesage, cachesage-evict, belady, lru-native, or a
    /// component name); a Wasm one may carry `init` settings as `:key=value`, e.g.
    /// `cachesage:w=8,cachesage:k=2` compares two variants in one run.
    #[arg(long, value_delimiter = ',')]
    pub policies: Option<Vec<String>>,
    /// Write every figure as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Record every eviction of every policy here (JSON Lines: policy, time, agent, session, kind
    /// of content, and when a later request asked for it again) and print where each policy's
    /// misses come from; `--json` then carries each policy's `regret` figures too.
    #[arg(long)]
    pub eviction_log: Option<PathBuf>,
    /// Replay under native LRU and write the block-pool operations for sim/fidelity/ here.
    #[arg(long)]
    pub op_log: Option<PathBuf>,
    /// `TENANT=MIN_BLOCKS[:MAX_BLOCKS]` (repeatable): the tenant's cache share — a guarantee and
    /// a limit. With any share, each tenant runs its own instance of each policy over its own
    /// blocks, and the tenant furthest past its limit, else above its guarantee, gives up the
    /// next victim (tenants not named: no guarantee, no limit). `--json` has per-tenant figures
    /// either way.
    #[arg(long = "share", value_name = "TENANT=MIN[:MAX]", value_parser = agentrt_runtime::parse_tenant_share)]
    pub shares: Vec<(String, Share)>,
    /// Replicas, each with --capacity-blocks of cache and its own instance of the policy, behind
    /// --router (docs/replicas.md).
    #[arg(long, default_value_t = 1)]
    pub replicas: usize,
    /// The router in front of several replicas: round-robin, session (sticky hashing), kv
    /// (Dynamo's KV-aware cost), agentrt (kv plus agentrt's anchor hint).
    #[arg(long, value_enum, default_value = "kv")]
    pub router: crate::router_model::RouterKind,
    #[command(flatten)]
    pub slots: SlotArgs,
    #[command(flatten)]
    pub replay: ReplayOptions,
}

/// Policy slots beside the cache policy, with `serve`'s flag names (docs/policy-slots.md).
#[derive(Args, Debug, Clone, Default)]
pub struct SlotArgs {
    /// `NAME=COMPONENT` (repeatable): a policy slot beside each replayed policy (e.g.
    /// `fair=fair-share`): it hears every request event and answers through side effects, merged
    /// as `serve` merges them.
    #[arg(long = "slot", value_name = "NAME=COMPONENT")]
    pub slots: Vec<String>,
    /// `NAME:KEY=VALUE` (repeatable): passed to slot NAME's `init`.
    #[arg(long = "slot-config", value_name = "NAME:KEY=VALUE")]
    pub slot_configs: Vec<String>,
    /// Model vLLM's priority scheduling (`--scheduling-policy priority`) with the slots'
    /// `set-priority` demotions sent as request priorities, as `serve --engine-priorities` does.
    #[arg(long)]
    pub engine_priorities: bool,
}

impl SlotArgs {
    /// The slots in order, each a component with its `init` settings.
    pub fn slots(&self) -> anyhow::Result<Vec<(String, PolicySpec)>> {
        let mut slots: Vec<(String, PolicySpec)> = Vec::new();
        for option in &self.slots {
            let (name, component) = option
                .split_once('=')
                .filter(|(n, c)| !n.is_empty() && !c.is_empty())
                .with_context(|| format!("--slot {option:?}: expected NAME=COMPONENT"))?;
            anyhow::ensure!(name != "kv", "--slot {option:?}: `kv` is the replayed policy's slot");
            anyhow::ensure!(
                !slots.iter().any(|(n, _)| n == name),
                "--slot: slot `{name}` is given twice"
            );
            slots.push((
                name.to_string(),
                PolicySpec::Wasm {
                    name: name.to_string(),
                    component: component.to_string(),
                    init: Vec::new(),
                },
            ));
        }
        for option in &self.slot_configs {
            let (slot, key, value) = agentrt_runtime::parse_slot_config(option).map_err(anyhow::Error::msg)?;
            let Some((_, PolicySpec::Wasm { init, .. })) = slots.iter_mut().find(|(n, _)| n == slot) else {
                anyhow::bail!("--slot-config names slot `{slot}`, which no --slot gives");
            };
            init.push((key.to_string(), value.to_string()));
        }
        Ok(slots)
    }

    /// Set the slots and the scheduling of `cfg`.
    pub fn apply(&self, cfg: &mut SimConfig) -> anyhow::Result<()> {
        cfg.slots = self.slots()?;
        cfg.engine_priorities = self.engine_priorities;
        Ok(())
    }
}

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
    /// Parallel replays (one per core).
    #[arg(long, default_value_t = 2)]
    pub jobs: usize,
    /// Where results.json, the SVG plots and table.md go.
    #[arg(long, default_value = "target/sim-table")]
    pub out: PathBuf,
    #[command(flatten)]
    pub replay: ReplayOptions,
}

/// Run a `sim` command; `components` finds Wasm policies by name.
pub fn run(args: SimArgs, components: &ComponentLookup) -> anyhow::Result<()> {
    match args.command {
        SimCommand::Gen(a) => gen(a),
        SimCommand::Import(a) => crate::import::run(a),
        SimCommand::Run(a) => run_trace(a, components),
        SimCommand::Table(a) => run_table(a, components),
        SimCommand::FleetSweep(a) => crate::fleet_sweep::run(a, components),
        SimCommand::NoisyNeighbour(a) => crate::noisy_neighbour::run(a, components),
        SimCommand::SessionFlood(a) => crate::session_flood::run(a, components),
    }
}

/// The headline cache: Llama-3.1-8B on one 80 GB H100 with vLLM's defaults.
pub fn headline_blocks() -> usize {
    GpuMemory::h100_80gb_llama31_8b().num_blocks()
}

fn gen(a: GenArgs) -> anyhow::Result<()> {
    let mut params = a.workload.headline();
    params.sessions = a.sessions.unwrap_or(params.sessions);
    params.concurrency = a.concurrency.unwrap_or(params.concurrency);
    params.rate = a.rate;
    params.seed = a.seed;
    params.fleet = a.fleet.params();
    let trace = generate(a.workload, &params);
    trace.save(&a.out)?;
    println!(
        "{}: {} sessions, {} requests, {} prompt tokens → {}",
        a.workload.name(),
        params.sessions,
        trace.requests.len(),
        trace.requests.iter().map(|r| u64::from(r.prompt_tokens())).sum::<u64>(),
        a.out.display()
    );
    Ok(())
}

pub(crate) fn progress(total: u64) -> ProgressBar {
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} replays  {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar
}

fn run_trace(a: RunArgs, components: &ComponentLookup) -> anyhow::Result<()> {
    let trace = Trace::load(&a.trace)?;
    let prepared = PreparedTrace::new(&trace, BLOCK_SIZE, a.replay.hide_agents);
    let blocks = match a.capacity_fraction {
        Some(f) => crate::conditions::capacity_of(&prepared, f)?,
        None => a.capacity_blocks.unwrap_or_else(headline_blocks),
    };
    let mut cfg = a.replay.config(blocks)?;
    let load = a.load.settle(&prepared, &mut cfg, |scale, u| {
        eprintln!("  arrival scale {scale:.3}: LRU utilisation {:.0} %", u * 100.0)
    })?;
    if !a.shares.is_empty() {
        cfg.shares = Some(a.shares.clone());
    }
    a.slots.apply(&mut cfg)?;
    anyhow::ensure!(
        a.replicas <= 1 || cfg.slots.is_empty(),
        "--slot is not modelled with several replicas yet"
    );
    if let Some(path) = &a.op_log {
        let file = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        let mut lru = crate::policies::NativeLru;
        let ops = OpLog {
            trace: &trace,
            out: Box::new(std::io::BufWriter::new(file)),
        };
        let result = Sim::new(cfg.clone(), &prepared, &mut lru).with_op_log(ops).run()?;
        println!(
            "lru-native: {} hit tokens of {} ({:.2}%), op log → {}",
            result.hit_tokens,
            result.prompt_tokens,
            result.hit_rate() * 100.0,
            path.display()
        );
        if a.policies.is_none() && a.json.is_none() {
            return Ok(());
        }
    }
    let policies: Vec<PolicySpec> = match &a.policies {
        Some(names) => names.iter().map(|n| PolicySpec::parse(n)).collect(),
        None => default_policies(),
    };
    let host = a.replay.host(components)?;
    host.preload(&policies)?;
    let bar = progress(policies.len() as u64);
    let audit = a.eviction_log.is_some();
    let step = |r: &crate::scheduler::RunResult| {
        bar.set_message(format!("{} done", r.policy));
        bar.inc(1);
    };
    let results = if a.replicas > 1 {
        let rerank = a.replay.rerank();
        crate::replicas::run_all(
            &host,
            &prepared,
            &cfg,
            &policies,
            rerank,
            crate::replicas::ReplicaSetup {
                replicas: a.replicas,
                router: a.router,
            },
            step,
        )?
    } else {
        run_all(&host, &prepared, &cfg, &policies, a.replay.rerank(), audit, step)?
    };
    bar.finish_and_clear();
    let summaries = summarize(&results);
    println!(
        "{}: {} sessions, {} requests, cache {} blocks × {} tokens, {}, session ends {}{}",
        a.trace.display(),
        prepared.sessions.len(),
        prepared.requests.len(),
        blocks,
        BLOCK_SIZE,
        load.describe(),
        cfg.session_ends.name(),
        if a.replicas > 1 {
            format!(
                " on each of {} replicas behind the {} router",
                a.replicas,
                a.router.name()
            )
        } else {
            String::new()
        }
    );
    print!("{}", table(&summaries));
    print!("{}", crate::report::tenant_table(&summaries));
    if cfg.engine_priorities {
        println!(
            "\npriority scheduling (--engine-priorities), slots: {}",
            a.slots.slots.join(", ")
        );
        for (name, s) in &summaries {
            println!(
                "  {name}: {} set-priority carried out, {} requests arrived demoted",
                s.priorities_set, s.demoted_requests
            );
        }
    }
    if let Some(path) = &a.eviction_log {
        let audits: Vec<&EvictionAudit> = results.iter().filter_map(|r| r.audit.as_ref()).collect();
        write_eviction_log(path, &prepared, &audits)?;
        print!("\n{}", regret_table(&prepared, &audits));
        println!("every eviction → {}", path.display());
    }
    if let Some(path) = &a.json {
        let mut json = run_json(&a.trace.display().to_string(), blocks, BLOCK_SIZE, &summaries);
        json["time_scale"] = serde_json::json!(load.time_scale);
        json["arrival_scale"] = serde_json::json!(load.arrival_scale);
        json["lru_utilisation_target_probe"] = serde_json::json!(load.lru_utilisation);
        json["session_ends"] = serde_json::json!(cfg.session_ends.name());
        if a.replicas > 1 {
            json["replicas"] = serde_json::json!(a.replicas);
            json["router"] = serde_json::json!(a.router.name());
        }
        std::fs::write(path, serde_json::to_string_pretty(&json)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn write_eviction_log(path: &Path, trace: &PreparedTrace, audits: &[&EvictionAudit]) -> anyhow::Result<()> {
    let file = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut out = std::io::BufWriter::new(file);
    for audit in audits {
        audit.write_jsonl(trace, &mut out)?;
    }
    out.flush().with_context(|| format!("writing {}", path.display()))
}

/// The summaries of one (workload index, capacity, is-headline) unit.
type UnitResult = (usize, usize, bool, Vec<(String, PolicySummary)>);

/// One (workload, capacity) replay unit of the table.
struct Unit {
    workload: usize,
    blocks: usize,
    headline: bool,
}

fn run_table(a: TableArgs, components: &ComponentLookup) -> anyhow::Result<()> {
    let started = Instant::now();
    let workloads = a.workloads.clone().unwrap_or_else(|| Workload::ALL.to_vec());
    let scale = if a.quick { 8 } else { 1 };
    let headline = headline_blocks() / scale;
    let sweep = a
        .sweep
        .clone()
        .unwrap_or_else(|| if a.quick { vec![0.5, 2.0] } else { vec![0.25, 0.5] });
    let policies = default_policies();
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
    let bar = progress((units.len() * policies.len()) as u64);
    let mut results: Vec<UnitResult> = crate::parallel::run_units(a.jobs, units, |unit| {
        let trace = &traces[unit.workload];
        let cfg = a.replay.config(unit.blocks)?;
        let name = workloads[unit.workload].name();
        let runs = run_all(&host, trace, &cfg, &policies, a.replay.rerank(), false, |r| {
            bar.set_message(format!("{name} @ {} blocks: {}", unit.blocks, r.policy));
            bar.inc(1);
        })
        .with_context(|| format!("{name} @ {} blocks", unit.blocks))?;
        Ok((unit.workload, unit.blocks, unit.headline, summarize(&runs)))
    })?;
    bar.finish_and_clear();
    results.sort_by_key(|(w, b, _, _)| (*w, *b));
    let wall = started.elapsed().as_secs_f64();
    write_table_outputs(
        &a,
        &workloads,
        &params_used,
        &traces,
        &results,
        &policies,
        headline,
        wall,
    )
}

#[allow(clippy::too_many_arguments)]
fn write_table_outputs(
    a: &TableArgs,
    workloads: &[Workload],
    params: &[GenParams],
    traces: &[PreparedTrace],
    results: &[UnitResult],
    policies: &[PolicySpec],
    headline: usize,
    wall: f64,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let names: Vec<String> = policies.iter().map(|p| p.name().to_string()).collect();
    let wnames: Vec<String> = workloads.iter().map(|w| w.name().to_string()).collect();
    let mut md = String::new();
    let mut json_workloads = serde_json::Map::new();
    let mut bars = Vec::new();
    let mut caps = Vec::new();
    let mut series = Vec::new();
    md.push_str(MARKDOWN_HEADER);
    for (wi, w) in workloads.iter().enumerate() {
        let mine: Vec<_> = results.iter().filter(|r| r.0 == wi).collect();
        let head = mine
            .iter()
            .find(|r| r.2)
            .map(|r| &r.3)
            .context("headline run missing")?;
        println!(
            "\n== {} — {} sessions, {} requests, {:.1} M prompt tokens; cache {} blocks ({} k tokens)",
            w.name(),
            traces[wi].sessions.len(),
            traces[wi].requests.len(),
            traces[wi].prompt_tokens() as f64 / 1e6,
            headline,
            headline * BLOCK_SIZE / 1000
        );
        print!("{}", table(head));
        md.push_str(&markdown_rows(w.name(), head));
        bars.push(
            names
                .iter()
                .map(|n| head.iter().find(|(p, _)| p == n).map_or(0.0, |(_, s)| s.hit_rate))
                .collect(),
        );
        let points: Vec<_> = mine.iter().map(|r| (r.1, &r.3)).collect();
        caps.push(points.iter().map(|(b, _)| *b).collect());
        series.push(
            names
                .iter()
                .map(|n| {
                    points
                        .iter()
                        .map(|(_, s)| s.iter().find(|(p, _)| p == n).map_or(0.0, |(_, x)| x.hit_rate))
                        .collect()
                })
                .collect(),
        );
        let sweep: Vec<_> = mine.iter().map(|r| run_json(w.name(), r.1, BLOCK_SIZE, &r.3)).collect();
        json_workloads.insert(
            w.name().to_string(),
            serde_json::json!({
                "generator": params[wi],
                "sessions": traces[wi].sessions.len(),
                "requests": traces[wi].requests.len(),
                "prompt_tokens": traces[wi].prompt_tokens(),
                "headline": run_json(w.name(), headline, BLOCK_SIZE, head),
                "sweep": sweep,
            }),
        );
    }
    // The targets, over the sweep.
    let mut verdict = String::from("\nCacheSage vs the targets (all capacities of each workload):\n");
    for (wi, w) in workloads.iter().enumerate() {
        let mine: Vec<_> = results.iter().filter(|r| r.0 == wi).collect();
        let get = |r: &Vec<(String, PolicySummary)>, n: &str| r.iter().find(|(p, _)| p == n).map(|(_, s)| s.clone());
        let gaps: Vec<f64> = mine
            .iter()
            .filter_map(|r| get(&r.3, "cachesage").and_then(|s| s.gap_closed))
            .collect();
        let worst = mine
            .iter()
            .filter_map(|r| get(&r.3, "cachesage").and_then(|s| s.delta_pp_vs_lru))
            .fold(f64::INFINITY, f64::min);
        let head = mine
            .iter()
            .find(|r| r.2)
            .and_then(|r| get(&r.3, "cachesage"))
            .and_then(|s| s.delta_pp_vs_lru);
        verdict.push_str(&format!(
            "  {:<10} headline Δ {:>6} pp   mean gap closed {:>5}   worst Δ {:>6} pp\n",
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
    print!("{verdict}");
    println!("\n{} replays in {:.1} s", results.len() * policies.len(), wall);

    let memory = GpuMemory::h100_80gb_llama31_8b();
    let json = serde_json::json!({
        "quick": a.quick,
        "hide_agents": a.replay.hide_agents,
        "rerank_ms": a.replay.rerank_ms,
        "session_ends": a.replay.config(1)?.session_ends.name(),
        "block_size": BLOCK_SIZE,
        "headline_capacity_blocks": headline,
        "gpu_memory": memory,
        "kv_tokens": memory.kv_tokens(),
        "latency_model": LatencyModel::default(),
        "engine": {"max_num_seqs": SimConfig::new(1).max_num_seqs, "max_batched_tokens": SimConfig::new(1).max_batched_tokens},
        "wall_s": wall,
        "workloads": json_workloads,
    });
    let json_path = a.out.join("results.json");
    std::fs::write(&json_path, serde_json::to_string_pretty(&json)?)?;
    std::fs::write(
        a.out.join("table.md"),
        format!("{md}{}", verdict.replace("\n  ", "\n    ")),
    )?;
    let title = format!("Token hit rate at the headline cache ({} blocks)", headline);
    let plots = [
        ("hit-rate", crate::plot::hit_rate_bars(&title, &wnames, &names, &bars)),
        (
            "capacity",
            crate::plot::capacity_lines("Token hit rate against cache capacity", &wnames, &names, &caps, &series),
        ),
    ];
    for (stem, svg) in &plots {
        std::fs::write(a.out.join(format!("{stem}.svg")), svg)?;
        crate::png::write_png(svg, &a.out.join(format!("{stem}.png")))?;
    }
    println!(
        "results → {} (results.json, table.md, hit-rate.svg/.png, capacity.svg/.png)",
        a.out.display()
    );
    Ok(())
}

//! `agentrt sim`: the subcommands and their dispatch; `gen` writes a workload trace. The
//! experiments live in [`crate::experiments`]; the `agentrt` binary only forwards to [`run`].

use std::path::PathBuf;

use agentrt_runtime::ComponentLookup;
use clap::{Args, Subcommand};

use crate::options::FleetArgs;
use crate::workloads::{generate, Workload};

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
    Run(Box<crate::experiments::run::RunArgs>),
    /// All six workloads at the headline setting plus a capacity sweep: table, JSON, plots.
    Table(crate::experiments::table::TableArgs),
    /// The many-application workload over fleet sizes and anchor scales: table, JSON, plot.
    FleetSweep(crate::experiments::fleet_sweep::FleetSweepArgs),
    /// An agent tenant next to a tenant flooding unique long prompts, with and without cache
    /// shares: table, JSON, plot.
    NoisyNeighbour(crate::experiments::noisy_neighbour::NoisyNeighbourArgs),
    /// One session flooding from several clients next to a session of short calls, without and
    /// with a fair-share slot under vLLM's priority scheduling: the light session's TTFT.
    SessionFlood(crate::experiments::session_flood::SessionFloodArgs),
    /// One workload at rising concurrency behind every admission arm (stock vLLM, agentrt's
    /// request cap, ThunderAgent, Continuum): calls/min, hit rate, latency; the knee; a plot.
    Knee(Box<crate::experiments::knee::KneeArgs>),
}

#[derive(Args, Debug)]
pub struct GenArgs {
    /// Which of the six multi-agent workloads to generate (docs/workloads.md).
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
    /// Seed of the generator: the same seed and flags give the same trace.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    #[command(flatten)]
    pub fleet: FleetArgs,
    /// Where to write the trace (JSON Lines, the input of `sim run --trace`).
    #[arg(long)]
    pub out: PathBuf,
}

/// Run a `sim` command; `components` finds Wasm policies by name.
pub fn run(args: SimArgs, components: &ComponentLookup) -> anyhow::Result<()> {
    match args.command {
        SimCommand::Gen(a) => gen(a),
        SimCommand::Import(a) => crate::import::run(a),
        SimCommand::Run(a) => crate::experiments::run::run(*a, components),
        SimCommand::Table(a) => crate::experiments::table::run(a, components),
        SimCommand::FleetSweep(a) => crate::experiments::fleet_sweep::run(a, components),
        SimCommand::NoisyNeighbour(a) => crate::experiments::noisy_neighbour::run(a, components),
        SimCommand::SessionFlood(a) => crate::experiments::session_flood::run(a, components),
        SimCommand::Knee(a) => crate::experiments::knee::run(*a, components),
    }
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

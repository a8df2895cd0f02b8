//! `agentrt sim run`: one trace under every policy — a table, per-tenant figures, optionally
//! JSON, an eviction log with where each policy's misses came from, or vLLM block-pool
//! operations for sim/fidelity/.

use std::io::Write;
use std::path::{Path, PathBuf};

use agentrt_runtime::{ComponentLookup, Share};
use anyhow::Context;
use clap::Args;

use crate::audit::EvictionAudit;
use crate::conditions::FittedCapacity;
use crate::harness::{default_policies, run_all};
use crate::options::{ReplayOptions, SlotArgs};
use crate::policies::{policies_help, PolicySpec};
use crate::prepare::PreparedTrace;
use crate::progress::Progress;
use crate::report::{legend_text, regret_table, run_json, summarize, table, PolicySummary};
use crate::scheduler::{OpLog, RunResult, Sim, SimConfig};
use crate::setting::BLOCK_SIZE;
use crate::trace::Trace;

/// The heading `sim run --help` starts with: the flags a first replay needs.
pub const START_HERE: &str = "Start here (a first replay)";

#[derive(Args, Debug)]
pub struct RunArgs {
    /// The trace to replay (JSON Lines, from `sim gen` or `sim import`).
    #[arg(help_heading = START_HERE, long)]
    pub trace: PathBuf,
    /// Cache size in blocks (vLLM's num_gpu_blocks). Default: sized from the trace, a third of
    /// the distinct blocks it touches, so that the engine must evict; the headline H100 setting
    /// of docs/results.md is `--capacity-blocks 28323`.
    #[arg(help_heading = START_HERE, long, conflicts_with = "capacity_fraction")]
    pub capacity_blocks: Option<usize>,
    /// Cache size as a fraction of the trace's distinct prompt blocks (e.g. 0.05).
    #[arg(help_heading = START_HERE, long)]
    pub capacity_fraction: Option<f64>,
    #[command(flatten, next_help_heading = "Load")]
    pub load: crate::conditions::LoadArgs,
    #[arg(help_heading = START_HERE, long, value_delimiter = ',', help = policies_help(
        "Comma-separated policies (default: the evaluation's seven; closed-first is LRU with the \
         closed sessions' blocks first, which hears `--hints`)."
    ))]
    pub policies: Option<Vec<String>>,
    /// Write every figure as JSON here.
    #[arg(help_heading = START_HERE, long)]
    pub json: Option<PathBuf>,
    /// Record every eviction of every policy here (JSON Lines: policy, time, agent, session, kind
    /// of content, and when a later request asked for it again) and print where each policy's
    /// misses come from; `--json` then carries each policy's `regret` figures too.
    #[arg(help_heading = "Output", long)]
    pub eviction_log: Option<PathBuf>,
    /// Replay under native LRU and write the block-pool operations for sim/fidelity/ here.
    #[arg(help_heading = "Output", long)]
    pub op_log: Option<PathBuf>,
    /// `TENANT=MIN_BLOCKS[:MAX_BLOCKS]` (repeatable): the tenant's cache share — a guarantee and
    /// a limit. With any share, each tenant runs its own instance of each policy over its own
    /// blocks, and the tenant furthest past its limit, else above its guarantee, gives up the
    /// next victim (tenants not named: no guarantee, no limit). `--json` has per-tenant figures
    /// either way.
    #[arg(help_heading = "Tenants and replicas", long = "share", value_name = "TENANT=MIN[:MAX]", value_parser = agentrt_runtime::parse_tenant_share)]
    pub shares: Vec<(String, Share)>,
    /// Replicas, each with --capacity-blocks of cache and its own instance of the policy, behind
    /// --router (docs/replicas.md).
    #[arg(help_heading = "Tenants and replicas", long, default_value_t = 1)]
    pub replicas: usize,
    /// The router in front of several replicas: round-robin, session (sticky hashing), kv
    /// (Dynamo's KV-aware cost), agentrt (kv plus agentrt's anchor hint), cache-aware and
    /// kv-aware (vLLM's router, `--policy cache_aware` / `kv_aware`).
    #[arg(help_heading = "Tenants and replicas", long, value_enum, default_value = "kv")]
    pub router: crate::router_model::RouterKind,
    #[command(flatten, next_help_heading = "vLLM router (--router cache-aware, kv-aware)")]
    pub vllm_router: VllmRouterArgs,
    #[command(flatten, next_help_heading = "Policy slots")]
    pub slots: SlotArgs,
    #[command(flatten, next_help_heading = "Host-memory tier")]
    pub host_tier: HostTierArgs,
    #[command(flatten, next_help_heading = "Policy host")]
    pub replay: ReplayOptions,
}

/// vLLM router's `cache_aware` and `kv_aware` settings, its own flags and defaults (`vllm-router`
/// 0.1.17).
#[derive(Args, Debug, Clone)]
pub struct VllmRouterArgs {
    /// `--router cache-aware`: the share of a request its longest prefix in the router's tree
    /// must exceed to go where that prefix went (else to the least-loaded replica).
    #[arg(long, default_value_t = 0.3)]
    pub cache_threshold: f64,
    /// `--router cache-aware`: imbalance when the busiest replica has more than this many
    /// requests in flight beyond the idlest…
    #[arg(long, default_value_t = 64)]
    pub balance_abs_threshold: u32,
    /// …and more than this multiple of the idlest's; imbalanced, the least loaded is chosen.
    #[arg(long, default_value_t = 1.5)]
    pub balance_rel_threshold: f64,
    /// `--router cache-aware`: seconds between passes trimming the router's tree.
    #[arg(long, default_value_t = 120)]
    pub eviction_interval_secs: u64,
    /// `--router kv-aware`: bind each session to its first call's replica while it is idle at
    /// most this long (vLLM router's `--kv-aware-session-affinity-ttl-secs`); off when not given.
    #[arg(long)]
    pub kv_aware_session_affinity_ttl_secs: Option<u64>,
    /// `--router cache-aware`: characters of prompts the tree keeps per replica (blocks at four
    /// characters a token).
    #[arg(long, default_value_t = 1 << 25)]
    pub max_tree_size: u64,
}

impl VllmRouterArgs {
    /// `kind` with these settings.
    fn spec(&self, kind: crate::router_model::RouterKind) -> crate::router_model::RouterSpec {
        crate::router_model::RouterSpec {
            kind,
            cache_aware: self.cache_aware(),
            kv_affinity_ttl_ns: self
                .kv_aware_session_affinity_ttl_secs
                .map(|s| s.saturating_mul(1_000_000_000)),
        }
    }

    fn cache_aware(&self) -> crate::router_model::CacheAwareConfig {
        crate::router_model::CacheAwareConfig {
            cache_threshold: self.cache_threshold,
            balance_abs_threshold: self.balance_abs_threshold,
            balance_rel_threshold: self.balance_rel_threshold,
            eviction_interval_ns: self.eviction_interval_secs.saturating_mul(1_000_000_000),
            max_tree_chars: self.max_tree_size,
        }
    }
}

/// vLLM's host-memory tier (`--kv-offloading-size`; docs/hierarchy.md).
#[derive(Args, Debug, Clone)]
pub struct HostTierArgs {
    /// Host-memory KV tier of this many blocks (vLLM's OffloadingConnector CPU pool; Llama-3.1-8B:
    /// 2 MiB a block, so `--kv-offloading-size` GiB × 512). Off when not given.
    #[arg(long)]
    pub host_blocks: Option<usize>,
    /// The host pool's cache policy: vLLM's `lru` or `arc` (`eviction_policy`), or `policy`: the
    /// replay's own policy ranks the host pool's evictions and may decline stores (a 0.2
    /// component, or native LRU, leaves vLLM's `lru` order).
    #[arg(long, default_value = "lru", requires = "host_blocks")]
    pub host_policy: String,
    /// Host↔GPU bandwidth each way, GB/s (default: PCIe Gen5 x16 as measured on an H100 host).
    #[arg(long, default_value_t = crate::offload::connector::PCIE_GEN5_BYTES_PER_S / 1e9, requires = "host_blocks")]
    pub host_bandwidth_gbps: f64,
    /// Fixed cost per host↔GPU transfer, µs (default 0: no measured figure; docs/hierarchy.md).
    #[arg(long, default_value_t = 0.0, requires = "host_blocks")]
    pub host_latency_us: f64,
}

impl HostTierArgs {
    /// The host tier these flags ask for, if any.
    pub fn config(&self) -> anyhow::Result<Option<crate::offload::HostTierConfig>> {
        let Some(blocks) = self.host_blocks else {
            return Ok(None);
        };
        anyhow::ensure!(blocks > 0, "--host-blocks must be at least 1");
        anyhow::ensure!(
            self.host_bandwidth_gbps.is_finite() && self.host_bandwidth_gbps > 0.0,
            "--host-bandwidth-gbps must be a positive number, got {}",
            self.host_bandwidth_gbps
        );
        anyhow::ensure!(
            self.host_latency_us.is_finite() && self.host_latency_us >= 0.0,
            "--host-latency-us must be 0 or more, got {}",
            self.host_latency_us
        );
        let policy = crate::offload::host_policy::HostPolicyKind::parse(&self.host_policy)
            .map_err(|e| anyhow::anyhow!("--host-policy: {e}"))?;
        let mut cfg = crate::offload::HostTierConfig::new(blocks, policy);
        cfg.h2d_bytes_per_s = self.host_bandwidth_gbps * 1e9;
        cfg.d2h_bytes_per_s = self.host_bandwidth_gbps * 1e9;
        cfg.latency_s = self.host_latency_us / 1e6;
        Ok(Some(cfg))
    }
}

/// Replay `a.trace` under every policy of `a` and report.
pub fn run(a: RunArgs, components: &ComponentLookup) -> anyhow::Result<()> {
    let trace = Trace::load(&a.trace)?;
    let prepared = PreparedTrace::new(&trace, BLOCK_SIZE, a.replay.hide_agents);
    let (blocks, sized) = capacity(&a, &prepared)?;
    let mut cfg = a.replay.config(blocks)?;
    if let Some(warning) = cfg.hints.missing_from(&prepared) {
        eprintln!("warning: {warning}");
    }
    let load = a.load.settle(&prepared, &mut cfg, |scale, u| {
        eprintln!("  arrival scale {scale:.3}: LRU utilisation {:.0} %", u * 100.0)
    })?;
    configure(&a, &mut cfg)?;
    if let Some(path) = &a.op_log {
        write_op_log(path, &trace, &prepared, &cfg)?;
        if a.policies.is_none() && a.json.is_none() {
            return Ok(());
        }
    }
    let results = replay(&a, components, &prepared, &cfg)?;
    let summaries = summarize(&results);
    println!(
        "{}: {} sessions, {} requests, cache {} blocks × {} tokens ({sized}), {}, session ends {}, hints {}{}",
        a.trace.display(),
        prepared.sessions.len(),
        prepared.requests.len(),
        blocks,
        BLOCK_SIZE,
        load.describe(),
        cfg.session_ends.name(),
        cfg.hints.name(),
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
    print_tables(&a, &cfg, &summaries);
    if let Some(path) = &a.eviction_log {
        let audits: Vec<&EvictionAudit> = results.iter().filter_map(|r| r.audit.as_ref()).collect();
        write_eviction_log(path, &prepared, &audits)?;
        print!("\n{}", regret_table(&prepared, &audits));
        println!("every eviction → {}", path.display());
    }
    if let Some(path) = &a.json {
        write_json(&a, path, blocks, &cfg, &load, &summaries)?;
    }
    crate::report::failed_replays(&summaries)
}

/// The cache's size in blocks, and how the output names that choice: a fraction of the trace,
/// the flag, or sized from the trace when neither is given.
fn capacity(a: &RunArgs, prepared: &PreparedTrace) -> anyhow::Result<(usize, String)> {
    Ok(match (a.capacity_fraction, a.capacity_blocks) {
        (Some(f), _) => (
            crate::conditions::capacity_of(prepared, f)?,
            format!("{f} of the trace's distinct blocks"),
        ),
        (None, Some(blocks)) => (blocks, "--capacity-blocks".to_string()),
        (None, None) => {
            let fitted = FittedCapacity::of(prepared);
            (fitted.blocks, fitted.describe())
        }
    })
}

/// Shares, slots and the host tier on top of the replay's settings, refusing the combinations
/// the simulator does not model.
fn configure(a: &RunArgs, cfg: &mut SimConfig) -> anyhow::Result<()> {
    if !a.shares.is_empty() {
        cfg.shares = Some(a.shares.clone());
    }
    a.slots.apply(cfg)?;
    cfg.host_tier = a.host_tier.config()?;
    anyhow::ensure!(
        a.replicas <= 1 || cfg.host_tier.is_none(),
        "--host-blocks is not modelled with several replicas yet"
    );
    anyhow::ensure!(
        a.op_log.is_none() || cfg.host_tier.is_none(),
        "--op-log checks the GPU pool alone: give it without --host-blocks"
    );
    anyhow::ensure!(
        a.replicas <= 1 || cfg.slots.is_empty(),
        "--slot is not modelled with several replicas yet"
    );
    Ok(())
}

/// Replay under native LRU, writing the block-pool operations for sim/fidelity/ to `path`.
fn write_op_log(path: &Path, trace: &Trace, prepared: &PreparedTrace, cfg: &SimConfig) -> anyhow::Result<()> {
    let file = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut lru = crate::policies::NativeLru;
    let ops = OpLog {
        trace,
        out: Box::new(std::io::BufWriter::new(file)),
    };
    let result = Sim::new(cfg.clone(), prepared, &mut lru).with_op_log(ops).run()?;
    println!(
        "lru-native: {} hit tokens of {} ({:.2}%), op log → {}",
        result.hit_tokens,
        result.prompt_tokens,
        result.hit_rate() * 100.0,
        path.display()
    );
    Ok(())
}

/// Every policy of `a` through the trace, on one engine or on replicas behind a router, showing
/// its progress.
fn replay(
    a: &RunArgs,
    components: &ComponentLookup,
    prepared: &PreparedTrace,
    cfg: &SimConfig,
) -> anyhow::Result<Vec<RunResult>> {
    let policies: Vec<PolicySpec> = match &a.policies {
        Some(names) => names.iter().map(|n| PolicySpec::parse(n)).collect(),
        None => default_policies(),
    };
    let host = a.replay.host(components)?;
    host.preload(&policies)?;
    let progress = Progress::new(policies.len() as u64);
    let step = |r: &RunResult| progress.replayed(&r.policy);
    let results = if a.replicas > 1 {
        crate::replicas::run_all(
            &host,
            prepared,
            cfg,
            &policies,
            a.replay.rerank(),
            crate::replicas::ReplicaSetup {
                replicas: a.replicas,
                router: a.vllm_router.spec(a.router),
            },
            step,
        )?
    } else {
        let audit = a.eviction_log.is_some();
        run_all(&host, prepared, cfg, &policies, a.replay.rerank(), audit, step)?
    };
    progress.finish();
    Ok(results)
}

/// The results table with its legend, and the host-tier, tenant and priority tables when the
/// replay had them.
fn print_tables(a: &RunArgs, cfg: &SimConfig, summaries: &[(String, PolicySummary)]) {
    print!("{}", table(summaries));
    print!("What the columns say:\n{}", legend_text());
    if let Some(h) = &cfg.host_tier {
        println!(
            "\nhost tier: {} blocks ({:.1} GiB), {}, {:.1} GB/s each way, {:.0} µs a transfer",
            h.blocks,
            h.blocks as f64 * (cfg.latency.kv_bytes_per_token * BLOCK_SIZE as u64) as f64 / (1u64 << 30) as f64,
            h.policy.name(),
            h.h2d_bytes_per_s / 1e9,
            h.latency_s * 1e6
        );
        print!("{}", crate::report::host_table(summaries));
    }
    print!("{}", crate::report::tenant_table(summaries));
    if cfg.engine_priorities {
        println!(
            "\npriority scheduling (--engine-priorities), slots: {}",
            a.slots.slots.join(", ")
        );
        for (name, s) in summaries {
            println!(
                "  {name}: {} set-priority carried out, {} requests arrived demoted",
                s.priorities_set, s.demoted_requests
            );
        }
    }
}

/// Every figure as JSON at `path`, with the load, the hints and the replicas' settings.
fn write_json(
    a: &RunArgs,
    path: &Path,
    blocks: usize,
    cfg: &SimConfig,
    load: &crate::conditions::Load,
    summaries: &[(String, PolicySummary)],
) -> anyhow::Result<()> {
    let mut json = run_json(&a.trace.display().to_string(), blocks, BLOCK_SIZE, summaries);
    json["time_scale"] = serde_json::json!(load.time_scale);
    json["arrival_scale"] = serde_json::json!(load.arrival_scale);
    json["lru_utilisation_target_probe"] = serde_json::json!(load.lru_utilisation);
    json["session_ends"] = serde_json::json!(cfg.session_ends.name());
    json["hints"] = serde_json::json!({
        "told": cfg.hints.name(),
        "kinds": clap::ValueEnum::to_possible_value(&cfg.hints.kinds).map(|v| v.get_name().to_string()),
        "coverage": cfg.hints.coverage,
    });
    if let Some(h) = &cfg.host_tier {
        json["host_tier"] = serde_json::json!({
            "blocks": h.blocks,
            "policy": h.policy.name(),
            "bandwidth_bytes_per_s": h.h2d_bytes_per_s,
            "latency_s": h.latency_s,
            "async_scheduling": h.async_scheduling,
        });
    }
    if a.replicas > 1 {
        json["replicas"] = serde_json::json!(a.replicas);
        json["router"] = serde_json::json!(a.router.name());
        json["router_settings"] = serde_json::to_value(a.vllm_router.spec(a.router))?;
    }
    std::fs::write(path, serde_json::to_string_pretty(&json)?)
        .with_context(|| format!("writing {}", path.display()))?;
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

#[cfg(test)]
mod tests {
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        run: super::RunArgs,
    }

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(["sim-run", "--trace", "t.jsonl"].iter().chain(args))
    }

    #[test]
    fn run_help_starts_with_the_flags_a_first_replay_needs_and_groups_the_rest() {
        use clap::CommandFactory;
        let command = Cli::command();
        let loose: Vec<String> = command
            .get_arguments()
            .filter(|a| a.get_long().is_some() && a.get_help_heading().is_none())
            .map(|a| a.get_id().to_string())
            .collect();
        assert!(loose.is_empty(), "flags without a help heading: {loose:?}");
        let first_heading = command.get_arguments().find_map(|a| a.get_help_heading());
        assert_eq!(
            first_heading,
            Some(super::START_HERE),
            "the first heading of `sim run --help`"
        );
        let first: Vec<&str> = command
            .get_arguments()
            .filter(|a| a.get_help_heading() == Some(super::START_HERE))
            .filter_map(|a| a.get_long())
            .collect();
        assert_eq!(
            first,
            ["trace", "capacity-blocks", "capacity-fraction", "policies", "json"]
        );
        let hints = command.get_arguments().find(|a| a.get_long() == Some("hints")).unwrap();
        assert_eq!(hints.get_help_heading(), Some("Lifecycle hints and session ends"));
    }

    #[test]
    fn host_tier_flags_parse_and_are_off_by_default() {
        let plain = parse(&[]).unwrap();
        assert!(plain.run.host_tier.config().unwrap().is_none());
        let on = parse(&[
            "--host-blocks",
            "113292",
            "--host-policy",
            "arc",
            "--host-bandwidth-gbps",
            "25",
        ])
        .unwrap();
        let cfg = on.run.host_tier.config().unwrap().unwrap();
        assert_eq!(
            (cfg.blocks, cfg.policy.name(), cfg.h2d_bytes_per_s),
            (113_292, "arc", 25e9)
        );
        assert!(
            parse(&["--host-policy", "arc"]).is_err(),
            "a host policy needs --host-blocks"
        );
        let bad = parse(&["--host-blocks", "8", "--host-policy", "fifo"]).unwrap();
        let err = bad.run.host_tier.config().unwrap_err().to_string();
        assert!(err.contains("--host-policy") && err.contains("fifo"), "{err}");
    }
}

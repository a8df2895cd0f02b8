//! `agentrt policy test FILE.wasm [--trace T]`: the conformance kit. It runs the component in the
//! real host and checks what the contract asks of every export, on valid and hostile input —
//! empty and huge batches, agents never registered, configuration it cannot know, corrupted
//! snapshots — plus `score` against `score-packed`, snapshot → restore → snapshot, determinism,
//! the time and memory of each call, a built-in replay of some thousands of events (a policy that
//! fails after a while fails it), and with `--trace` the policy's hit rate on a workload next to
//! LRU's and Bélády's. One line per property; the exit status is non-zero when any fails.
//!
//! `agentrt policy check` stays the fast validator (load, `info`, `init`). Modules: [`inputs`]
//! (what is fed), [`slot`] (calls through the host, timed), [`checks`] (the properties),
//! [`trace`] (the replays), [`report`] (the lines).

mod checks;
mod inputs;
mod report;
mod slot;
mod trace;

use std::path::PathBuf;

use agentrt_runtime::BreakerConfig;
use agentrt_sim::policy_limits::PolicyLimitArgs;

use report::{Line, Problem, Verdict};
use slot::Host;

#[derive(clap::Args)]
pub struct TestArgs {
    /// The component file.
    file: PathBuf,
    /// `key=value` pairs to pass to the policy's `init` (repeatable).
    #[arg(long = "config", value_name = "KEY=VALUE")]
    config: Vec<String>,
    /// Also replay this trace (the simulator's JSON Lines, e.g. from `agentrt sim gen`) under the
    /// policy, vLLM's LRU and Bélády, and report the hit rates.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Which of the `--trace`'s lifecycle hints the policy hears, as in `agentrt sim run`; with
    /// any, the simulator's closed-first rule (closed sessions' blocks first, then LRU) joins the
    /// hit rates: what the hints alone are worth.
    #[command(flatten)]
    hints: agentrt_sim::hints::HintArgs,
    /// Cache size in blocks for the replays (default: a third of the distinct blocks the workload
    /// touches, so the engine evicts and the policy ranks).
    #[arg(long)]
    capacity_blocks: Option<usize>,
    /// Sessions of the built-in replay (GSM8K-like, ~3 requests each); 0 skips it.
    #[arg(long, default_value_t = trace::BUILT_IN_SESSIONS)]
    replay_sessions: usize,
    /// Items in the huge `score` batch.
    #[arg(long, default_value_t = 100_000)]
    huge_batch: usize,
    /// Limits of every instance the kit starts, as in `agentrt sim run` (the failure threshold
    /// applies to the `--trace` replay; the kit's own checks make every call).
    #[command(flatten)]
    limits: PolicyLimitArgs,
}

pub fn run(args: TestArgs) -> anyhow::Result<()> {
    let init = crate::policy_check::parse_pairs(&args.config)?;
    let limits = args.limits.limits()?;
    let config = agentrt_runtime::SlotConfig {
        // Every call the kit makes is made: a failure is what it is there to see.
        breaker: BreakerConfig::give_up_after(0),
        init: init.clone(),
        ..limits.slot_config("policy-test".into(), &[])
    };
    let file = args.file.display().to_string();
    let mut lines = Vec::new();
    let host = match Host::load(&args.file, config) {
        Ok(host) => host,
        Err(e) => {
            return finish(
                &file,
                vec![Line::checked("loads", Err(Problem::Fail(format!("{e:#}"))))],
            )
        }
    };
    let stats = host.component().load_stats();
    lines.push(Line::checked(
        "loads",
        Ok(format!(
            "{}, {} in {}",
            report::size(host.component().size_bytes()),
            stats.source,
            crate::describe::millis(stats.elapsed)
        )),
    ));
    let line = host.component().contract_line();
    lines.push(Line::info("contract", crate::describe::contract(Some(line.version()))));
    match host.fresh() {
        Ok(slot) => {
            let (name, version, _) = slot.info_name();
            let named = if name.trim().is_empty() || version.trim().is_empty() {
                Err(Problem::Fail(format!(
                    "name {name:?}, version {version:?}: neither may be empty"
                )))
            } else {
                Ok(format!("{name} {version}"))
            };
            lines.push(Line::checked("info", named));
            lines.push(Line::checked("init: the given config", Ok(describe_config(&init))));
        }
        Err(e) => {
            lines.push(Line::checked(
                "init: the given config",
                Err(Problem::Fail(format!(
                    "{}: nothing else can run",
                    crate::describe::error(&e)
                ))),
            ));
            return finish(&file, lines);
        }
    }
    lines.extend(checks::all(&host, args.huge_batch));
    lines.extend(report::measure_lines(
        &host.measures(),
        host.config().limits.memory_bytes,
    ));
    let replay = trace::Replay {
        file: &args.file,
        init: &init,
        capacity_blocks: args.capacity_blocks,
        limits,
        hints: args.hints.told()?,
    };
    if args.replay_sessions > 0 {
        lines.extend(trace::built_in_lines(&replay, args.replay_sessions));
    }
    if let Some(trace) = &args.trace {
        lines.extend(trace::trace_lines(&replay, trace));
    }
    finish(&file, lines)
}

fn describe_config(init: &[(String, String)]) -> String {
    if init.is_empty() {
        return "(none)".into();
    }
    init.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Print the lines and a summary; an error (the exit status) when any property failed.
fn finish(file: &str, lines: Vec<Line>) -> anyhow::Result<()> {
    println!("agentrt policy test {file}");
    for line in &lines {
        println!("{line}");
    }
    let count = |v: Verdict| lines.iter().filter(|l| l.verdict == v).count();
    let (passed, failed, skipped) = (count(Verdict::Pass), count(Verdict::Fail), count(Verdict::Skip));
    let warned = match count(Verdict::Warn) {
        0 => String::new(),
        1 => "; 1 warning (above)".to_string(),
        n => format!("; {n} warnings (above)"),
    };
    println!(
        "{} properties: {passed} passed, {failed} failed, {skipped} not run{warned}",
        passed + failed + skipped
    );
    anyhow::ensure!(
        failed == 0,
        "{failed} of {} properties failed",
        passed + failed + skipped
    );
    Ok(())
}

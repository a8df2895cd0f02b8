//! `agentrt sim import FORMAT SRC --out T.jsonl`: public traces nobody here wrote, in the trace
//! format, with prefix sharing kept exact (one segment per source block, [`blocks`]).
//!
//! Formats: `kv-cache-tester` (Claude Code conversations, [`kv_cache_tester`]), `mooncake`
//! (FAST '25 traces, [`mooncake`]), `bailian` (Qwen-Bailian usage traces, [`bailian`]). What a
//! source does not say — sessions (Mooncake), anchors (Mooncake, Bailian), when conversations
//! start (kv-cache-tester) — is inferred by a rule the user picks; docs/workloads.md gives each
//! mapping and the provenance of the files the evaluation used.

pub mod anchors;
pub mod bailian;
pub mod blocks;
pub mod hashed;
pub mod kv_cache_tester;
pub mod mooncake;
pub mod record;
pub mod threads;

use std::collections::HashSet;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

use anchors::AnchorRule;
use kv_cache_tester::{CcAnchors, CcOptions, CcWaits};
use mooncake::SessionRule;

/// The source formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// callanjfox/kv-cache-tester `traces/trace_NNNN.json` (a file or a folder of them).
    KvCacheTester,
    /// kvcache-ai/Mooncake `FAST25-release/traces/*.jsonl`.
    Mooncake,
    /// alibaba-edu/qwen-bailian-usagetraces-anon `*.jsonl`.
    Bailian,
}

#[derive(Args, Debug)]
pub struct ImportArgs {
    /// The public trace's format.
    #[arg(value_enum)]
    pub format: Format,
    /// The source: a file (a folder of `.json` conversations for kv-cache-tester).
    pub src: PathBuf,
    /// Where to write the converted trace (JSON Lines, the input of `sim run --trace`).
    #[arg(long)]
    pub out: PathBuf,
    /// mooncake: `request` (each request its own session; the source has none) or `chained`
    /// (turns chained into conversations by their block prefixes).
    #[arg(long, value_enum, default_value = "request")]
    pub sessions: SessionRule,
    /// mooncake, bailian: how anchors are inferred — none, first-block, shared-prefix (leading
    /// blocks at least two sessions' prompts contain). Default: first-block for mooncake,
    /// shared-prefix for bailian.
    #[arg(long, value_enum)]
    pub anchors: Option<AnchorRule>,
    /// kv-cache-tester: `source` (each conversation's tool + system blocks) or `shared-tools`
    /// (tool definitions shared by every conversation: an assumption, not in the trace).
    #[arg(long, value_enum, default_value = "source")]
    pub cc_anchors: CcAnchors,
    /// kv-cache-tester: how long a call waits after the previous one finished — `bounded`
    /// (`think_time`, never longer than the two calls lie apart in `t`: after a call the recorder
    /// did not time, its `think_time` also counts that call) or `recorded` (`think_time` as is).
    #[arg(long, value_enum, default_value = "bounded")]
    pub cc_waits: CcWaits,
    /// kv-cache-tester: leave out conversations with a request longer than this many tokens
    /// (the tester's --max-context).
    #[arg(long)]
    pub max_context: Option<u32>,
    /// kv-cache-tester: at most this many conversations (file-name order, after --max-context).
    #[arg(long)]
    pub conversations: Option<usize>,
    /// kv-cache-tester: conversations in progress at once on an unloaded engine (Poisson starts).
    #[arg(long, default_value_t = 8.0)]
    pub users: f64,
    /// kv-cache-tester: seed of the start times.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// Run `sim import`.
pub fn run(a: ImportArgs) -> anyhow::Result<()> {
    let (threads, what) = match a.format {
        Format::KvCacheTester => {
            let options = CcOptions {
                anchors: a.cc_anchors,
                waits: a.cc_waits,
                max_context: a.max_context,
                conversations: a.conversations,
                users: a.users,
                seed: a.seed,
            };
            let (threads, ids) = kv_cache_tester::import(&a.src, &options)?;
            let first_last = match (ids.first(), ids.last()) {
                (Some(f), Some(l)) => format!("{f} … {l}"),
                _ => String::new(),
            };
            (
                threads,
                format!(
                    "{} conversations ({first_last}), anchors {}, waits {}, {} users",
                    ids.len(),
                    a.cc_anchors.name(),
                    a.cc_waits.name(),
                    a.users
                ),
            )
        }
        Format::Mooncake => {
            let anchors = a.anchors.unwrap_or(AnchorRule::FirstBlock);
            let sessions = match a.sessions {
                SessionRule::Request => "one session per request",
                SessionRule::Chained => "turns chained into sessions",
            };
            (
                mooncake::import(&a.src, a.sessions, anchors)?,
                format!("{sessions}, anchors {}", anchors.name()),
            )
        }
        Format::Bailian => {
            let anchors = a.anchors.unwrap_or(AnchorRule::SharedPrefix);
            (
                bailian::import(&a.src, anchors)?,
                format!("sessions from parent_chat_id, anchors {}", anchors.name()),
            )
        }
    };
    let trace = threads::to_trace(&threads);
    trace.save(&a.out)?;
    let agents: HashSet<&str> = trace.requests.iter().map(|r| r.agent.as_str()).collect();
    let tokens: u64 = trace.requests.iter().map(|r| u64::from(r.prompt_tokens())).sum();
    println!(
        "{}: {} requests, {} sessions, {} agents, {:.1} M prompt tokens ({what}) → {}",
        a.src.display(),
        trace.requests.len(),
        trace.sessions(),
        agents.len(),
        tokens as f64 / 1e6,
        a.out.display()
    );
    Ok(())
}

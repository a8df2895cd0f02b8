//! `agentrt sim session-flood`: one session floods the engine from several clients at once while
//! another sends short calls one after another — the simulator's version of the real-vLLM run of
//! `adapters/vllm/tests/test_e2e_priority.py`, under vLLM's priority scheduling with no slot
//! (every request at priority 0: arrival order) and with a fair-share slot whose demotions go as
//! request priorities (`sim run --slot fair=fair-share --engine-priorities`).
//!
//! The defaults are the real run's parameters, taken from its description before any replay: 8
//! flood clients in one session, each sending unique documents back to back (1,684 prompt tokens
//! with the tiny model's tokenizer, 8 output tokens); the light session's one unmeasured call 5 s
//! in, then after 3 s 12 short questions (49 prompt tokens, 1 output token) 200 ms apart; vLLM's
//! CPU defaults with `--max-num-seqs 4` (2,048 batched tokens) and the real run's cache (400
//! blocks of 32 tokens = 800 of 16). The latency is the simulator's H100 model, not the CPU's.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use agentrt_runtime::ComponentLookup;

use crate::harness::run_one;
use crate::options::ReplayOptions;
use crate::policies::PolicySpec;
use crate::prepare::PreparedTrace;
use crate::scheduler::RunResult;
use crate::setting::BLOCK_SIZE;
use crate::trace::{Segment, Trace, TraceRequest};

const FLOOD: &str = "flood";
const LIGHT: &str = "light";

#[derive(Args, Debug)]
pub struct SessionFloodArgs {
    /// Clients of the flooding session, each sending its documents back to back.
    #[arg(long, default_value_t = 8)]
    pub flood_clients: usize,
    /// Documents each flood client sends (enough to outlast the light session; checked).
    #[arg(long, default_value_t = 200)]
    pub flood_requests: usize,
    /// Prompt tokens of each flood document.
    #[arg(long, default_value_t = 1684)]
    pub flood_prompt_tokens: u32,
    /// Tokens each flood document generates.
    #[arg(long, default_value_t = 8)]
    pub flood_output_tokens: u32,
    /// Measured light calls (after one unmeasured call).
    #[arg(long, default_value_t = 12)]
    pub light_calls: usize,
    /// Prompt tokens of each light call.
    #[arg(long, default_value_t = 49)]
    pub light_prompt_tokens: u32,
    /// Tokens each light call generates.
    #[arg(long, default_value_t = 1)]
    pub light_output_tokens: u32,
    /// vLLM's max_num_seqs.
    #[arg(long, default_value_t = 4)]
    pub max_num_seqs: usize,
    /// vLLM's max_num_batched_tokens (its CPU default for the API server).
    #[arg(long, default_value_t = 2048)]
    pub max_batched_tokens: u32,
    /// Cache size in blocks of 16 tokens.
    #[arg(long, default_value_t = 800)]
    pub capacity_blocks: usize,
    /// The cache policy (the `kv` slot).
    #[arg(long, default_value = "lru")]
    pub policy: String,
    /// The slot beside it in the second setup.
    #[arg(long, default_value = "fair=fair-share")]
    pub slot: String,
    /// Write the figures as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    #[command(flatten)]
    pub replay: ReplayOptions,
}

/// The two sessions' trace: flood clients `flood/0..`, the light session `light`.
pub fn flood_trace(a: &SessionFloodArgs) -> Trace {
    let mut requests = Vec::new();
    for c in 0..a.flood_clients {
        for i in 0..a.flood_requests {
            requests.push(TraceRequest {
                tenant: None,
                session: format!("{FLOOD}/{c}"),
                agent: "summariser".into(),
                after_ms: 0.0,
                prompt: vec![
                    Segment::new("sys/summariser", 8),
                    Segment::new(format!("{FLOOD}/{c}/{i}/document"), a.flood_prompt_tokens - 8),
                ],
                output_tokens: a.flood_output_tokens,
                tool_call: false,
                hints: Default::default(),
            });
        }
    }
    for i in 0..=a.light_calls {
        requests.push(TraceRequest {
            tenant: None,
            session: LIGHT.into(),
            agent: "answerer".into(),
            // One unmeasured call 5 s in, the measured ones 3 s later, 200 ms apart.
            after_ms: match i {
                0 => 5000.0,
                1 => 3000.0,
                _ => 200.0,
            },
            prompt: vec![
                Segment::new("sys/answerer", 8),
                Segment::new(format!("{LIGHT}/{i}/question"), a.light_prompt_tokens - 8),
            ],
            output_tokens: a.light_output_tokens,
            tool_call: false,
            hints: Default::default(),
        });
    }
    Trace { requests }
}

/// `trace` prepared, with every flood client's chain of requests in one session (the policy sees
/// one session id, as the proxy does for clients sending one `x-session-id`).
pub fn prepare(trace: &Trace) -> PreparedTrace {
    let mut prepared = PreparedTrace::new(trace, BLOCK_SIZE, false);
    let flood_id = crate::tokens::hash_str(FLOOD);
    for s in &mut prepared.sessions {
        if s.name.starts_with(&format!("{FLOOD}/")) {
            s.id = flood_id;
        }
    }
    prepared
}

/// What one setup measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FloodFigures {
    pub setup: String,
    pub light_ttft_ms: Vec<f64>,
    pub light_p50_ms: f64,
    pub light_p99_ms: f64,
    pub flood_p50_ms: f64,
    /// Flood requests finished by the light session's last finish, and per second until then.
    pub flood_served: usize,
    pub flood_per_s: f64,
    pub demoted_requests: u64,
    pub preemptions: u64,
}

/// The test's percentile: the sorted value at round(q · (n − 1)).
pub fn percentile(values: &[f64], q: f64) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((q * (v.len() - 1) as f64).round() as usize).min(v.len() - 1)]
}

/// The light and flood figures of one replay of `trace`.
pub fn figures(setup: &str, trace: &PreparedTrace, r: &RunResult) -> anyhow::Result<FloodFigures> {
    let light = trace
        .sessions
        .iter()
        .find(|s| s.name == LIGHT)
        .context("the trace has a light session")?;
    let measured = &light.requests[1..];
    let light_ttft_ms: Vec<f64> = measured.iter().map(|&u| r.ttft_us[u as usize] / 1000.0).collect();
    let end = measured
        .iter()
        .map(|&u| r.finish_us[u as usize])
        .fold(f64::NAN, f64::max);
    anyhow::ensure!(end.is_finite(), "the light session did not finish");
    let flood: Vec<u32> = trace
        .sessions
        .iter()
        .filter(|s| s.name.starts_with(&format!("{FLOOD}/")))
        .flat_map(|s| s.requests.iter().copied())
        .collect();
    anyhow::ensure!(
        flood
            .iter()
            .any(|&u| r.arrival_us[u as usize].is_nan() || r.finish_us[u as usize] > end),
        "the flood ended before the light session did: raise --flood-requests"
    );
    let served: Vec<u32> = flood
        .iter()
        .copied()
        .filter(|&u| r.finish_us[u as usize] <= end)
        .collect();
    let flood_ttft: Vec<f64> = served.iter().map(|&u| r.ttft_us[u as usize] / 1000.0).collect();
    Ok(FloodFigures {
        setup: setup.to_string(),
        light_p50_ms: percentile(&light_ttft_ms, 0.5),
        light_p99_ms: percentile(&light_ttft_ms, 0.99),
        light_ttft_ms,
        flood_p50_ms: percentile(&flood_ttft, 0.5),
        flood_served: served.len(),
        flood_per_s: served.len() as f64 / (end / 1e6),
        demoted_requests: r.demoted_requests,
        preemptions: r.preemptions,
    })
}

pub fn run(a: SessionFloodArgs, components: &ComponentLookup) -> anyhow::Result<()> {
    let trace = flood_trace(&a);
    let prepared = prepare(&trace);
    let host = a.replay.host(components)?;
    let policy = PolicySpec::parse(&a.policy);
    let slots = crate::options::SlotArgs {
        slots: vec![a.slot.clone()],
        slot_configs: Vec::new(),
        engine_priorities: true,
    }
    .slots()?;
    let mut rows = Vec::new();
    for (setup, slots) in [
        ("no slot (priority 0: arrival order)", Vec::new()),
        ("fair-share slot + priorities", slots),
    ] {
        let mut cfg = a.replay.config(a.capacity_blocks)?;
        cfg.max_num_seqs = a.max_num_seqs;
        cfg.max_batched_tokens = a.max_batched_tokens;
        cfg.engine_priorities = true;
        cfg.slots = slots;
        let result = run_one(&host, &prepared, &cfg, &policy, None, a.replay.rerank())?;
        crate::report::failed_replays(&crate::report::summarize(std::slice::from_ref(&result)))?;
        rows.push(figures(setup, &prepared, &result)?);
    }
    let mut md = format!(
        "{} flood clients × {}-token documents (+{} out) in one session; {} light calls of {} tokens; \
         max_num_seqs {}, {} batched tokens, {} blocks; H100 latency model\n\n\
         | setup | light p50 TTFT ms | light p99 TTFT ms | flood p50 TTFT ms | flood requests served (per s) | flood requests demoted |\n\
         |---|---:|---:|---:|---:|---:|\n",
        a.flood_clients,
        a.flood_prompt_tokens,
        a.flood_output_tokens,
        a.light_calls,
        a.light_prompt_tokens,
        a.max_num_seqs,
        a.max_batched_tokens,
        a.capacity_blocks
    );
    for f in &rows {
        md.push_str(&format!(
            "| {} | {:.1} | {:.1} | {:.1} | {} ({:.1}) | {} |\n",
            f.setup, f.light_p50_ms, f.light_p99_ms, f.flood_p50_ms, f.flood_served, f.flood_per_s, f.demoted_requests
        ));
    }
    print!("{md}");
    if let Some(path) = &a.json {
        std::fs::write(path, serde_json::to_string_pretty(&rows)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

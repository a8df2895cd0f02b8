//! Turn run results into the figures the evaluation reports: per policy, token hit rate, Δ pp vs
//! LRU, the fraction of the LRU → Bélády gap closed, TTFT (mean, p99), per-turn latency,
//! throughput, warm-up tokens, policy state size, policy time per event and how often the policy
//! failed — as JSON and as a terminal table, with a loud note under it for a policy that failed;
//! and, for audited runs, which evictions a later request regretted.

use serde::Serialize;

use crate::audit::{Content, EvictionAudit, RegretSummary, Tally};
use crate::prepare::PreparedTrace;
use crate::scheduler::RunResult;

/// Every figure of one policy on one trace and cache size.
#[derive(Debug, Clone, Serialize)]
pub struct PolicySummary {
    /// Cached prompt tokens / prompt tokens (trace requests, at first admission).
    pub hit_rate: f64,
    /// Hit rate minus LRU's, in percentage points.
    pub delta_pp_vs_lru: Option<f64>,
    /// (hit − LRU) / (Bélády − LRU); `None` when the gap is under 0.1 pp.
    pub gap_closed: Option<f64>,
    pub ttft_ms_mean: f64,
    pub ttft_ms_p99: f64,
    pub turn_ms_mean: f64,
    pub turn_ms_p99: f64,
    /// Generated tokens per second of simulated time (trace requests).
    pub throughput_tok_s: f64,
    pub makespan_s: f64,
    /// Fraction of the makespan the engine spent running steps (per engine, with replicas).
    pub utilisation: f64,
    /// `session-end` events the policy heard.
    pub sessions_ended: u64,
    /// Prompt tokens warm-ups computed (uncached prefill spent on prefetching).
    pub warmup_tokens: u64,
    pub warmups: u64,
    pub warmups_skipped: u64,
    pub side_effects_ignored: u64,
    /// `set-priority` side effects carried out, and trace requests that arrived demoted
    /// (`--engine-priorities`).
    pub priorities_set: u64,
    pub demoted_requests: u64,
    /// Trace requests longer than the whole cache, refused.
    pub rejected: u64,
    /// Largest policy snapshot seen (bytes).
    pub state_bytes_max: usize,
    /// Wall time per delivered event in observe / observe-blocks calls (µs).
    pub observe_us_per_event: f64,
    /// Wall time per scored item (µs), including the host's ranking.
    pub score_us_per_item: f64,
    pub score_calls: u64,
    /// Wall time per act call (µs).
    pub act_us_per_call: f64,
    pub events: u64,
    /// Rankings that fell back to LRU because the policy failed or had been given up on.
    pub fallbacks: u64,
    /// Policy calls that failed (trap, deadline, memory cap, wrong output, …), any primitive.
    pub failed_calls: u64,
    /// The same by primitive and kind: `{"observe trap": 3, "score deadline": 5}`.
    pub failures: std::collections::BTreeMap<String, u64>,
    /// Fresh instances started after a failure.
    pub restarts: u64,
    /// Calls not made once the replay gave up on the policy (its breaker opened).
    pub calls_skipped: u64,
    /// The replay gave up on the policy: from then on its rankings are LRU's.
    pub gave_up: bool,
    pub hit_tokens: u64,
    pub prompt_tokens: u64,
    pub evictions: u64,
    pub preemptions: u64,
    pub steps: u64,
    /// Wall time of the replay (seconds).
    pub wall_s: f64,
    /// Evictions a later request undid, for audited runs (`--eviction-log`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub regret: Option<RegretSummary>,
    /// The same hit figures per tenant (a trace without tenants has one, `default`).
    pub tenants: std::collections::BTreeMap<String, TenantSummary>,
    /// The host tier's figures, when the replay had one (`--host-blocks`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<HostTierSummary>,
}

/// What the host tier did under one policy: where prompt tokens came from.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct HostTierSummary {
    /// vLLM's host cache policy (lru, arc) and the pool's size in blocks.
    pub host_policy: String,
    pub host_blocks: usize,
    /// Prompt tokens hit in the GPU cache, loaded from the host tier, and computed (neither),
    /// as fractions of prompt tokens (trace requests, at first admission).
    pub gpu_hit_rate: f64,
    pub host_hit_rate: f64,
    pub host_hit_tokens: u64,
    pub recomputed_tokens: u64,
    pub loads: u64,
    pub loaded_blocks: u64,
    pub loaded_bytes: u64,
    pub stored_bytes: u64,
    /// Warm-ups whose anchor came (partly) from the host tier, and the tokens they loaded
    /// instead of recomputing.
    pub warmup_loads: u64,
    pub warmup_loaded_tokens: u64,
    /// Store offers refused because nothing in the host pool could be evicted (retried).
    pub refused_offers: u64,
    /// Blocks the policy declined to store (`--host-policy policy`).
    pub declined_blocks: u64,
    pub host_evictions: u64,
    /// Mean time from a load's admission to the step that computed the rest (ms).
    pub load_wait_ms_mean: f64,
}

fn host_summary(r: &RunResult) -> Option<HostTierSummary> {
    let h = r.host.as_ref()?;
    let rate = |t: u64| {
        if r.prompt_tokens == 0 {
            0.0
        } else {
            t as f64 / r.prompt_tokens as f64
        }
    };
    Some(HostTierSummary {
        host_policy: h.policy.clone(),
        host_blocks: h.blocks,
        gpu_hit_rate: r.hit_rate(),
        host_hit_rate: rate(h.hit_tokens),
        host_hit_tokens: h.hit_tokens,
        recomputed_tokens: r.prompt_tokens.saturating_sub(r.hit_tokens + h.hit_tokens),
        loads: h.loads,
        loaded_blocks: h.loaded_blocks,
        loaded_bytes: h.loaded_bytes,
        stored_bytes: h.stored_bytes,
        warmup_loads: h.warmup_loads,
        warmup_loaded_tokens: h.warmup_loaded_tokens,
        refused_offers: h.refused_offers,
        declined_blocks: h.declined_blocks,
        host_evictions: h.evictions,
        load_wait_ms_mean: if h.loads == 0 {
            0.0
        } else {
            h.load_wait_us / h.loads as f64 / 1000.0
        },
    })
}

/// One tenant's hit figures under one policy.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TenantSummary {
    pub hit_rate: f64,
    pub hit_tokens: u64,
    pub prompt_tokens: u64,
    /// Mean time from a request's arrival to its last token (ms).
    pub turn_ms_mean: f64,
}

fn mean(xs: &[f64]) -> f64 {
    let v: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

fn percentile(xs: &[f64], p: f64) -> f64 {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

fn per(ns: u64, n: u64) -> f64 {
    if n == 0 {
        0.0
    } else {
        ns as f64 / 1000.0 / n as f64
    }
}

/// Summaries of runs of one trace, in the same order, with Δ and gap relative to `lru` and
/// `belady` when present.
pub fn summarize(results: &[RunResult]) -> Vec<(String, PolicySummary)> {
    let find = |name: &str| results.iter().find(|r| r.policy == name).map(RunResult::hit_rate);
    let lru = find("lru").or_else(|| find("lru-native"));
    let belady = find("belady");
    results
        .iter()
        .map(|r| {
            let hit = r.hit_rate();
            let s = &r.policy_stats;
            let summary = PolicySummary {
                hit_rate: hit,
                delta_pp_vs_lru: lru.map(|l| (hit - l) * 100.0),
                gap_closed: match (lru, belady) {
                    (Some(l), Some(b)) if b - l > 0.001 => Some((hit - l) / (b - l)),
                    _ => None,
                },
                ttft_ms_mean: mean(&r.ttft_us) / 1000.0,
                ttft_ms_p99: percentile(&r.ttft_us, 99.0) / 1000.0,
                turn_ms_mean: mean(&r.turn_us) / 1000.0,
                turn_ms_p99: percentile(&r.turn_us, 99.0) / 1000.0,
                throughput_tok_s: if r.makespan_us > 0.0 {
                    r.output_tokens as f64 / (r.makespan_us / 1e6)
                } else {
                    0.0
                },
                makespan_s: r.makespan_us / 1e6,
                utilisation: if r.makespan_us > 0.0 {
                    (r.busy_us / r.makespan_us).min(1.0)
                } else {
                    0.0
                },
                sessions_ended: r.sessions_ended,
                warmup_tokens: r.warmup_tokens,
                warmups: r.warmups,
                warmups_skipped: r.warmups_skipped,
                side_effects_ignored: r.effects_ignored,
                priorities_set: r.priorities_set,
                demoted_requests: r.demoted_requests,
                rejected: r.rejected,
                state_bytes_max: s.state_bytes_max,
                observe_us_per_event: per(s.observe_ns, s.events),
                score_us_per_item: per(s.score_ns, s.score_items),
                score_calls: s.score_calls,
                act_us_per_call: per(s.act_ns, s.act_calls),
                events: s.events,
                fallbacks: s.fallbacks,
                failed_calls: s.failed_calls,
                failures: s.failures.clone(),
                restarts: s.restarts,
                calls_skipped: s.calls_skipped,
                gave_up: s.gave_up,
                hit_tokens: r.hit_tokens,
                prompt_tokens: r.prompt_tokens,
                evictions: r.evictions,
                preemptions: r.preemptions,
                steps: r.steps,
                wall_s: r.wall_s,
                regret: r.audit.as_ref().map(EvictionAudit::summary),
                tenants: r
                    .tenants
                    .iter()
                    .map(|t| {
                        let figures = TenantSummary {
                            hit_rate: t.hit_rate(),
                            hit_tokens: t.hit_tokens,
                            prompt_tokens: t.prompt_tokens,
                            turn_ms_mean: if t.requests == 0 {
                                0.0
                            } else {
                                t.turn_us_sum / t.requests as f64 / 1000.0
                            },
                        };
                        (t.name.clone(), figures)
                    })
                    .collect(),
                host: host_summary(r),
            };
            (r.policy.clone(), summary)
        })
        .collect()
}

/// The JSON object `agentrt sim run --json` writes.
pub fn run_json(
    trace: &str,
    capacity_blocks: usize,
    block_size: usize,
    summaries: &[(String, PolicySummary)],
) -> serde_json::Value {
    let mut policies = serde_json::Map::new();
    for (name, s) in summaries {
        policies.insert(name.clone(), serde_json::to_value(s).expect("summaries serialize"));
    }
    serde_json::json!({
        "trace": trace,
        "capacity_blocks": capacity_blocks,
        "block_size": block_size,
        "policies": policies,
    })
}

fn opt(x: Option<f64>, digits: usize) -> String {
    match x {
        Some(v) => format!("{v:+.digits$}"),
        None => "–".to_string(),
    }
}

/// The share of the LRU→Bélády gap, as a percentage ("–" when there is no gap).
fn gap(s: &PolicySummary) -> String {
    s.gap_closed.map_or("–".to_string(), |g| format!("{:.0}%", g * 100.0))
}

/// Header of the Markdown table [`markdown_rows`] fills (docs/results.md, `table.md`).
pub const MARKDOWN_HEADER: &str = "| workload | policy | hit % | Δ pp vs LRU | gap closed | TTFT mean ms | TTFT p99 ms | util % | turn ms | out tok/s | warm-up tok | state B | observe µs/ev | score µs/item | evictions | rankings |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";

/// One Markdown row per policy of one workload's results.
pub fn markdown_rows(workload: &str, summaries: &[(String, PolicySummary)]) -> String {
    let mut out = String::new();
    for (name, s) in summaries {
        out.push_str(&format!(
            "| {workload} | {} | {:.1} | {} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {} | {} | {:.3} | {:.3} | {} | {} |\n",
            shown_name(name),
            s.hit_rate * 100.0,
            opt(s.delta_pp_vs_lru, 1),
            gap(s),
            s.ttft_ms_mean,
            s.ttft_ms_p99,
            s.utilisation * 100.0,
            s.turn_ms_mean,
            s.throughput_tok_s,
            s.warmup_tokens,
            s.state_bytes_max,
            s.observe_us_per_event,
            s.score_us_per_item,
            s.evictions,
            rankings(name, s)
        ));
    }
    out
}

/// Hit rate per tenant and policy, for traces with more than one tenant (empty otherwise).
pub fn tenant_table(summaries: &[(String, PolicySummary)]) -> String {
    let Some((_, first)) = summaries.first() else {
        return String::new();
    };
    if first.tenants.len() < 2 {
        return String::new();
    }
    let mut out = format!("{:<16}", "hit % by tenant");
    for tenant in first.tenants.keys() {
        out.push_str(&format!(" {tenant:>12}"));
    }
    out.push('\n');
    for (name, s) in summaries {
        out.push_str(&format!("{name:<16}"));
        for t in s.tenants.values() {
            out.push_str(&format!(" {:>12.1}", t.hit_rate * 100.0));
        }
        out.push('\n');
    }
    out
}

/// A fixed-width table of one trace's results, and [`failure_notes`] under it.
pub fn table(summaries: &[(String, PolicySummary)]) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "{:<16} {:>7} {:>8} {:>6} {:>10} {:>10} {:>6} {:>10} {:>10} {:>10} {:>9} {:>9} {:>13} {:>10} {:>8} {:>8} {:>6} {:>8}\n",
        "policy",
        "hit %",
        "Δ pp",
        "gap",
        "TTFT ms",
        "TTFT p99",
        "util",
        "turn ms",
        "out tok/s",
        "warm tok",
        "state B",
        "obs µs/ev",
        "score µs/item",
        "evictions",
        "rankings",
        "fallback",
        "failed",
        "restarts"
    ));
    for (name, s) in summaries {
        out.push_str(&format!(
            "{:<16} {:>7.1} {:>8} {:>6} {:>10.1} {:>10.1} {:>5.0}% {:>10.1} {:>10.0} {:>10} {:>9} {:>9.3} {:>13.3} {:>10} {:>8} {:>8} {:>6} {:>8}\n",
            shown_name(name),
            s.hit_rate * 100.0,
            opt(s.delta_pp_vs_lru, 1),
            gap(s),
            s.ttft_ms_mean,
            s.ttft_ms_p99,
            s.utilisation * 100.0,
            s.turn_ms_mean,
            s.throughput_tok_s,
            s.warmup_tokens,
            s.state_bytes_max,
            s.observe_us_per_event,
            s.score_us_per_item,
            s.evictions,
            rankings(name, s),
            s.fallbacks,
            s.failed_calls,
            s.restarts,
        ));
    }
    out.push_str(&failure_notes(summaries));
    out.push_str(&proves_nothing_notes(summaries));
    out
}

/// What each column of [`table`] and [`MARKDOWN_HEADER`]'s table means: a reader of a table
/// must not need the source to know what "gap" or "state B" is.
pub const LEGEND: &[(&str, &str)] = &[
    ("hit %", "prompt tokens served from the prefix cache, of all prompt tokens (each request at its first admission)"),
    ("Δ pp", "hit % minus LRU's, in percentage points"),
    ("gap", "the share of the distance from LRU to the offline bound this policy closed (100 % = as good as the bound; – when LRU is within 0.1 pp of it)"),
    ("belady (offline)", "Bélády's offline bound: evicts the block asked for furthest in the future, knowing the whole trace — the ceiling no online policy can pass, not a contender"),
    ("TTFT", "time to first token, mean and p99, ms of simulated time"),
    ("util", "share of the run the engine was busy"),
    ("turn ms", "a request from arrival to last token, ms of simulated time"),
    ("out tok/s", "generated tokens per simulated second"),
    ("warm tok", "prompt tokens warm-ups computed (prefetching anchors costs prefill)"),
    ("state B", "the policy's largest snapshot, bytes"),
    ("obs µs/ev, score µs/item", "wall time inside the policy per event delivered and per item ranked"),
    ("evictions", "blocks the engine evicted (0: the cache never filled, so every policy ties)"),
    ("rankings", "the policy's score calls (– for a native one; 0: it never ranked, so its figures are LRU's)"),
    ("fallback, failed, restarts", "rankings that fell back to LRU, failed policy calls, fresh instances after a failure"),
];

/// [`LEGEND`] as lines of text, for under a fixed-width table.
pub fn legend_text() -> String {
    LEGEND
        .iter()
        .map(|(term, meaning)| format!("  {term}: {meaning}\n"))
        .collect()
}

/// [`LEGEND`] as a Markdown list, for under a Markdown table.
pub fn legend_markdown() -> String {
    LEGEND
        .iter()
        .map(|(term, meaning)| format!("- **{term}**: {meaning}\n"))
        .collect()
}

/// The fixed-width table's name for a policy: Bélády is the offline bound, and says so.
fn shown_name(name: &str) -> String {
    if name == "belady" {
        "belady (offline)".to_string()
    } else {
        name.to_string()
    }
}

/// Score calls, or "–" for a policy the replay does not call (native LRU, Bélády: no events, no
/// rankings).
fn rankings(name: &str, s: &PolicySummary) -> String {
    if is_native(name, s) {
        "–".to_string()
    } else {
        s.score_calls.to_string()
    }
}

fn is_native(name: &str, s: &PolicySummary) -> bool {
    name == "belady" || name == "lru-native" || (s.events == 0 && s.score_calls == 0)
}

/// Warnings for a replay that proves nothing: a cache that never filled (no evictions under any
/// policy, so every policy ties on hit rate), and each policy that never ranked (its figures are
/// LRU's, whatever it would have done). Empty when the replay compared what it meant to.
pub fn proves_nothing_notes(summaries: &[(String, PolicySummary)]) -> String {
    if summaries.is_empty() {
        return String::new();
    }
    if summaries.iter().all(|(_, s)| s.evictions == 0) {
        return "! the cache never filled: no policy evicted a block, so every policy ties and this replay \
compares nothing — give a smaller --capacity-blocks (or leave it out to size the cache from the trace)\n"
            .to_string();
    }
    let mut out = String::new();
    let bound = summaries.iter().find(|(n, _)| n == "belady").map(|(_, s)| s);
    if let Some(bound) = bound {
        if bound.delta_pp_vs_lru.is_some_and(|d| d < 0.1) {
            out.push_str(
                "! LRU is within 0.1 pp of the offline bound at this cache: no policy can gain here, so this replay \
ranks nothing but noise — try a smaller cache or another trace\n",
            );
        }
    }
    for (name, s) in summaries {
        if is_native(name, s) || s.score_calls > 0 {
            continue;
        }
        out.push_str(&format!(
            "! {name} ranked nothing: 0 score calls in {} evictions, so its figures are LRU's, not its own\n",
            s.evictions
        ));
    }
    out
}

/// Where prompt tokens came from when a host tier was on (empty otherwise): GPU hits, host-tier
/// loads, recomputed, and the bytes moved.
pub fn host_table(summaries: &[(String, PolicySummary)]) -> String {
    if summaries.iter().all(|(_, s)| s.host.is_none()) {
        return String::new();
    }
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    let mut out = format!(
        "{:<16} {:>6} {:>9} {:>10} {:>10} {:>14} {:>10} {:>10} {:>8} {:>9} {:>14} {:>8} {:>9} {:>10} {:>10}\n",
        "host tier",
        "policy",
        "GPU hit %",
        "host hit %",
        "all hit %",
        "recomputed tok",
        "loaded GiB",
        "stored GiB",
        "loads",
        "warm load",
        "warm tok loaded",
        "refused",
        "declined",
        "evicted",
        "wait ms"
    );
    for (name, s) in summaries {
        let Some(h) = &s.host else { continue };
        out.push_str(&format!(
            "{:<16} {:>6} {:>9.1} {:>10.1} {:>10.1} {:>14} {:>10.2} {:>10.2} {:>8} {:>9} {:>14} {:>8} {:>9} {:>10} {:>10.2}\n",
            name,
            h.host_policy,
            h.gpu_hit_rate * 100.0,
            h.host_hit_rate * 100.0,
            (h.gpu_hit_rate + h.host_hit_rate) * 100.0,
            h.recomputed_tokens,
            gib(h.loaded_bytes),
            gib(h.stored_bytes),
            h.loads,
            h.warmup_loads,
            h.warmup_loaded_tokens,
            h.refused_offers,
            h.declined_blocks,
            h.host_evictions,
            h.load_wait_ms_mean
        ));
    }
    out
}

/// One line per policy that failed during the replay, saying how and what it did to its figures:
/// a broken policy must not pass for a weak one.
pub fn failure_notes(summaries: &[(String, PolicySummary)]) -> String {
    let mut out = String::new();
    for (name, s) in summaries {
        if s.failed_calls == 0 && s.fallbacks == 0 {
            continue;
        }
        let how: Vec<String> = s.failures.iter().map(|(what, n)| format!("{what} ×{n}")).collect();
        out.push_str(&format!(
            "! {name}: {} failed calls ({}), {} restarts; {} of {} rankings fell back to LRU",
            s.failed_calls,
            if how.is_empty() {
                "none".to_string()
            } else {
                how.join(", ")
            },
            s.restarts,
            s.fallbacks,
            s.score_calls,
        ));
        if s.gave_up {
            out.push_str(&format!(
                "; gave up on it after repeated failures ({} calls skipped): its figures are mostly LRU's",
                s.calls_skipped
            ));
        }
        out.push('\n');
    }
    out
}

/// Agents listed in the regret table's per-agent part (those with the most regrets).
const REGRET_TABLE_AGENTS: usize = 12;

/// Where each policy's misses come from: evictions a later request undid, by kind of content and
/// by agent, for audited runs (`agentrt sim run --eviction-log`).
pub fn regret_table(trace: &PreparedTrace, audits: &[&EvictionAudit]) -> String {
    let share = |t: Tally| format!("{}/{}", t.regretted, t.evicted);
    let mut out = String::from("evictions a later request undid (regretted / evicted):\n");
    out.push_str(&format!(
        "{:<16} {:>9} {:>10} {:>6} {:>11} {:>15} {:>15} {:>15} {:>10}\n",
        "policy", "evicted", "regretted", "%", "tokens", "anchor", "shared", "session", "gap ms p50"
    ));
    for a in audits {
        let by_content = a.by_content();
        let content = |c: Content| share(by_content.get(&c).copied().unwrap_or_default());
        let evicted = a.evictions.len() as u64;
        out.push_str(&format!(
            "{:<16} {:>9} {:>10} {:>6.1} {:>11} {:>15} {:>15} {:>15} {:>10}\n",
            a.policy,
            evicted,
            a.regretted(),
            100.0 * a.regretted() as f64 / evicted.max(1) as f64,
            a.regretted_tokens(),
            content(Content::Anchor),
            content(Content::Shared),
            content(Content::Session),
            a.median_regret_gap_us()
                .map_or("-".to_string(), |us| format!("{:.0}", us as f64 / 1000.0)),
        ));
    }
    // Agents ranked by their most-regretted policy: where a policy and Bélády differ most.
    let by_agent: Vec<_> = audits.iter().map(|a| a.by_agent()).collect();
    let mut agents: Vec<u32> = by_agent.iter().flat_map(|m| m.keys().copied()).collect();
    agents.sort_unstable();
    agents.dedup();
    let regretted = |m: &std::collections::BTreeMap<u32, Tally>, agent: u32| m.get(&agent).map_or(0, |t| t.regretted);
    agents.sort_by_key(|&agent| std::cmp::Reverse(by_agent.iter().map(|m| regretted(m, agent)).max()));
    if agents.is_empty() {
        return out;
    }
    out.push_str("\nregretted blocks by agent:\n");
    out.push_str(&format!("{:<24}", "agent"));
    for a in audits {
        out.push_str(&format!(" {:>16}", a.policy));
    }
    out.push('\n');
    for &agent in agents.iter().take(REGRET_TABLE_AGENTS) {
        let name = trace
            .agent(agent)
            .map_or_else(|| format!("#{agent}"), |a| a.name.clone());
        out.push_str(&format!("{name:<24}"));
        for m in &by_agent {
            out.push_str(&format!(" {:>16}", regretted(m, agent)));
        }
        out.push('\n');
    }
    if agents.len() > REGRET_TABLE_AGENTS {
        out.push_str(&format!("({} more agents)\n", agents.len() - REGRET_TABLE_AGENTS));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_tier_figures_appear_only_when_a_host_tier_ran() {
        let plain = summarize(&[run("lru", 300)]);
        assert_eq!(host_table(&plain), "");
        let json = run_json("t", 10, 16, &plain);
        assert!(
            json["policies"]["lru"].get("host").is_none(),
            "JSON without a host tier is unchanged"
        );

        let mut r = run("lru", 300);
        r.host = Some(crate::offload::HostTierFigures {
            policy: "arc".to_string(),
            blocks: 40,
            hit_tokens: 200,
            loads: 2,
            loaded_blocks: 13,
            loaded_bytes: 13 << 21,
            load_wait_us: 6000.0,
            ..Default::default()
        });
        let with = summarize(&[r]);
        let h = with[0].1.host.as_ref().unwrap();
        assert_eq!((h.gpu_hit_rate, h.host_hit_rate), (0.3, 0.2));
        assert_eq!(
            h.recomputed_tokens, 500,
            "1000 prompt tokens − 300 GPU hits − 200 loaded"
        );
        assert_eq!(h.load_wait_ms_mean, 3.0);
        let table = host_table(&with);
        let row = table.lines().nth(1).unwrap();
        for figure in ["arc", "30.0", "20.0", "50.0", "500", "0.03"] {
            assert!(
                row.split_whitespace().any(|w| w == figure),
                "{figure} missing from {row:?}"
            );
        }
        let json = run_json("t", 10, 16, &with);
        assert_eq!(json["policies"]["lru"]["host"]["host_hit_tokens"], 200);
    }

    fn run(policy: &str, hit: u64) -> RunResult {
        RunResult {
            policy: policy.to_string(),
            prompt_tokens: 1000,
            hit_tokens: hit,
            output_tokens: 500,
            ttft_us: vec![1000.0, 3000.0, f64::NAN],
            turn_us: vec![2000.0, 4000.0, f64::NAN],
            makespan_us: 1e6,
            ..RunResult::default()
        }
    }

    #[test]
    fn deltas_and_gap_are_relative_to_lru_and_belady() {
        let s = summarize(&[run("lru", 400), run("cachesage", 600), run("belady", 800)]);
        let cs = &s[1].1;
        assert!((cs.hit_rate - 0.6).abs() < 1e-12);
        assert!((cs.delta_pp_vs_lru.unwrap() - 20.0).abs() < 1e-9);
        assert!((cs.gap_closed.unwrap() - 0.5).abs() < 1e-9);
        assert!((cs.ttft_ms_mean - 2.0).abs() < 1e-9);
        assert_eq!(cs.ttft_ms_p99, 3.0);
        assert_eq!(cs.throughput_tok_s, 500.0);
        let json = run_json("t.jsonl", 100, 16, &s);
        assert_eq!(json["policies"]["belady"]["hit_rate"], 0.8);
        assert!(table(&s).contains("cachesage"));
    }

    #[test]
    fn a_replay_that_proves_nothing_says_why() {
        let with = |policy: &str, hit: u64, evictions: u64, events: u64, score_calls: u64| {
            let mut r = run(policy, hit);
            r.evictions = evictions;
            r.policy_stats.events = events;
            r.policy_stats.score_calls = score_calls;
            r
        };
        // The cache never filled: one note, whatever else.
        let idle = summarize(&[with("lru", 400, 0, 90, 0), with("belady", 400, 0, 0, 0)]);
        let notes = proves_nothing_notes(&idle);
        assert!(
            notes.starts_with("! the cache never filled") && notes.lines().count() == 1,
            "{notes}"
        );
        // It filled, but a Wasm policy never ranked, and LRU is at the bound.
        let flat = summarize(&[
            with("lru", 400, 50, 90, 12),
            with("mine", 400, 50, 90, 0),
            with("belady", 400, 40, 0, 0),
        ]);
        let notes = proves_nothing_notes(&flat);
        assert!(
            notes.contains("! mine ranked nothing: 0 score calls in 50 evictions"),
            "{notes}"
        );
        assert!(notes.contains("! LRU is within 0.1 pp of the offline bound"), "{notes}");
        assert!(!notes.contains("! lru ") && !notes.contains("! belady"), "{notes}");
        assert!(table(&flat).contains(&notes), "the table carries the notes");
        // A replay that compares what it meant to: no note.
        let fine = summarize(&[with("lru", 400, 50, 90, 12), with("belady", 600, 40, 0, 0)]);
        assert_eq!(proves_nothing_notes(&fine), "");
        let row = table(&fine)
            .lines()
            .find(|l| l.starts_with("belady (offline)"))
            .map(str::to_string);
        assert!(
            row.is_some_and(|r| r.split_whitespace().any(|w| w == "–")),
            "Bélády ranks nothing: –"
        );
    }

    #[test]
    fn a_policy_that_failed_gets_columns_and_a_loud_note_and_a_healthy_one_none() {
        let mut broken = run("broken", 400);
        broken.policy_stats = crate::policies::PolicyStats {
            score_calls: 816,
            fallbacks: 816,
            failed_calls: 7,
            failures: [("score deadline".to_string(), 5), ("observe trap".to_string(), 2)].into(),
            restarts: 6,
            calls_skipped: 1600,
            gave_up: true,
            ..Default::default()
        };
        let s = summarize(&[run("lru", 400), broken]);
        let text = table(&s);
        let header: Vec<&str> = text.lines().next().unwrap().split_whitespace().collect();
        assert_eq!(
            header[header.len() - 6..],
            ["µs/item", "evictions", "rankings", "fallback", "failed", "restarts"]
        );
        let row: Vec<&str> = text
            .lines()
            .find(|l| l.starts_with("broken"))
            .unwrap()
            .split_whitespace()
            .collect();
        assert_eq!(row[row.len() - 3..], ["816", "7", "6"]);
        let lru_row: Vec<&str> = text
            .lines()
            .find(|l| l.starts_with("lru"))
            .unwrap()
            .split_whitespace()
            .collect();
        assert_eq!(lru_row[lru_row.len() - 3..], ["0", "0", "0"]);
        let note = text.lines().find(|l| l.starts_with("! broken")).expect("a note");
        assert!(
            note.contains("7 failed calls (observe trap ×2, score deadline ×5), 6 restarts"),
            "{note}"
        );
        assert!(note.contains("816 of 816 rankings fell back to LRU"), "{note}");
        assert!(note.contains("gave up on it"), "{note}");
        assert!(!text.contains("! lru"), "no note for a healthy policy");
        let json = run_json("t", 1, 16, &s);
        let broken = &json["policies"]["broken"];
        assert_eq!(broken["failures"]["score deadline"], 5);
        assert_eq!(
            (broken["restarts"].as_u64(), broken["gave_up"].as_bool()),
            (Some(6), Some(true))
        );
    }

    #[test]
    fn the_regret_table_breaks_regrets_down_by_content_and_agent() {
        use crate::audit::Eviction;
        let text = r#"{"session": "s1", "agent": "coder", "after_ms": 0, "prompt": [{"seg": "sys/coder", "tokens": 16}], "output_tokens": 1}"#;
        let trace = PreparedTrace::new(&crate::trace::Trace::parse(text).unwrap(), 16, false);
        let eviction = |content, requested_again_us| Eviction {
            at_us: 1_000,
            hash: 1,
            agent: 1,
            session: 1,
            position: 0,
            content,
            requested_again_us,
        };
        let audit = EvictionAudit {
            policy: "lru".into(),
            block_size: 16,
            evictions: vec![
                eviction(Content::Session, Some(3_000)),
                eviction(Content::Session, None),
                eviction(Content::Shared, Some(5_000)),
            ],
        };
        let text = regret_table(&trace, &[&audit]);
        let row = text.lines().find(|l| l.starts_with("lru")).unwrap();
        let cells: Vec<&str> = row.split_whitespace().collect();
        // policy, evicted, regretted, %, tokens, anchor, shared, session, median gap (ms)
        assert_eq!(cells, ["lru", "3", "2", "66.7", "32", "0/0", "1/1", "1/2", "4"]);
        let coder = text.lines().find(|l| l.starts_with("coder")).unwrap();
        assert_eq!(coder.split_whitespace().collect::<Vec<_>>(), ["coder", "2"]);

        let json = serde_json::to_value(audit.summary()).unwrap();
        assert_eq!(json["regretted_tokens"], 32);
        assert_eq!(
            json["by_content"]["session"],
            serde_json::json!({"evicted": 2, "regretted": 1})
        );
        assert_eq!(json["median_regret_gap_ms"], 4.0);
    }
}

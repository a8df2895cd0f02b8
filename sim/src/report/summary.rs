//! Every figure of each policy's replay, from its run result: hit rates, the gap to the offline
//! bound, latency, cost, failures; and the JSON `sim run --json` writes.

use serde::Serialize;

use crate::audit::{EvictionAudit, RegretSummary};
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
    /// The policy failed during the replay (any failed call: each one restarts the instance and
    /// loses what it learned since its last checkpoint), so the figures are not the policy's: a
    /// failed run ([`super::failed_replays`]).
    pub failed: bool,
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
                failed: s.failed_calls > 0 || s.restarts > 0,
                hit_tokens: r.hit_tokens,
                prompt_tokens: r.prompt_tokens,
                evictions: r.evictions,
                preemptions: r.preemptions,
                steps: r.steps,
                wall_s: r.wall_s,
                regret: r.audit.as_ref().map(EvictionAudit::summary),
                tenants: tenant_summaries(r),
                host: host_summary(r),
            };
            (r.policy.clone(), summary)
        })
        .collect()
}

/// Each tenant's hit figures and mean turn latency.
fn tenant_summaries(r: &RunResult) -> std::collections::BTreeMap<String, TenantSummary> {
    r.tenants
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

//! What one replay measured, in all and per tenant.

use crate::audit::EvictionAudit;
use crate::policies::PolicyStats;

/// What one replay measured.
#[derive(Debug, Clone, Default)]
pub struct RunResult {
    pub policy: String,
    /// Prompt tokens of trace requests, and how many of them hit the cache at first admission.
    pub prompt_tokens: u64,
    pub hit_tokens: u64,
    pub output_tokens: u64,
    /// Per trace request (uid order): time to first token and whole-turn latency (µs).
    pub ttft_us: Vec<f64>,
    pub turn_us: Vec<f64>,
    /// Per trace request (uid order): when it arrived and when it finished, from the first
    /// arrival (µs; NaN if it never ran).
    pub arrival_us: Vec<f64>,
    pub finish_us: Vec<f64>,
    /// Time from the first arrival to the last finish (µs).
    pub makespan_us: f64,
    /// Time the engine spent running steps (µs): utilisation = busy / makespan.
    pub busy_us: f64,
    /// `session-end` events the policy was told.
    pub sessions_ended: u64,
    pub steps: u64,
    pub preemptions: u64,
    pub evictions: u64,
    pub warmups: u64,
    /// Prompt tokens warm-ups computed (their uncached part): the prefill they cost.
    pub warmup_tokens: u64,
    /// Warm-ups asked for but not issued (one in flight already, or the anchor resident).
    pub warmups_skipped: u64,
    /// Trace requests longer than the whole cache (prompt + output): vLLM refuses them (its
    /// max_model_len must fit the cache); the session goes on without them.
    pub rejected: u64,
    /// Side effects other than warm-ups and, with engine priorities, `set-priority` (counted,
    /// not carried out).
    pub effects_ignored: u64,
    /// `set-priority` side effects carried out (engine priorities on).
    pub priorities_set: u64,
    /// Trace requests that arrived with a priority other than 0.
    pub demoted_requests: u64,
    /// Trace request uids in the order they were first admitted (Bélády's reference future).
    pub admission_order: Vec<u32>,
    /// Prompt and hit tokens per tenant, in the trace's tenant order (one entry, `default`, for a
    /// trace without tenants).
    pub tenants: Vec<TenantFigures>,
    pub policy_stats: PolicyStats,
    /// Every eviction and whether it was regretted, when the replay was audited.
    pub audit: Option<EvictionAudit>,
    /// Wall time of the replay (seconds).
    pub wall_s: f64,
    /// What the host tier did, when there was one.
    pub host: Option<crate::offload::connector::HostTierFigures>,
    /// The live sessions' contexts summed over time (token·µs), and the tokens the admission
    /// stage counted resident (the live ones without a stage that keeps a ledger): divided by
    /// makespan × capacity, the mean working set against the cache.
    pub demand_token_us: f64,
    pub resident_token_us: f64,
    /// What the admission stage did, when there was one.
    pub admission: Option<crate::admission::StageFigures>,
    /// Held requests the replay had to let go because the stage would never have (a stage
    /// fault: 0 for every arm here).
    pub stuck_releases: u64,
    /// Continuum's pins: set, and ended by their TTL rather than by the program's next call.
    pub pins: u64,
    pub pins_expired: u64,
}

/// One tenant's share of a replay's figures.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TenantFigures {
    pub name: String,
    pub prompt_tokens: u64,
    pub hit_tokens: u64,
    /// Trace requests finished, and the sum of their turn latencies (µs).
    pub requests: u64,
    pub turn_us_sum: f64,
}

impl TenantFigures {
    pub fn hit_rate(&self) -> f64 {
        hit_rate(self.hit_tokens, self.prompt_tokens)
    }
}

impl RunResult {
    /// The figures of the tenant named `name`.
    pub fn tenant(&self, name: &str) -> Option<&TenantFigures> {
        self.tenants.iter().find(|t| t.name == name)
    }

    pub fn hit_rate(&self) -> f64 {
        hit_rate(self.hit_tokens, self.prompt_tokens)
    }
}

/// Hit tokens as a share of prompt tokens (0 with no prompt tokens).
fn hit_rate(hit_tokens: u64, prompt_tokens: u64) -> f64 {
    if prompt_tokens == 0 {
        0.0
    } else {
        hit_tokens as f64 / prompt_tokens as f64
    }
}

//! The scaled model's settings (`init` keys) and their defaults.

use agentrt_sdk::Config;

/// Every key the scaled model accepts (`model` picks the model; see the crate root).
pub const KEYS: &[&str] = &[
    "model",
    "k",
    "prior",
    "max-agents",
    "max-sessions",
    "prefetch",
    "prefetch-threshold",
    "warmup-cooldown-ms",
    "warmup-max-queue",
    "warmup-budget",
    "gap-model",
    "ended-sessions",
];

/// Upper bound of `max-agents`: the snapshot budget grows ~100 bytes per agent, so 65,536 agents
/// stay under 7 MB.
pub const MAX_AGENTS_LIMIT: usize = 65_536;
pub const MAX_SESSIONS_LIMIT: usize = 65_536;

#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    /// Agent steps looked ahead from a live session.
    pub k: u32,
    /// Pseudo-count added to a row's total before it becomes probabilities: with one observed
    /// session, `prior = 1` gives its transitions probability 1/2, not 1.
    pub prior: f32,
    pub max_agents: usize,
    pub max_sessions: usize,
    /// Warm the predicted next agent's anchor (`false` = eviction only).
    pub prefetch: bool,
    /// Probability of a live session's next call that is needed to warm an anchor.
    pub prefetch_threshold: f32,
    /// An agent's anchor is not warmed again within this much time (ms).
    pub warmup_cooldown_ms: u32,
    /// No warm-up while the engine's waiting queue is deeper than this (warm-ups must not steal
    /// capacity from user requests under load).
    pub warmup_max_queue: u32,
    /// Warm-ups may prefill at most this fraction of the prompt tokens user requests bring: a
    /// warm-up's prefill is capacity taken from them, and its blocks push others out.
    pub warmup_budget: f32,
    /// Time a waiting session's next call by the distribution of its agent's gaps in its state
    /// (`true`, default), or by the mean gap minus the time waited (`false`: the first version).
    pub gap_histograms: bool,
    /// Value the content of sessions reported ended by how often ended sessions came back
    /// (`true`, default), or as dead (`false`: the first version).
    pub ended_sessions: bool,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            k: 3,
            prior: 1.0,
            max_agents: 10_000,
            max_sessions: 4096,
            prefetch: true,
            prefetch_threshold: 0.5,
            warmup_cooldown_ms: 2_000,
            warmup_max_queue: 0,
            warmup_budget: 0.05,
            gap_histograms: true,
            ended_sessions: true,
        }
    }
}

impl Params {
    pub fn from_config(config: &Config) -> Result<Self, String> {
        config.expect_only(KEYS)?;
        let d = Params::default();
        let p = Params {
            k: config.parse_or("k", d.k)?,
            prior: config.parse_or("prior", d.prior)?,
            max_agents: config.parse_or("max-agents", d.max_agents)?,
            max_sessions: config.parse_or("max-sessions", d.max_sessions)?,
            prefetch: config.parse_or("prefetch", d.prefetch)?,
            prefetch_threshold: config.parse_or("prefetch-threshold", d.prefetch_threshold)?,
            warmup_cooldown_ms: config.parse_or("warmup-cooldown-ms", d.warmup_cooldown_ms)?,
            warmup_max_queue: config.parse_or("warmup-max-queue", d.warmup_max_queue)?,
            warmup_budget: config.parse_or("warmup-budget", d.warmup_budget)?,
            gap_histograms: match config.get("gap-model").unwrap_or("histogram") {
                "histogram" => true,
                "mean" => false,
                other => return Err(format!("config key `gap-model`: {other:?} is not histogram or mean")),
            },
            ended_sessions: config.parse_or("ended-sessions", d.ended_sessions)?,
        };
        let check = |name: &str, ok: bool, what: &str| {
            if ok {
                Ok(())
            } else {
                Err(format!("config key `{name}`: {what}"))
            }
        };
        check("k", (1..=6).contains(&p.k), "must be 1..=6")?;
        check(
            "prior",
            p.prior.is_finite() && p.prior >= 0.0,
            "must be a finite number ≥ 0",
        )?;
        check(
            "max-agents",
            (1..=MAX_AGENTS_LIMIT).contains(&p.max_agents),
            "must be 1..=65536",
        )?;
        check(
            "max-sessions",
            (1..=MAX_SESSIONS_LIMIT).contains(&p.max_sessions),
            "must be 1..=65536",
        )?;
        check(
            "prefetch-threshold",
            (0.0..=1.0).contains(&p.prefetch_threshold),
            "must be in [0, 1]",
        )?;
        check(
            "warmup-budget",
            p.warmup_budget.is_finite() && (0.0..=1.0).contains(&p.warmup_budget),
            "must be in [0, 1]",
        )?;
        Ok(p)
    }
}

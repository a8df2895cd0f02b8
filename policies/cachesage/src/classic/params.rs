//! CacheSage's configuration: every knob, its default, and why.

use agentrt_sdk::Config;

/// Tunables, set through `init` (`key=value`).
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    /// `window`: transitions remembered per source agent. The matrix is a sliding window so it
    /// follows a workload that changes; per source, so a rarely-seen agent's row is not pushed out
    /// by a busy one. 32 is enough to tell a 0.6/0.4 branch from uniform noise at 3σ.
    pub window: usize,
    /// `k`: the survival horizon in agent steps — "runs again within K steps". 3 as published.
    pub k: u32,
    /// `threshold`: an edge enters the survival graph when its probability reaches this (and is
    /// significantly above uniform, see `z`). Low edges add noise, not foresight.
    pub threshold: f32,
    /// `z`: significance of the test that tells learned structure from noise, as a normal
    /// quantile (3.5 ≈ p = 0.0002 per row). Rows that fail it add no edges; with no edges at all
    /// the policy ranks exactly like LRU.
    pub z: f32,
    /// `min-samples`: transitions out of an agent before its row is trusted at all.
    pub min_samples: u32,
    /// `w`: weight of survival against recency in `w · p_survive + exp(-decay · age)`. 4 as
    /// published: a clear survival difference beats any recency difference.
    pub w: f32,
    /// `decay`: recency decay over the candidate batch's age span (age normalised to [0, 1]):
    /// the oldest candidate's recency term is exp(-decay). Normalising makes the term independent
    /// of the engine's clock units.
    pub decay: f32,
    /// `prefetch`: issue warm-ups for the predicted next agent's anchor (`false` = eviction only).
    pub prefetch: bool,
    /// `prefetch-threshold`: the predicted next-step probability an agent needs to be warmed.
    pub prefetch_threshold: f32,
    /// `warmup-cooldown`: `act` calls before the same agent may be warmed again.
    pub warmup_cooldown: u32,
    /// `max-agents`: agents tracked; beyond it the least recently seen is aged out. Bounds state.
    pub max_agents: usize,
    /// `max-sessions`: live sessions tracked; beyond it the least recently active is dropped.
    pub max_sessions: usize,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            window: 32,
            k: 3,
            threshold: 0.2,
            z: 3.5,
            min_samples: 6,
            w: 4.0,
            decay: 2.0,
            prefetch: true,
            prefetch_threshold: 0.5,
            warmup_cooldown: 16,
            max_agents: 32,
            max_sessions: 1024,
        }
    }
}

/// Hard ceilings that keep state inside its budget whatever the configuration says.
pub const MAX_AGENTS_LIMIT: usize = 42;
pub const MAX_WINDOW_LIMIT: usize = 255;
pub const MAX_SESSIONS_LIMIT: usize = 1024;

const KEYS: &[&str] = &[
    "window",
    "k",
    "threshold",
    "z",
    "min-samples",
    "w",
    "decay",
    "prefetch",
    "prefetch-threshold",
    "warmup-cooldown",
    "max-agents",
    "max-sessions",
];

impl Params {
    pub fn from_config(config: &Config) -> Result<Self, String> {
        config.expect_only(KEYS)?;
        let d = Params::default();
        let p = Params {
            window: config.parse_or("window", d.window)?,
            k: config.parse_or("k", d.k)?,
            threshold: config.parse_or("threshold", d.threshold)?,
            z: config.parse_or("z", d.z)?,
            min_samples: config.parse_or("min-samples", d.min_samples)?,
            w: config.parse_or("w", d.w)?,
            decay: config.parse_or("decay", d.decay)?,
            prefetch: config.parse_or("prefetch", d.prefetch)?,
            prefetch_threshold: config.parse_or("prefetch-threshold", d.prefetch_threshold)?,
            warmup_cooldown: config.parse_or("warmup-cooldown", d.warmup_cooldown)?,
            max_agents: config.parse_or("max-agents", d.max_agents)?,
            max_sessions: config.parse_or("max-sessions", d.max_sessions)?,
        };
        let in_range = |name: &str, ok: bool, what: &str| {
            if ok {
                Ok(())
            } else {
                Err(format!("config key `{name}`: {what}"))
            }
        };
        in_range("window", (1..=MAX_WINDOW_LIMIT).contains(&p.window), "must be 1..=255")?;
        in_range("k", (1..=16).contains(&p.k), "must be 1..=16")?;
        in_range("threshold", (0.0..=1.0).contains(&p.threshold), "must be in [0, 1]")?;
        in_range(
            "max-agents",
            (1..=MAX_AGENTS_LIMIT).contains(&p.max_agents),
            "must be 1..=42 (states are one byte)",
        )?;
        in_range(
            "max-sessions",
            (1..=MAX_SESSIONS_LIMIT).contains(&p.max_sessions),
            "must be 1..=1024",
        )?;
        in_range("w", p.w.is_finite() && p.w >= 0.0, "must be a finite number ≥ 0")?;
        in_range(
            "decay",
            p.decay.is_finite() && p.decay >= 0.0,
            "must be a finite number ≥ 0",
        )?;
        Ok(p)
    }
}

//! CacheSage's settings: one `init` key per setting, each spelled one way, with its default and
//! the range it is checked against. docs/cachesage.md has the table.

use agentrt_sdk::Config;

/// Upper bound of `max-agents`: the snapshot budget grows ~100 bytes per agent, so 65,536 agents
/// stay under 7 MB.
pub const MAX_AGENTS_LIMIT: usize = 65_536;
pub const MAX_SESSIONS_LIMIT: usize = 65_536;

#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// `k`: agent steps looked ahead from a live session.
    pub k: u32,
    /// `prior`: pseudo-count added to a row's total before it becomes probabilities: with one
    /// observed session, `prior = 1` gives its transitions probability 1/2, not 1.
    pub prior: f32,
    /// `max-agents`, `max-sessions`: the model's tables.
    pub max_agents: usize,
    pub max_sessions: usize,
    /// `prefetch`: warm the predicted next agent's anchor (`false` = eviction only).
    pub prefetch: bool,
    /// `prefetch-threshold`: probability of a live session's next call needed to warm an anchor.
    pub prefetch_threshold: f32,
    /// `warmup-cooldown-ms`: an agent's anchor is not warmed again within this much time, doubled at
    /// every warm-up of it lost in a row.
    pub warmup_cooldown_ms: u32,
    /// `warmup-max-queue`: no warm-up while the engine's waiting queue is deeper than this.
    pub warmup_max_queue: u32,
    /// `warmup-budget`: warm-ups may prefill at most this fraction of the prompt tokens user
    /// requests bring.
    pub warmup_budget: f32,
    /// `guard`: let the model order only where its evidence says it wins (`false`: always).
    pub guard: bool,
    /// `hints`: hear what the framework says of sessions' lives (`false`: ignore it).
    pub hints: bool,
}

impl Default for Settings {
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
            guard: true,
            hints: true,
        }
    }
}

/// Every key, in the order of the documentation's table.
const KEYS: &[&str] = &[
    "k",
    "prior",
    "max-agents",
    "max-sessions",
    "prefetch",
    "prefetch-threshold",
    "warmup-cooldown-ms",
    "warmup-max-queue",
    "warmup-budget",
    "guard",
    "hints",
];

fn check(key: &str, ok: bool, what: &str) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(format!("config key `{key}`: {what}"))
    }
}

impl Settings {
    /// The settings `config` gives, or an error naming the key that is unknown or out of range.
    pub fn from_config(config: &Config) -> Result<Self, String> {
        config.expect_only(KEYS)?;
        let d = Settings::default();
        let s = Settings {
            k: config.parse_or("k", d.k)?,
            prior: config.parse_or("prior", d.prior)?,
            max_agents: config.parse_or("max-agents", d.max_agents)?,
            max_sessions: config.parse_or("max-sessions", d.max_sessions)?,
            prefetch: config.parse_or("prefetch", d.prefetch)?,
            prefetch_threshold: config.parse_or("prefetch-threshold", d.prefetch_threshold)?,
            warmup_cooldown_ms: config.parse_or("warmup-cooldown-ms", d.warmup_cooldown_ms)?,
            warmup_max_queue: config.parse_or("warmup-max-queue", d.warmup_max_queue)?,
            warmup_budget: config.parse_or("warmup-budget", d.warmup_budget)?,
            guard: config.parse_or("guard", d.guard)?,
            hints: config.parse_or("hints", d.hints)?,
        };
        check("k", (1..=6).contains(&s.k), "must be 1..=6")?;
        check(
            "prior",
            s.prior.is_finite() && s.prior >= 0.0,
            "must be a finite number ≥ 0",
        )?;
        check(
            "max-agents",
            (1..=MAX_AGENTS_LIMIT).contains(&s.max_agents),
            "must be 1..=65536",
        )?;
        check(
            "max-sessions",
            (1..=MAX_SESSIONS_LIMIT).contains(&s.max_sessions),
            "must be 1..=65536",
        )?;
        check(
            "prefetch-threshold",
            (0.0..=1.0).contains(&s.prefetch_threshold),
            "must be in [0, 1]",
        )?;
        check(
            "warmup-budget",
            s.warmup_budget.is_finite() && (0.0..=1.0).contains(&s.warmup_budget),
            "must be in [0, 1]",
        )?;
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(pairs: &[(&str, &str)]) -> Result<Settings, String> {
        Settings::from_config(&Config::new(
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        ))
    }

    #[test]
    fn every_key_is_spelled_one_way_and_a_bad_one_is_named() {
        assert_eq!(parse(&[]).unwrap(), Settings::default());
        let s = parse(&[("k", "2"), ("guard", "false"), ("warmup-cooldown-ms", "10")]).unwrap();
        assert_eq!((s.k, s.guard, s.warmup_cooldown_ms), (2, false, 10));
        assert!(parse(&[("model", "classic")]).unwrap_err().contains("model"));
        assert!(parse(&[("k", "9")]).unwrap_err().contains("`k`"));
        assert!(parse(&[("warmup-budget", "2")]).unwrap_err().contains("warmup-budget"));
    }
}

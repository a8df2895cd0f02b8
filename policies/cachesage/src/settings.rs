//! CacheSage's settings: one `init` key per setting, each spelled one way, with its default and
//! the range it is checked against, declared once below in the order of docs/cachesage.md's table
//! (the order `from_config` checks them in).

use agentrt_sdk::Config;

/// Upper bound of `max-agents`: the snapshot budget grows ~100 bytes per agent, so 65,536 agents
/// stay under 7 MB.
pub const MAX_AGENTS_LIMIT: usize = 65_536;
pub const MAX_SESSIONS_LIMIT: usize = 65_536;

/// Each setting's field, type, default and key, and the check its value must pass, if any; every
/// value is parsed before any is checked.
macro_rules! settings {
    ($($(#[$doc:meta])* $field:ident: $ty:ty = $default:expr, $key:literal $(if $ok:expr, $what:literal)?;)*) => {
        #[derive(Debug, Clone, PartialEq)]
        pub struct Settings {
            $($(#[$doc])* pub $field: $ty,)*
        }

        impl Default for Settings {
            fn default() -> Self {
                Self { $($field: $default,)* }
            }
        }

        impl Settings {
            /// The settings `config` gives, or an error naming the key that is unknown or out of range.
            pub fn from_config(config: &Config) -> Result<Self, String> {
                config.expect_only(&[$($key),*])?;
                let s = Self { $($field: config.parse_or($key, $default)?,)* };
                $($(if !($ok)(&s.$field) {
                    return Err(format!("config key `{}`: {}", $key, $what));
                })?)*
                Ok(s)
            }
        }
    };
}

settings! {
    /// `k`: agent steps looked ahead from a live session.
    k: u32 = 3, "k" if |v: &u32| (1..=6).contains(v), "must be 1..=6";
    /// `prior`: pseudo-count added to a row's total before it becomes probabilities: with one
    /// observed session, `prior = 1` gives its transitions probability 1/2, not 1.
    prior: f32 = 1.0, "prior" if |v: &f32| v.is_finite() && *v >= 0.0, "must be a finite number ≥ 0";
    /// `max-agents`, `max-sessions`: the model's tables.
    max_agents: usize = 10_000, "max-agents" if |v| (1..=MAX_AGENTS_LIMIT).contains(v), "must be 1..=65536";
    max_sessions: usize = 4096, "max-sessions" if |v| (1..=MAX_SESSIONS_LIMIT).contains(v), "must be 1..=65536";
    /// `prefetch`: warm the predicted next agent's anchor (`false` = eviction only).
    prefetch: bool = true, "prefetch";
    /// `prefetch-threshold`: probability of a live session's next call needed to warm an anchor.
    prefetch_threshold: f32 = 0.5, "prefetch-threshold" if |v| (0.0..=1.0).contains(v), "must be in [0, 1]";
    /// `warmup-cooldown-ms`: an agent's anchor is not warmed again within this much time, doubled at
    /// every warm-up of it lost in a row.
    warmup_cooldown_ms: u32 = 2_000, "warmup-cooldown-ms";
    /// `warmup-max-queue`: no warm-up while the engine's waiting queue is deeper than this.
    warmup_max_queue: u32 = 0, "warmup-max-queue";
    /// `warmup-budget`: warm-ups may prefill at most this fraction of the prompt tokens user
    /// requests bring.
    warmup_budget: f32 = 0.05, "warmup-budget" if |v| (0.0..=1.0).contains(v), "must be in [0, 1]";
    /// `guard`: let the model order only where its evidence says it wins (`false`: always).
    guard: bool = true, "guard";
    /// `hints`: hear what the framework says of sessions' lives (`false`: ignore it).
    hints: bool = true, "hints";
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

//! The limits a replayed policy runs under, and their flags (`sim run|table|…`, `agentrt policy
//! test`). The flags have the names of `agentrt serve`'s (`--policy-memory-mib`,
//! `--policy-deadline-ms`, `--policy-failure-threshold`) and the memory cap's default is the
//! host's ([`SandboxLimits::default`]); two differ on purpose:
//!
//! - the call deadline is [`REPLAY_DEADLINE`], not serve's 20 ms: a replay ranks the whole free
//!   queue (tens of thousands of blocks) in one call, on a CPU shared with other work;
//! - the breaker gives up for the rest of the run ([`BreakerConfig::give_up_after`]): a replay's
//!   clock is simulated, and a policy that keeps failing would otherwise pay its deadline again
//!   after every wall-clock backoff (a `score` that spins: ~7 s per ranking, ~95 minutes a run).

use std::time::Duration;

use agentrt_runtime::{BreakerConfig, SandboxLimits, SlotConfig};

/// How long one call of a replayed policy may run: generous next to the serving deadline, so
/// time is measured rather than enforced; short enough that a policy that never answers costs a
/// run seconds, not hours.
pub const REPLAY_DEADLINE: Duration = Duration::from_secs(5);

/// Flags for the limits of a replayed policy's slot.
#[derive(clap::Args, Debug, Clone)]
pub struct PolicyLimitArgs {
    /// Most memory one policy instance may hold, its linear memories and tables together, in MiB.
    #[arg(long, default_value_t = (SandboxLimits::default().memory_bytes >> 20) as u64)]
    pub policy_memory_mib: u64,
    /// Most CPU time one policy call may use, copying its result included; then it is interrupted and
    /// the call fails (a ranking falls back to LRU). Serve's default is 20 ms; a replay ranks far
    /// more candidates per call.
    #[arg(long, default_value_t = REPLAY_DEADLINE.as_millis() as u64)]
    pub policy_deadline_ms: u64,
    /// Failed calls of one primitive in a row after which the replay gives up on the policy for
    /// the rest of the run (rankings LRU, no side effects; reported under the table). 0 = never.
    #[arg(long, default_value_t = BreakerConfig::default().failure_threshold)]
    pub policy_failure_threshold: u32,
}

impl Default for PolicyLimitArgs {
    fn default() -> Self {
        Self {
            policy_memory_mib: (SandboxLimits::default().memory_bytes >> 20) as u64,
            policy_deadline_ms: REPLAY_DEADLINE.as_millis() as u64,
            policy_failure_threshold: BreakerConfig::default().failure_threshold,
        }
    }
}

impl PolicyLimitArgs {
    /// The limits, or an error naming the flag that is out of range.
    pub fn limits(&self) -> anyhow::Result<ReplayLimits> {
        Ok(ReplayLimits {
            sandbox: SandboxLimits::from_flags(self.policy_memory_mib, self.policy_deadline_ms)
                .map_err(anyhow::Error::msg)?,
            failure_threshold: self.policy_failure_threshold,
        })
    }
}

/// What every replayed slot is held to.
#[derive(Debug, Clone)]
pub struct ReplayLimits {
    pub sandbox: SandboxLimits,
    /// See [`PolicyLimitArgs::policy_failure_threshold`].
    pub failure_threshold: u32,
}

impl Default for ReplayLimits {
    fn default() -> Self {
        PolicyLimitArgs::default().limits().expect("the defaults are in range")
    }
}

impl ReplayLimits {
    /// A slot named `label` with `init` configuration under these limits. No periodic
    /// checkpoints: those are a serving concern, and a replay measures state size explicitly.
    pub fn slot_config(&self, label: String, init: &[(&str, &str)]) -> SlotConfig {
        SlotConfig {
            checkpoint_every: None,
            breaker: BreakerConfig::give_up_after(self.failure_threshold),
            ..SlotConfig::new(label)
                .with_init(init.iter().copied())
                .with_limits(self.sandbox.clone())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        limits: PolicyLimitArgs,
    }

    #[test]
    fn the_flags_set_the_slot_and_their_defaults_are_the_documented_ones() {
        let parse = |args: &[&str]| {
            Flags::try_parse_from(std::iter::once("sim").chain(args.iter().copied()))
                .map(|f| f.limits)
                .unwrap()
        };
        let defaults = parse(&[]).limits().unwrap();
        assert_eq!(defaults.sandbox.memory_bytes, SandboxLimits::default().memory_bytes);
        assert_eq!(defaults.sandbox.memory_bytes, 128 << 20);
        assert_eq!(defaults.sandbox.call_deadline, REPLAY_DEADLINE);
        assert_eq!(defaults.failure_threshold, 5);

        let set = parse(&[
            "--policy-memory-mib",
            "300",
            "--policy-deadline-ms",
            "250",
            "--policy-failure-threshold",
            "2",
        ]);
        let slot = set.limits().unwrap().slot_config("sim/x".into(), &[("k", "v")]);
        assert_eq!(slot.limits.memory_bytes, 300 << 20);
        assert_eq!(slot.limits.call_deadline, Duration::from_millis(250));
        assert_eq!(slot.breaker, BreakerConfig::give_up_after(2));
        assert_eq!(slot.init, vec![("k".to_string(), "v".to_string())]);
        assert_eq!(slot.checkpoint_every, None);
    }

    #[test]
    fn a_limit_out_of_range_names_its_flag() {
        let zero = PolicyLimitArgs {
            policy_deadline_ms: 0,
            ..PolicyLimitArgs::default()
        };
        assert!(zero.limits().unwrap_err().to_string().contains("--policy-deadline-ms"));
        let huge = PolicyLimitArgs {
            policy_memory_mib: u64::MAX,
            ..PolicyLimitArgs::default()
        };
        assert!(huge.limits().unwrap_err().to_string().contains("--policy-memory-mib"));
    }
}

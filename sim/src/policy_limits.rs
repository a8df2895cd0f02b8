//! The limits a replayed policy runs under, and their flags (`sim run|table|…`, `agentrt policy
//! test`'s replays). A replay's figures must not depend on how busy the machine is, so a replayed
//! policy's calls are bounded by **fuel** (an instruction budget: the same call burns the same
//! fuel on any machine, loaded or idle), never by a clock: the engine a replay runs its policies
//! in is built with [`CpuBound::Fuel`] ([`replay_engine_options`]). `agentrt serve` bounds calls by
//! a deadline instead (`--policy-deadline-ms`): a server answers in time or not at all.
//!
//! - `--policy-fuel` ([`REPLAY_FUEL`]): generous next to what a ranking of the whole free queue
//!   burns (tens of thousands of items in one call), small enough that a policy that never
//!   answers costs a run seconds, not hours;
//! - `--policy-memory-mib`: the host's default cap ([`SandboxLimits::default`]);
//! - the breaker gives up for the rest of the run ([`BreakerConfig::give_up_after`]): a replay's
//!   clock is simulated, and a policy that keeps failing would otherwise pay its budget again
//!   at every call.
//!
//! A replay in which the policy failed at all — a call out of fuel or memory, a trap, a wrong
//! answer, each of which restarts the instance from its last checkpoint and loses what it learned
//! since — is a failed run: its figures are not the policy's, and the command says so and exits
//! with an error ([`crate::report::failed_replays`]).

use agentrt_runtime::{BreakerConfig, CpuBound, EngineOptions, PoolingOptions, SandboxLimits, SlotConfig};

/// Fuel one call of a replayed policy may burn (≈ Wasm instructions): a hundred times what
/// CacheSage's calls needed on a replay of Claude Code conversations (docs/simulator.md), and a
/// call that spins through it stops after seconds, not hours.
pub const REPLAY_FUEL: u64 = 20_000_000_000;

/// The engine a replay's policies run in: calls bounded by fuel, `random-seed` fixed, an instance
/// pool of `max_instances` fitting `memory_cap` bytes per instance.
pub fn replay_engine_options(max_instances: u32, memory_cap: usize) -> EngineOptions {
    EngineOptions {
        pooling: Some(PoolingOptions {
            max_instances,
            ..PoolingOptions::default()
        }),
        cpu_bound: CpuBound::Fuel,
        seed: Some(7),
        ..EngineOptions::default()
    }
    .fitting_memory_cap(memory_cap)
}

/// Flags for the limits of a replayed policy's slot.
#[derive(clap::Args, Debug, Clone)]
pub struct PolicyLimitArgs {
    /// Most memory one policy instance may hold, its linear memories and tables together, in MiB.
    #[arg(long, default_value_t = (SandboxLimits::default().memory_bytes >> 20) as u64)]
    pub policy_memory_mib: u64,
    /// Most fuel (≈ Wasm instructions) one policy call may burn; then it is stopped and the
    /// call fails (a ranking falls back to LRU, and the run fails). A
    /// budget of instructions, not of time, so that a replay's figures do not depend on how busy
    /// the machine is.
    #[arg(long, default_value_t = REPLAY_FUEL)]
    pub policy_fuel: u64,
    /// Failed calls of one primitive in a row after which the replay gives up on the policy for
    /// the rest of the run (rankings LRU, no side effects; the run fails). 0 = never.
    #[arg(long, default_value_t = BreakerConfig::default().failure_threshold)]
    pub policy_failure_threshold: u32,
}

impl Default for PolicyLimitArgs {
    fn default() -> Self {
        Self {
            policy_memory_mib: (SandboxLimits::default().memory_bytes >> 20) as u64,
            policy_fuel: REPLAY_FUEL,
            policy_failure_threshold: BreakerConfig::default().failure_threshold,
        }
    }
}

impl PolicyLimitArgs {
    /// The limits, or an error naming the flag that is out of range.
    pub fn limits(&self) -> anyhow::Result<ReplayLimits> {
        anyhow::ensure!(self.policy_fuel > 0, "--policy-fuel must be at least 1");
        let mut sandbox = SandboxLimits::from_flags(self.policy_memory_mib, 1).map_err(anyhow::Error::msg)?;
        sandbox.call_fuel = self.policy_fuel;
        Ok(ReplayLimits {
            sandbox,
            failure_threshold: self.policy_failure_threshold,
        })
    }
}

/// What every replayed slot is held to.
#[derive(Debug, Clone)]
pub struct ReplayLimits {
    /// The memory cap and `call_fuel` are a replay's; the engine bounds calls by fuel, so the
    /// deadline is not used.
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
        assert_eq!(defaults.sandbox.call_fuel, REPLAY_FUEL);
        assert_eq!(defaults.failure_threshold, 5);

        let set = parse(&[
            "--policy-memory-mib",
            "300",
            "--policy-fuel",
            "250000",
            "--policy-failure-threshold",
            "2",
        ]);
        let slot = set.limits().unwrap().slot_config("sim/x".into(), &[("k", "v")]);
        assert_eq!(slot.limits.memory_bytes, 300 << 20);
        assert_eq!(slot.limits.call_fuel, 250_000);
        assert_eq!(slot.breaker, BreakerConfig::give_up_after(2));
        assert_eq!(slot.init, vec![("k".to_string(), "v".to_string())]);
        assert_eq!(slot.checkpoint_every, None);
        assert_eq!(replay_engine_options(4, 300 << 20).cpu_bound, CpuBound::Fuel);
    }

    #[test]
    fn a_limit_out_of_range_names_its_flag() {
        let zero = PolicyLimitArgs {
            policy_fuel: 0,
            ..PolicyLimitArgs::default()
        };
        assert!(zero.limits().unwrap_err().to_string().contains("--policy-fuel"));
        let huge = PolicyLimitArgs {
            policy_memory_mib: u64::MAX,
            ..PolicyLimitArgs::default()
        };
        assert!(huge.limits().unwrap_err().to_string().contains("--policy-memory-mib"));
    }
}

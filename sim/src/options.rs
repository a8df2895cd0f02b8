//! The flag groups every experiment shares — how a replay runs (`ReplayOptions`), the policy
//! slots beside it (`SlotArgs`), the `fleet` workload's settings (`FleetArgs`).

use std::path::PathBuf;

use agentrt_runtime::{ComponentLookup, SlowCompileNotice};
use anyhow::Context;
use clap::Args;

use crate::harness::PolicyHost;
use crate::policies::{PolicySpec, Rerank};
use crate::policy_limits::PolicyLimitArgs;
use crate::scheduler::SimConfig;
use crate::setting::DEFAULT_RERANK_MS;
use crate::workloads::fleet::FleetParams;

/// Settings of the `fleet` workload (many agent applications sharing one engine).
#[derive(Args, Debug, Clone)]
pub struct FleetArgs {
    /// fleet: agent applications sharing the engine.
    #[arg(long, default_value_t = FleetParams::default().applications)]
    pub applications: usize,
    /// fleet: multiplier on every anchor's size.
    #[arg(long, default_value_t = FleetParams::default().anchor_scale)]
    pub anchor_scale: f64,
    /// fleet: Zipf exponent of application popularity.
    #[arg(long, default_value_t = FleetParams::default().zipf)]
    pub zipf: f64,
}

impl FleetArgs {
    pub fn params(&self) -> FleetParams {
        FleetParams {
            applications: self.applications,
            anchor_scale: self.anchor_scale,
            zipf: self.zipf,
        }
    }
}

#[derive(Args, Debug)]
pub struct ReplayOptions {
    /// Identify agents by anchor hashing alone (hide the trace's `agent` field).
    #[arg(long)]
    pub hide_agents: bool,
    /// Refresh a Wasm policy's ranking of the free queue at most every this many milliseconds of
    /// simulated time (0 = every scheduler step). See docs/simulator.md for the measured effect.
    #[arg(long, default_value_t = DEFAULT_RERANK_MS)]
    pub rerank_ms: f64,
    /// Look for policy components only in this folder — but for the baseline `lru`, which comes
    /// built into agentrt when the folder has none (default: `$AGENTRT_COMPONENTS_DIR`, beside the
    /// binary, built into it, then the source tree's build). A policy may also be named by a path
    /// ending in `.wasm`.
    #[arg(long)]
    pub components: Option<PathBuf>,
    #[command(flatten)]
    pub limits: PolicyLimitArgs,
    #[command(flatten, next_help_heading = "Lifecycle hints and session ends")]
    pub session_ends: crate::conditions::SessionEndArgs,
    #[command(flatten, next_help_heading = "Lifecycle hints and session ends")]
    pub hints: crate::hints::HintArgs,
}

impl ReplayOptions {
    /// The engine settings of a replay of `blocks` blocks under these options.
    pub fn config(&self, blocks: usize) -> anyhow::Result<SimConfig> {
        let mut cfg = SimConfig::new(blocks);
        cfg.session_ends = self.session_ends.rule()?;
        cfg.hints = self.hints.told()?;
        Ok(cfg)
    }

    /// Where components are found: `--components` (and the built-in baseline) when given, else
    /// `default`.
    pub(crate) fn components(&self, default: &ComponentLookup) -> ComponentLookup {
        match &self.components {
            Some(dir) => default.given_folder(dir.clone()),
            None => default.clone(),
        }
    }

    /// The host that loads and starts the replay's policies, under the limits of the flags; a
    /// long first compile is announced on stderr.
    pub(crate) fn host(&self, default: &ComponentLookup) -> anyhow::Result<PolicyHost> {
        PolicyHost::with_limits(
            self.components(default),
            self.limits.limits()?,
            Some(SlowCompileNotice::stderr()),
        )
    }

    pub(crate) fn rerank(&self) -> Rerank {
        if self.rerank_ms <= 0.0 {
            Rerank::EveryStep
        } else {
            Rerank::EveryMs(self.rerank_ms)
        }
    }
}

/// Policy slots beside the cache policy, with `serve`'s flag names (docs/policy-slots.md).
#[derive(Args, Debug, Clone, Default)]
pub struct SlotArgs {
    /// `NAME=COMPONENT` (repeatable): a policy slot beside each replayed policy (e.g.
    /// `fair=fair-share`): it hears every request event and answers through side effects, merged
    /// as `serve` merges them.
    #[arg(long = "slot", value_name = "NAME=COMPONENT")]
    pub slots: Vec<String>,
    /// `NAME:KEY=VALUE` (repeatable): passed to slot NAME's `init`.
    #[arg(long = "slot-config", value_name = "NAME:KEY=VALUE")]
    pub slot_configs: Vec<String>,
    /// Model vLLM's priority scheduling (`--scheduling-policy priority`) with the slots'
    /// `set-priority` demotions sent as request priorities, as `serve --engine-priorities` does.
    #[arg(long)]
    pub engine_priorities: bool,
}

impl SlotArgs {
    /// The slots in order, each a component with its `init` settings.
    pub fn slots(&self) -> anyhow::Result<Vec<(String, PolicySpec)>> {
        let mut slots: Vec<(String, PolicySpec)> = Vec::new();
        for option in &self.slots {
            let (name, component) = option
                .split_once('=')
                .filter(|(n, c)| !n.is_empty() && !c.is_empty())
                .with_context(|| format!("--slot {option:?}: expected NAME=COMPONENT"))?;
            anyhow::ensure!(name != "kv", "--slot {option:?}: `kv` is the replayed policy's slot");
            anyhow::ensure!(
                !slots.iter().any(|(n, _)| n == name),
                "--slot: slot `{name}` is given twice"
            );
            slots.push((
                name.to_string(),
                PolicySpec::Wasm {
                    name: name.to_string(),
                    component: component.to_string(),
                    init: Vec::new(),
                },
            ));
        }
        for option in &self.slot_configs {
            let (slot, key, value) = agentrt_runtime::parse_slot_config(option).map_err(anyhow::Error::msg)?;
            let Some((_, PolicySpec::Wasm { init, .. })) = slots.iter_mut().find(|(n, _)| n == slot) else {
                anyhow::bail!("--slot-config names slot `{slot}`, which no --slot gives");
            };
            init.push((key.to_string(), value.to_string()));
        }
        Ok(slots)
    }

    /// Set the slots and the scheduling of `cfg`.
    pub fn apply(&self, cfg: &mut SimConfig) -> anyhow::Result<()> {
        cfg.slots = self.slots()?;
        cfg.engine_priorities = self.engine_priorities;
        Ok(())
    }
}

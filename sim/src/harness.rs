//! Run one prepared trace under a list of policies, the way the table and `agentrt sim run` do.
//!
//! Wasm policies load once per process (the engine caches compiled artifacts) and each run starts
//! a fresh instance, its calls bounded by fuel ([`crate::policy_limits`]). Bélády needs the reference admission order, so the LRU run goes first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use agentrt_runtime::{
    ComponentLookup, ComponentSource, EngineOptions, PolicyComponent, PolicyEngine, SlowCompileNotice,
};
use anyhow::Context;

use agentrt_runtime::Share;

use crate::arbiter::{Ownership, TenantArbiter};
use crate::audit::Audited;
use crate::policies::{Belady, ClosedFirstLru, NativeLru, PolicySpec, Rerank, SimPolicy, Slotted, WasmPolicy};
use crate::policy_limits::{replay_engine_options, ReplayLimits};
use crate::prepare::PreparedTrace;
use crate::scheduler::{RunResult, Sim, SimConfig};

/// The names of the evaluation's policies, in report order.
pub const DEFAULT_POLICY_NAMES: [&str; 7] = [
    "lru",
    "ttl",
    "arc",
    "session-retain",
    "cachesage",
    "cachesage-evict",
    "belady",
];

/// The policies of the evaluation, in report order.
pub fn default_policies() -> Vec<PolicySpec> {
    DEFAULT_POLICY_NAMES.iter().map(|n| PolicySpec::parse(n)).collect()
}

/// Loads components once and starts policies.
pub struct PolicyHost {
    engine: PolicyEngine,
    lookup: ComponentLookup,
    limits: ReplayLimits,
    components: Mutex<HashMap<String, Arc<PolicyComponent>>>,
}

impl PolicyHost {
    /// A host whose slots get the replay's default limits.
    pub fn new(lookup: ComponentLookup) -> anyhow::Result<Self> {
        Self::with_limits(lookup, ReplayLimits::default(), None)
    }

    /// A host whose slots get `limits`; `slow_compile` is told when a component's first compile
    /// runs long.
    pub fn with_limits(
        lookup: ComponentLookup,
        limits: ReplayLimits,
        slow_compile: Option<SlowCompileNotice>,
    ) -> anyhow::Result<Self> {
        let options = EngineOptions {
            slow_compile,
            ..replay_engine_options(16, limits.sandbox.memory_bytes)
        };
        let engine = PolicyEngine::new(options).map_err(|e| anyhow::anyhow!("starting the policy engine: {e}"))?;
        Ok(Self {
            engine,
            lookup,
            limits,
            components: Mutex::new(HashMap::new()),
        })
    }

    /// Where the component `stem` is (a name, or a path ending in `.wasm`), or an error naming
    /// every place searched.
    pub fn find(&self, stem: &str) -> anyhow::Result<ComponentSource> {
        Ok(self.lookup.resolve(stem)?)
    }

    /// Load every Wasm policy of `policies` now: a missing component fails before minutes of
    /// replay, and a long first compile says so before a progress bar is drawn.
    pub fn preload(&self, policies: &[PolicySpec]) -> anyhow::Result<()> {
        for p in policies {
            if let PolicySpec::Wasm { component, .. } = p {
                self.component(component)?;
            }
        }
        Ok(())
    }

    fn component(&self, stem: &str) -> anyhow::Result<Arc<PolicyComponent>> {
        let mut cache = self.components.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = cache.get(stem) {
            return Ok(c.clone());
        }
        let source = self.find(stem)?;
        let component = Arc::new(
            source
                .load(&self.engine)
                .map_err(|e| anyhow::anyhow!("loading {source}: {e}"))?,
        );
        cache.insert(stem.to_string(), component.clone());
        Ok(component)
    }

    /// Start a Wasm policy.
    pub fn start(
        &self,
        name: &str,
        stem: &str,
        init: &[(String, String)],
        block_size: usize,
        rerank: Rerank,
    ) -> anyhow::Result<WasmPolicy> {
        let init: Vec<(&str, &str)> = init.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        WasmPolicy::start(
            &self.engine,
            self.component(stem)?,
            self.limits.slot_config(format!("sim/{name}"), &init),
            name,
            block_size as u32,
            rerank,
        )
    }
}

/// Replay `trace` once under `policy`.
pub fn run_one(
    host: &PolicyHost,
    trace: &PreparedTrace,
    cfg: &SimConfig,
    policy: &PolicySpec,
    reference_order: Option<&[u32]>,
    rerank: Rerank,
) -> anyhow::Result<RunResult> {
    replay(host, trace, cfg, policy, reference_order, rerank, false)
}

/// [`run_one`], recording every eviction in [`RunResult::audit`] when `audit` is set.
fn replay(
    host: &PolicyHost,
    trace: &PreparedTrace,
    cfg: &SimConfig,
    policy: &PolicySpec,
    reference_order: Option<&[u32]>,
    rerank: Rerank,
    audit: bool,
) -> anyhow::Result<RunResult> {
    let mut boxed: Box<dyn SimPolicy> = match (&cfg.shares, policy) {
        (_, PolicySpec::Belady) => {
            // The whole cache's ceiling: Bélády knows the future of every tenant and ignores shares.
            let order = reference_order.context("Bélády needs the LRU run's admission order")?;
            let prompts: Vec<&[u64]> = trace.requests.iter().map(|r| &r.prompt.hashes[..]).collect();
            Box::new(Belady::new(order, &prompts))
        }
        (Some(shares), _) => Box::new(arbitrated(host, trace, cfg, shares, policy, rerank)?),
        (None, PolicySpec::NativeLru) => Box::new(NativeLru),
        (None, PolicySpec::ClosedFirst) => Box::new(ClosedFirstLru::default()),
        (None, PolicySpec::Wasm { name, component, init }) => {
            Box::new(host.start(name, component, init, trace.block_size, rerank)?)
        }
    };
    if !cfg.slots.is_empty() {
        let mut slots = Vec::new();
        for (slot, spec) in &cfg.slots {
            let PolicySpec::Wasm { component, init, .. } = spec else {
                anyhow::bail!("slot {slot}: a slot runs a policy component, not {}", spec.name());
            };
            slots.push(host.start(
                &format!("{}/{slot}", policy.name()),
                component,
                init,
                trace.block_size,
                rerank,
            )?);
        }
        boxed = Box::new(Slotted::new(boxed, slots));
    }
    let mut result = if audit {
        let mut audited = Audited::new(boxed.as_mut(), trace);
        let mut result = Sim::new(cfg.clone(), trace, &mut audited).run()?;
        let mut audit = audited.into_audit();
        audit.policy = policy.name().to_string();
        result.audit = Some(audit);
        result
    } else {
        Sim::new(cfg.clone(), trace, boxed.as_mut()).run()?
    };
    result.policy = policy.name().to_string();
    Ok(result)
}

/// Replay `trace` under the cache policy `policy` behind the admission arm `arm` (the proxy's
/// stage, or Continuum's engine): `sim knee`'s unit of work.
pub fn replay_admitted(
    host: &PolicyHost,
    trace: &PreparedTrace,
    cfg: &SimConfig,
    policy: &PolicySpec,
    arm: &crate::admission::AdmissionArm,
    rerank: Rerank,
) -> anyhow::Result<RunResult> {
    use crate::admission::{request_cap::RequestCap, thunderagent::ThunderAgent, AdmissionArm};
    let mut cfg = cfg.clone();
    let stage: Option<Box<dyn crate::admission::AdmissionStage>> = match arm {
        AdmissionArm::Stock => None,
        AdmissionArm::RequestCap { max_in_flight } => {
            let n =
                max_in_flight.unwrap_or_else(|| crate::admission::request_cap::sized_to_cache(trace, cfg.num_blocks));
            Some(Box::new(RequestCap::new(n)))
        }
        AdmissionArm::ThunderAgent { decay } => Some(Box::new(ThunderAgent::new(*decay))),
        AdmissionArm::Continuum => {
            cfg.continuum = Some(crate::scheduler::ContinuumConfig::default());
            None
        }
        AdmissionArm::WorkingSet(_) => None,
    };
    let mut boxed: Box<dyn SimPolicy> = match policy {
        PolicySpec::NativeLru => Box::new(NativeLru),
        PolicySpec::ClosedFirst => Box::new(ClosedFirstLru::default()),
        PolicySpec::Wasm { name, component, init } => {
            Box::new(host.start(name, component, init, trace.block_size, rerank)?)
        }
        PolicySpec::Belady => anyhow::bail!("Bélády needs a reference run; name a cache policy that runs online"),
    };
    let mut result = if let AdmissionArm::WorkingSet(arm) = arm {
        let classes = std::rc::Rc::new(std::cell::RefCell::new(Default::default()));
        let slot = match &arm.slot {
            Some(component) => Some(host.start("admission", component, &[], trace.block_size, rerank)?),
            None => None,
        };
        let stage =
            crate::admission::working_set::WorkingSetStage::new(arm.settings()?, arm.releases, slot, classes.clone());
        if arm.held_first {
            boxed = Box::new(crate::admission::held_first::HeldFirst::new(boxed, classes));
        }
        Sim::new(cfg, trace, boxed.as_mut())
            .with_admission(Box::new(stage))
            .run()?
    } else {
        let mut sim = Sim::new(cfg, trace, boxed.as_mut());
        if let Some(stage) = stage {
            sim = sim.with_admission(stage);
        }
        sim.run()?
    };
    result.policy = arm.name();
    Ok(result)
}

/// One instance of `policy` per tenant of `trace`, each ranking only its tenant's blocks, under
/// `shares` (tenants not named: no guarantee, no limit).
fn arbitrated(
    host: &PolicyHost,
    trace: &PreparedTrace,
    cfg: &SimConfig,
    shares: &[(String, Share)],
    policy: &PolicySpec,
    rerank: Rerank,
) -> anyhow::Result<TenantArbiter> {
    for (name, _) in shares {
        anyhow::ensure!(
            trace.tenants.contains(name),
            "--share names tenant {name:?}, which has no request in the trace (tenants: {})",
            trace.tenants.join(", ")
        );
    }
    let guaranteed: u64 = shares.iter().map(|(_, s)| s.min_blocks).sum();
    anyhow::ensure!(
        guaranteed < cfg.num_blocks as u64,
        "the guarantees add up to {guaranteed} blocks, not less than the cache's {}",
        cfg.num_blocks
    );
    let owners = Ownership::of(trace);
    let mut policies: Vec<Box<dyn SimPolicy>> = Vec::new();
    let mut tenant_shares = Vec::new();
    for (t, tenant) in trace.tenants.iter().enumerate() {
        tenant_shares.push(
            shares
                .iter()
                .find(|(name, _)| name == tenant)
                .map_or(Share::NONE, |(_, s)| *s),
        );
        policies.push(match policy {
            PolicySpec::Wasm { name, component, init } => {
                let started = host.start(&format!("{name}/{tenant}"), component, init, trace.block_size, rerank)?;
                let owns = owners.clone();
                Box::new(started.ranking_only(Box::new(move |b| usize::from(owns.block(b)) == t)))
            }
            // The arbiter evicts the tenant's oldest block when its policy names none.
            PolicySpec::NativeLru | PolicySpec::Belady => Box::new(NativeLru),
            PolicySpec::ClosedFirst => anyhow::bail!(
                "closed-first is a baseline for one cache; leave it out with --shares (--policies lru,cachesage)"
            ),
        });
    }
    Ok(TenantArbiter::new(policy.name(), owners, policies, tenant_shares))
}

/// Replay `trace` under every policy in `policies` (LRU first when Bélády needs it), recording
/// every eviction when `audit` is set. `done` is called after each run.
pub fn run_all(
    host: &PolicyHost,
    trace: &PreparedTrace,
    cfg: &SimConfig,
    policies: &[PolicySpec],
    rerank: Rerank,
    audit: bool,
    mut done: impl FnMut(&RunResult),
) -> anyhow::Result<Vec<RunResult>> {
    let mut results: Vec<Option<RunResult>> = vec![None; policies.len()];
    let mut order: Vec<usize> = (0..policies.len()).collect();
    // LRU (Wasm or native) first, Bélády last.
    let is_lru = |p: &PolicySpec| p.name() == "lru" || *p == PolicySpec::NativeLru;
    order.sort_by_key(|&i| match &policies[i] {
        p if is_lru(p) => 0,
        PolicySpec::Belady => 2,
        _ => 1,
    });
    let mut reference: Option<Vec<u32>> = None;
    for i in order {
        let policy = &policies[i];
        if *policy == PolicySpec::Belady && reference.is_none() {
            let lru = run_one(host, trace, cfg, &PolicySpec::NativeLru, None, rerank)?;
            reference = Some(lru.admission_order);
        }
        let result = replay(host, trace, cfg, policy, reference.as_deref(), rerank, audit)
            .with_context(|| format!("policy {}", policy.name()))?;
        if is_lru(policy) && reference.is_none() {
            reference = Some(result.admission_order.clone());
        }
        done(&result);
        results[i] = Some(result);
    }
    Ok(results.into_iter().map(|r| r.expect("every policy ran")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_name_may_carry_its_component_configuration() {
        let pairs = |v: &[(&str, &str)]| {
            v.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            PolicySpec::parse("cachesage:w=8:k=2"),
            PolicySpec::Wasm {
                name: "cachesage:w=8:k=2".into(),
                component: "cachesage".into(),
                init: pairs(&[("w", "8"), ("k", "2")]),
            }
        );
        assert_eq!(
            PolicySpec::parse("cachesage-evict:window=8"),
            PolicySpec::Wasm {
                name: "cachesage-evict:window=8".into(),
                component: "cachesage".into(),
                init: pairs(&[("prefetch", "false"), ("window", "8")]),
            }
        );
        assert_eq!(PolicySpec::parse("belady"), PolicySpec::Belady);
    }

    #[test]
    fn a_component_file_is_loaded_from_its_path_and_named_by_its_file() {
        assert_eq!(
            PolicySpec::parse("./target/my-policy.wasm:k=2"),
            PolicySpec::Wasm {
                name: "my-policy:k=2".into(),
                component: "./target/my-policy.wasm".into(),
                init: vec![("k".into(), "2".into())],
            }
        );
        assert_eq!(PolicySpec::parse("/tmp/mine.wasm").name(), "mine");
    }
}

//! The proxy's admission stage in front of the modelled engine: which requests go to vLLM now and
//! which wait in the proxy, as `agentrt serve`'s queue (or a peer's proxy) decides.
//!
//! The replay ([`crate::scheduler`]) offers every request to the stage when its session issues it
//! (`offer`); a request the stage holds waits outside the engine — its time there counts in its
//! TTFT, as a client sees it — until a later `release` lets its session go. The stage hears every
//! answer (`answered`), the events a policy slot hears (`event`), and each program's end
//! (`program_released`: the client's release call, which ThunderAgent's clients send), and says
//! when it must be asked again even if nothing happens (`next_check_us`: a periodic check, an
//! aging deadline).
//!
//! Arms, one module each: none (stock vLLM: every request goes at once), [`request_cap`]
//! (agentrt today: `--upstream-max-in-flight`), [`thunderagent`] (its `tr` scheduler, with or
//! without its decay), [`working_set`] (agentrt's working-set admission: the decision of the
//! `agentrt-admission` crate, a policy slot's scores, the [`held_first`] rule in the ranker).
//! Continuum is an engine change, not a proxy:
//! `crate::scheduler`'s pins and program-level FCFS ([`crate::scheduler::ContinuumConfig`]).

pub mod held_first;
pub mod request_cap;
pub mod thunderagent;
pub mod working_set;

use agentrt_runtime::types::Event;

/// A request at the proxy's door.
#[derive(Debug, Clone)]
pub struct Offer {
    /// The session (program) id, as policies hear it.
    pub session: u64,
    /// Index of its tenant in the trace's tenant list.
    pub tenant: u16,
    pub agent: u32,
    pub prompt_tokens: u32,
    /// Tokens of the prompt that are its agent's anchor (system prompt + tools), shared by every
    /// session of the agent.
    pub anchor_tokens: u32,
    pub anchor_hash: u64,
    pub at_us: u64,
}

/// An answer that completed, as the proxy sees it in the response.
#[derive(Debug, Clone)]
pub struct Answer {
    pub session: u64,
    pub tenant: u16,
    pub prompt_tokens: u32,
    pub cached_tokens: u32,
    pub output_tokens: u32,
    /// From the engine scheduling it to its first token (µs): its prefill, without its wait in
    /// the engine's queue (vLLM's `request_prefill_time`).
    pub prefill_us: u64,
    /// From the first token to the last (µs).
    pub decode_us: u64,
    /// The answer asks for a tool (`finish_reason: tool_calls`).
    pub asked_tool: bool,
    pub at_us: u64,
}

/// What the proxy can know of the engine now (vLLM's `/metrics`: `vllm:num_requests_running`,
/// `vllm:num_requests_waiting`, `vllm:cache_config_info`, KV usage).
#[derive(Debug, Clone, Copy, Default)]
pub struct EngineView {
    pub running: u32,
    pub waiting: u32,
    pub free_blocks: u32,
    /// vLLM's `num_gpu_blocks`.
    pub total_blocks: u32,
    pub block_size: u32,
}

impl EngineView {
    /// The KV capacity in tokens, as `vllm:cache_config_info` gives it (blocks × block size).
    pub fn capacity_tokens(&self) -> u64 {
        u64::from(self.total_blocks) * u64::from(self.block_size)
    }
}

/// What a stage did, for the report.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct StageFigures {
    /// Sessions held at least once, and holds in all (a session may be held several times).
    pub sessions_held: u64,
    pub holds: u64,
    /// Requests that waited in the proxy, and the longest such wait (µs).
    pub requests_waited: u64,
    pub max_wait_us: u64,
    /// Resumes forced by an aging bound (a request waited its longest).
    pub forced_resumes: u64,
    /// Admission checks, and those that found holding does not pay on this engine (working-set
    /// admission only).
    pub checks: u64,
    pub checks_not_paying: u64,
}

/// The proxy between the clients and the engine.
pub trait AdmissionStage {
    /// The arm's name in tables.
    fn name(&self) -> String;
    /// A request of `offer.session` arrives: `true` sends it to the engine now, `false` holds it
    /// until a `release` names its session.
    fn offer(&mut self, offer: &Offer, engine: &EngineView) -> bool;
    /// A request's answer completed.
    fn answered(&mut self, answer: &Answer, engine: &EngineView);
    /// The program is over and its client says so with ThunderAgent's `POST /programs/release`
    /// (its clients send it when a task ends). Arms whose clients do not speak that protocol
    /// ignore it and learn of ends as a policy does, from `event` (`session-end`: a framework's
    /// closing under `--hints`, or the idle rule).
    fn program_released(&mut self, _session: u64, _at_us: u64) {}
    /// An event a policy slot hears (agent registered, arrivals, finishes, waits, ends).
    fn event(&mut self, _event: &Event) {}
    /// Sessions whose held request goes to the engine now, in order.
    fn release(&mut self, now_us: u64, engine: &EngineView) -> Vec<u64>;
    /// The next time `release` must be asked although nothing else happens.
    fn next_check_us(&self) -> Option<u64>;
    /// The tokens the stage counts resident now (its ledger), when it keeps one.
    fn resident_tokens(&self) -> Option<u64> {
        None
    }
    fn figures(&self) -> StageFigures;
}

/// Which admission arm a replay runs (`sim knee --arms`, `sim run --admission`).
#[derive(Debug, Clone, PartialEq)]
pub enum AdmissionArm {
    /// Stock vLLM: no proxy admission, FCFS in the engine.
    Stock,
    /// agentrt today: at most `max_in_flight` requests upstream (`--upstream-max-in-flight`);
    /// `None` = sized to the cache from the trace (capacity ÷ mean prompt tokens).
    RequestCap { max_in_flight: Option<usize> },
    /// ThunderAgent's `tr` scheduler; `decay`: its 2^-t weight of idle programs on resume.
    ThunderAgent { decay: bool },
    /// Continuum: TTL pins after tool calls and program-level FCFS, in the engine.
    Continuum,
    /// agentrt's working-set admission: `settings` (the crate's, from `KEY=VALUE`), the
    /// admission slot's component (`None`: no slot, every score 0), and whether the ranker puts
    /// held sessions' blocks first.
    WorkingSet(WorkingSetArm),
}

/// The settings of a working-set arm.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkingSetArm {
    pub settings: Vec<(String, String)>,
    pub slot: Option<String>,
    pub held_first: bool,
    /// Whether the clients' release calls (ThunderAgent's protocol, which `serve` accepts as a
    /// closing) are heard; `false`: sessions end by hints and the idle rule only.
    pub releases: bool,
}

impl WorkingSetArm {
    /// The crate's settings with this arm's overrides.
    pub fn settings(&self) -> anyhow::Result<agentrt_admission::Settings> {
        let mut s = agentrt_admission::Settings::default();
        for (k, v) in &self.settings {
            let bad = |e: &dyn std::fmt::Display| anyhow::anyhow!("working-set `{k}={v}`: {e}");
            match k.as_str() {
                "max-hold-ms" => s.max_hold_us = v.parse::<u64>().map_err(|e| bad(&e))? * 1000,
                "max-first-wait-ms" => s.max_first_wait_us = v.parse::<u64>().map_err(|e| bad(&e))? * 1000,
                "check-ms" => s.check_every_us = v.parse::<u64>().map_err(|e| bad(&e))?.max(1) * 1000,
                "min-answers" => s.min_answers = v.parse().map_err(|e| bad(&e))?,
                "fill" => {
                    s.fill = v.parse().map_err(|e| bad(&e))?;
                    anyhow::ensure!(s.fill > 0.0 && s.fill <= 1.0, "working-set `fill={v}`: must be in (0, 1]");
                }
                other => anyhow::bail!(
                    "working-set: unknown setting `{other}` (settings: max-hold-ms, max-first-wait-ms, check-ms, min-answers, fill, slot, held-first, releases)"
                ),
            }
        }
        Ok(s)
    }
}

impl AdmissionArm {
    /// Parse an arm's name: `stock`, `cap[:N]`, `thunderagent`, `thunderagent-decay`,
    /// `continuum`, `working-set[:KEY=VALUE…]` (`slot=COMPONENT|none`, `held-first=false`,
    /// `releases=false`, and the crate's settings `max-hold-ms`, `max-first-wait-ms`, `check-ms`,
    /// `min-answers`, `fill`).
    pub fn parse(name: &str) -> anyhow::Result<Self> {
        let mut parts = name.split(':');
        let head = parts.next().unwrap_or_default();
        let rest: Vec<&str> = parts.collect();
        let no_settings = |arm: Self| {
            anyhow::ensure!(rest.is_empty(), "admission arm {name:?}: `{head}` takes no settings");
            Ok(arm)
        };
        match head {
            "stock" | "vllm" => no_settings(AdmissionArm::Stock),
            "cap" => match rest.as_slice() {
                [] => Ok(AdmissionArm::RequestCap { max_in_flight: None }),
                [n] => Ok(AdmissionArm::RequestCap {
                    max_in_flight: Some(
                        n.parse::<usize>()
                            .ok()
                            .filter(|&n| n > 0)
                            .ok_or_else(|| anyhow::anyhow!("admission arm {name:?}: `cap:N` needs N ≥ 1"))?,
                    ),
                }),
                _ => anyhow::bail!("admission arm {name:?}: expected `cap` or `cap:N`"),
            },
            "thunderagent" => no_settings(AdmissionArm::ThunderAgent { decay: false }),
            "thunderagent-decay" => no_settings(AdmissionArm::ThunderAgent { decay: true }),
            "continuum" => no_settings(AdmissionArm::Continuum),
            "working-set" => {
                let mut arm = WorkingSetArm {
                    settings: Vec::new(),
                    slot: Some("working-set".into()),
                    held_first: true,
                    releases: true,
                };
                for kv in &rest {
                    let (k, v) = kv
                        .split_once('=')
                        .filter(|(k, v)| !k.is_empty() && !v.is_empty())
                        .ok_or_else(|| anyhow::anyhow!("admission arm {name:?}: settings are KEY=VALUE, got {kv:?}"))?;
                    match k {
                        "slot" => arm.slot = (v != "none").then(|| v.to_string()),
                        "held-first" => {
                            arm.held_first = v
                                .parse()
                                .map_err(|_| anyhow::anyhow!("admission arm {name:?}: held-first is true or false"))?
                        }
                        "releases" => {
                            arm.releases = v
                                .parse()
                                .map_err(|_| anyhow::anyhow!("admission arm {name:?}: releases is true or false"))?
                        }
                        _ => arm.settings.push((k.to_string(), v.to_string())),
                    }
                }
                arm.settings()?;
                Ok(AdmissionArm::WorkingSet(arm))
            }
            other => anyhow::bail!(
                "unknown admission arm {other:?} (arms: stock, cap, cap:N, thunderagent, thunderagent-decay, continuum, working-set)"
            ),
        }
    }

    /// The arm's name in tables.
    pub fn name(&self) -> String {
        match self {
            AdmissionArm::Stock => "vllm".into(),
            AdmissionArm::RequestCap { max_in_flight: None } => "cap".into(),
            AdmissionArm::RequestCap { max_in_flight: Some(n) } => format!("cap:{n}"),
            AdmissionArm::ThunderAgent { decay: false } => "thunderagent".into(),
            AdmissionArm::ThunderAgent { decay: true } => "thunderagent-decay".into(),
            AdmissionArm::Continuum => "continuum".into(),
            AdmissionArm::WorkingSet(arm) => {
                let mut parts = vec!["working-set".to_string()];
                if arm.slot.as_deref() != Some("working-set") {
                    parts.push(format!("slot={}", arm.slot.as_deref().unwrap_or("none")));
                }
                if !arm.held_first {
                    parts.push("held-first=false".into());
                }
                if !arm.releases {
                    parts.push("releases=false".into());
                }
                parts.extend(arm.settings.iter().map(|(k, v)| format!("{k}={v}")));
                parts.join(":")
            }
        }
    }
}

/// Tenants' turns at freed places, in proportion to their weights (start-time fair queueing, as
/// `serve`'s admission queue gives them): the tenant with the fewest places per unit of weight
/// goes next, and a tenant that comes back starts level with the others, not with credit saved up.
#[derive(Debug, Clone, Default)]
pub struct FairTurns {
    /// Places given to each tenant so far, per unit of weight.
    given: Vec<f64>,
    /// The tag of the tenant that got the last place.
    clock: f64,
}

impl FairTurns {
    /// The tenant among `waiting` (tenant indices with something waiting) whose turn it is.
    pub fn next(&self, waiting: impl IntoIterator<Item = u16>) -> Option<u16> {
        waiting
            .into_iter()
            .min_by(|a, b| self.tag(*a).total_cmp(&self.tag(*b)).then(a.cmp(b)))
    }

    fn tag(&self, tenant: u16) -> f64 {
        self.given.get(tenant as usize).copied().unwrap_or(0.0)
    }

    fn slot(&mut self, tenant: u16) -> &mut f64 {
        let t = tenant as usize;
        if self.given.len() <= t {
            self.given.resize(t + 1, 0.0);
        }
        &mut self.given[t]
    }

    /// `tenant` has something waiting again after having nothing: it starts at the clock.
    pub fn join(&mut self, tenant: u16) {
        let clock = self.clock;
        let tag = self.slot(tenant);
        *tag = tag.max(clock);
    }

    /// `tenant`, of `weight`, got a place.
    pub fn gave(&mut self, tenant: u16, weight: f64) {
        let tag = self.slot(tenant);
        let before = *tag;
        *tag += 1.0 / weight.max(1e-9);
        self.clock = before;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arms_parse_by_name_and_name_themselves_back() {
        for name in [
            "vllm",
            "cap",
            "cap:12",
            "thunderagent",
            "thunderagent-decay",
            "continuum",
            "working-set",
            "working-set:slot=none",
            "working-set:held-first=false:max-hold-ms=5000",
        ] {
            assert_eq!(AdmissionArm::parse(name).unwrap().name(), name);
        }
        assert_eq!(AdmissionArm::parse("stock").unwrap(), AdmissionArm::Stock);
        let err = AdmissionArm::parse("thunderagnet").unwrap_err().to_string();
        assert!(
            err.contains("thunderagnet") && err.contains("thunderagent-decay"),
            "{err}"
        );
        assert!(AdmissionArm::parse("cap:0").is_err());
        assert!(AdmissionArm::parse("continuum:ttl=3").is_err());
        let err = AdmissionArm::parse("working-set:max-hold=5").unwrap_err().to_string();
        assert!(err.contains("max-hold") && err.contains("max-hold-ms"), "{err}");
        assert!(AdmissionArm::parse("working-set:fill=1.5").is_err());
    }

    #[test]
    fn fair_turns_alternate_between_equal_tenants_and_follow_weights() {
        let mut turns = FairTurns::default();
        let mut got = [0u32; 2];
        for _ in 0..30 {
            let t = turns.next([0u16, 1]).unwrap();
            got[t as usize] += 1;
            turns.gave(t, if t == 0 { 2.0 } else { 1.0 });
        }
        assert_eq!(got, [20, 10], "weight 2 gets two places for every one of weight 1");
        // Tenant 2 arrives late: it starts at the clock, not 20 places behind.
        turns.join(2);
        let next: Vec<u16> = (0..3)
            .map(|_| {
                let t = turns.next([0u16, 1, 2]).unwrap();
                turns.gave(t, 1.0);
                t
            })
            .collect();
        assert!(next.iter().filter(|&&t| t == 2).count() <= 2, "{next:?}");
    }
}

//! # CacheSage — agent-aware KV-cache policy
//!
//! A reactive prefix cache evicts multi-agent "anchors" (an agent's system prompt + tool
//! definitions) just before the next session needs them. CacheSage learns which agent follows
//! which and keeps — or brings back — the anchors of agents that are about to run. Two models,
//! chosen by the `model` key of `init`:
//!
//! - **`scaled`** (the default, [`scaled`]): a sparse agent graph (thousands of agents, ~100 bytes
//!   each) and, for every candidate block, the rate at which it is expected to be used again —
//!   from the live sessions' likely paths and their timing (tool waits, user think time) and the
//!   rate at which new sessions start using its agent. Built for one engine shared by many agent
//!   applications, where anchors are evicted between uses.
//! - **`classic`** ([`classic`]): the published design — a windowed Markov matrix over (agent,
//!   call depth) states, hop-limited survival within K steps, `w · p_survive + recency` — for up
//!   to 42 agents.
//!
//! Both fall back to exact LRU before they have learned anything, and both keep their snapshot
//! bounded (20 KB for a workload of up to 32 agents). Whichever model runs, the [`guard`] follows
//! LRU instead while the model's recent rankings lose more blocks than they win against LRU's
//! (`guard=false` turns it off; `guard-margin`, default 0.002, is the share of recent block
//! accesses the model may lose first).
//!
//! **Lifecycle hints** (contract 0.4, [`lifecycle`]): blocks of sessions the framework closed
//! are evicted first, and a waiting session's blocks next when it is unlikely to return before
//! the cache turns over (return-time curves learned per wait kind and per tool); the guard judges
//! the result against closed-first — LRU with the closed sessions' blocks first, the robust expert
//! once closings are heard — like any other ranking of the model. `hints=false` ignores them.
//!
//! **Two tiers** (contract 0.3): the host-memory tier's candidates are ranked by the same model —
//! what will be used soon stays on the GPU, what will be used later in host memory. It declines no
//! store: a block is offered to the host tier while its request runs, when its session is live by
//! definition, and which sessions will never be continued is not something the model predicts.
//! The guard's verdict covers both tiers: while it follows LRU on the GPU, the host tier gets
//! vLLM's own order (every score 0). The host tier has no regret count of its own: its evidence is
//! the GPU tier's, where the model's bets are tested first.

pub mod anchor;
pub mod attribution;
pub mod classic;
pub mod guard;
#[cfg(test)]
mod guard_tests;
pub mod lifecycle;
pub mod scaled;
pub mod shadow;
#[cfg(test)]
mod tier_tests;

use agentrt_sdk::{info, BlockEvent, Config, Event, Forecast, Item, Policy, PolicyInfo, SideEffect, Tier};

/// One of the two models.
#[derive(Debug, Clone)]
pub enum Model {
    Scaled(Box<scaled::Scaled>),
    Classic(Box<classic::CacheSage>),
}

/// The policy: a model, and the guard that hands the ranking to LRU when the model loses.
#[derive(Debug, Clone)]
pub struct CacheSage {
    pub model: Model,
    pub guard: guard::Guard,
    /// What the framework said of sessions' lives (closed, waiting), applied to the model's
    /// scores before the guard judges them; `hints=false` ignores it.
    pub lifecycle: lifecycle::Lifecycle,
    pub use_hints: bool,
}

impl Default for CacheSage {
    fn default() -> Self {
        Self {
            model: Model::Scaled(Box::default()),
            guard: guard::Guard::new(guard::GuardParams::default()),
            lifecycle: lifecycle::Lifecycle::default(),
            use_hints: true,
        }
    }
}

/// The `init` keys of the guard; the rest go to the model.
const POLICY_KEYS: [&str; 3] = ["guard", "guard-margin", "hints"];

impl CacheSage {
    /// Size of the learned state: the snapshot's length.
    pub fn state_bytes(&self) -> usize {
        self.snapshot().len()
    }

    fn model_scores(&mut self, items: &[Item]) -> Vec<f32> {
        let scores = match &mut self.model {
            Model::Scaled(m) => m.score(items),
            Model::Classic(m) => m.score(items),
        };
        if self.use_hints {
            self.lifecycle.adjust(items, scores)
        } else {
            scores
        }
    }

    /// Host-tier candidates: the model's expected use while the guard follows it (never below 0:
    /// a negative score would decline a store), vLLM's own order (all 0) while the guard follows
    /// LRU. Scoring them teaches the
    /// model nothing: their `last-access` is the host pool's stamp, not the engine's clock.
    fn host_scores(&mut self, items: &[Item]) -> Vec<f32> {
        if self.guard.mode() == guard::Expert::Lru {
            return vec![0.0; items.len()];
        }
        let model = match &mut self.model {
            Model::Scaled(m) => m.score_host(items),
            // The classic model ranks by agents' transition counts over the engine's clock; it
            // has nothing to say of host-tier copies: vLLM's order.
            Model::Classic(_) => vec![0.0; items.len()],
        };
        model
            .into_iter()
            .map(|score| if score.is_finite() { score.max(0.0) } else { 0.0 })
            .collect()
    }
}

impl Policy for CacheSage {
    fn info() -> PolicyInfo {
        info(
            "cachesage",
            "agent-aware KV eviction: keeps the anchors (system prompt + tools) and histories of the agents about to run, \
             warms the next agent's anchor; model=scaled (next-use rate over a sparse agent graph, default) or \
             model=classic (Markov survival within K steps + recency)",
        )
    }

    fn init(&mut self, config: &Config) -> Result<(), String> {
        let defaults = guard::GuardParams::default();
        let use_hints = config.parse_or("hints", true)?;
        let params = guard::GuardParams {
            enabled: config.parse_or("guard", defaults.enabled)?,
            margin: config.parse_or("guard-margin", defaults.margin)?,
            // The robust expert hears the closings the model hears.
            closings: use_hints,
        };
        if !(params.margin.is_finite() && (0.0..=1.0).contains(&params.margin)) {
            return Err("config key `guard-margin`: must be in [0, 1]".into());
        }
        let rest: Vec<(String, String)> = config
            .pairs()
            .iter()
            .filter(|(k, _)| !POLICY_KEYS.contains(&k.as_str()))
            .cloned()
            .collect();
        let model_config = Config::new(rest.clone());
        let model = match config.get("model").unwrap_or("scaled") {
            "scaled" => Model::Scaled(Box::new(scaled::Scaled::init(&model_config)?)),
            "classic" => {
                // The classic model's keys, without the model choice.
                let rest = rest.into_iter().filter(|(k, _)| k != "model").collect();
                let mut classic = classic::CacheSage::default();
                classic.init(&Config::new(rest))?;
                Model::Classic(Box::new(classic))
            }
            other => return Err(format!("config key `model`: unknown model {other:?} (scaled, classic)")),
        };
        *self = CacheSage {
            model,
            guard: guard::Guard::new(params),
            lifecycle: lifecycle::Lifecycle::default(),
            use_hints,
        };
        Ok(())
    }

    fn observe(&mut self, event: &Event) {
        self.guard.observe(event, |agent| self.lifecycle.anchor_tokens(agent));
        // Silence the lifecycle values as a wait is not an end for the model either.
        let silence = match event {
            Event::SessionEnd(end) => self.use_hints && self.lifecycle.silence_is_a_wait(end),
            _ => false,
        };
        self.lifecycle.observe(event);
        if silence {
            return;
        }
        match &mut self.model {
            Model::Scaled(m) => m.observe(event),
            Model::Classic(m) => m.observe(event),
        }
    }

    fn observe_block(&mut self, block: &BlockEvent) {
        // The model and the guard track the GPU tier's residency; what the host tier holds is
        // the engine's to look up when a prefix continues there.
        if block.tier == Tier::Host {
            return;
        }
        self.guard.observe_block(block);
        self.lifecycle.observe_block(block);
        match &mut self.model {
            Model::Scaled(m) => m.observe_block(block),
            Model::Classic(m) => m.observe_block(block),
        }
    }

    fn score(&mut self, items: &[Item]) -> Vec<f32> {
        // The host asks about one tier at a time; a mixed batch is ranked tier by tier.
        if items.iter().all(|i| i.tier == Tier::Gpu) {
            let model = self.model_scores(items);
            return self.guard.choose(items, model);
        }
        if items.iter().all(|i| i.tier == Tier::Host) {
            return self.host_scores(items);
        }
        let (gpu, host): (Vec<Item>, Vec<Item>) = items.iter().cloned().partition(|i| i.tier == Tier::Gpu);
        let (mut gpu, mut host) = (self.score(&gpu).into_iter(), self.score(&host).into_iter());
        items
            .iter()
            .map(|i| match i.tier {
                Tier::Gpu => gpu.next(),
                Tier::Host => host.next(),
            })
            .map(|s| s.unwrap_or(0.0))
            .collect()
    }

    fn predict(&mut self, horizon: u32) -> Vec<Forecast> {
        match &mut self.model {
            Model::Scaled(m) => m.predict(horizon),
            Model::Classic(m) => m.predict(horizon),
        }
    }

    fn act(&mut self) -> Vec<SideEffect> {
        // Warm-ups are the model's bets too: none while the guard follows LRU.
        if self.guard.mode() == guard::Expert::Lru {
            return Vec::new();
        }
        match &mut self.model {
            Model::Scaled(m) => m.act(),
            Model::Classic(m) => m.act(),
        }
    }

    fn snapshot(&self) -> Vec<u8> {
        match &self.model {
            Model::Scaled(m) => m.snapshot(),
            Model::Classic(m) => m.snapshot(),
        }
    }

    fn restore(&mut self, state: &[u8]) -> Result<(), String> {
        if state.is_empty() {
            // Another policy's (stateless) snapshot, e.g. on a swap from LRU: start fresh.
            return match &mut self.model {
                Model::Scaled(m) => {
                    **m = scaled::Scaled::with_params(m.params().clone());
                    Ok(())
                }
                Model::Classic(m) => m.restore(state),
            };
        }
        match &mut self.model {
            Model::Scaled(m) => m.restore(state),
            Model::Classic(m) => m.restore(state),
        }
    }
}

agentrt_sdk::export_policy!(CacheSage);

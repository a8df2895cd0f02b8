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

pub mod anchor;
pub mod classic;
pub mod guard;
pub mod scaled;
pub mod shadow;

use agentrt_sdk::{info, BlockEvent, Config, Event, Forecast, Item, Policy, PolicyInfo, SideEffect};

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
}

impl Default for CacheSage {
    fn default() -> Self {
        Self {
            model: Model::Scaled(Box::default()),
            guard: guard::Guard::new(guard::GuardParams::default()),
        }
    }
}

/// The `init` keys of the guard; the rest go to the model.
const GUARD_KEYS: [&str; 2] = ["guard", "guard-margin"];

impl CacheSage {
    /// Size of the learned state: the snapshot's length.
    pub fn state_bytes(&self) -> usize {
        self.snapshot().len()
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
        let params = guard::GuardParams {
            enabled: config.parse_or("guard", defaults.enabled)?,
            margin: config.parse_or("guard-margin", defaults.margin)?,
        };
        if !(params.margin.is_finite() && (0.0..=1.0).contains(&params.margin)) {
            return Err("config key `guard-margin`: must be in [0, 1]".into());
        }
        let rest: Vec<(String, String)> = config
            .pairs()
            .iter()
            .filter(|(k, _)| !GUARD_KEYS.contains(&k.as_str()))
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
        };
        Ok(())
    }

    fn observe(&mut self, event: &Event) {
        self.guard.observe(event);
        match &mut self.model {
            Model::Scaled(m) => m.observe(event),
            Model::Classic(m) => m.observe(event),
        }
    }

    fn observe_block(&mut self, block: &BlockEvent) {
        self.guard.observe_block(block);
        match &mut self.model {
            Model::Scaled(m) => m.observe_block(block),
            Model::Classic(m) => m.observe_block(block),
        }
    }

    fn score(&mut self, items: &[Item]) -> Vec<f32> {
        let model = match &mut self.model {
            Model::Scaled(m) => m.score(items),
            Model::Classic(m) => m.score(items),
        };
        self.guard.choose(items, model)
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

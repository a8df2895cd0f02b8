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
//! bounded (20 KB for a workload of up to 32 agents).

pub mod anchor;
pub mod classic;
pub mod scaled;

use agentrt_sdk::{info, BlockEvent, Config, Event, Forecast, Item, Policy, PolicyInfo, SideEffect};

/// The policy: one of the two models.
#[derive(Debug, Clone)]
pub enum CacheSage {
    Scaled(Box<scaled::Scaled>),
    Classic(Box<classic::CacheSage>),
}

impl Default for CacheSage {
    fn default() -> Self {
        CacheSage::Scaled(Box::default())
    }
}

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
        *self = match config.get("model").unwrap_or("scaled") {
            "scaled" => CacheSage::Scaled(Box::new(scaled::Scaled::init(config)?)),
            "classic" => {
                // The classic model's keys, without the model choice.
                let rest = config.pairs().iter().filter(|(k, _)| k != "model").cloned().collect();
                let mut classic = classic::CacheSage::default();
                classic.init(&Config::new(rest))?;
                CacheSage::Classic(Box::new(classic))
            }
            other => return Err(format!("config key `model`: unknown model {other:?} (scaled, classic)")),
        };
        Ok(())
    }

    fn observe(&mut self, event: &Event) {
        match self {
            CacheSage::Scaled(m) => m.observe(event),
            CacheSage::Classic(m) => m.observe(event),
        }
    }

    fn observe_block(&mut self, block: &BlockEvent) {
        match self {
            CacheSage::Scaled(m) => m.observe_block(block),
            CacheSage::Classic(m) => m.observe_block(block),
        }
    }

    fn score(&mut self, items: &[Item]) -> Vec<f32> {
        match self {
            CacheSage::Scaled(m) => m.score(items),
            CacheSage::Classic(m) => m.score(items),
        }
    }

    fn predict(&mut self, horizon: u32) -> Vec<Forecast> {
        match self {
            CacheSage::Scaled(m) => m.predict(horizon),
            CacheSage::Classic(m) => m.predict(horizon),
        }
    }

    fn act(&mut self) -> Vec<SideEffect> {
        match self {
            CacheSage::Scaled(m) => m.act(),
            CacheSage::Classic(m) => m.act(),
        }
    }

    fn snapshot(&self) -> Vec<u8> {
        match self {
            CacheSage::Scaled(m) => m.snapshot(),
            CacheSage::Classic(m) => m.snapshot(),
        }
    }

    fn restore(&mut self, state: &[u8]) -> Result<(), String> {
        if state.is_empty() {
            // Another policy's (stateless) snapshot, e.g. on a swap from LRU: start fresh.
            return match self {
                CacheSage::Scaled(m) => {
                    **m = scaled::Scaled::with_params(m.params().clone());
                    Ok(())
                }
                CacheSage::Classic(m) => m.restore(state),
            };
        }
        match self {
            CacheSage::Scaled(m) => m.restore(state),
            CacheSage::Classic(m) => m.restore(state),
        }
    }
}

agentrt_sdk::export_policy!(CacheSage);

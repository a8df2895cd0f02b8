//! The engine(s) behind the proxy: the upstream and its limits, the admission queue in front of
//! it and working-set admission (whole sessions held back past the engine's knee), several replicas behind a router (agentrt's, or one agentrt fronts: [`upstream_router`]),
//! and who owns an engine block under cache shares.

pub mod adapters;
pub mod admission;
pub mod held_first;
pub mod kind;
pub mod plugin_metrics;
pub mod prompt_scale;
pub mod replicas;
pub mod startup_checks;
pub mod tokenize;
pub mod upstream;
pub mod upstream_router;
pub mod working_set;

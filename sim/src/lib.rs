//! # agentrt-sim — the evaluation instrument
//!
//! A block-level model of vLLM V1's prefix cache and scheduler, faithful to vLLM's rules (checked
//! against vLLM's own `KVCacheManager` by `sim/fidelity/`), that replays multi-agent traces under
//! eviction policies — vLLM's LRU, Bélády's offline optimum, and any policy component run through
//! the real agentrt host — and measures token hit rate, TTFT, per-turn latency and throughput.
//!
//! Module map: [`trace`] (the JSONL format) → [`prepare`] (token ids, block hashes, agents) →
//! [`scheduler`] (vLLM's scheduler over [`kv_cache_manager`] and [`block_pool`], the files named
//! for the vLLM files they mirror, timed by [`latency`]) with a policy from [`policies`] (held to
//! [`policy_limits`]); [`workloads`] generate traces and [`import`] converts public ones, replayed
//! under the [`conditions`] a run states; [`harness`] runs every policy and [`report`] / [`plot`]
//! present the results; [`audit`] says which evictions a later request regretted. The
//! [`experiments`] sit on top, each a subcommand of [`cli`] (`agentrt sim`), sharing the
//! [`setting`] and the [`options`].

pub mod arbiter;
pub mod audit;
pub mod block_pool;
pub mod cli;
pub mod conditions;
pub mod experiments;
pub mod harness;
pub mod hints;
pub mod import;
pub mod kv_cache_manager;
pub mod latency;
pub mod offload;
pub mod options;
pub mod parallel;
pub mod plot;
pub mod png;
pub mod policies;
pub mod policy_limits;
pub mod prepare;
pub mod replicas;
pub mod report;
pub mod rng;
pub mod router_model;
pub mod scheduler;
pub mod setting;
pub mod tokens;
pub mod trace;
pub mod workloads;

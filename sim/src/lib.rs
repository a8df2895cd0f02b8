//! # agentrt-sim — the evaluation instrument
//!
//! A block-level model of vLLM V1's prefix cache and scheduler, faithful to vLLM's rules (checked
//! against vLLM's own `KVCacheManager` by `sim/fidelity/`), that replays multi-agent traces under
//! eviction policies — vLLM's LRU, Bélády's offline optimum, and any policy component run through
//! the real agentrt host — and measures token hit rate, TTFT, per-turn latency and throughput.
//!
//! ## Modules in detail
//!
//! Evaluation: trace format, six workload generators (`fleet`: many agent applications on one
//! engine), `import` (public traces → the format: kv-cache-tester's Claude Code conversations,
//! Mooncake, Bailian; one segment per source block, so prefix sharing is exact), `conditions` (what
//! the policy is told of session ends — inferred from idle time as `serve` does, or the oracle —
//! and the load: time scale, arrival scale, a target utilisation reached with LRU replays), `hints`
//! (which of the trace's lifecycle hints — a session's close, what it waits for — the policy hears
//! as `session-end` closed / `session-wait`, for which share of sessions: `--hints`,
//! `--hint-coverage`), `block_pool` + `kv_cache_manager` (named for the vLLM files they mirror) +
//! `offload` (vLLM's host-memory tier, `sim run --host-blocks`: `host_pool` = its
//! `CPUOffloadingManager`, `host_policy` = its `lru` and `arc`, both checked call by call against
//! vLLM's class by `tests/host_fidelity.rs`; `connector` = the offloading connector's stores, loads
//! and copy times; the scheduler's side in `scheduler/host_tier`; `ranked` = the host pool ranked
//! by the replayed policy (`--host-policy policy`: the evict-first window of vLLM's LRU order
//! scored as host-tier items, negative = not stored) or by two-tier Bélády;
//! [docs/hierarchy.md](hierarchy.md)) + `scheduler/` (FCFS, or vLLM's priority scheduling with the
//! slots' demotions: `--engine-priorities`; one file per concept: `config`, `results`, `step`
//! (running, waiting, the batch), `sessions` (idle ends, the next request), `effects` (side
//! effects, load reports), `replica`, `host_tier`) + latency model (it reports `engine-load` to
//! policies), policy slots beside the replayed policy (`policies::Slotted`: the same request
//! events, side effects merged as `serve` merges them), `policies/` (`spec` = names → policies,
//! `native` = vLLM's LRU, `closed_first` = LRU with the closed sessions' blocks first (the hints'
//! online baseline), `belady`, `wasm` = the component adapter: a ranking scores a bounded window,
//! the blocks it kept last time and the oldest others; `slotted`), `policy_limits` (a replayed
//! slot's memory cap, deadline and give-up threshold, with `serve`'s flag names), tables and plots
//! (SVG, and PNG through resvg; `plot/legend` lays the legend out from the names' estimated widths
//! (`plot/text`), wrapping rows and moving the plot down; a policy's failures are columns and a
//! note under the table), `audit` (which evictions a later request regretted, by content and
//! agent), `fleet_sweep` (applications × anchor scale), `parallel` (replays on worker threads);
//! tenants: trace lines may name one (salted blocks), `arbiter` (one policy instance per tenant
//! under cache shares: eviction by `shares`, admission that keeps others' guarantees),
//! `noisy_neighbour` (an agent tenant next to a flood), `session_flood` (a session flooding from
//! several clients next to a light one, without and with fair-share); several replicas: `replicas`
//! (N engines driven in simulated-time order, one router placing every request), `router_model`
//! (round-robin, session-sticky, Dynamo's KV cost, that plus agentrt's hint, and vLLM's router's
//! `cache_aware` (`approx_tree`) and `kv_aware` with its session affinity). The proxy in front of
//! the engine: `admission/` (the stage a request passes before vLLM — `request_cap` = `serve
//! --upstream-max-in-flight`, `thunderagent` = ThunderAgent's `tr` scheduler, `working_set` = the
//! `agentrt-admission` decision with an `admission` slot's scores, `held_first` = the ranker rule
//! that offers held sessions' blocks first) and `scheduler/proxy` (held requests, closed-loop
//! programs), `scheduler/continuum` (Continuum's TTL pins). On top, `experiments/` (`run`, `table`,
//! `fleet_sweep`, `noisy_neighbour`, `session_flood`, `knee`: one per subcommand) over `setting`
//! (the headline block size and cache) and `options` (the flags every experiment shares) and
//! `progress` (a bar on a terminal, a line per replay on stderr otherwise); `cli` only dispatches.
//! Nothing below the experiments uses them (`tests/layers.rs`).

pub mod admission;
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
pub mod progress;
pub mod replicas;
pub mod report;
pub mod rng;
pub mod router_model;
pub mod scheduler;
pub mod setting;
pub mod tokens;
pub mod trace;
pub mod workloads;

//! # agentrt-admission — working-set admission
//!
//! Past the engine's knee the live agent sessions' contexts no longer fit its KV cache together:
//! each session's blocks are evicted while it waits for a tool, and its next call recomputes
//! the whole context. Counting requests (`serve --upstream-max-in-flight`) cannot see this —
//! the sessions whose blocks are thrashed are idle, not in flight. This crate keeps the one
//! thing that can: a **ledger of the live sessions' contexts, idle ones included, against the
//! cache**, and decides which *sessions* are resident (their calls go to the engine at once) and
//! which are held (their next call waits in the proxy). One implementation for every caller: the
//! simulator's admission stage (`agentrt-sim`, `sim/src/admission/working_set.rs`) and `serve`'s
//! queue. No I/O, no clock, no async: the caller says what happened and when.
//!
//! ## How a caller drives it ([`WorkingSet`])
//!
//! 1. `set_capacity(tokens)` — the engine's KV capacity: vLLM's `vllm:cache_config_info`
//!    (`num_gpu_blocks` × `block_size`); again whenever it changes.
//! 2. `arrive(&Arrival, now)` for every request of a session (its tenant, agent, anchor and
//!    prompt size) → [`Verdict::Admit`] (send it now) or [`Verdict::Hold`] (keep it; a later
//!    `rebalance` names its session when it may go). A resident session's calls are always
//!    admitted: its blocks are in the cache.
//! 3. `answer(&Answered, now)` when its response ends (prompt, cached and output tokens, time to
//!    first token, decode time — what the response's `usage` and the proxy's clock give).
//! 4. `close(session, now)` on a closing (a framework's `session-end` closed, ThunderAgent's
//!    `POST /programs/release`): the session leaves the ledger at once. `idle_end` for what the
//!    host only infers (its idle rule, its full session table): the same, unless a call of the
//!    session is in flight or waiting.
//! 5. When [`WorkingSet::due`] says so (an answer, a close, a held request, or `check_every`
//!    since the last one): `candidates()` lists the sessions to score, the caller has its
//!    tenant's `admission` slot score them as `session` items (contract 0.5.0: key = session,
//!    tokens = context, last-access = last activity), and `rebalance(now, engine, &scores)`
//!    holds and resumes sessions and returns the held requests that go now. Without a slot, or
//!    when its call fails, the scores are all 0 and the host's order decides (below).
//! 6. The engine's ranker asks [`WorkingSet::eviction_class`] for a block's session: held
//!    sessions' blocks are offered for eviction before any other, a resumed session's are kept
//!    until its call has been admitted, and everything else stays in the cache policy's order —
//!    so no cache policy has to change (CacheSage ranks beside it).
//!
//! ## The decision (one rebalance)
//!
//! - **Hold nothing unless it pays** ([`cost::CostMeter::holding_pays`]): a hold saves the
//!   recompute of evicted contexts and costs the engine parallelism (resident sessions that
//!   wait for a tool keep KV no running call can use). With the cache full of resident sessions
//!   of which a fraction φ is running, against every running call recomputing its context, a
//!   hold wins when `p × S > O × d × (1/n_held − 1/n_all)` per call — with `n = C / S` sessions
//!   in the cache, `1/φ − 1` = wait / decode time, it reduces to **`p × C > W`**: prefilling the
//!   whole cache (`p` = the engine's measured prefill time per uncached token, the slope of TTFT
//!   against uncached tokens over recent answers; `C` = capacity) takes longer than a session's
//!   typical pause between calls (`W` = the median measured wait). On an H100 serving
//!   Llama-3.1-8B `p × C` ≈ 15 s against tool pauses of seconds: holds pay. On the tiny CPU model
//!   `p × C` is tens of milliseconds: nothing is ever held. Until `min_answers` answers are
//!   measured nothing is held either.
//! - **While the working set fits** (`fill` × capacity; each agent's anchor counted once, each
//!   running call with room for its answer): nothing is held, every waiting request goes.
//! - **Over it**: idle resident sessions are held, lowest score first (a long tool, a user),
//!   those of tenants over their share first; when no idle session is left, running ones are
//!   marked and held when their answer ends.
//! - **Resume**: held calls go, tenants under their share first, then by score, then smallest
//!   first (the most calls in the cache, the cheapest recompute), while they fit.
//!   To make room for one, idle sessions expected to stay away longer than the **break-even
//!   horizon `p × C`** are held, farthest first: keeping `S` tokens idle for `r` seconds costs
//!   the engine `S × r / C` seconds of a full cache's work, recomputing them later `p × S`. One
//!   call goes whatever the room whenever the engine would otherwise idle (nothing running,
//!   nothing waiting in it).
//! - **The policy's score** of a `session` item is minus the expected seconds until the
//!   session's next call (0: in flight, or due now): the host holds the lowest first and compares
//!   it with the horizon. Without a policy every score is 0: only the working set's excess is
//!   held, oldest activity first, and nothing is held to make room.
//! - **Aging**: no request is held longer than `max_hold_us` (600 s by default), and a session's
//!   first call no longer than `max_first_wait_us` (30 s: a new session's first response is
//!   bounded tighter; its context is small): past it, it goes whatever the working set — the
//!   bound every session's wait has.
//! - **Tenant shares**: a tenant's share is the capacity × its weight ÷ the weights of tenants
//!   with live sessions; one tenant flooding sessions is held beyond its share, not the others.
//!   A session of a tenant within its share is held only for that tenant's own calls (or while no
//!   tenant is over its share) — never to make room for another's call, forced or not — and a
//!   call within its share goes at once when another tenant's excess has taken the room: that
//!   excess is held at the next rebalance (running calls when their answers end).

mod contract;
pub mod cost;
pub mod ledger;
mod working_set;

pub use cost::CostMeter;
pub use ledger::{Ledger, SessionState};
pub use working_set::{
    Answered, Arrival, Candidate, CapacityReport, EngineNow, EvictionClass, Figures, Settings, Verdict, WorkingSet,
};

/// A session id, as policies hear it (a 64-bit hash of the caller's session id).
pub type SessionId = u64;

/// A tenant, as the caller numbers them.
pub type TenantId = u32;

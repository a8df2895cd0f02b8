//! A request inside the scheduler, and the block-pool operation log.

use std::io::Write;

use crate::kv_cache_manager::SeqKv;
use crate::trace::Trace;

/// Where a request came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Origin {
    Trace(u32),
    Warmup(u32),
}

pub(super) struct Req {
    pub(super) origin: Origin,
    pub(super) kv: SeqKv,
    pub(super) prompt_tokens: u32,
    pub(super) output_target: u32,
    pub(super) generated: u32,
    /// When it entered the engine's waiting queue.
    pub(super) arrival_ns: u64,
    /// When its session issued it at the proxy (= `arrival_ns` unless the admission stage held
    /// it): TTFT and turn latency count from here, as the client sees them.
    pub(super) offered_ns: u64,
    /// When the engine first scheduled it (its prefill began).
    pub(super) scheduled_ns: Option<u64>,
    pub(super) first_token_ns: Option<u64>,
    pub(super) admitted_once: bool,
    pub(super) hit_tokens: u32,
    pub(super) agent: u32,
    pub(super) anchor_hash: u64,
    /// Session index (trace requests) — warm-ups have none.
    pub(super) session: Option<u32>,
    /// vLLM's request priority (lower is served first), fixed at arrival.
    pub(super) priority: i32,
    /// Tokens loaded from the host tier at admission, and when that load was issued.
    pub(super) host_tokens: u32,
    pub(super) load_started_ns: u64,
}

/// Block-pool operations in a form a Python script can replay through vLLM's own
/// `KVCacheManager` (see sim/fidelity/).
pub struct OpLog<'a> {
    pub trace: &'a Trace,
    pub out: Box<dyn Write + 'a>,
}

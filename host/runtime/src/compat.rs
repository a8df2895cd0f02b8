//! Components built against the previous contract line, `agentrt:policy@0.2.0`.
//!
//! 0.3.0 added the KV tier: a `tier` field on `block-event` and `item`. Everything a 0.2 guest
//! returns (`policy-info`, forecasts, side effects, scores, snapshots) has the same shape under
//! both lines, so the host lifts those with its 0.3 types; only what the host *sends* differs.
//! A 0.2 guest is told about the GPU tier alone, as it always was: host-tier block events are
//! left out of its batches, and it is never asked to rank the host tier (its handle answers
//! that in LRU order). The host's imports are the same functions under both lines.

use crate::bindings::v0_2::agentrt::policy::{host as host_v0_2, types as v0_2};
use crate::sandbox::GuestState;
use crate::types::{self as current, Event, Item, Tier};

/// The contract line a component was built against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContractLine {
    /// `agentrt:policy@0.3.x`: the current line.
    V0_3,
    /// `agentrt:policy@0.2.x`: GPU tier only.
    V0_2,
}

impl ContractLine {
    /// The version a component of this line exports its guest interface under.
    pub fn version(self) -> &'static str {
        match self {
            Self::V0_3 => "0.3.0",
            Self::V0_2 => "0.2.0",
        }
    }

    /// Whether components of this line rank and hear about the host tier.
    pub fn knows_tiers(self) -> bool {
        self == Self::V0_3
    }
}

/// `event` as a 0.2 guest receives it; `None` for what 0.2 has no words for (host-tier blocks).
pub(crate) fn event_v0_2(event: &Event) -> Option<v0_2::Event> {
    Some(match event {
        Event::AgentRegistered(a) => v0_2::Event::AgentRegistered(v0_2::AgentRegistered {
            agent: a.agent,
            name: a.name.clone(),
            anchor_hash: a.anchor_hash,
            anchor_tokens: a.anchor_tokens,
        }),
        Event::RequestArrival(r) => v0_2::Event::RequestArrival(v0_2::RequestArrival {
            request_id: r.request_id,
            agent: r.agent,
            session: r.session,
            anchor_hash: r.anchor_hash,
            prompt_tokens: r.prompt_tokens,
            continues: r.continues.map(|c| v0_2::Continuation {
                shared_tokens: c.shared_tokens,
                previous_tokens: c.previous_tokens,
            }),
            warmup: r.warmup,
            at_us: r.at_us,
        }),
        Event::RequestFinish(r) => v0_2::Event::RequestFinish(v0_2::RequestFinish {
            request_id: r.request_id,
            agent: r.agent,
            session: r.session,
            prompt_tokens: r.prompt_tokens,
            cached_tokens: r.cached_tokens,
            output_tokens: r.output_tokens,
            warmup: r.warmup,
            ok: r.ok,
            at_us: r.at_us,
        }),
        Event::ToolCall(t) => v0_2::Event::ToolCall(v0_2::ToolCall {
            session: t.session,
            agent: t.agent,
            tool: t.tool,
            args_hash: t.args_hash,
            at_us: t.at_us,
        }),
        Event::ToolReturn(t) => v0_2::Event::ToolReturn(v0_2::ToolReturn {
            session: t.session,
            agent: t.agent,
            tool: t.tool,
            args_hash: t.args_hash,
            result_tokens: t.result_tokens,
            latency_us: t.latency_us,
            ok: t.ok,
        }),
        Event::SessionEnd(s) => v0_2::Event::SessionEnd(*s),
        Event::EngineLoad(l) => v0_2::Event::EngineLoad(v0_2::EngineLoad {
            queue_depth: l.queue_depth,
            running: l.running,
            free_blocks: l.free_blocks,
            total_blocks: l.total_blocks,
            at_us: l.at_us,
        }),
        Event::Block(b) if b.tier == Tier::Host => return None,
        Event::Block(b) => v0_2::Event::Block(v0_2::BlockEvent {
            op: match b.op {
                current::BlockOp::Stored => v0_2::BlockOp::Stored,
                current::BlockOp::Touched => v0_2::BlockOp::Touched,
                current::BlockOp::Removed => v0_2::BlockOp::Removed,
                current::BlockOp::AllCleared => v0_2::BlockOp::AllCleared,
            },
            agent: b.agent,
            block_hash: b.block_hash,
            parent_hash: b.parent_hash,
            position: b.position,
        }),
    })
}

/// `item` as a 0.2 guest receives it (callers keep host-tier items away from 0.2 guests).
pub(crate) fn item_v0_2(item: &Item) -> v0_2::Item {
    v0_2::Item {
        kind: match item.kind {
            current::ItemKind::KvBlock => v0_2::ItemKind::KvBlock,
            current::ItemKind::Request => v0_2::ItemKind::Request,
            current::ItemKind::ToolResult => v0_2::ItemKind::ToolResult,
        },
        key: item.key,
        agent: item.agent,
        session: item.session,
        last_access: item.last_access,
        tokens: item.tokens,
        position: item.position,
    }
}

/// Packed block events as a 0.2 guest receives them: the GPU tier's, which pack to the same words
/// under both lines (the tier sits in bits 0.2 always left zero). Borrowed when there is nothing
/// to leave out, which is every batch from an engine without a host tier.
pub(crate) fn blocks_v0_2(packed: &[u64]) -> std::borrow::Cow<'_, [u64]> {
    use agentrt_sdk::packed::WORDS_PER_EVENT;
    let host_tier = |event: &[u64]| (event[0] >> 4) & 0x0f != 0;
    if !packed.chunks_exact(WORDS_PER_EVENT).any(host_tier) {
        return std::borrow::Cow::Borrowed(packed);
    }
    std::borrow::Cow::Owned(
        packed
            .chunks_exact(WORDS_PER_EVENT)
            .filter(|event| !host_tier(event))
            .flatten()
            .copied()
            .collect(),
    )
}

/// The 0.2.0 `policy-info`, in the current type (same fields).
pub(crate) fn info_from_v0_2(info: v0_2::PolicyInfo) -> current::PolicyInfo {
    current::PolicyInfo {
        name: info.name,
        version: info.version,
        description: info.description,
    }
}

impl v0_2::Host for GuestState {}

// The same three imports under the 0.2.0 names: one implementation, two names.
impl host_v0_2::Host for GuestState {
    fn now_us(&mut self) -> u64 {
        crate::bindings::agentrt::policy::host::Host::now_us(self)
    }

    fn log(&mut self, level: v0_2::LogLevel, message: String) {
        let level = match level {
            v0_2::LogLevel::Trace => current::LogLevel::Trace,
            v0_2::LogLevel::Debug => current::LogLevel::Debug,
            v0_2::LogLevel::Info => current::LogLevel::Info,
            v0_2::LogLevel::Warn => current::LogLevel::Warn,
            v0_2::LogLevel::Error => current::LogLevel::Error,
        };
        crate::bindings::agentrt::policy::host::Host::log(self, level, message)
    }

    fn random_seed(&mut self) -> u64 {
        crate::bindings::agentrt::policy::host::Host::random_seed(self)
    }
}

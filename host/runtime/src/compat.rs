//! Components built against the previous contract lines, `agentrt:policy@0.4.0`, `0.3.0` and
//! `0.2.0`.
//!
//! 0.5.0 added working-set admission: the `engine-capacity` event and `session` items. 0.4.0
//! added what the framework knows about a session's life: `session-end` became a record
//! with the reason (closed, idle, evicted), and `session-wait` and `handoff` are new events; it
//! also added `observe-packed`. 0.3.0 added the KV tier (`tier` on `block-event` and `item`).
//! Everything an older guest returns (`policy-info`, forecasts, side effects, scores, snapshots)
//! has the same shape under every line, so the host lifts those with its current types; only what
//! the host *sends* differs, and an older guest hears what it always heard:
//!
//! - a 0.4 guest gets every event but `engine-capacity` (packed as under 0.5: the layouts agree),
//!   and is never asked to score `session` items (its handle scores them 0 without a call);
//! - a 0.3 guest gets every session end as `session-end(session-id)`, whatever its reason, and no
//!   waits or handoffs; typed events only (it has no `observe-packed`);
//! - a 0.2 guest gets that, and the GPU tier alone: host-tier block events are left out of its
//!   batches, and it is never asked to rank the host tier (its handle answers that in LRU order).
//!
//! The host's imports are the same three functions under every line.

use crate::bindings::v0_2::agentrt::policy::{host as host_v0_2, types as v0_2};
use crate::bindings::v0_3::agentrt::policy::{host as host_v0_3, types as v0_3};
use crate::bindings::v0_4::agentrt::policy::{host as host_v0_4, types as v0_4};
use crate::sandbox::GuestState;
use crate::types::{self as current, Event, Item, Tier};

/// The contract line a component was built against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContractLine {
    /// `agentrt:policy@0.5.x`: the current line.
    V0_5,
    /// `agentrt:policy@0.4.x`: no `engine-capacity`, no `session` items.
    V0_4,
    /// `agentrt:policy@0.3.x`: no session-end reasons, waits or handoffs; no packed events.
    V0_3,
    /// `agentrt:policy@0.2.x`: that, and the GPU tier only.
    V0_2,
}

impl ContractLine {
    /// The version a component of this line exports its guest interface under.
    pub fn version(self) -> &'static str {
        match self {
            Self::V0_5 => "0.5.0",
            Self::V0_4 => "0.4.0",
            Self::V0_3 => "0.3.0",
            Self::V0_2 => "0.2.0",
        }
    }

    /// Whether components of this line rank and hear about the host tier.
    pub fn knows_tiers(self) -> bool {
        self != Self::V0_2
    }

    /// Whether components of this line hear why a session ended, waits and handoffs.
    pub fn knows_session_life(self) -> bool {
        matches!(self, Self::V0_5 | Self::V0_4)
    }

    /// Whether components of this line score `session` items and hear `engine-capacity`.
    pub fn knows_admission(self) -> bool {
        self == Self::V0_5
    }
}

/// Whether a 0.4 guest hears `event` (it has no words for `engine-capacity`; everything else it
/// hears as 0.5 sends it, packed the same).
pub(crate) fn heard_by_v0_4(event: &Event) -> bool {
    !matches!(event, Event::EngineCapacity(_))
}

/// `event` as a 0.4 guest receives it through `observe` (only `agent-registered` goes typed; the
/// rest is packed): `None` for what 0.4 has no words for.
pub(crate) fn event_v0_4(event: &Event) -> Option<v0_4::Event> {
    match event {
        Event::AgentRegistered(a) => Some(v0_4::Event::AgentRegistered(v0_4::AgentRegistered {
            agent: a.agent,
            name: a.name.clone(),
            anchor_hash: a.anchor_hash,
            anchor_tokens: a.anchor_tokens,
        })),
        _ => None,
    }
}

/// `event` as a 0.3 guest receives it; `None` for what 0.3 has no words for (waits, handoffs).
pub(crate) fn event_v0_3(event: &Event) -> Option<v0_3::Event> {
    Some(match event {
        Event::AgentRegistered(a) => v0_3::Event::AgentRegistered(v0_3::AgentRegistered {
            agent: a.agent,
            name: a.name.clone(),
            anchor_hash: a.anchor_hash,
            anchor_tokens: a.anchor_tokens,
        }),
        Event::RequestArrival(r) => v0_3::Event::RequestArrival(v0_3::RequestArrival {
            request_id: r.request_id,
            agent: r.agent,
            session: r.session,
            anchor_hash: r.anchor_hash,
            prompt_tokens: r.prompt_tokens,
            continues: r.continues.map(|c| v0_3::Continuation {
                shared_tokens: c.shared_tokens,
                previous_tokens: c.previous_tokens,
            }),
            warmup: r.warmup,
            at_us: r.at_us,
        }),
        Event::RequestFinish(r) => v0_3::Event::RequestFinish(v0_3::RequestFinish {
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
        Event::ToolCall(t) => v0_3::Event::ToolCall(v0_3::ToolCall {
            session: t.session,
            agent: t.agent,
            tool: t.tool,
            args_hash: t.args_hash,
            at_us: t.at_us,
        }),
        Event::ToolReturn(t) => v0_3::Event::ToolReturn(v0_3::ToolReturn {
            session: t.session,
            agent: t.agent,
            tool: t.tool,
            args_hash: t.args_hash,
            result_tokens: t.result_tokens,
            latency_us: t.latency_us,
            ok: t.ok,
        }),
        Event::SessionEnd(e) => v0_3::Event::SessionEnd(e.session),
        Event::EngineLoad(l) => v0_3::Event::EngineLoad(v0_3::EngineLoad {
            queue_depth: l.queue_depth,
            running: l.running,
            free_blocks: l.free_blocks,
            total_blocks: l.total_blocks,
            at_us: l.at_us,
        }),
        Event::Block(b) => v0_3::Event::Block(v0_3::BlockEvent {
            op: match b.op {
                current::BlockOp::Stored => v0_3::BlockOp::Stored,
                current::BlockOp::Touched => v0_3::BlockOp::Touched,
                current::BlockOp::Removed => v0_3::BlockOp::Removed,
                current::BlockOp::AllCleared => v0_3::BlockOp::AllCleared,
            },
            agent: b.agent,
            block_hash: b.block_hash,
            parent_hash: b.parent_hash,
            position: b.position,
            tier: match b.tier {
                Tier::Gpu => v0_3::Tier::Gpu,
                Tier::Host => v0_3::Tier::Host,
            },
        }),
        Event::SessionWait(_) | Event::Handoff(_) | Event::EngineCapacity(_) => return None,
    })
}

/// A 0.3 event as a 0.2 guest receives it; `None` for what 0.2 has no words for (host-tier
/// blocks). A 0.2 guest's batch is the 0.3 batch with this applied.
pub(crate) fn event_v0_2(event: v0_3::Event) -> Option<v0_2::Event> {
    Some(match event {
        v0_3::Event::AgentRegistered(a) => v0_2::Event::AgentRegistered(v0_2::AgentRegistered {
            agent: a.agent,
            name: a.name,
            anchor_hash: a.anchor_hash,
            anchor_tokens: a.anchor_tokens,
        }),
        v0_3::Event::RequestArrival(r) => v0_2::Event::RequestArrival(v0_2::RequestArrival {
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
        v0_3::Event::RequestFinish(r) => v0_2::Event::RequestFinish(v0_2::RequestFinish {
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
        v0_3::Event::ToolCall(t) => v0_2::Event::ToolCall(v0_2::ToolCall {
            session: t.session,
            agent: t.agent,
            tool: t.tool,
            args_hash: t.args_hash,
            at_us: t.at_us,
        }),
        v0_3::Event::ToolReturn(t) => v0_2::Event::ToolReturn(v0_2::ToolReturn {
            session: t.session,
            agent: t.agent,
            tool: t.tool,
            args_hash: t.args_hash,
            result_tokens: t.result_tokens,
            latency_us: t.latency_us,
            ok: t.ok,
        }),
        v0_3::Event::SessionEnd(s) => v0_2::Event::SessionEnd(s),
        v0_3::Event::EngineLoad(l) => v0_2::Event::EngineLoad(v0_2::EngineLoad {
            queue_depth: l.queue_depth,
            running: l.running,
            free_blocks: l.free_blocks,
            total_blocks: l.total_blocks,
            at_us: l.at_us,
        }),
        v0_3::Event::Block(b) if b.tier == v0_3::Tier::Host => return None,
        v0_3::Event::Block(b) => v0_2::Event::Block(v0_2::BlockEvent {
            op: match b.op {
                v0_3::BlockOp::Stored => v0_2::BlockOp::Stored,
                v0_3::BlockOp::Touched => v0_2::BlockOp::Touched,
                v0_3::BlockOp::Removed => v0_2::BlockOp::Removed,
                v0_3::BlockOp::AllCleared => v0_2::BlockOp::AllCleared,
            },
            agent: b.agent,
            block_hash: b.block_hash,
            parent_hash: b.parent_hash,
            position: b.position,
        }),
    })
}

/// `item` as a 0.4 guest receives it (callers keep `session` items away from older guests).
pub(crate) fn item_v0_4(item: &Item) -> v0_4::Item {
    v0_4::Item {
        kind: match item.kind {
            current::ItemKind::KvBlock => v0_4::ItemKind::KvBlock,
            current::ItemKind::Request | current::ItemKind::Session => v0_4::ItemKind::Request,
            current::ItemKind::ToolResult => v0_4::ItemKind::ToolResult,
        },
        key: item.key,
        agent: item.agent,
        session: item.session,
        last_access: item.last_access,
        tokens: item.tokens,
        position: item.position,
        tier: match item.tier {
            Tier::Gpu => v0_4::Tier::Gpu,
            Tier::Host => v0_4::Tier::Host,
        },
    }
}

/// `item` as a 0.3 guest receives it (same fields).
pub(crate) fn item_v0_3(item: &Item) -> v0_3::Item {
    v0_3::Item {
        kind: match item.kind {
            current::ItemKind::KvBlock => v0_3::ItemKind::KvBlock,
            current::ItemKind::Request | current::ItemKind::Session => v0_3::ItemKind::Request,
            current::ItemKind::ToolResult => v0_3::ItemKind::ToolResult,
        },
        key: item.key,
        agent: item.agent,
        session: item.session,
        last_access: item.last_access,
        tokens: item.tokens,
        position: item.position,
        tier: match item.tier {
            Tier::Gpu => v0_3::Tier::Gpu,
            Tier::Host => v0_3::Tier::Host,
        },
    }
}

/// `item` as a 0.2 guest receives it (callers keep host-tier items away from 0.2 guests).
pub(crate) fn item_v0_2(item: &Item) -> v0_2::Item {
    v0_2::Item {
        kind: match item.kind {
            current::ItemKind::KvBlock => v0_2::ItemKind::KvBlock,
            current::ItemKind::Request | current::ItemKind::Session => v0_2::ItemKind::Request,
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
/// under every line (the tier sits in bits 0.2 always left zero). Borrowed when there is nothing
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

/// An older line's `policy-info`, in the current type (same fields under every line).
macro_rules! info_from {
    ($name:ident, $line:ident) => {
        pub(crate) fn $name(info: $line::PolicyInfo) -> current::PolicyInfo {
            current::PolicyInfo {
                name: info.name,
                version: info.version,
                description: info.description,
            }
        }
    };
}
info_from!(info_from_v0_4, v0_4);
info_from!(info_from_v0_3, v0_3);
info_from!(info_from_v0_2, v0_2);

/// The three host imports under an older line's names: one implementation, three names.
macro_rules! host_imports {
    ($types:ident, $host:ident) => {
        impl $types::Host for GuestState {}

        impl $host::Host for GuestState {
            fn now_us(&mut self) -> u64 {
                crate::bindings::agentrt::policy::host::Host::now_us(self)
            }

            fn log(&mut self, level: $types::LogLevel, message: String) {
                let level = match level {
                    $types::LogLevel::Trace => current::LogLevel::Trace,
                    $types::LogLevel::Debug => current::LogLevel::Debug,
                    $types::LogLevel::Info => current::LogLevel::Info,
                    $types::LogLevel::Warn => current::LogLevel::Warn,
                    $types::LogLevel::Error => current::LogLevel::Error,
                };
                crate::bindings::agentrt::policy::host::Host::log(self, level, message)
            }

            fn random_seed(&mut self) -> u64 {
                crate::bindings::agentrt::policy::host::Host::random_seed(self)
            }
        }
    };
}
host_imports!(v0_4, host_v0_4);
host_imports!(v0_3, host_v0_3);
host_imports!(v0_2, host_v0_2);

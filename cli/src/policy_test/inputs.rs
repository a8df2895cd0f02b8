//! What the kit feeds a policy: a small multi-agent stream in every event kind the contract has,
//! candidates to score, and the hostile inputs — events and items of agents never registered,
//! corrupted snapshots. All of it is a fixed function of nothing, so two runs (and two instances)
//! see the same bytes.

use agentrt_runtime::packed;
use agentrt_runtime::types::{
    AgentRegistered, BlockEvent, BlockOp, Continuation, EndReason, EngineCapacity, EngineLoad, Event, Handoff, Item,
    ItemKind, RequestArrival, RequestFinish, SessionEnd, SessionWait, ToolCall, ToolReturn, WaitKind,
};

/// Agents the stream registers: handles 1..=AGENTS.
pub const AGENTS: u32 = 6;
/// Handles the stream never registers.
pub const UNKNOWN_AGENTS: [u32; 3] = [0, AGENTS + 1, u32::MAX];
/// Sessions of the stream: ids 1..=SESSIONS.
const SESSIONS: u64 = 4;
/// A typical batch of candidates (a ranking of part of the free queue).
pub const TYPICAL_BATCH: usize = 1000;
/// Blocks of each agent's anchor.
const ANCHOR_BLOCKS: u64 = 4;
const BLOCK_TOKENS: u32 = 16;

fn anchor_hash(agent: u32) -> u64 {
    0xa5c0_0000_0000 | u64::from(agent)
}

fn block_hash(agent: u32, i: u64) -> u64 {
    u64::from(agent) << 32 | i
}

/// Registrations, then sessions in which the agents take turns (arrival, tool call and return,
/// finish; later calls continue the previous prompt), a warm-up, a failed request, engine load,
/// block events in the typed form, and session ends.
pub fn stream() -> Vec<Event> {
    let mut events = registrations();
    let mut request_id = 0;
    let mut at_us = 1_000_000;
    for session in 1..=SESSIONS {
        for turn in 0..AGENTS {
            request_id += 1;
            at_us += 250_000;
            events.extend(agent_turn(session, turn, request_id, at_us));
        }
        events.push(Event::EngineLoad(EngineLoad {
            queue_depth: session as u32,
            running: 2,
            free_blocks: 100,
            total_blocks: 1000,
            at_us,
        }));
        // The host's admission check (0.5).
        events.push(Event::EngineCapacity(EngineCapacity {
            capacity_tokens: 16_000,
            resident_tokens: 9_000 + 1_000 * session,
            resident_sessions: (SESSIONS - session + 1) as u32,
            held_sessions: session as u32 - 1,
            prefill_us_per_ktoken: 35_000,
            decode_step_us: 25_000,
            at_us,
        }));
        events.push(session_end(
            session,
            END_REASONS[session as usize % END_REASONS.len()],
            at_us,
        ));
    }
    events
}

/// The event's case, by its position in the contract's `event` variant. The match is exhaustive:
/// a contract that gains a kind fails to compile here until the stream sends it too.
fn kind_ordinal(event: &Event) -> usize {
    match event {
        Event::AgentRegistered(_) => 0,
        Event::RequestArrival(_) => 1,
        Event::RequestFinish(_) => 2,
        Event::ToolCall(_) => 3,
        Event::ToolReturn(_) => 4,
        Event::SessionEnd(_) => 5,
        Event::EngineLoad(_) => 6,
        Event::Block(_) => 7,
        Event::SessionWait(_) => 8,
        Event::Handoff(_) => 9,
        Event::EngineCapacity(_) => 10,
    }
}

/// How many kinds of event `events` has.
pub fn kinds(events: &[Event]) -> usize {
    events
        .iter()
        .map(kind_ordinal)
        .collect::<std::collections::BTreeSet<_>>()
        .len()
}

/// Every agent registered, before anything of theirs happens; its own step because a policy
/// hears of an agent first from its registration.
fn registrations() -> Vec<Event> {
    (1..=AGENTS)
        .map(|agent| {
            Event::AgentRegistered(AgentRegistered {
                agent,
                name: format!("agent-{agent}"),
                anchor_hash: anchor_hash(agent),
                anchor_tokens: ANCHOR_BLOCKS as u32 * BLOCK_TOKENS,
            })
        })
        .collect()
}

/// One agent's turn in a session, from its request's arrival to its finish; its own step because
/// a turn is the stream's unit: every turn hears the same kinds in the same order. Later turns
/// continue the previous prompt, the last session's first turn is a warm-up, one turn fails.
fn agent_turn(session: u64, turn: u32, request_id: u64, at_us: u64) -> Vec<Event> {
    let agent = (turn + session as u32) % AGENTS + 1;
    let prompt_tokens = 200 + 40 * turn;
    let mut events = vec![Event::RequestArrival(RequestArrival {
        request_id,
        agent,
        session,
        anchor_hash: anchor_hash(agent),
        prompt_tokens,
        continues: (turn > 0).then_some(Continuation {
            shared_tokens: prompt_tokens - 40,
            previous_tokens: prompt_tokens - 40,
        }),
        warmup: session == SESSIONS && turn == 0,
        at_us,
    })];
    events.extend(tool_round(session, agent, turn, request_id, at_us));
    events.extend(anchor_blocks(session, agent));
    events.push(Event::RequestFinish(RequestFinish {
        request_id,
        agent,
        session,
        prompt_tokens,
        cached_tokens: if session == 1 {
            0
        } else {
            ANCHOR_BLOCKS as u32 * BLOCK_TOKENS
        },
        output_tokens: 30,
        warmup: session == SESSIONS && turn == 0,
        ok: turn != 5,
        at_us: at_us + 100_000,
    }));
    events
}

/// The turn's tool call and return, the pause that follows and the handoff to the next agent; its
/// own step because these are what the agent framework (and hints) says, not the engine.
fn tool_round(session: u64, agent: u32, turn: u32, request_id: u64, at_us: u64) -> [Event; 4] {
    [
        Event::ToolCall(ToolCall {
            session,
            agent,
            tool: 0x7001 + u64::from(turn % 2),
            args_hash: request_id,
            at_us: at_us + 1_000,
        }),
        Event::ToolReturn(ToolReturn {
            session,
            agent,
            tool: 0x7001 + u64::from(turn % 2),
            args_hash: request_id,
            result_tokens: 64,
            latency_us: 20_000,
            ok: turn != 3,
        }),
        // What the framework says of the pause and of who runs next, as hints do (0.4).
        Event::SessionWait(SessionWait {
            session,
            agent,
            kind: if turn % 3 == 2 { WaitKind::User } else { WaitKind::Tool },
            tool: 0x7001 + u64::from(turn % 2),
            expected_us: if turn.is_multiple_of(2) { 20_000 } else { 0 },
            hinted: turn.is_multiple_of(2),
            at_us: at_us + 2_000,
        }),
        Event::Handoff(Handoff {
            session,
            from_agent: agent,
            to_agent: agent % AGENTS + 1,
            at_us: at_us + 3_000,
        }),
    ]
}

/// The agent's anchor blocks in the typed form, stored in the first session and touched after;
/// its own step because the packed form ([`packed_blocks`]) carries the sessions' own blocks.
fn anchor_blocks(session: u64, agent: u32) -> impl Iterator<Item = Event> {
    (0..ANCHOR_BLOCKS).map(move |i| {
        Event::Block(BlockEvent {
            op: if session == 1 {
                BlockOp::Stored
            } else {
                BlockOp::Touched
            },
            agent,
            block_hash: block_hash(agent, i),
            parent_hash: if i == 0 { 0 } else { block_hash(agent, i - 1) },
            position: i as u32 * BLOCK_TOKENS,
            tier: agentrt_runtime::types::Tier::Gpu,
        })
    })
}

/// Every reason a session ends for, so a policy hears each in the stream.
const END_REASONS: [EndReason; 3] = [EndReason::Closed, EndReason::Idle, EndReason::Evicted];

fn session_end(session: u64, reason: EndReason, at_us: u64) -> Event {
    Event::SessionEnd(SessionEnd { session, reason, at_us })
}

/// Block events in the packed form: each session's own blocks stored after the anchors, some
/// touched, some removed.
pub fn packed_blocks() -> Vec<u64> {
    let mut words = Vec::new();
    for agent in 1..=AGENTS {
        for i in ANCHOR_BLOCKS..ANCHOR_BLOCKS + 8 {
            for op in [BlockOp::Stored, BlockOp::Touched] {
                packed::encode(
                    &BlockEvent {
                        op,
                        agent,
                        block_hash: block_hash(agent, i),
                        parent_hash: block_hash(agent, i - 1),
                        position: i as u32 * BLOCK_TOKENS,
                        tier: agentrt_runtime::types::Tier::Gpu,
                    },
                    &mut words,
                );
            }
        }
        packed::encode(
            &BlockEvent {
                op: BlockOp::Removed,
                agent,
                block_hash: block_hash(agent, ANCHOR_BLOCKS + 7),
                parent_hash: block_hash(agent, ANCHOR_BLOCKS + 6),
                position: (ANCHOR_BLOCKS as u32 + 7) * BLOCK_TOKENS,
                tier: agentrt_runtime::types::Tier::Gpu,
            },
            &mut words,
        );
    }
    words
}

/// `n` candidates: mostly KV blocks of the registered agents (anchors and session content),
/// some of unknown agents, some requests, tool results and sessions; all keys distinct.
pub fn items(n: usize) -> Vec<Item> {
    (0..n)
        .map(|i| {
            let kind = match i % 20 {
                8 | 18 => ItemKind::Request,
                9 => ItemKind::ToolResult,
                19 => ItemKind::Session,
                _ => ItemKind::KvBlock,
            };
            let agent = match i % 16 {
                15 => UNKNOWN_AGENTS[i / 16 % UNKNOWN_AGENTS.len()],
                a => a as u32 % AGENTS + 1,
            };
            let depth = (i / 16) as u64 % 12;
            Item {
                kind,
                key: block_hash(agent, depth) ^ ((i as u64) << 40),
                agent,
                session: if depth < ANCHOR_BLOCKS {
                    0
                } else {
                    (i as u64 % SESSIONS) + 1
                },
                last_access: 1 + (i as u64 * 7919) % (n as u64 + 1),
                tokens: BLOCK_TOKENS,
                position: depth as u32 * BLOCK_TOKENS,
                tier: agentrt_runtime::types::Tier::Gpu,
            }
        })
        .collect()
}

/// Items all of agents the policy never heard of.
pub fn unknown_agent_items() -> Vec<Item> {
    let mut items = items(64);
    for (i, item) in items.iter_mut().enumerate() {
        item.agent = UNKNOWN_AGENTS[i % UNKNOWN_AGENTS.len()];
        item.session = u64::MAX - i as u64;
    }
    items
}

/// Events of agents never registered and of sessions never seen, and an engine that dropped
/// every cached block.
pub fn unknown_agent_events() -> Vec<Event> {
    let mut events = Vec::new();
    for (i, &agent) in UNKNOWN_AGENTS.iter().enumerate() {
        let session = u64::MAX - i as u64;
        events.push(Event::RequestArrival(RequestArrival {
            request_id: u64::MAX - i as u64,
            agent,
            session,
            anchor_hash: 0,
            prompt_tokens: 0,
            continues: Some(Continuation {
                shared_tokens: u32::MAX,
                previous_tokens: 0,
            }),
            warmup: false,
            at_us: 0,
        }));
        events.push(Event::Block(BlockEvent {
            op: BlockOp::Touched,
            agent,
            block_hash: u64::MAX - i as u64,
            parent_hash: 12345,
            position: u32::MAX,
            tier: agentrt_runtime::types::Tier::Gpu,
        }));
        events.push(Event::RequestFinish(RequestFinish {
            request_id: 424242 + i as u64,
            agent,
            session,
            prompt_tokens: 1,
            cached_tokens: 2,
            output_tokens: 0,
            warmup: false,
            ok: false,
            at_us: 0,
        }));
        events.push(Event::SessionWait(SessionWait {
            session,
            agent,
            kind: WaitKind::Tool,
            tool: u64::MAX,
            expected_us: u64::MAX,
            hinted: true,
            at_us: 0,
        }));
        events.push(Event::Handoff(Handoff {
            session,
            from_agent: agent,
            to_agent: agent,
            at_us: 0,
        }));
        events.push(session_end(session, END_REASONS[i % END_REASONS.len()], 0));
    }
    events.push(Event::EngineCapacity(EngineCapacity {
        capacity_tokens: u64::MAX,
        resident_tokens: u64::MAX,
        resident_sessions: u32::MAX,
        held_sessions: u32::MAX,
        prefill_us_per_ktoken: u32::MAX,
        decode_step_us: 0,
        at_us: 0,
    }));
    events.push(Event::Block(BlockEvent {
        op: BlockOp::AllCleared,
        agent: 0,
        block_hash: 0,
        parent_hash: 0,
        position: 0,
        tier: agentrt_runtime::types::Tier::Gpu,
    }));
    events
}

/// Bytes that are not the policy's state, made from its own snapshot `own` where that helps:
/// (what they are, the bytes). A policy must refuse each with an error.
pub fn corrupted_snapshots(own: &[u8]) -> Vec<(&'static str, Vec<u8>)> {
    let mut corrupted = vec![
        ("4 KiB of random bytes", random_bytes(4 << 10, 1)),
        ("1 MiB of random bytes", random_bytes(1 << 20, 2)),
        ("its own snapshot followed by junk", [own, b"\xffjunk\x00\x01"].concat()),
    ];
    if own.len() >= 2 {
        corrupted.push(("its own snapshot cut in half", own[..own.len() / 2].to_vec()));
    }
    corrupted
}

/// `len` bytes of splitmix64 output from `seed`.
fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        out.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    out.truncate(len);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How many variants `event` has; `kind_ordinal`'s exhaustive match stops compiling when the
    /// contract gains one, so this count cannot go stale silently.
    const EVENT_KINDS: usize = 11;

    #[test]
    fn the_stream_has_every_event_kind_and_items_have_distinct_keys() {
        let stream = stream();
        assert_eq!(kinds(&stream), EVENT_KINDS, "every variant of `event`");
        let reasons: std::collections::HashSet<u8> = stream
            .iter()
            .filter_map(|e| match e {
                Event::SessionEnd(end) => Some(end.reason as u8),
                _ => None,
            })
            .collect();
        assert_eq!(reasons.len(), END_REASONS.len(), "every reason a session ends for");
        let items = items(TYPICAL_BATCH);
        let keys: std::collections::HashSet<u64> = items.iter().map(|i| i.key).collect();
        assert_eq!(keys.len(), items.len());
        assert!(items.iter().any(|i| UNKNOWN_AGENTS.contains(&i.agent)));
        assert!(items.iter().any(|i| i.kind == ItemKind::ToolResult));
        assert!(items.iter().any(|i| i.kind == ItemKind::Session));
        assert_eq!(packed_blocks().len() % packed::WORDS_PER_EVENT, 0);
    }

    #[test]
    fn corruptions_differ_from_the_snapshot_and_are_the_same_every_time() {
        let own = b"PRB1 a snapshot".to_vec();
        let a = corrupted_snapshots(&own);
        assert_eq!(a.len(), 4);
        assert!(a.iter().all(|(_, bytes)| bytes != &own && !bytes.is_empty()));
        assert_eq!(a, corrupted_snapshots(&own));
        assert_eq!(corrupted_snapshots(&[]).len(), 3, "an empty snapshot cannot be cut");
    }
}

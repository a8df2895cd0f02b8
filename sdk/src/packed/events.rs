//! The packed form of events used by `observe-packed` (contract 0.4.0; `engine-capacity` since
//! 0.5.0): every event without a string as a header word and a fixed number of payload words
//! per kind.
//!
//! ```text
//! header: bits 0..8 = the `event` case's ordinal, bits 8..16 = payload words that follow,
//!         bits 16..32 = flags of the kind, bits 32..64 = agent handle (0 where none)
//! ```
//!
//! The layout of each kind is in `wit/policy.wit` (`observe-packed`). Typed events cost ~60 ns
//! each to lower field by field across the boundary; packed, a batch is one copy of its words.
//! A decoder skips kinds it does not know by the header's word count, so a host may add kinds
//! without breaking older guests of the same contract line.
//!
//! The per-kind functions take plain fields, so that a host with its own generated types (the
//! runtime's are wasmtime's, not this crate's) encodes through the same code: [`encode`] here is
//! a thin adapter over them for this crate's [`Event`].

use crate::{
    BlockEvent, Continuation, EndReason, EngineCapacity, EngineLoad, Event, Handoff, RequestArrival, RequestFinish,
    SessionEnd, SessionWait, ToolCall, ToolReturn, WaitKind,
};

/// The `event` case ordinals, as in `wit/policy.wit`.
pub mod kind {
    pub const AGENT_REGISTERED: u8 = 0;
    pub const REQUEST_ARRIVAL: u8 = 1;
    pub const REQUEST_FINISH: u8 = 2;
    pub const TOOL_CALL: u8 = 3;
    pub const TOOL_RETURN: u8 = 4;
    pub const SESSION_END: u8 = 5;
    pub const ENGINE_LOAD: u8 = 6;
    pub const BLOCK: u8 = 7;
    pub const SESSION_WAIT: u8 = 8;
    pub const HANDOFF: u8 = 9;
    pub const ENGINE_CAPACITY: u8 = 10;
}

/// Most payload words any kind has: a buffer of this many more words takes any one event.
pub const MAX_EVENT_WORDS: usize = 7;

fn header(kind: u8, words: usize, flags: u16, agent: u32) -> u64 {
    u64::from(kind) | ((words as u64) << 8) | (u64::from(flags) << 16) | (u64::from(agent) << 32)
}

fn push(out: &mut Vec<u64>, kind: u8, flags: u16, agent: u32, payload: &[u64]) {
    out.push(header(kind, payload.len(), flags, agent));
    out.extend_from_slice(payload);
}

fn low_high(low: u32, high: u32) -> u64 {
    u64::from(low) | (u64::from(high) << 32)
}

/// A `request-arrival`'s words.
#[allow(clippy::too_many_arguments)]
pub fn request_arrival(
    out: &mut Vec<u64>,
    request_id: u64,
    agent: u32,
    session: u64,
    anchor_hash: u64,
    prompt_tokens: u32,
    continues: Option<(u32, u32)>,
    warmup: bool,
    at_us: u64,
) {
    let flags = u16::from(warmup) | (u16::from(continues.is_some()) << 1);
    let (shared, previous) = continues.unwrap_or_default();
    let payload = [
        request_id,
        session,
        anchor_hash,
        at_us,
        u64::from(prompt_tokens),
        low_high(shared, previous),
    ];
    push(out, kind::REQUEST_ARRIVAL, flags, agent, &payload);
}

/// A `request-finish`'s words.
#[allow(clippy::too_many_arguments)]
pub fn request_finish(
    out: &mut Vec<u64>,
    request_id: u64,
    agent: u32,
    session: u64,
    prompt_tokens: u32,
    cached_tokens: u32,
    output_tokens: u32,
    warmup: bool,
    ok: bool,
    at_us: u64,
) {
    let flags = u16::from(warmup) | (u16::from(ok) << 1);
    let payload = [
        request_id,
        session,
        at_us,
        low_high(prompt_tokens, cached_tokens),
        u64::from(output_tokens),
    ];
    push(out, kind::REQUEST_FINISH, flags, agent, &payload);
}

/// A `tool-call`'s words.
pub fn tool_call(out: &mut Vec<u64>, session: u64, agent: u32, tool: u64, args_hash: u64, at_us: u64) {
    push(out, kind::TOOL_CALL, 0, agent, &[session, tool, args_hash, at_us]);
}

/// A `tool-return`'s words.
#[allow(clippy::too_many_arguments)]
pub fn tool_return(
    out: &mut Vec<u64>,
    session: u64,
    agent: u32,
    tool: u64,
    args_hash: u64,
    result_tokens: u32,
    latency_us: u64,
    ok: bool,
) {
    let payload = [session, tool, args_hash, latency_us, u64::from(result_tokens)];
    push(out, kind::TOOL_RETURN, u16::from(ok), agent, &payload);
}

/// A `session-end`'s words; `reason_ordinal` is the `end-reason` case's position (closed = 0,
/// idle = 1, evicted = 2).
pub fn session_end(out: &mut Vec<u64>, session: u64, reason_ordinal: u8, at_us: u64) {
    push(out, kind::SESSION_END, u16::from(reason_ordinal), 0, &[session, at_us]);
}

/// An `engine-load`'s words.
pub fn engine_load(
    out: &mut Vec<u64>,
    queue_depth: u32,
    running: u32,
    free_blocks: u32,
    total_blocks: u32,
    at_us: u64,
) {
    let payload = [
        low_high(queue_depth, running),
        low_high(free_blocks, total_blocks),
        at_us,
    ];
    push(out, kind::ENGINE_LOAD, 0, 0, &payload);
}

/// A block event's words: the `observe-blocks` words of [`super::words`] behind a header.
pub fn block(out: &mut Vec<u64>, words: [u64; super::WORDS_PER_EVENT]) {
    push(out, kind::BLOCK, 0, 0, &words);
}

/// A `session-wait`'s words; `kind_ordinal` is the `wait-kind` case's position (tool = 0,
/// user = 1).
#[allow(clippy::too_many_arguments)]
pub fn session_wait(
    out: &mut Vec<u64>,
    session: u64,
    agent: u32,
    kind_ordinal: u8,
    tool: u64,
    expected_us: u64,
    hinted: bool,
    at_us: u64,
) {
    let flags = u16::from(kind_ordinal) | (u16::from(hinted) << 8);
    push(
        out,
        kind::SESSION_WAIT,
        flags,
        agent,
        &[session, tool, expected_us, at_us],
    );
}

/// A `handoff`'s words.
pub fn handoff(out: &mut Vec<u64>, session: u64, from_agent: u32, to_agent: u32, at_us: u64) {
    push(
        out,
        kind::HANDOFF,
        0,
        from_agent,
        &[session, u64::from(to_agent), at_us],
    );
}

/// An `engine-capacity`'s words (0.5.0).
#[allow(clippy::too_many_arguments)]
pub fn engine_capacity(
    out: &mut Vec<u64>,
    capacity_tokens: u64,
    resident_tokens: u64,
    resident_sessions: u32,
    held_sessions: u32,
    prefill_us_per_ktoken: u32,
    decode_step_us: u32,
    at_us: u64,
) {
    let payload = [
        capacity_tokens,
        resident_tokens,
        low_high(resident_sessions, held_sessions),
        low_high(prefill_us_per_ktoken, decode_step_us),
        at_us,
    ];
    push(out, kind::ENGINE_CAPACITY, 0, 0, &payload);
}

/// Append one event's words; `false` (and nothing appended) for `agent-registered`, which carries
/// a string and always goes through `observe`.
pub fn encode(event: &Event, out: &mut Vec<u64>) -> bool {
    match event {
        Event::AgentRegistered(_) => return false,
        Event::RequestArrival(r) => request_arrival(
            out,
            r.request_id,
            r.agent,
            r.session,
            r.anchor_hash,
            r.prompt_tokens,
            r.continues.map(|c| (c.shared_tokens, c.previous_tokens)),
            r.warmup,
            r.at_us,
        ),
        Event::RequestFinish(r) => request_finish(
            out,
            r.request_id,
            r.agent,
            r.session,
            r.prompt_tokens,
            r.cached_tokens,
            r.output_tokens,
            r.warmup,
            r.ok,
            r.at_us,
        ),
        Event::ToolCall(t) => tool_call(out, t.session, t.agent, t.tool, t.args_hash, t.at_us),
        Event::ToolReturn(t) => tool_return(
            out,
            t.session,
            t.agent,
            t.tool,
            t.args_hash,
            t.result_tokens,
            t.latency_us,
            t.ok,
        ),
        Event::SessionEnd(e) => session_end(out, e.session, e.reason as u8, e.at_us),
        Event::EngineLoad(l) => engine_load(out, l.queue_depth, l.running, l.free_blocks, l.total_blocks, l.at_us),
        Event::Block(b) => block(
            out,
            super::words(
                super::op_ordinal(b.op),
                super::tier_ordinal(b.tier),
                b.agent,
                b.position,
                b.block_hash,
                b.parent_hash,
            ),
        ),
        Event::SessionWait(w) => session_wait(
            out,
            w.session,
            w.agent,
            w.kind as u8,
            w.tool,
            w.expected_us,
            w.hinted,
            w.at_us,
        ),
        Event::Handoff(h) => handoff(out, h.session, h.from_agent, h.to_agent, h.at_us),
        Event::EngineCapacity(c) => engine_capacity(
            out,
            c.capacity_tokens,
            c.resident_tokens,
            c.resident_sessions,
            c.held_sessions,
            c.prefill_us_per_ktoken,
            c.decode_step_us,
            c.at_us,
        ),
    }
    true
}

/// Decode packed events, oldest first. Kinds this SDK does not know, kinds whose payload is
/// shorter than this SDK reads, unknown reasons or wait kinds, and a trailing partial event are
/// skipped: an old policy keeps working against a newer host.
pub fn decode(words: &[u64]) -> Decoder<'_> {
    Decoder { words }
}

/// The iterator [`decode`] returns.
pub struct Decoder<'a> {
    words: &'a [u64],
}

impl Iterator for Decoder<'_> {
    type Item = Event;

    fn next(&mut self) -> Option<Event> {
        loop {
            let (&head, rest) = self.words.split_first()?;
            let len = ((head >> 8) & 0xff) as usize;
            if rest.len() < len {
                self.words = &[];
                return None;
            }
            let (payload, rest) = rest.split_at(len);
            self.words = rest;
            if let Some(event) = event(head, payload) {
                return Some(event);
            }
        }
    }
}

fn event(head: u64, p: &[u64]) -> Option<Event> {
    let flags = (head >> 16) as u16;
    let flag = |bit: u16| flags & (1 << bit) != 0;
    let agent = (head >> 32) as u32;
    let low = |w: u64| w as u32;
    let high = |w: u64| (w >> 32) as u32;
    Some(match head as u8 {
        kind::REQUEST_ARRIVAL if p.len() >= 6 => Event::RequestArrival(RequestArrival {
            request_id: p[0],
            agent,
            session: p[1],
            anchor_hash: p[2],
            at_us: p[3],
            prompt_tokens: low(p[4]),
            continues: flag(1).then(|| Continuation {
                shared_tokens: low(p[5]),
                previous_tokens: high(p[5]),
            }),
            warmup: flag(0),
        }),
        kind::REQUEST_FINISH if p.len() >= 5 => Event::RequestFinish(RequestFinish {
            request_id: p[0],
            agent,
            session: p[1],
            at_us: p[2],
            prompt_tokens: low(p[3]),
            cached_tokens: high(p[3]),
            output_tokens: low(p[4]),
            warmup: flag(0),
            ok: flag(1),
        }),
        kind::TOOL_CALL if p.len() >= 4 => Event::ToolCall(ToolCall {
            session: p[0],
            agent,
            tool: p[1],
            args_hash: p[2],
            at_us: p[3],
        }),
        kind::TOOL_RETURN if p.len() >= 5 => Event::ToolReturn(ToolReturn {
            session: p[0],
            agent,
            tool: p[1],
            args_hash: p[2],
            latency_us: p[3],
            result_tokens: low(p[4]),
            ok: flag(0),
        }),
        kind::SESSION_END if p.len() >= 2 => Event::SessionEnd(SessionEnd {
            session: p[0],
            reason: end_reason(flags as u8)?,
            at_us: p[1],
        }),
        kind::ENGINE_LOAD if p.len() >= 3 => Event::EngineLoad(EngineLoad {
            queue_depth: low(p[0]),
            running: high(p[0]),
            free_blocks: low(p[1]),
            total_blocks: high(p[1]),
            at_us: p[2],
        }),
        kind::BLOCK if p.len() >= super::WORDS_PER_EVENT => {
            let block: BlockEvent = super::decode(&p[..super::WORDS_PER_EVENT]).next()?;
            Event::Block(block)
        }
        kind::SESSION_WAIT if p.len() >= 4 => Event::SessionWait(SessionWait {
            session: p[0],
            agent,
            kind: wait_kind(flags as u8)?,
            tool: p[1],
            expected_us: p[2],
            hinted: flag(8),
            at_us: p[3],
        }),
        kind::HANDOFF if p.len() >= 3 => Event::Handoff(Handoff {
            session: p[0],
            from_agent: agent,
            to_agent: low(p[1]),
            at_us: p[2],
        }),
        kind::ENGINE_CAPACITY if p.len() >= 5 => Event::EngineCapacity(EngineCapacity {
            capacity_tokens: p[0],
            resident_tokens: p[1],
            resident_sessions: low(p[2]),
            held_sessions: high(p[2]),
            prefill_us_per_ktoken: low(p[3]),
            decode_step_us: high(p[3]),
            at_us: p[4],
        }),
        _ => return None,
    })
}

fn end_reason(ordinal: u8) -> Option<EndReason> {
    match ordinal {
        0 => Some(EndReason::Closed),
        1 => Some(EndReason::Idle),
        2 => Some(EndReason::Evicted),
        _ => None,
    }
}

fn wait_kind(ordinal: u8) -> Option<WaitKind> {
    match ordinal {
        0 => Some(WaitKind::Tool),
        1 => Some(WaitKind::User),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AgentRegistered, BlockOp, Tier};

    fn one_of_each() -> Vec<Event> {
        vec![
            Event::RequestArrival(RequestArrival {
                request_id: u64::MAX,
                agent: u32::MAX,
                session: 1 << 63,
                anchor_hash: 3,
                prompt_tokens: u32::MAX,
                continues: Some(Continuation {
                    shared_tokens: 7,
                    previous_tokens: u32::MAX,
                }),
                warmup: true,
                at_us: 9,
            }),
            Event::RequestArrival(RequestArrival {
                request_id: 1,
                agent: 2,
                session: 3,
                anchor_hash: 4,
                prompt_tokens: 5,
                continues: None,
                warmup: false,
                at_us: 6,
            }),
            Event::RequestFinish(RequestFinish {
                request_id: 1,
                agent: 2,
                session: 3,
                prompt_tokens: u32::MAX,
                cached_tokens: 5,
                output_tokens: u32::MAX,
                warmup: false,
                ok: true,
                at_us: u64::MAX,
            }),
            Event::ToolCall(ToolCall {
                session: 1,
                agent: 2,
                tool: 3,
                args_hash: 4,
                at_us: 5,
            }),
            Event::ToolReturn(ToolReturn {
                session: 1,
                agent: 2,
                tool: 3,
                args_hash: 4,
                result_tokens: 5,
                latency_us: 6,
                ok: false,
            }),
            Event::SessionEnd(SessionEnd {
                session: 8,
                reason: EndReason::Evicted,
                at_us: 9,
            }),
            Event::EngineLoad(EngineLoad {
                queue_depth: 1,
                running: 2,
                free_blocks: u32::MAX,
                total_blocks: 4,
                at_us: 5,
            }),
            Event::Block(BlockEvent {
                op: BlockOp::Removed,
                agent: 5,
                block_hash: 6,
                parent_hash: 7,
                position: 64,
                tier: Tier::Host,
            }),
            Event::SessionWait(SessionWait {
                session: 1,
                agent: 2,
                kind: WaitKind::User,
                tool: 0,
                expected_us: 0,
                hinted: true,
                at_us: 3,
            }),
            Event::SessionWait(SessionWait {
                session: 1,
                agent: 2,
                kind: WaitKind::Tool,
                tool: u64::MAX,
                expected_us: 30_000_000,
                hinted: false,
                at_us: 3,
            }),
            Event::Handoff(Handoff {
                session: 4,
                from_agent: 0,
                to_agent: u32::MAX,
                at_us: 6,
            }),
            Event::EngineCapacity(EngineCapacity {
                capacity_tokens: u64::MAX,
                resident_tokens: 453_168,
                resident_sessions: u32::MAX,
                held_sessions: 7,
                prefill_us_per_ktoken: 35_000,
                decode_step_us: u32::MAX,
                at_us: 11,
            }),
        ]
    }

    #[test]
    fn every_kind_round_trips_with_every_field() {
        let events = one_of_each();
        let mut words = Vec::new();
        for e in &events {
            assert!(encode(e, &mut words));
        }
        assert_eq!(decode(&words).collect::<Vec<_>>(), events);
    }

    #[test]
    fn no_event_is_longer_than_the_buffer_bound() {
        for e in one_of_each() {
            let mut words = Vec::new();
            encode(&e, &mut words);
            assert!(words.len() <= 1 + MAX_EVENT_WORDS, "{e:?}");
        }
    }

    #[test]
    fn a_registration_is_never_packed() {
        let mut words = Vec::new();
        let registered = Event::AgentRegistered(AgentRegistered {
            agent: 1,
            name: "a".into(),
            anchor_hash: 2,
            anchor_tokens: 3,
        });
        assert!(!encode(&registered, &mut words));
        assert!(words.is_empty());
    }

    #[test]
    fn unknown_kinds_and_longer_payloads_are_skipped_by_their_word_count() {
        let mut words = vec![header(200, 2, 0, 0), 1, 2];
        tool_call(&mut words, 1, 2, 3, 4, 5);
        // A newer host's request-finish with a word more than this SDK reads.
        words.extend_from_slice(&[header(kind::REQUEST_FINISH, 6, 2, 9), 1, 2, 3, 4, 5, 6]);
        words.push(header(kind::SESSION_END, 2, 0, 0)); // truncated
        let decoded: Vec<Event> = decode(&words).collect();
        assert_eq!(decoded.len(), 2, "{decoded:?}");
        assert!(matches!(decoded[0], Event::ToolCall(_)));
        assert!(matches!(&decoded[1], Event::RequestFinish(f) if f.agent == 9 && f.ok && f.output_tokens == 5));
    }
}

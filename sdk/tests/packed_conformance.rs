//! The packed forms (`observe-packed`, `observe-blocks`, `score-packed`) decode to the same values
//! in every SDK: sdk/conformance/packed.txt holds words the host sends — every event kind at its
//! extremes, every op and tier, the cases a decoder must skip — and what they decode to, written
//! the same way in every language's native tests (Python, JavaScript, C, Go read this file too).
//!
//! The file is this SDK's output: this test fails when the Rust SDK would write it differently (a
//! layout changed), and `AGENTRT_BLESS=1 cargo test -p agentrt-sdk --test packed_conformance`
//! rewrites it.

use agentrt_sdk::packed::{self, events};
use agentrt_sdk::{
    BlockEvent, BlockOp, Continuation, EndReason, EngineCapacity, EngineLoad, Event, Handoff, Item, ItemKind,
    RequestArrival, RequestFinish, SessionEnd, SessionWait, Tier, ToolCall, ToolReturn, WaitKind,
};

const PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/conformance/packed.txt");

const HEADER: &str = "\
# The packed forms of wit/policy.wit (`observe-packed`, `observe-blocks`, `score-packed`) and what
# they decode to, in every SDK (Rust, Python, JavaScript, C, Go): each SDK's native tests decode
# the words and must write the same line. Written by the Rust SDK (sdk/tests/packed_conformance.rs;
# AGENTRT_BLESS=1 rewrites it), so the layouts cannot drift apart.
#
# One case per line: the export (events, blocks, items), its words in decimal, \"->\", then what
# they decode to, values separated by \" ; \" (\"nothing\": every word skipped). A value is its
# case or record name, then each field in the contract's order as name=value: numbers in
# decimal, booleans true/false, enums by their WIT name, `continues` as none or SHARED/PREVIOUS.
";

fn op(op: BlockOp) -> &'static str {
    match op {
        BlockOp::Stored => "stored",
        BlockOp::Touched => "touched",
        BlockOp::Removed => "removed",
        BlockOp::AllCleared => "all-cleared",
    }
}

fn tier(tier: Tier) -> &'static str {
    match tier {
        Tier::Gpu => "gpu",
        Tier::Host => "host",
    }
}

fn block(b: &BlockEvent) -> String {
    format!(
        "block op={} agent={} block-hash={} parent-hash={} position={} tier={}",
        op(b.op),
        b.agent,
        b.block_hash,
        b.parent_hash,
        b.position,
        tier(b.tier)
    )
}

fn item(i: &Item) -> String {
    let kind = match i.kind {
        ItemKind::KvBlock => "kv-block",
        ItemKind::Request => "request",
        ItemKind::ToolResult => "tool-result",
        ItemKind::Session => "session",
    };
    format!(
        "item kind={kind} key={} agent={} session={} last-access={} tokens={} position={} tier={}",
        i.key,
        i.agent,
        i.session,
        i.last_access,
        i.tokens,
        i.position,
        tier(i.tier)
    )
}

fn event(e: &Event) -> String {
    match e {
        Event::AgentRegistered(_) => unreachable!("never packed"),
        Event::RequestArrival(r) => format!(
            "request-arrival request-id={} agent={} session={} anchor-hash={} prompt-tokens={} continues={} \
             warmup={} at-us={}",
            r.request_id,
            r.agent,
            r.session,
            r.anchor_hash,
            r.prompt_tokens,
            r.continues.map_or("none".to_string(), |c| format!(
                "{}/{}",
                c.shared_tokens, c.previous_tokens
            )),
            r.warmup,
            r.at_us
        ),
        Event::RequestFinish(r) => format!(
            "request-finish request-id={} agent={} session={} prompt-tokens={} cached-tokens={} output-tokens={} \
             warmup={} ok={} at-us={}",
            r.request_id,
            r.agent,
            r.session,
            r.prompt_tokens,
            r.cached_tokens,
            r.output_tokens,
            r.warmup,
            r.ok,
            r.at_us
        ),
        Event::ToolCall(t) => format!(
            "tool-call session={} agent={} tool={} args-hash={} at-us={}",
            t.session, t.agent, t.tool, t.args_hash, t.at_us
        ),
        Event::ToolReturn(t) => format!(
            "tool-return session={} agent={} tool={} args-hash={} result-tokens={} latency-us={} ok={}",
            t.session, t.agent, t.tool, t.args_hash, t.result_tokens, t.latency_us, t.ok
        ),
        Event::SessionEnd(s) => {
            let reason = match s.reason {
                EndReason::Closed => "closed",
                EndReason::Idle => "idle",
                EndReason::Evicted => "evicted",
            };
            format!("session-end session={} reason={reason} at-us={}", s.session, s.at_us)
        }
        Event::EngineLoad(l) => format!(
            "engine-load queue-depth={} running={} free-blocks={} total-blocks={} at-us={}",
            l.queue_depth, l.running, l.free_blocks, l.total_blocks, l.at_us
        ),
        Event::Block(b) => block(b),
        Event::SessionWait(w) => {
            let kind = match w.kind {
                WaitKind::Tool => "tool",
                WaitKind::User => "user",
            };
            format!(
                "session-wait session={} agent={} kind={kind} tool={} expected-us={} hinted={} at-us={}",
                w.session, w.agent, w.tool, w.expected_us, w.hinted, w.at_us
            )
        }
        Event::Handoff(h) => format!(
            "handoff session={} from-agent={} to-agent={} at-us={}",
            h.session, h.from_agent, h.to_agent, h.at_us
        ),
        Event::EngineCapacity(c) => format!(
            "engine-capacity capacity-tokens={} resident-tokens={} resident-sessions={} held-sessions={} \
             prefill-us-per-ktoken={} decode-step-us={} at-us={}",
            c.capacity_tokens,
            c.resident_tokens,
            c.resident_sessions,
            c.held_sessions,
            c.prefill_us_per_ktoken,
            c.decode_step_us,
            c.at_us
        ),
    }
}

fn line(export: &str, words: &[u64], decoded: Vec<String>) -> String {
    let words: Vec<String> = words.iter().map(u64::to_string).collect();
    let decoded = if decoded.is_empty() {
        "nothing".to_string()
    } else {
        decoded.join(" ; ")
    };
    format!("{export} {} -> {decoded}\n", words.join(" "))
}

fn events_line(words: &[u64]) -> String {
    line("events", words, events::decode(words).map(|e| event(&e)).collect())
}

fn blocks_line(words: &[u64]) -> String {
    line("blocks", words, packed::decode(words).map(|b| block(&b)).collect())
}

fn items_line(words: &[u64]) -> String {
    line("items", words, packed::decode_items(words).iter().map(item).collect())
}

/// Every event kind of the 0.4 line, at its extremes and with each flag and enum case: the line
/// every SDK decodes (0.5's `engine-capacity` and `session` items are the Rust SDK's alone until
/// the others move to it; to them kind 10 is a kind they skip, as the cases below show).
fn every_event() -> Vec<Event> {
    let arrival = RequestArrival {
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
    };
    let finish = RequestFinish {
        request_id: 1,
        agent: 2,
        session: 3,
        prompt_tokens: u32::MAX,
        cached_tokens: 5,
        output_tokens: u32::MAX,
        warmup: false,
        ok: true,
        at_us: u64::MAX,
    };
    let wait = SessionWait {
        session: 1,
        agent: 2,
        kind: WaitKind::Tool,
        tool: u64::MAX,
        expected_us: 30_000_000,
        hinted: false,
        at_us: 3,
    };
    let mut events = vec![
        Event::RequestArrival(arrival),
        Event::RequestArrival(RequestArrival {
            continues: None,
            warmup: false,
            agent: 0,
            ..arrival
        }),
        Event::RequestFinish(finish),
        Event::RequestFinish(RequestFinish {
            warmup: true,
            ok: false,
            ..finish
        }),
        Event::ToolCall(ToolCall {
            session: 1,
            agent: 2,
            tool: 3,
            args_hash: u64::MAX,
            at_us: 5,
        }),
        Event::ToolReturn(ToolReturn {
            session: 1,
            agent: 2,
            tool: 3,
            args_hash: 4,
            result_tokens: u32::MAX,
            latency_us: 6,
            ok: true,
        }),
        Event::EngineLoad(EngineLoad {
            queue_depth: 1,
            running: u32::MAX,
            free_blocks: u32::MAX,
            total_blocks: 4,
            at_us: 5,
        }),
        Event::SessionWait(wait),
        Event::SessionWait(SessionWait {
            kind: WaitKind::User,
            tool: 0,
            expected_us: 0,
            hinted: true,
            ..wait
        }),
        Event::Handoff(Handoff {
            session: u64::MAX,
            from_agent: 0,
            to_agent: u32::MAX,
            at_us: 6,
        }),
        Event::EngineCapacity(EngineCapacity {
            capacity_tokens: u64::MAX,
            resident_tokens: 1 << 40,
            resident_sessions: u32::MAX,
            held_sessions: 3,
            prefill_us_per_ktoken: 29_500,
            decode_step_us: u32::MAX,
            at_us: 7,
        }),
    ];
    for reason in [EndReason::Closed, EndReason::Idle, EndReason::Evicted] {
        events.push(Event::SessionEnd(SessionEnd {
            session: 8,
            reason,
            at_us: 9,
        }));
    }
    for (op, tier) in [(BlockOp::Removed, Tier::Host), (BlockOp::Stored, Tier::Gpu)] {
        events.push(Event::Block(BlockEvent {
            op,
            agent: 5,
            block_hash: u64::MAX,
            parent_hash: 7,
            position: 64,
            tier,
        }));
    }
    events
}

fn every_block() -> Vec<BlockEvent> {
    let ops = [BlockOp::Stored, BlockOp::Touched, BlockOp::Removed, BlockOp::AllCleared];
    let positions = [0, 16, packed::MAX_POSITION, u32::MAX];
    ops.into_iter()
        .enumerate()
        .map(|(i, op)| BlockEvent {
            op,
            agent: u32::MAX - i as u32,
            block_hash: u64::MAX - i as u64,
            parent_hash: i as u64,
            position: positions[i],
            tier: if i % 2 == 0 { Tier::Gpu } else { Tier::Host },
        })
        .collect()
}

fn every_item() -> Vec<Item> {
    let kinds = [
        ItemKind::KvBlock,
        ItemKind::Request,
        ItemKind::ToolResult,
        ItemKind::Session,
    ];
    kinds
        .into_iter()
        .enumerate()
        .map(|(i, kind)| Item {
            kind,
            key: u64::MAX - i as u64,
            agent: u32::MAX - i as u32,
            session: if i == 0 { 0 } else { 1 << 40 },
            last_access: 1 << (20 * i),
            tokens: 16 << i,
            position: if i == 2 { u32::MAX } else { 32 * i as u32 },
            tier: if i == 1 { Tier::Host } else { Tier::Gpu },
        })
        .collect()
}

fn header(kind: u64, words: u64, flags: u64, agent: u64) -> u64 {
    kind | words << 8 | flags << 16 | agent << 32
}

fn written() -> String {
    let mut text = HEADER.to_string();
    for e in every_event() {
        let mut words = Vec::new();
        assert!(events::encode(&e, &mut words));
        text += &events_line(&words);
    }
    // One batch of several events, in order.
    let mut batch = Vec::new();
    for e in every_event().iter().take(3) {
        events::encode(e, &mut batch);
    }
    text += &events_line(&batch);
    // What a decoder skips: a kind it does not know (by its word count), a payload longer than it
    // reads (the extra word ignored), a reason, wait kind, op or tier it does not know, a payload
    // shorter than it reads, a truncated event.
    let mut tool_call = Vec::new();
    events::tool_call(&mut tool_call, 1, 2, 3, 4, 5);
    text += &events_line(&[&[header(200, 2, 0, 0), 1, 2][..], &tool_call].concat());
    text += &events_line(&[header(2, 6, 2, 9), 1, 2, 3, 4, 5, 6]);
    text += &events_line(&[header(5, 2, 3, 0), 8, 9]);
    text += &events_line(&[header(8, 4, 2, 1), 1, 2, 3, 4]);
    text += &events_line(&[header(7, 3, 0, 0), 0x2f | 5 << 32, 6, 7]);
    text += &events_line(&[header(9, 2, 0, 1), 1, 2]);
    text += &events_line(&[header(5, 2, 0, 0), 8]);

    let mut blocks = Vec::new();
    for b in every_block() {
        packed::encode(&b, &mut blocks);
    }
    text += &blocks_line(&blocks);
    // An op and a tier this SDK does not know, and trailing words that make no event.
    text += &blocks_line(&[0x0e, 1, 2, 0x20, 3, 4, 0x10 | 1 << 32, 5, 0, 9]);

    let mut items = Vec::new();
    for i in every_item() {
        packed::encode_item(&i, &mut items);
    }
    text += &items_line(&items);
    // A kind and a tier this SDK does not know (kv-block; host), and a partial item.
    text += &items_line(&[1, 2, 3, 16 | 7 << 32, 48 | 9 << 32 | 5 << 40, 1, 2]);
    text
}

#[test]
fn the_shared_cases_are_what_this_sdk_encodes_and_decodes() {
    let want = written();
    let have = std::fs::read_to_string(PATH).unwrap_or_default();
    if have != want {
        if std::env::var_os("AGENTRT_BLESS").is_some() {
            std::fs::write(PATH, &want).expect("writing the shared cases");
            return;
        }
        panic!(
            "{PATH} is not what the Rust SDK writes; if the layouts changed on purpose, rewrite it with \
             AGENTRT_BLESS=1 cargo test -p agentrt-sdk --test packed_conformance\n--- it would be:\n{want}"
        );
    }
    let cases = want.lines().filter(|l| !l.starts_with('#')).count();
    assert!(cases >= 25, "{cases} cases");
}

//! What one tenant's tables hold when a client fills each to its cap with the largest entries it
//! may send, measured on the heap (a counting allocator: bytes requested and not yet freed, the
//! allocator's own overhead aside). docs/security.md's table "What one tenant's tables hold"
//! gives these figures; the test fails if a table holds more than the per-tenant figure that
//! table states (each a little above what was measured). Keys are held twice by every table (its
//! map and its recency order), so a table of 256-byte names costs ~700 bytes an entry.
//!
//! `cargo test -p agentrt-hostile-tests --test table_bytes -- --nocapture` prints the table.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering::Relaxed};
use std::time::Instant;

use agentrt_serve::identity::Identity;
use agentrt_serve::names::MAX_NAME_BYTES;
use agentrt_serve::table::{LruTable, TableLimits};
use agentrt_serve::tenant::agents::AgentDirectory;
use agentrt_serve::tenant::continuation::{Continuations, PromptShape};
use agentrt_serve::tenant::handles::Handles;
use agentrt_serve::tenant::hint_state::MAX_CLOSED_SESSIONS;
use agentrt_serve::tenant::responses::StoredResponses;
use agentrt_serve::tenant::return_times::{ReturnTimes, MAX_OPEN_WAITS, MAX_OPEN_WAIT_BYTES, MAX_PAIRS};
use agentrt_serve::tenant::verdicts::Verdicts;

/// The system allocator, counting the bytes live.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as isize - layout.size() as isize, Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The heap bytes `fill` leaves live (what it builds and returns stays alive for the count).
fn held<T>(fill: impl FnOnce() -> T) -> (usize, T) {
    let before = LIVE.load(Relaxed);
    let table = fill();
    (LIVE.load(Relaxed).saturating_sub(before).max(0) as usize, table)
}

/// A name of exactly the longest length, distinct by `i`.
fn name(i: usize, fill: char) -> String {
    let prefix = format!("{i:08}-");
    format!("{prefix}{}", fill.to_string().repeat(MAX_NAME_BYTES - prefix.len()))
}

struct Row {
    table: &'static str,
    entries: usize,
    bytes: usize,
    bound: usize,
}

/// One test: the counts must not interleave with another test's allocations.
#[test]
fn each_table_filled_to_its_cap_holds_no_more_than_its_stated_bound() {
    let started = Instant::now();
    let limits = TableLimits::default();
    let mut rows = Vec::new();

    let (bytes, agents) = held(|| {
        let directory = AgentDirectory::new("t", limits, Handles::default());
        for i in 0..limits.max_agents * 2 {
            let identity = Identity {
                agent_name: name(i, 'a'),
                anchor_hash: 0,
                anchor_tokens: 0,
                session_key: String::new(),
                session: 0,
                prompt_tokens: 0,
            };
            directory.intern(&identity);
        }
        directory
    });
    assert_eq!(agents.agents(), limits.max_agents);
    rows.push(Row {
        table: "agents (names of 256 B → handles), with their handles' owners",
        entries: limits.max_agents,
        bytes,
        bound: 3 << 20,
    });

    let (bytes, sessions) = held(|| {
        let directory = AgentDirectory::new("t", limits, Handles::default());
        for s in 0..limits.max_sessions as u64 * 2 {
            directory.record_session(s);
        }
        directory
    });
    assert_eq!(sessions.live_sessions(), limits.max_sessions);
    rows.push(Row {
        table: "live sessions (ids, last activity)",
        entries: limits.max_sessions,
        bytes,
        bound: 640 << 10,
    });

    let (bytes, waits) = held(|| {
        let mut times = ReturnTimes::default();
        let now = Instant::now();
        for s in 0..20_000u64 {
            let tools = (0..16).map(|t| name(t, 't')).collect();
            times.paused(s, &name(s as usize, 'a'), tools, now);
        }
        times
    });
    assert!(waits.open_waits() < MAX_OPEN_WAITS);
    rows.push(Row {
        table: "open tool waits (16 tools of 256 B each)",
        entries: waits.open_waits(),
        bytes,
        bound: MAX_OPEN_WAIT_BYTES + (1 << 20),
    });

    let (bytes, pairs) = held(|| {
        let mut times = ReturnTimes::default();
        let now = Instant::now();
        let tool = name(0, 't');
        for s in 0..(MAX_PAIRS as u64 * 2) {
            let agent = name(s as usize, 'a');
            for _ in 0..32 {
                times.paused(s, &agent, vec![tool.clone()], now);
                times.resumed(s, now);
            }
        }
        times
    });
    rows.push(Row {
        table: "tool return times ((agent, tool) of 256 B each, 32 gaps)",
        entries: pairs.report().len(),
        bytes,
        bound: 8 << 20,
    });

    let (bytes, _closed) = held(|| {
        let mut closed: LruTable<u64, ()> = LruTable::new(MAX_CLOSED_SESSIONS, usize::MAX);
        for s in 0..MAX_CLOSED_SESSIONS as u64 {
            closed.insert(s, (), 0);
        }
        closed
    });
    rows.push(Row {
        table: "closed sessions (ids)",
        entries: MAX_CLOSED_SESSIONS,
        bytes,
        bound: 6 << 20,
    });

    let (bytes, _responses) = held(|| {
        let responses = StoredResponses::new(limits.max_sessions);
        for i in 0..limits.max_sessions * 2 {
            responses.record(&format!("resp_{i:040}"));
        }
        responses
    });
    rows.push(Row {
        table: "stored response ids (the engine's, ~45 B)",
        entries: limits.max_sessions,
        bytes,
        bound: 1 << 20,
    });

    let (bytes, _verdicts) = held(|| {
        let verdicts = Verdicts::new(limits.max_sessions);
        for s in 1..=limits.max_sessions as u64 {
            verdicts.deny(s, "r".repeat(agentrt_runtime::results::MAX_SIDE_EFFECT_STRING_BYTES));
            verdicts.set_priority(s, -1);
        }
        verdicts
    });
    rows.push(Row {
        table: "verdicts (a policy's deny reasons of 4 KiB, priorities)",
        entries: limits.max_sessions,
        bytes,
        bound: 18 << 20,
    });

    let (bytes, shapes) = held(|| {
        let continuations = Continuations::new(&limits);
        // A long agent conversation: 200 messages.
        let messages: Vec<serde_json::Value> = (0..200)
            .map(|i| serde_json::json!({"role": "user", "content": format!("message {i}")}))
            .collect();
        let shape = PromptShape::of_chat(&serde_json::json!({"messages": messages}));
        for s in 0..limits.max_shapes as u64 * 2 {
            continuations.observe(s, 1, shape.clone());
        }
        continuations
    });
    rows.push(Row {
        table: "prompt shapes (200 messages each; hashes and sizes)",
        entries: shapes.len(),
        bytes,
        bound: 18 << 20,
    });

    println!("| table (one tenant) | entries at the cap | heap bytes | per entry | bound |");
    println!("|---|---|---|---|---|");
    for row in &rows {
        println!(
            "| {} | {} | {:.1} MiB | {} B | {:.1} MiB |",
            row.table,
            row.entries,
            row.bytes as f64 / (1 << 20) as f64,
            row.bytes / row.entries.max(1),
            row.bound as f64 / (1 << 20) as f64
        );
    }
    for row in &rows {
        assert!(
            row.bytes <= row.bound,
            "{}: {} bytes, over {}",
            row.table,
            row.bytes,
            row.bound
        );
    }
    eprintln!("measured in {:?}", started.elapsed());
}

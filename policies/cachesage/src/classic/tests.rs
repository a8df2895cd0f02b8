//! Policy-level behaviour, natively through the SDK harness. The properties are also
//! checked through the real component in `tests/cachesage.rs`.

use agentrt_sdk::testing::Harness;
use agentrt_sdk::{AgentRegistered, Event, RequestArrival};

use crate::classic::CacheSage;

fn arrival(agent: u32, session: u64, warmup: bool) -> Event {
    Event::RequestArrival(RequestArrival {
        request_id: 0,
        agent,
        session,
        anchor_hash: 0x100 + u64::from(agent),
        prompt_tokens: 100,
        continues: None,
        warmup,
        at_us: 0,
    })
}

fn learn_pairs(h: &mut Harness<CacheSage>, sessions: u64, warmup: bool) {
    for s in 0..sessions {
        h.observe(&[
            arrival(1, s, warmup),
            arrival(2, s, warmup),
            agentrt_sdk::testing::session_end(s),
        ]);
    }
}

#[test]
fn warmups_are_not_learned() {
    let mut h = Harness::<CacheSage>::new([]).unwrap();
    learn_pairs(&mut h, 20, true);
    assert_eq!(h.policy().step, 0);
    assert!(!h.policy().clone().has_structure());
    learn_pairs(&mut h, 20, false);
    assert!(h.policy().clone().has_structure());
}

#[test]
fn config_is_validated_by_name() {
    assert!(Harness::<CacheSage>::new([("k", "0")]).unwrap_err().contains("`k`"));
    assert!(Harness::<CacheSage>::new([("windw", "8")])
        .unwrap_err()
        .contains("windw"));
    let h = Harness::<CacheSage>::new([("prefetch", "false"), ("w", "2.5")]).unwrap();
    assert!(!h.policy().params().prefetch);
    assert_eq!(h.policy().params().w, 2.5);
}

#[test]
fn registration_sets_the_anchor_size_used_to_classify_blocks() {
    let mut h = Harness::<CacheSage>::new([]).unwrap();
    h.observe(&[Event::AgentRegistered(AgentRegistered {
        agent: 7,
        name: "coder".into(),
        anchor_hash: 0xc0de,
        anchor_tokens: 512,
    })]);
    let p = h.policy();
    let slot = p.agents.find(7).unwrap();
    let agent = p.agents.get(slot).unwrap();
    assert!(
        agent.is_anchor_position(480, 32) && !agent.is_anchor_position(496, 32),
        "the straddling block is not anchor"
    );
    assert!(agent.is_anchor_position(496, 16) && !agent.is_anchor_position(512, 16));
}

#[test]
fn an_empty_snapshot_resets_and_a_foreign_one_is_refused() {
    let mut h = Harness::<CacheSage>::new([("window", "8")]).unwrap();
    learn_pairs(&mut h, 10, false);
    h.restore(&[]).unwrap();
    assert_eq!(h.policy().step, 0);
    assert_eq!(h.policy().params().window, 8, "config survives a reset");
    assert!(h.restore(b"PRB1xxxxxxx").unwrap_err().contains("not from this policy"));
}

fn finish(agent: u32, session: u64) -> Event {
    Event::RequestFinish(agentrt_sdk::RequestFinish {
        request_id: 0,
        agent,
        session,
        prompt_tokens: 100,
        cached_tokens: 0,
        output_tokens: 10,
        warmup: false,
        ok: true,
        at_us: 0,
    })
}

#[test]
fn a_request_in_flight_keeps_its_agents_history_until_it_finishes() {
    use agentrt_sdk::{Item, ItemKind};
    let mut h = Harness::<CacheSage>::new([]).unwrap();
    learn_pairs(&mut h, 20, false); // 1 → 2 → END
                                    // Session 99 called agent 2, its last: the chain says agent 2 does not run again, but the
                                    // request may still be queued, its prefix hit not yet taken.
    h.observe(&[arrival(1, 99, false), finish(1, 99), arrival(2, 99, false)]);
    let history = Item {
        kind: ItemKind::KvBlock,
        key: 1,
        agent: 2,
        session: 99,
        last_access: 10,
        tokens: 16,
        position: 4096,
        tier: agentrt_sdk::Tier::Gpu,
    };
    let queued = h.score(std::slice::from_ref(&history))[0];
    h.observe(&[finish(2, 99)]);
    let done = h.score(std::slice::from_ref(&history))[0];
    let w = h.policy().params().w;
    assert!(queued >= w, "in flight: {queued}");
    assert!(done < w / 2.0, "finished, never called again: {done}");
}

fn arrival_continuing(agent: u32, session: u64, shared: u32, previous: u32) -> Event {
    Event::RequestArrival(RequestArrival {
        request_id: 0,
        agent,
        session,
        anchor_hash: 0x100 + u64::from(agent),
        prompt_tokens: 1000,
        continues: Some(agentrt_sdk::Continuation {
            shared_tokens: shared,
            previous_tokens: previous,
        }),
        warmup: false,
        at_us: 0,
    })
}

/// Sessions 1 → 2 → 1 → 2 → END where agent 1's second call extends its first (chat memory) and
/// agent 2's second call starts over from a 300-token common part (another template, a task
/// restated). Leaves session 99 after its first call of agent 2.
fn learn_two_turns(h: &mut Harness<CacheSage>) {
    for s in 0..20 {
        h.observe(&[
            arrival(1, s, false),
            finish(1, s),
            arrival(2, s, false),
            finish(2, s),
            arrival_continuing(1, s, 600, 400),
            finish(1, s),
            arrival_continuing(2, s, 300, 900),
            finish(2, s),
            agentrt_sdk::testing::session_end(s),
        ]);
    }
    h.observe(&[
        arrival(1, 99, false),
        finish(1, 99),
        arrival(2, 99, false),
        finish(2, 99),
    ]);
}

fn history(agent: u32, position: u32) -> agentrt_sdk::Item {
    agentrt_sdk::Item {
        kind: agentrt_sdk::ItemKind::KvBlock,
        key: u64::from(position),
        agent,
        session: 99,
        last_access: 10,
        tokens: 16,
        position,
        tier: agentrt_sdk::Tier::Gpu,
    }
}

#[test]
fn history_is_kept_only_as_far_as_the_next_call_carries_it() {
    let mut h = Harness::<CacheSage>::new([]).unwrap();
    learn_two_turns(&mut h);
    let w = h.policy().params().w;
    let scores = h.score(&[history(1, 500), history(2, 200), history(2, 600)]);
    assert!(scores[0] >= w, "agent 1 extends its history: kept ({})", scores[0]);
    assert!(
        scores[1] >= w,
        "agent 2 carries its first 300 tokens: kept ({})",
        scores[1]
    );
    assert!(
        scores[2] < w / 2.0,
        "agent 2 runs again but starts over past 300: dead ({})",
        scores[2]
    );
}

#[test]
fn a_snapshot_carries_what_was_learned_about_continuation() {
    let mut h = Harness::<CacheSage>::new([]).unwrap();
    learn_two_turns(&mut h);
    let snap = h.snapshot();
    let mut other = Harness::<CacheSage>::new([]).unwrap();
    other.restore(&snap).unwrap();
    assert_eq!(other.policy().continuity, h.policy().continuity);
    let items = [history(1, 500), history(2, 600)];
    assert_eq!(other.score(&items), h.score(&items));
}

#[test]
fn the_snapshot_stays_inside_the_budget_with_every_table_full() {
    // 32 agents called in a scrambled order by 3,000 sessions of 8 calls that never end: every
    // node's window fills, every node learns continuation, the session table is full.
    let mut h = Harness::<CacheSage>::new([]).unwrap();
    let mut x = 12345u64;
    for s in 0..3000u64 {
        let mut events = Vec::new();
        for call in 0..8u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let agent = 1 + ((x >> 33) % 32) as u32;
            events.push(arrival_continuing(agent, s, (call * 100) as u32, 500));
        }
        h.observe(&events);
    }
    let snap = h.snapshot();
    assert!(
        snap.len() <= crate::classic::snapshot::STATE_BUDGET,
        "{} bytes",
        snap.len()
    );
    let mut other = Harness::<CacheSage>::new([]).unwrap();
    other.restore(&snap).unwrap();
    let (kept, all) = (other.policy().sessions.len(), h.policy().sessions.len());
    println!("worst-case snapshot: {} bytes, {kept} of {all} sessions", snap.len());
    assert!(
        kept < all && kept > 300,
        "the most recent {kept} of {all} sessions carried over"
    );
    let newest = h.policy().sessions.iter().max_by_key(|s| s.stamp).unwrap().id;
    assert!(other.policy().sessions.get(newest).is_some());
    assert_eq!(other.policy().continuity, h.policy().continuity);
}

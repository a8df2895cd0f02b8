//! One policy in every supported language: `callrate` (policies/callrate/SPEC.md) written in Rust,
//! Python, JavaScript, C and Go with each language's SDK, fed one trace through the real host,
//! must give the same scores (to the bit), rankings, side effects and snapshot bytes — and a
//! snapshot written by one language must continue in another.
//!
//! A language whose toolchain could not be installed has no component, only the note xtask left
//! beside where it would be (`<name>.skipped`); it is reported as skipped with that reason. The
//! Rust one is always required.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agentrt_runtime::types::{
    EndReason, Event, Handoff, Item, ItemKind, RequestArrival, SessionEnd, SessionWait, SideEffect, Tier, WaitKind,
};
use agentrt_runtime::{PolicyComponent, PolicyEngine, PolicyHandle, SandboxLimits, SlotConfig};
use agentrt_sdk::packed;
use agentrt_tests::{component_path, engine, register, Rng};

/// The reference first, then the others, by component name.
const LANGUAGES: [&str; 5] = ["callrate", "callrate-py", "callrate-js", "callrate-c", "callrate-go"];
/// Small enough that the table overflows (8 agents) and decay matters within the trace.
const CONFIG: [(&str, &str); 3] = [("half-life", "16"), ("recency", "64"), ("max-agents", "5")];
const AGENTS: u32 = 8;
const STEPS: u64 = 240;
const TOUCHED: u8 = 1;

/// Everything a policy said on the trace, comparable across languages.
#[derive(Debug, PartialEq)]
enum Said {
    Scores(Vec<u32>),
    Ranking(Vec<usize>),
    Act(Vec<(u32, u64, u32)>),
    Snapshot(Vec<u8>),
}

fn component(name: &str) -> Result<PathBuf, String> {
    let rust = component_path("callrate");
    let path = rust.with_file_name(format!("{name}.wasm"));
    if path.is_file() {
        return Ok(path);
    }
    let note = rust.with_file_name(format!("{name}.skipped"));
    match std::fs::read_to_string(&note) {
        Ok(reason) => Err(reason),
        Err(_) => panic!(
            "{} is missing and no {} says why: run `cargo xtask build-policies`",
            path.display(),
            note.display()
        ),
    }
}

fn start(engine: &PolicyEngine, component: &Arc<PolicyComponent>, name: &str) -> PolicyHandle {
    // Behaviour, not limits, is under test: JavaScript's engine settles near 65 MiB and a cold
    // Python or JavaScript instance takes its time on a loaded 2-core machine.
    let limits = SandboxLimits {
        memory_bytes: 256 << 20,
        call_deadline: Duration::from_secs(10),
        ..SandboxLimits::default()
    };
    let slot = SlotConfig::new(format!("test/{name}"))
        .with_init(CONFIG)
        .with_limits(limits);
    PolicyHandle::start(engine, component.clone(), slot).unwrap_or_else(|e| panic!("starting {name}: {e}"))
}

fn arrival(step: u64, agent: u32, warmup: bool) -> Event {
    Event::RequestArrival(RequestArrival {
        request_id: step,
        agent,
        session: 1 + step / 40,
        anchor_hash: 0xa000 + u64::from(agent),
        prompt_tokens: 512,
        continues: None,
        warmup,
        at_us: step * 1000,
    })
}

/// Every agent of the trace, registered with the anchor its arrivals name.
fn registrations() -> Vec<Event> {
    (1..=AGENTS)
        .map(|a| register(a, &format!("agent-{a}"), 0xa000 + u64::from(a)))
        .collect()
}

/// A tier at random: every language hears the host tier's events and ranks its blocks alike.
fn tier(rng: &mut Rng) -> Tier {
    if rng.below(3) == 0 {
        Tier::Host
    } else {
        Tier::Gpu
    }
}

/// What a framework tells of a session's life (callrate ignores it): every language decodes it
/// from the packed events and goes on alike.
fn lifecycle(step: u64, agent: u32) -> [Event; 3] {
    let session = 1 + step / 40;
    [
        Event::SessionWait(SessionWait {
            session,
            agent,
            kind: if step.is_multiple_of(2) {
                WaitKind::Tool
            } else {
                WaitKind::User
            },
            tool: step,
            expected_us: 1000,
            hinted: step.is_multiple_of(3),
            at_us: step * 1000,
        }),
        Event::Handoff(Handoff {
            session,
            from_agent: agent,
            to_agent: agent % AGENTS + 1,
            at_us: step * 1000,
        }),
        Event::SessionEnd(SessionEnd {
            session: session + 100,
            reason: [EndReason::Closed, EndReason::Idle, EndReason::Evicted][step as usize % 3],
            at_us: step * 1000,
        }),
    ]
}

/// A batch of candidates: known, unknown (99) and no (0) agents, clock values spread over and
/// beyond the recency window, some equal, in both tiers.
fn items(rng: &mut Rng, clock: u64) -> Vec<Item> {
    (0..48)
        .map(|k| Item {
            kind: ItemKind::KvBlock,
            key: k,
            agent: match rng.below(10) {
                0 => 0,
                1 => 99,
                _ => 1 + rng.below(u64::from(AGENTS)) as u32,
            },
            session: rng.below(4),
            last_access: clock.saturating_sub(rng.below(200)),
            tokens: 16,
            position: (k as u32) * 16,
            tier: tier(rng),
        })
        .collect()
}

/// Run the trace through `policy` (restarting it from the reference's snapshot at the middle),
/// recording what it says.
fn replay(engine: &PolicyEngine, component: &Arc<PolicyComponent>, name: &str, midpoint: Option<&[u8]>) -> Vec<Said> {
    let mut policy = start(engine, component, name);
    let mut rng = Rng::new(12);
    let mut said = Vec::new();
    policy.observe(&registrations()).unwrap();
    for step in 1..=STEPS {
        // Skewed: agent 1 most, agent 8 least; one arrival in 12 is a warm-up.
        let agent = 1 + (rng.below(u64::from(AGENTS)) * rng.below(u64::from(AGENTS)) / u64::from(AGENTS)) as u32;
        policy.observe(&[arrival(step, agent, rng.below(12) == 0)]).unwrap();
        if step % 7 == 0 {
            policy.observe(&lifecycle(step, agent)).unwrap();
        }
        let mut words = Vec::new();
        for _ in 0..rng.below(6) {
            let toucher = rng.below(u64::from(AGENTS) + 2) as u32;
            let tier = tier(&mut rng) as u8;
            words.extend(packed::words(TOUCHED, tier, toucher, 16, rng.next_u64(), 0));
        }
        words.extend(packed::words(0, Tier::Gpu as u8, agent, 0, rng.next_u64(), 0));
        policy.observe_blocks(&words).unwrap();
        if step % 8 == 0 {
            let batch = items(&mut rng, step * 10);
            let scores = policy.score(&batch).unwrap();
            let typed = policy.score_typed(&batch).unwrap();
            assert_eq!(
                bits(&scores),
                bits(&typed),
                "{name}: score and score-packed differ at step {step}"
            );
            said.push(Said::Scores(bits(&scores)));
            said.push(Said::Ranking(policy.rank(&batch).order));
        }
        if step % 5 == 0 {
            let effects = policy.act().unwrap();
            said.push(Said::Act(effects.iter().map(warm_prefix).collect()));
        }
        if step % 60 == 0 {
            said.push(Said::Snapshot(policy.snapshot().unwrap()));
        }
        if step == STEPS / 2 {
            if let Some(state) = midpoint {
                policy = start(engine, component, name);
                policy
                    .restore(state)
                    .unwrap_or_else(|e| panic!("{name} refused the reference's snapshot: {e}"));
            }
        }
    }
    said
}

fn bits(scores: &[f32]) -> Vec<u32> {
    scores.iter().map(|s| s.to_bits()).collect()
}

fn warm_prefix(effect: &SideEffect) -> (u32, u64, u32) {
    match effect {
        SideEffect::WarmPrefix(w) => (w.agent, w.anchor_hash, w.probability.to_bits()),
        other => panic!("callrate asks only for warm-ups, got {other:?}"),
    }
}

/// The reference's snapshot at the trace's midpoint.
fn midpoint_state(engine: &PolicyEngine, component: &Arc<PolicyComponent>) -> Vec<u8> {
    let said = replay(engine, component, "callrate", None);
    // Snapshots are taken every 60 steps; the midpoint (120) is the second.
    said.into_iter()
        .filter_map(|s| match s {
            Said::Snapshot(state) => Some(state),
            _ => None,
        })
        .nth(1)
        .expect("a snapshot at the midpoint")
}

#[test]
fn the_reference_policy_behaves_identically_in_every_language() {
    let (engine, _cache) = engine();
    let load = |path: &PathBuf| {
        Arc::new(
            engine
                .load_file(path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display())),
        )
    };
    let reference = load(&component("callrate").expect("the Rust reference is always built"));
    let state = midpoint_state(&engine, &reference);
    let expected = replay(&engine, &reference, "callrate", Some(&state));
    let acts = expected
        .iter()
        .filter(|s| matches!(s, Said::Act(a) if !a.is_empty()))
        .count();
    assert!(acts > 5, "the trace must exercise act: {acts} warm-ups");
    let (mut compared, mut skipped) = (vec!["callrate"], Vec::new());
    for name in &LANGUAGES[1..] {
        let path = match component(name) {
            Ok(path) => path,
            Err(reason) => {
                eprintln!("skipped {name}: {reason}");
                skipped.push(*name);
                continue;
            }
        };
        let said = replay(&engine, &load(&path), name, Some(&state));
        assert_eq!(said.len(), expected.len(), "{name}: a different number of answers");
        for (k, (got, want)) in said.iter().zip(&expected).enumerate() {
            assert_eq!(got, want, "{name} differs from the Rust reference at answer {k}");
        }
        compared.push(name);
    }
    eprintln!(
        "identical: {}; skipped: {}",
        compared.join(", "),
        if skipped.is_empty() {
            "none".to_string()
        } else {
            skipped.join(", ")
        }
    );
}

#[test]
fn every_language_imports_only_the_host_and_refuses_bad_config_by_key() {
    let (engine, _cache) = engine();
    for name in LANGUAGES {
        let Ok(path) = component(name) else {
            eprintln!("skipped {name}: see the note beside its component");
            continue;
        };
        let component = Arc::new(engine.load_file(&path).unwrap());
        let world = component.world(engine.wasmtime());
        for (import, _) in &world.imports {
            assert!(import.starts_with("agentrt:policy/"), "{name} imports {import}");
        }
        for (key, value) in [("half-life", "0"), ("recency", "x"), ("max-agnets", "3")] {
            let slot = SlotConfig::new(format!("test/{name}"))
                .with_init([(key, value)])
                .with_limits(SandboxLimits {
                    memory_bytes: 256 << 20,
                    call_deadline: Duration::from_secs(10),
                    ..SandboxLimits::default()
                });
            let err = PolicyHandle::start(&engine, component.clone(), slot)
                .err()
                .unwrap_or_else(|| panic!("{name} accepted {key}={value}"));
            assert!(err.to_string().contains(key), "{name}: {err}");
        }
    }
}

/// Every language's SDK builds the current contract line.
#[test]
fn every_language_speaks_the_line_its_sdk_builds() {
    use agentrt_runtime::compat::ContractLine;
    let (engine, _cache) = engine();
    for name in LANGUAGES {
        let Ok(path) = component(name) else {
            eprintln!("skipped {name}: see the note beside its component");
            continue;
        };
        let component = engine.load_file(&path).unwrap();
        assert_eq!(component.contract_line(), ContractLine::V0_5, "{name}");
    }
}

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

use agentrt_runtime::types::{Event, Item, ItemKind, RequestArrival, SideEffect};
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
/// The GPU tier's ordinal: the only tier the other languages' policies (built against the 0.2.0
/// contract) are told about, and the one the Rust reference is driven on here.
const GPU_TIER: u8 = 0;

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

/// A batch of candidates: known, unknown (99) and no (0) agents, clock values spread over and
/// beyond the recency window, some equal.
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
            tier: agentrt_runtime::types::Tier::Gpu,
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
        let mut words = Vec::new();
        for _ in 0..rng.below(6) {
            let toucher = rng.below(u64::from(AGENTS) + 2) as u32;
            words.extend(packed::words(TOUCHED, GPU_TIER, toucher, 16, rng.next_u64(), 0));
        }
        words.extend(packed::words(0, GPU_TIER, agent, 0, rng.next_u64(), 0));
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

/// The other languages' SDKs are built against the 0.2.0 contract, the line before the KV tier:
/// the host must load them, tell them about the GPU tier only, and answer their share of a
/// host-tier ranking itself (score 0: the host pool's own order, everything stored).
#[test]
fn a_component_of_the_0_2_line_hears_only_the_gpu_tier() {
    use agentrt_runtime::compat::ContractLine;
    use agentrt_runtime::types::{BlockEvent, BlockOp, Tier};
    let (engine, _cache) = engine();
    let reference = Arc::new(engine.load_file(&component("callrate").unwrap()).unwrap());
    assert_eq!(reference.contract_line(), ContractLine::V0_4);
    let Some((name, path)) = LANGUAGES[1..].iter().find_map(|n| component(n).ok().map(|p| (*n, p))) else {
        eprintln!("skipped: no component of another language was built (see the notes beside them)");
        return;
    };
    let old = Arc::new(engine.load_file(&path).unwrap());
    assert_eq!(old.contract_line(), ContractLine::V0_2, "{name}");

    // Two instances on the same trace; the second also hears host-tier events, typed and packed,
    // that name agent 3 — which a guest hearing them would count as touches of its blocks.
    let (plain, told) = (start(&engine, &old, name), start(&engine, &old, name));
    let host_event = |op, hash| {
        Event::Block(BlockEvent {
            op,
            agent: 3,
            block_hash: hash,
            parent_hash: 0,
            position: 16,
            tier: Tier::Host,
        })
    };
    for policy in [&plain, &told] {
        policy.observe(&registrations()).unwrap();
    }
    for step in 1..=40 {
        let agent = 1 + (step as u32 % 2);
        let gpu = packed::words(TOUCHED, GPU_TIER, agent, 16, step, 0);
        for policy in [&plain, &told] {
            policy.observe(&[arrival(step, agent, false)]).unwrap();
        }
        plain.observe_blocks(&gpu).unwrap();
        // The same GPU event, in one batch with a host-tier one.
        let host_tier = packed::tier_ordinal(agentrt_sdk::Tier::Host);
        let mut words = packed::words(TOUCHED, host_tier, 3, 16, 1000 + step, 0).to_vec();
        words.extend(gpu);
        told.observe_blocks(&words).unwrap();
        told.observe(&[
            host_event(BlockOp::Touched, 2000 + step),
            host_event(BlockOp::Stored, 3000 + step),
        ])
        .unwrap();
    }
    assert_eq!(
        plain.snapshot().unwrap(),
        told.snapshot().unwrap(),
        "{name} heard the host tier: its state differs"
    );

    // A mixed batch: the GPU items score as they do alone; the host items 0, without a call.
    let gpu_items = items(&mut Rng::new(5), 400);
    let alone = plain.score(&gpu_items).unwrap();
    let mut mixed = Vec::new();
    for item in &gpu_items {
        mixed.push(*item);
        mixed.push(Item {
            tier: Tier::Host,
            key: item.key + 10_000,
            agent: 3,
            ..*item
        });
    }
    let scores = told.score(&mixed).unwrap();
    let (gpu_scores, host_scores): (Vec<_>, Vec<_>) = scores.chunks(2).map(|pair| (pair[0], pair[1])).unzip();
    assert_eq!(bits(&gpu_scores), bits(&alone), "{name}: the GPU items' scores changed");
    assert!(
        host_scores.iter().all(|s| *s == 0.0),
        "{name}: host-tier items must score 0: {host_scores:?}"
    );
    assert_eq!(
        told.metrics().calls(agentrt_runtime::Primitive::Score),
        1,
        "{name}: one call, for the GPU items"
    );
    eprintln!("{name} (0.2.0) heard the GPU tier only");
}

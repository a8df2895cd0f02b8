//! Replays of generated traces through the real host and the real policy components
//! (`<target>/components/*.wasm`, built by `cargo xtask build-policies`).

use agentrt_runtime::{ComponentLookup, EmbeddedSet};
use agentrt_sim::harness::{run_all, run_one, PolicyHost};
use agentrt_sim::policies::PolicySpec;
use agentrt_sim::policies::Rerank;
use agentrt_sim::prepare::PreparedTrace;
use agentrt_sim::scheduler::{RunResult, SimConfig};
use agentrt_sim::workloads::{generate, GenParams, Workload};

fn small(workload: Workload, sessions: usize, seed: u64) -> PreparedTrace {
    let params = GenParams {
        sessions,
        concurrency: sessions as f64 / 2.0,
        rate: None,
        seed,
        fleet: Default::default(),
    };
    PreparedTrace::new(&generate(workload, &params), 16, false)
}

fn host() -> PolicyHost {
    let host = PolicyHost::new(ComponentLookup::from_environment(EmbeddedSet::NONE)).expect("policy engine");
    for c in ["lru", "ttl", "probe"] {
        if let Err(missing) = host.find(c) {
            panic!("{missing}");
        }
    }
    host
}

fn run(host: &PolicyHost, trace: &PreparedTrace, blocks: usize, names: &[&str]) -> Vec<RunResult> {
    let policies: Vec<PolicySpec> = names.iter().map(|n| PolicySpec::parse(n)).collect();
    run_all(
        host,
        trace,
        &SimConfig::new(blocks),
        &policies,
        Rerank::EveryStep,
        false,
        |_| {},
    )
    .expect("replay")
}

#[test]
fn lru_through_wasm_reproduces_native_lru_exactly() {
    let host = host();
    for (w, sessions, blocks) in [
        (Workload::Gsm8k, 40, 400),
        (Workload::Gaia, 6, 3000),
        (Workload::Mtbench, 60, 300),
    ] {
        let trace = small(w, sessions, 11);
        let r = run(&host, &trace, blocks, &["lru-native", "lru"]);
        assert!(
            r[0].evictions > 0,
            "{w:?}: the cache must be under pressure for this to mean anything"
        );
        assert_eq!(r[0].hit_tokens, r[1].hit_tokens, "{w:?}");
        assert_eq!(r[0].evictions, r[1].evictions, "{w:?}");
        assert_eq!(r[0].admission_order, r[1].admission_order, "{w:?}");
        assert!(r[1].policy_stats.score_calls > 0 && r[1].policy_stats.events > 0);
    }
}

#[test]
fn belady_is_at_least_lru_on_every_workload() {
    let host = host();
    for w in Workload::ALL {
        // GAIA's contexts grow to tens of thousands of tokens: the cache must hold one.
        let (sessions, blocks) = if w == Workload::Gaia { (8, 4000) } else { (24, 350) };
        let trace = small(w, sessions, 5);
        let r = run(&host, &trace, blocks, &["lru-native", "belady"]);
        assert!(r[0].evictions > 0, "{w:?}");
        assert!(
            r[1].hit_tokens >= r[0].hit_tokens,
            "{w:?}: belady {} < lru {}",
            r[1].hit_tokens,
            r[0].hit_tokens
        );
    }
}

#[test]
fn ttl_with_a_zero_ttl_is_lru_and_with_a_ttl_protects_sessions() {
    let host = host();
    let trace = small(Workload::Humaneval, 30, 3);
    let cfg = SimConfig::new(400);
    let lru = run_one(&host, &trace, &cfg, &PolicySpec::NativeLru, None, Rerank::EveryStep).unwrap();
    let zero = PolicySpec::Wasm {
        name: "ttl-0".into(),
        component: "ttl".into(),
        init: vec![("ttl-ms".into(), "0".into())],
    };
    let r0 = run_one(&host, &trace, &cfg, &zero, None, Rerank::EveryStep).unwrap();
    assert_eq!(r0.hit_tokens, lru.hit_tokens);
    let ttl = run_one(&host, &trace, &cfg, &PolicySpec::parse("ttl"), None, Rerank::EveryStep).unwrap();
    assert_ne!(ttl.hit_tokens, lru.hit_tokens, "a 5 s TTL changes what is evicted");
    assert!(ttl.policy_stats.state_bytes_max > 0);
}

#[test]
fn warm_ups_become_requests_that_cost_prefill_and_other_effects_are_counted() {
    let host = host();
    let trace = small(Workload::Humaneval, 10, 2);
    let r = run(&host, &trace, 400, &["lru-native", "probe"]);
    let probe = &r[1];
    assert!(probe.warmups > 0, "the probe asks for a warm-up at every act");
    assert!(probe.warmup_tokens > 0, "warm-ups compute their anchor");
    assert!(
        probe.warmups_skipped > 0,
        "no second warm-up while one is in flight or the anchor is resident"
    );
    assert!(
        probe.effects_ignored > 0,
        "pins, preloads, … are counted, not carried out"
    );
    // Warm-ups are not trace requests: the trace's prompt tokens are the same.
    assert_eq!(probe.prompt_tokens, r[0].prompt_tokens);
}

#[test]
fn hidden_agents_are_identified_by_anchor_and_replay_the_same_cache() {
    let host = host();
    let params = GenParams {
        sessions: 12,
        concurrency: 6.0,
        rate: None,
        seed: 9,
        fleet: Default::default(),
    };
    let trace = generate(Workload::Mmlu, &params);
    let named = PreparedTrace::new(&trace, 16, false);
    let hidden = PreparedTrace::new(&trace, 16, true);
    // One agent per distinct anchor: the three debaters and the aggregator have distinct anchors.
    assert_eq!(hidden.agents.len(), 4);
    assert!(hidden
        .agents
        .iter()
        .all(|a| a.name == format!("{:016x}", a.anchor_hash)));
    let a = run(&host, &named, 250, &["lru"]);
    let b = run(&host, &hidden, 250, &["lru"]);
    assert_eq!(a[0].hit_tokens, b[0].hit_tokens, "identity does not change LRU's cache");
}

#[test]
fn reranking_less_often_still_replays() {
    let host = host();
    let trace = small(Workload::Gsm8k, 30, 4);
    let cfg = SimConfig::new(300);
    let every = run_one(&host, &trace, &cfg, &PolicySpec::parse("lru"), None, Rerank::EveryStep).unwrap();
    let sparse = run_one(
        &host,
        &trace,
        &cfg,
        &PolicySpec::parse("lru"),
        None,
        Rerank::EveryMs(500.0),
    )
    .unwrap();
    assert!(sparse.policy_stats.score_calls <= every.policy_stats.score_calls);
    assert_eq!(sparse.prompt_tokens, every.prompt_tokens);
}

#[test]
fn an_audit_accounts_for_every_eviction_and_changes_no_decision() {
    let host = host();
    let trace = small(Workload::Mtbench, 60, 7);
    let names = ["lru-native", "lru", "belady"];
    let policies: Vec<PolicySpec> = names.iter().map(|n| PolicySpec::parse(n)).collect();
    let cfg = SimConfig::new(300);
    let audited = run_all(&host, &trace, &cfg, &policies, Rerank::EveryStep, true, |_| {}).unwrap();
    let plain = run_all(&host, &trace, &cfg, &policies, Rerank::EveryStep, false, |_| {}).unwrap();
    for (a, p) in audited.iter().zip(&plain) {
        assert!(p.audit.is_none());
        let audit = a.audit.as_ref().expect("audited");
        assert_eq!((a.hit_tokens, a.evictions), (p.hit_tokens, p.evictions), "{}", a.policy);
        assert_eq!(audit.evictions.len() as u64, a.evictions, "{}", a.policy);
        let by_content = audit.by_content();
        assert_eq!(by_content.values().map(|t| t.regretted).sum::<u64>(), audit.regretted());
        // A regretted block is one a request recomputed: never more than the tokens it missed.
        assert!(
            audit.regretted_tokens() <= a.prompt_tokens - a.hit_tokens,
            "{}: {} regretted tokens, {} missed",
            a.policy,
            audit.regretted_tokens(),
            a.prompt_tokens - a.hit_tokens
        );
    }
    // `--json` carries the audit's figures for audited runs only.
    let summaries = agentrt_sim::report::summarize(&audited);
    let regret = summaries[0].1.regret.as_ref().expect("audited");
    assert_eq!(regret.regretted_blocks, audited[0].audit.as_ref().unwrap().regretted());
    assert!(agentrt_sim::report::summarize(&plain)[0].1.regret.is_none());
    let regretted: Vec<u64> = audited.iter().map(|r| r.audit.as_ref().unwrap().regretted()).collect();
    assert!(
        regretted[0] > 0,
        "the cache must be under pressure for this to mean anything"
    );
    assert_eq!(
        regretted[0], regretted[1],
        "LRU in Wasm evicts exactly what native LRU does"
    );
    assert!(
        regretted[2] < regretted[0],
        "Bélády regrets fewer evictions ({}) than LRU ({})",
        regretted[2],
        regretted[0]
    );
}

#[test]
fn a_python_policy_replays_and_with_weight_0_is_exactly_lru() {
    let host = host();
    let trace = small(Workload::Gsm8k, 40, 11);
    let r = run(&host, &trace, 400, &["lru-native", "frequency:weight=0", "frequency"]);
    assert!(r[0].evictions > 0, "the cache must be under pressure");
    for python in &r[1..] {
        let stats = &python.policy_stats;
        assert!(
            stats.score_calls > 0 && stats.events > 0,
            "{}: the policy ran",
            python.policy
        );
        assert_eq!(stats.fallbacks, 0, "{}: every ranking came from Python", python.policy);
    }
    // Recency alone, computed in Python, is LRU: the same hits, evictions and admission order.
    assert_eq!(r[1].hit_tokens, r[0].hit_tokens);
    assert_eq!(r[1].evictions, r[0].evictions);
    assert_eq!(r[1].admission_order, r[0].admission_order);
    assert!(r[2].policy_stats.state_bytes_max > 0, "the rates are state");
}

/// A policy that keeps failing is given up on after `failure_threshold` failures in a row, not
/// paid for at every call: a `score` that spins costs the threshold × its fuel (here 5 × 2·10⁸
/// units), not a tank per ranking; a trap in `observe` is counted like any failure; and a run
/// in which the policy failed is a failed run, not figures.
#[test]
fn a_policy_that_keeps_failing_is_given_up_on_and_counted() {
    use agentrt_runtime::SandboxLimits;
    use agentrt_sim::policy_limits::ReplayLimits;

    let limits = ReplayLimits {
        sandbox: SandboxLimits {
            call_fuel: 200_000_000,
            ..SandboxLimits::default()
        },
        failure_threshold: 5,
    };
    let host = PolicyHost::with_limits(ComponentLookup::from_environment(EmbeddedSet::NONE), limits, None)
        .expect("policy engine");
    let trace = small(Workload::Gsm8k, 40, 11);
    let started = std::time::Instant::now();
    let r = run(
        &host,
        &trace,
        400,
        &[
            "lru-native",
            "probe:fault=score-spin",
            "probe:fault=observe-trap",
            "probe",
        ],
    );
    let wall = started.elapsed();

    let spin = &r[1].policy_stats;
    assert!(r[0].evictions > 0, "the cache must be under pressure");
    assert!(spin.gave_up, "{spin:?}");
    assert_eq!(spin.failures, [("score fuel".to_string(), 5)].into(), "{spin:?}");
    assert_eq!(spin.failed_calls, 5);
    assert_eq!(spin.fallbacks, spin.score_calls, "every ranking fell back to LRU");
    assert!(spin.score_calls > 5 && spin.calls_skipped > 0, "{spin:?}");
    assert!(wall < std::time::Duration::from_secs(60), "took {wall:?}");

    let traps = &r[2].policy_stats;
    assert!(traps.gave_up, "{traps:?}");
    assert!(
        traps
            .failures
            .keys()
            .all(|k| k.starts_with("observe") && k.ends_with(" trap")),
        "{traps:?}"
    );
    assert!(traps.failures.values().any(|&n| n == 5), "{traps:?}");
    assert!(traps.restarts > 0, "each failure cost an instance");

    let healthy = &r[3].policy_stats;
    assert_eq!(
        (
            healthy.failed_calls,
            healthy.fallbacks,
            healthy.restarts,
            healthy.gave_up
        ),
        (0, 0, 0, false)
    );
    // The table says so: columns, and a note for each broken policy only.
    let text = agentrt_sim::report::table(&agentrt_sim::report::summarize(&r));
    assert!(
        text.contains("! probe:fault=score-spin: FAILED — 5 failed calls (score fuel ×5)"),
        "{text}"
    );
    assert!(text.contains("! probe:fault=observe-trap: "), "{text}");
    assert!(!text.contains("! probe: "), "{text}");
}

/// A replay's policy calls are bounded by fuel, not by a clock: the same replay gives the same
/// figures, to the last token and the order of admissions, whether the machine is idle or every
/// core is busy (here: threads spinning on every core for the second replay). And a call that
/// runs out of fuel is a failure of the run, which reports no figures for it.
#[test]
fn a_replays_figures_do_not_depend_on_how_busy_the_machine_is() {
    use agentrt_runtime::SandboxLimits;
    use agentrt_sim::policy_limits::ReplayLimits;
    use std::sync::atomic::{AtomicBool, Ordering};

    let host = host();
    let trace = small(Workload::Mtbench, 60, 3);
    let quiet = run(&host, &trace, 300, &["cachesage"]).remove(0);
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let hogs: Vec<_> = (0..2 * cores)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut x = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            })
        })
        .collect();
    let busy = run(&host, &trace, 300, &["cachesage"]).remove(0);
    stop.store(true, Ordering::Relaxed);
    hogs.into_iter().for_each(|h| h.join().unwrap());
    assert!(
        quiet.evictions > 0 && quiet.policy_stats.score_calls > 0,
        "the policy ranked"
    );
    assert_eq!(quiet.policy_stats.failed_calls, 0);
    assert_eq!(
        (
            quiet.hit_tokens,
            quiet.evictions,
            quiet.warmup_tokens,
            &quiet.admission_order
        ),
        (
            busy.hit_tokens,
            busy.evictions,
            busy.warmup_tokens,
            &busy.admission_order
        )
    );
    assert_eq!(busy.policy_stats.failed_calls, 0);

    // Fuel for a few thousand instructions a call: the first ranking runs out, deterministically.
    let starved = PolicyHost::with_limits(
        ComponentLookup::from_environment(EmbeddedSet::NONE),
        ReplayLimits {
            sandbox: SandboxLimits {
                call_fuel: 20_000,
                ..SandboxLimits::default()
            },
            failure_threshold: 5,
        },
        None,
    )
    .expect("policy engine");
    let r = run(&starved, &trace, 300, &["cachesage"]);
    let summaries = agentrt_sim::report::summarize(&r);
    assert!(summaries[0].1.failed, "{:?}", r[0].policy_stats);
    let error = agentrt_sim::report::failed_replays(&summaries).unwrap_err().to_string();
    assert!(error.contains("cachesage (") && error.contains("fuel"), "{error}");
}

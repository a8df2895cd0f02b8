//! Several tenants on one simulated engine: salted blocks, cache shares, per-tenant figures —
//! through the real host and the real policy components.

use agentrt_runtime::{ComponentLookup, EmbeddedSet, Share};
use agentrt_sim::experiments::noisy_neighbour::with_flood;
use agentrt_sim::harness::{run_all, PolicyHost};
use agentrt_sim::policies::PolicySpec;
use agentrt_sim::policies::Rerank;
use agentrt_sim::prepare::PreparedTrace;
use agentrt_sim::scheduler::{RunResult, SimConfig};
use agentrt_sim::trace::Trace;
use agentrt_sim::workloads::{generate, GenParams, Workload};

fn run(trace: &PreparedTrace, cfg: &SimConfig, names: &[&str]) -> anyhow::Result<Vec<RunResult>> {
    let host = PolicyHost::new(ComponentLookup::from_environment(EmbeddedSet::NONE)).expect("policy engine");
    let policies: Vec<PolicySpec> = names.iter().map(|n| PolicySpec::parse(n)).collect();
    run_all(&host, trace, cfg, &policies, Rerank::EveryStep, false, |_| {})
}

/// Two sessions with the same 512-token prompt, the second a second later; `tenants` tags them.
fn same_prompt_twice(tenants: [Option<&str>; 2]) -> PreparedTrace {
    let line = |tenant: Option<&str>, session: &str, after: u32| {
        let tenant = tenant.map_or(String::new(), |t| format!(r#""tenant": "{t}", "#));
        format!(
            r#"{{{tenant}"session": "{session}", "agent": "helper", "after_ms": {after}, "prompt": [{{"seg": "sys/helper", "tokens": 256}}, {{"seg": "shared/question", "tokens": 256}}], "output_tokens": 4}}"#
        )
    };
    let text = format!("{}\n{}\n", line(tenants[0], "s1", 0), line(tenants[1], "s2", 1000));
    PreparedTrace::new(&Trace::parse(&text).unwrap(), 16, false)
}

#[test]
fn a_tenant_never_hits_another_tenants_blocks() {
    let cfg = SimConfig::new(1000);
    let untagged = &run(&same_prompt_twice([None, None]), &cfg, &["lru"]).unwrap()[0];
    // The whole prompt but its last block, which vLLM computes again for the first token.
    let full_hit = 512 - 16;
    assert_eq!(untagged.hit_tokens, full_hit, "one tenant: the second request hits");

    let tagged = &run(&same_prompt_twice([Some("alpha"), Some("beta")]), &cfg, &["lru"]).unwrap()[0];
    assert_eq!(tagged.hit_tokens, 0, "two tenants: their blocks are salted apart");
    let names: Vec<&str> = tagged.tenants.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["alpha", "beta"]);
    assert!(tagged
        .tenants
        .iter()
        .all(|t| t.prompt_tokens == 512 && t.hit_tokens == 0));

    // Within one tenant, sharing is as before.
    let same = &run(&same_prompt_twice([Some("alpha"), Some("alpha")]), &cfg, &["lru"]).unwrap()[0];
    assert_eq!(same.tenant("alpha").unwrap().hit_tokens, full_hit);
}

fn agents(sessions: usize) -> Trace {
    let params = GenParams {
        sessions,
        concurrency: sessions as f64 / 2.0,
        rate: None,
        seed: 3,
        fleet: Default::default(),
    };
    let mut trace = generate(Workload::Gaia, &params);
    for r in &mut trace.requests {
        r.tenant = Some("agents".into());
    }
    trace
}

#[test]
fn one_tenant_under_shares_replays_exactly_as_without_them() {
    let trace = PreparedTrace::new(&agents(6), 16, false);
    let plain = SimConfig::new(1500);
    let shared = SimConfig {
        shares: Some(vec![("agents".into(), Share::NONE)]),
        ..plain.clone()
    };
    let a = run(&trace, &plain, &["lru", "cachesage"]).unwrap();
    let b = run(&trace, &shared, &["lru", "cachesage"]).unwrap();
    for (x, y) in a.iter().zip(&b) {
        assert!(x.evictions > 0, "{}: the cache must be under pressure", x.policy);
        assert_eq!(
            (x.hit_tokens, x.evictions),
            (y.hit_tokens, y.evictions),
            "{}: one tenant is the whole cache",
            x.policy
        );
    }
}

#[test]
fn a_guarantee_protects_a_tenants_cache_from_a_flood() {
    let guarantee = 1200;
    let agents = agents(8);
    let alone = run(
        &PreparedTrace::new(&agents, 16, false),
        &SimConfig::new(guarantee),
        &["lru-native"],
    )
    .unwrap()
    .remove(0);
    let span_s = alone.makespan_us / 1e6;
    let rate = alone.prompt_tokens as f64 / span_s;
    let flooded = PreparedTrace::new(&with_flood(&agents, 2.0 * rate, span_s, 8192, 64), 16, false);
    let shared_cfg = SimConfig::new(2 * guarantee);
    let shares_cfg = SimConfig {
        shares: Some(vec![(
            "agents".into(),
            Share {
                min_blocks: guarantee as u64,
                max_blocks: u64::MAX,
            },
        )]),
        ..shared_cfg.clone()
    };
    let shared = run(&flooded, &shared_cfg, &["lru-native"]).unwrap().remove(0);
    let shares = run(&flooded, &shares_cfg, &["lru-native"]).unwrap().remove(0);
    let hit = |r: &RunResult| r.tenant("agents").unwrap().hit_rate();
    let (alone, shared, shares) = (hit(&alone), hit(&shared), hit(&shares));
    eprintln!("agents' hit rate: alone {alone:.3}, shared {shared:.3}, with a guarantee {shares:.3}");
    assert!(alone - shared > 0.05, "the flood hurts without shares");
    assert!(
        shares - shared >= 0.5 * (alone - shared),
        "a guarantee wins back most of what the flood took"
    );
}

#[test]
fn a_share_for_a_tenant_the_trace_lacks_is_refused_by_name() {
    let trace = PreparedTrace::new(&agents(2), 16, false);
    let cfg = SimConfig {
        shares: Some(vec![("nobody".into(), Share::NONE)]),
        ..SimConfig::new(500)
    };
    let e = run(&trace, &cfg, &["lru"]).unwrap_err();
    assert!(format!("{e:#}").contains("\"nobody\""), "{e:#}");
}

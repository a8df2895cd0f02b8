//! vLLM's priority scheduling in the simulator, driven by the real fair-share component in a slot
//! beside the cache policy (`sim session-flood`'s setup, with fewer flood documents).

use agentrt_runtime::{ComponentLookup, EmbeddedSet};
use agentrt_sim::experiments::session_flood::{figures, flood_trace, prepare, SessionFloodArgs};
use agentrt_sim::harness::{run_one, PolicyHost};
use agentrt_sim::options::SlotArgs;
use agentrt_sim::policies::PolicySpec;
use agentrt_sim::policies::Rerank;
use agentrt_sim::scheduler::SimConfig;
use clap::Parser;

#[derive(Parser)]
struct Flags {
    #[command(flatten)]
    flood: SessionFloodArgs,
}

#[test]
fn a_flooding_session_demoted_by_fair_share_waits_behind_a_light_session() {
    let a = Flags::parse_from(["test", "--flood-requests", "80"]).flood;
    let trace = prepare(&flood_trace(&a));
    let host = PolicyHost::new(ComponentLookup::from_environment(EmbeddedSet::NONE)).expect("policy engine");
    let run = |slots: &[&str]| {
        let mut cfg = SimConfig::new(a.capacity_blocks);
        cfg.max_num_seqs = a.max_num_seqs;
        cfg.max_batched_tokens = a.max_batched_tokens;
        SlotArgs {
            slots: slots.iter().map(|s| s.to_string()).collect(),
            slot_configs: Vec::new(),
            engine_priorities: true,
        }
        .apply(&mut cfg)
        .unwrap();
        let result = run_one(&host, &trace, &cfg, &PolicySpec::parse("lru"), None, Rerank::EveryStep).unwrap();
        figures("", &trace, &result).unwrap()
    };
    let plain = run(&[]);
    let fair = run(&["fair=fair-share"]);
    assert_eq!(plain.demoted_requests, 0);
    assert!(fair.demoted_requests > 0, "fair-share demoted the flood");
    assert!(
        fair.light_p99_ms < plain.light_p99_ms / 2.0,
        "the light session's tail: {} ms with fair-share, {} ms without",
        fair.light_p99_ms,
        plain.light_p99_ms
    );
    // The flood is not starved: the engine keeps serving it at about the same rate.
    assert!(
        fair.flood_per_s > 0.8 * plain.flood_per_s,
        "{} vs {}",
        fair.flood_per_s,
        plain.flood_per_s
    );
}

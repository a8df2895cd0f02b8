//! CacheSage puts the framework's closings first by construction, and knows whose each block is
//! when one agent serves thousands of sessions at once — the shape of Mooncake's conversations
//! imported a session per request at four times the recorded rate (docs/results.md). Replayed
//! through the real host and the real component (`<target>/components/cachesage.wasm`).

use agentrt_runtime::{ComponentLookup, EmbeddedSet};
use agentrt_sim::harness::{run_all, PolicyHost};
use agentrt_sim::hints::{HintKinds, HintsTold};
use agentrt_sim::policies::{PolicySpec, Rerank};
use agentrt_sim::prepare::PreparedTrace;
use agentrt_sim::scheduler::SimConfig;
use agentrt_sim::trace::Trace;

/// `n` sessions of one agent, one request each, closed at its answer, arriving 0.2 ms apart (far
/// faster than one engine serves them: thousands are in flight at once). Each asks about one of
/// 40 documents, the first few far more often than the rest, plus a question of its own. In a
/// cache of 3,000 blocks (the documents take 1,200) the closings are worth about 3 pp over LRU
/// (59.2 % against 56.1 %); in one of 1,500 the running requests hold most of it and they are
/// worth under 1 pp.
fn one_agent_many_sessions(n: usize) -> Trace {
    let mut text = String::new();
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    for i in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let u = (x >> 11) as f64 / (1u64 << 53) as f64;
        let doc = (40.0 * u * u * u) as usize; // skewed: document 0 most often
        text.push_str(&format!(
            r#"{{"session": "s{i}", "agent": "one", "after_ms": {}, "prompt": [{{"seg": "sys/one", "tokens": 64}}, {{"seg": "doc/{doc}", "tokens": 480}}, {{"seg": "q/{i}", "tokens": 320}}], "output_tokens": 4, "hints": {{"closes": true}}}}"#,
            0.2 * i as f64
        ));
        text.push('\n');
    }
    Trace::parse(&text).expect("a valid trace")
}

#[test]
fn one_agent_serving_thousands_of_sessions_gets_what_the_closings_are_worth() {
    let host = PolicyHost::new(ComponentLookup::from_environment(EmbeddedSet::NONE)).expect("policy engine");
    let trace = PreparedTrace::new(&one_agent_many_sessions(3000), 16, false);
    let mut cfg = SimConfig::new(3000);
    cfg.hints = HintsTold {
        kinds: HintKinds::Closed,
        coverage: 1.0,
    };
    let policies: Vec<PolicySpec> = ["lru", "closed-first", "cachesage"]
        .iter()
        .map(|n| PolicySpec::parse(n))
        .collect();
    let r = run_all(&host, &trace, &cfg, &policies, Rerank::EveryMs(100.0), false, |_| {}).expect("replay");
    let [lru, closed_first, cachesage] = [&r[0], &r[1], &r[2]].map(|r| 100.0 * r.hit_rate());
    assert_eq!(cachesage_failures(&r[2]), 0);
    assert!(
        closed_first > lru + 1.0,
        "the closings must be worth something here: closed-first {closed_first:.2} % vs LRU {lru:.2} %"
    );
    assert!(
        cachesage >= closed_first - 0.3,
        "CacheSage {cachesage:.2} % vs closed-first {closed_first:.2} % (LRU {lru:.2} %)"
    );
}

fn cachesage_failures(r: &agentrt_sim::scheduler::RunResult) -> u64 {
    r.policy_stats.failed_calls
}

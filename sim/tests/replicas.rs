//! Several replicas behind a router model (`sim run --replicas N --router …`).

use agentrt_sim::policies::{NativeLru, SimPolicy};
use agentrt_sim::prepare::PreparedTrace;
use agentrt_sim::replicas::replay;
use agentrt_sim::router_model::RouterKind;
use agentrt_sim::scheduler::{Sim, SimConfig};
use agentrt_sim::workloads::{generate, GenParams, Workload};

fn trace(workload: Workload, sessions: usize, concurrency: f64) -> PreparedTrace {
    let params = GenParams {
        sessions,
        concurrency,
        rate: None,
        seed: 5,
        fleet: Default::default(),
    };
    PreparedTrace::new(&generate(workload, &params), 16, false)
}

fn lru(n: usize) -> Vec<Box<dyn SimPolicy>> {
    (0..n).map(|_| Box::new(NativeLru) as Box<dyn SimPolicy>).collect()
}

#[test]
fn one_replica_behind_any_router_replays_exactly_as_one_engine() {
    let trace = trace(Workload::Gaia, 12, 6.0);
    let cfg = SimConfig::new(3000);
    let mut policy = NativeLru;
    let alone = Sim::new(cfg.clone(), &trace, &mut policy).run().unwrap();
    for router in [
        RouterKind::RoundRobin,
        RouterKind::Session,
        RouterKind::Kv,
        RouterKind::Agentrt,
        RouterKind::CacheAware,
        RouterKind::KvAware,
    ] {
        let one = replay(&cfg, &trace, &mut lru(1), router).unwrap();
        assert_eq!(one.hit_tokens, alone.hit_tokens, "{router:?}");
        assert_eq!(one.prompt_tokens, alone.prompt_tokens);
        assert_eq!(one.steps, alone.steps);
        assert_eq!(one.evictions, alone.evictions);
        let same = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(x, y)| x == y || (x.is_nan() && y.is_nan()));
        assert!(same(&one.ttft_us, &alone.ttft_us), "{router:?}: TTFT differs");
        assert!(same(&one.turn_us, &alone.turn_us));
    }
}

#[test]
fn every_request_is_served_once_and_the_kv_router_beats_round_robin_on_hits() {
    // Many agent applications, each replica's cache far smaller than all their anchors.
    let trace = trace(Workload::Fleet, 120, 12.0);
    let cfg = SimConfig::new(3000);
    let rr = replay(&cfg, &trace, &mut lru(2), RouterKind::RoundRobin).unwrap();
    let kv = replay(&cfg, &trace, &mut lru(2), RouterKind::Kv).unwrap();
    let cache_aware = replay(&cfg, &trace, &mut lru(2), RouterKind::CacheAware).unwrap();
    let kv_aware = replay(&cfg, &trace, &mut lru(2), RouterKind::KvAware).unwrap();
    for r in [&rr, &kv, &cache_aware, &kv_aware] {
        assert_eq!(r.rejected, 0, "every prompt fits one replica's cache");
        assert!(r.ttft_us.iter().all(|t| t.is_finite()), "a request was never served");
        assert_eq!(r.admission_order.len(), trace.requests.len());
    }
    assert_eq!(rr.prompt_tokens, kv.prompt_tokens);
    for (name, r) in [("kv", &kv), ("cache-aware", &cache_aware), ("kv-aware", &kv_aware)] {
        assert!(
            r.hit_rate() > rr.hit_rate(),
            "{name} {:.3} vs round-robin {:.3}",
            r.hit_rate(),
            rr.hit_rate()
        );
    }
}

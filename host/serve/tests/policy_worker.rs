//! A tenant's policy worker (host/serve/src/tenant/worker.rs) with a real component: a request's
//! `act` is answered after the request's events, even when an earlier `act` is still queued
//! ahead of them. Requests share a queued `act`; one that was queued before a request's finish
//! cannot answer for it, or a session over its budget is denied one call late. Under steady
//! traffic the worker takes requests' events in batches, not one wake per request.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentrt_runtime::types::{Event, RequestFinish, SideEffect};
use agentrt_runtime::{PolicyHandle, SlotConfig};
use agentrt_serve::tenant::quotas::{LiveQuotas, Quotas};
use agentrt_serve::tenant::worker::{PolicyWorker, GATHER_WAIT};

fn finish(session: u64, tokens: u32) -> Event {
    Event::RequestFinish(RequestFinish {
        request_id: 1,
        agent: 1,
        session,
        prompt_tokens: tokens,
        cached_tokens: 0,
        output_tokens: 0,
        warmup: false,
        ok: true,
        at_us: 0,
    })
}

fn denied_sessions(effects: &[SideEffect]) -> Vec<u64> {
    effects
        .iter()
        .filter_map(|e| match e {
            SideEffect::Deny(d) => Some(d.session),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn an_act_asked_after_a_finish_hears_it_though_an_earlier_act_is_still_queued() {
    let (engine, _cache) = agentrt_tests::engine();
    let guard = agentrt_tests::load(&engine, "guard");
    let slot = SlotConfig::new("t/guard").with_init([("session-token-budget", "40")]);
    let policy = PolicyHandle::start(&engine, guard, slot).unwrap();
    let quotas = Quotas {
        policy_cpu_ms_per_s: 1000, // never throttled: every event must reach the policy
        ..Quotas::default()
    };
    let worker = PolicyWorker::spawn("t", Arc::new(policy), 4096, Arc::new(LiveQuotas::new(quotas))).unwrap();

    // Work ahead of the first act, so that it is still queued when the finish comes in.
    for _ in 0..200 {
        assert!(worker.observe(vec![finish(1, 0)]));
    }
    let first = worker.act().expect("no act was pending");
    assert!(
        worker.act().is_none(),
        "with no event in between, a second act shares the first"
    );
    // Session 9 passes its budget of 40 tokens.
    assert!(worker.observe(vec![finish(9, 45)]));
    let second = worker
        .act()
        .expect("the pending act is ahead of the finish: a new one must be queued behind it");

    let first = first.await.unwrap().unwrap();
    let second = second.await.unwrap().unwrap();
    assert_eq!(
        denied_sessions(&first),
        Vec::<u64>::new(),
        "the first act ran before the finish"
    );
    assert_eq!(
        denied_sessions(&second),
        vec![9],
        "the act behind the finish denies the session"
    );
    assert_eq!(worker.stats().throttled(), 0);
}

#[test]
fn under_steady_traffic_the_worker_wakes_per_batch_not_per_request() {
    let (engine, _cache) = agentrt_tests::engine();
    let lru = agentrt_tests::load(&engine, "lru");
    let policy = PolicyHandle::start(&engine, lru, SlotConfig::new("t/lru")).unwrap();
    let quotas = Quotas {
        policy_cpu_ms_per_s: 1000,
        ..Quotas::default()
    };
    let worker = PolicyWorker::spawn("t", Arc::new(policy), 4096, Arc::new(LiveQuotas::new(quotas))).unwrap();

    // A request's events every 50 µs (20,000 req/s) for 100 ms: `lru` observes one in about a
    // microsecond, so a worker that took each as it came would make a call per request.
    let every = Duration::from_micros(50);
    let (requests, started) = (2_000u32, Instant::now());
    for i in 0..requests {
        while started.elapsed() < every * i {
            std::hint::spin_loop();
        }
        assert!(worker.observe(vec![finish(u64::from(i), 10)]));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while worker.stats().queued() > 0 {
        assert!(Instant::now() < deadline, "the worker did not drain its queue");
        std::thread::sleep(Duration::from_millis(1));
    }
    let (calls, took) = (worker.stats().observe_calls(), started.elapsed());
    assert_eq!(
        worker.stats().observed(),
        u64::from(requests),
        "every event reached the policy"
    );
    // About one call per GATHER_WAIT of sending (a slow machine sends for longer, and makes
    // fewer, larger batches); twice that leaves room for a sender descheduled mid-run, whose
    // catching up finds the worker with a backlog. A call per request would be ~10× this.
    let most = 2 * took.as_micros() / GATHER_WAIT.as_micros() + 2;
    assert!(
        u128::from(calls) <= most,
        "{calls} observe calls for {requests} requests sent over {took:?}: more than one per {GATHER_WAIT:?}"
    );
}

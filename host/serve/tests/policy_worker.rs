//! A tenant's policy worker (host/serve/src/tenant/worker.rs) with a real component: a request's
//! `act` is answered after the request's events, even when an earlier `act` is still queued
//! ahead of them. Requests share a queued `act`; one that was queued before a request's finish
//! cannot answer for it, or a session over its budget is denied one call late.

use std::sync::Arc;

use agentrt_runtime::types::{Event, RequestFinish, SideEffect};
use agentrt_runtime::{PolicyHandle, SlotConfig};
use agentrt_serve::tenant::quotas::{LiveQuotas, Quotas};
use agentrt_serve::tenant::worker::PolicyWorker;

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

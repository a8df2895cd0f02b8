//! The scheduler with engine priorities: demotions, preemption order.

use super::*;
use crate::block_pool::PoolObserver;
use crate::trace::Trace;
use agentrt_runtime::types::SetPriority;

/// A policy that demotes one session from its first `act` on (the part of fair-share this
/// test is about: what the scheduler does with a demotion).
struct Demote {
    session: u64,
    told: bool,
}
impl PoolObserver for Demote {}
impl crate::offload::ranked::HostRanker for Demote {}
impl SimPolicy for Demote {
    fn name(&self) -> &str {
        "demote"
    }
    fn act(&mut self) -> Vec<SideEffect> {
        if std::mem::replace(&mut self.told, true) {
            return Vec::new();
        }
        vec![SideEffect::SetPriority(SetPriority {
            session: self.session,
            priority: -10,
        })]
    }
}

/// One running seat: `busy` holds it from 0 ms, then `heavy` (demoted) arrives at 1 ms and
/// `light` at 2 ms; both wait for the seat.
fn trace() -> PreparedTrace {
    let line = |session: &str, after: u32, output: u32| {
        format!(
            r#"{{"session": "{session}", "agent": "{session}", "after_ms": {after}, "prompt": [{{"seg": "{session}/q", "tokens": 64}}], "output_tokens": {output}}}"#
        )
    };
    let text = format!(
        "{}\n{}\n{}\n",
        line("busy", 0, 200),
        line("heavy", 1, 4),
        line("light", 2, 4)
    );
    PreparedTrace::new(&Trace::parse(&text).unwrap(), 16, false)
}

fn admission_order(engine_priorities: bool) -> (Vec<String>, RunResult) {
    let trace = trace();
    let mut cfg = SimConfig::new(100);
    cfg.max_num_seqs = 1;
    cfg.engine_priorities = engine_priorities;
    let mut policy = Demote {
        session: crate::tokens::hash_str("heavy"),
        told: false,
    };
    let result = Sim::new(cfg, &trace, &mut policy).run().unwrap();
    let names = result
        .admission_order
        .iter()
        .map(|&uid| {
            trace.sessions[trace.requests[uid as usize].session as usize]
                .name
                .clone()
        })
        .collect();
    (names, result)
}

/// Blocks run out while a demoted request admitted first and a normal one admitted later
/// both decode: vLLM's priority scheduling preempts the demoted one (largest priority), not
/// the last one running as FCFS does.
#[test]
fn out_of_blocks_the_demoted_request_is_preempted_not_the_last_one() {
    let line = |session: &str, after: u32, prompt: u32, output: u32| {
        format!(
            r#"{{"session": "{session}", "agent": "{session}", "after_ms": {after}, "prompt": [{{"seg": "{session}/q", "tokens": {prompt}}}], "output_tokens": {output}}}"#
        )
    };
    let text = format!(
        "{}\n{}\n{}\n",
        line("first", 0, 16, 1),
        line("a", 1, 320, 400),
        line("b", 50, 320, 400)
    );
    let trace = PreparedTrace::new(&Trace::parse(&text).unwrap(), 16, false);
    let finish = |engine_priorities: bool| {
        let mut cfg = SimConfig::new(60);
        cfg.engine_priorities = engine_priorities;
        let mut policy = Demote {
            session: crate::tokens::hash_str("a"),
            told: false,
        };
        let r = Sim::new(cfg, &trace, &mut policy).run().unwrap();
        assert!(r.preemptions > 0, "the cache is too small for both");
        (r.finish_us[1], r.finish_us[2])
    };
    let (a, b) = finish(true);
    assert!(a > b, "a, demoted, was preempted and finished after b: {a} vs {b}");
    let (a, b) = finish(false);
    assert!(a < b, "FCFS preempts b, the last one running: {a} vs {b}");
}

#[test]
fn a_demoted_sessions_waiting_request_is_scheduled_after_a_normal_one() {
    let (order, result) = admission_order(true);
    assert_eq!(order, ["busy", "light", "heavy"], "priority scheduling: light first");
    assert_eq!((result.priorities_set, result.demoted_requests), (1, 1));
    // The same trace without engine priorities is FCFS: the demotion is counted, not used.
    let (order, result) = admission_order(false);
    assert_eq!(order, ["busy", "heavy", "light"]);
    assert_eq!((result.priorities_set, result.effects_ignored), (0, 1));
}

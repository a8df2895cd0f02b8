//! `sim knee` in small: closed-loop agent programs whose contexts grow call after call, on a
//! cache that holds about six of them, below and past the knee, behind stock vLLM and
//! working-set admission (the real `working-set` component in the admission slot). It asserts what admission promises, not figures: below the knee it changes nothing;
//! past it stock vLLM's hit rate collapses and working-set admission keeps it and completes
//! more calls, within its waiting bounds; where prefill is nearly free it holds nothing.
//! About 5 s in a debug build, once built.

use agentrt_runtime::{ComponentLookup, EmbeddedSet};
use agentrt_sim::admission::AdmissionArm;
use agentrt_sim::experiments::knee::Figures;
use agentrt_sim::harness::{replay_admitted, PolicyHost};
use agentrt_sim::latency::LatencyModel;
use agentrt_sim::policies::{PolicySpec, Rerank};
use agentrt_sim::prepare::PreparedTrace;
use agentrt_sim::scheduler::SimConfig;
use agentrt_sim::trace::Trace;

/// 40 programs: an 800-token anchor shared by all, a task, then 12 calls each extending the last
/// with its answer (60 tokens) and a 400-token observation; a `tool_ms` tool between calls.
fn programs(tool_ms: u32) -> PreparedTrace {
    let mut lines = Vec::new();
    for p in 0..40 {
        let mut prompt = vec![
            r#"{"seg": "sys/agent", "tokens": 800}"#.to_string(),
            format!(r#"{{"seg": "p{p}/task", "tokens": 200}}"#),
        ];
        for call in 0..12 {
            let last = call == 11;
            let hints = if last {
                r#""hints": {"closes": true}"#.to_string()
            } else {
                r#""tool_call": true, "hints": {"wait": {"kind": "tool", "tool": "bash"}}"#.to_string()
            };
            lines.push(format!(
                r#"{{"session": "p{p}", "agent": "agent", "after_ms": {}, "prompt": [{}], "output_tokens": 60, {hints}}}"#,
                if call == 0 { 0 } else { tool_ms },
                prompt.join(", ")
            ));
            prompt.push(format!(r#"{{"seg": "p{p}/act-{call}", "tokens": 60}}"#));
            prompt.push(format!(r#"{{"seg": "p{p}/obs-{call}", "tokens": 400}}"#));
        }
    }
    PreparedTrace::new(&Trace::parse(&lines.join("\n")).unwrap(), 16, false)
}

const CACHE_BLOCKS: usize = 1_600;

fn replay(host: &PolicyHost, trace: &PreparedTrace, programs: usize, arm: &str, latency: LatencyModel) -> Figures {
    let mut cfg = SimConfig::new(CACHE_BLOCKS);
    cfg.programs = Some(programs);
    cfg.latency = latency;
    let arm = AdmissionArm::parse(arm).unwrap();
    let result = replay_admitted(host, trace, &cfg, &PolicySpec::NativeLru, &arm, Rerank::EveryStep).unwrap();
    assert_eq!(
        result.stuck_releases,
        0,
        "{}: every held call was let go by the stage",
        arm.name()
    );
    Figures::of(&result, trace, (CACHE_BLOCKS * 16) as f64)
}

#[test]
fn past_the_knee_working_set_admission_keeps_the_cache_and_completes_more_calls() {
    let trace = programs(300);
    let host = PolicyHost::new(ComponentLookup::from_environment(EmbeddedSet::NONE)).expect("policy engine");
    let h100 = LatencyModel::llama31_8b_h100;

    // Below the knee (2 programs): nothing is held, the figures are stock vLLM's.
    let (stock, ws) = (
        replay(&host, &trace, 2, "vllm", h100()),
        replay(&host, &trace, 2, "working-set", h100()),
    );
    assert!(stock.working_set_over_cache < 1.0, "{}", stock.working_set_over_cache);
    assert_eq!(ws.stage.as_ref().unwrap().requests_waited, 0);
    assert!(
        (ws.calls_per_min / stock.calls_per_min - 1.0).abs() < 0.02,
        "{ws:?} vs {stock:?}"
    );
    assert!((ws.hit_rate - stock.hit_rate).abs() < 0.02);
    let plateau = stock.hit_rate;

    // Past it (24 programs, about four times what the cache holds): stock vLLM thrashes.
    let (stock, ws) = (
        replay(&host, &trace, 24, "vllm", h100()),
        replay(&host, &trace, 24, "working-set", h100()),
    );
    assert!(stock.working_set_over_cache > 2.0, "{}", stock.working_set_over_cache);
    assert!(
        stock.hit_rate < 0.8 * plateau,
        "stock {} against the plateau {plateau}",
        stock.hit_rate
    );
    assert!(
        ws.hit_rate > stock.hit_rate + 0.1,
        "working-set {} vs stock {}",
        ws.hit_rate,
        stock.hit_rate
    );
    assert!(
        ws.calls_per_min > stock.calls_per_min,
        "{} vs {}",
        ws.calls_per_min,
        stock.calls_per_min
    );
    let held = ws.stage.as_ref().unwrap();
    assert!(held.requests_waited > 0, "it held calls: {held:?}");
    // The bounds: a first call waits at most 30 s, any call 600 s.
    assert!(held.max_wait_us <= 600_000_000 + 1_000_000, "{held:?}");
    assert!(ws.first_response_p99_ms <= 31_000.0, "{}", ws.first_response_p99_ms);

    // Where prefill is nearly free (the tiny CPU model's regime: its tools took 0.5–2 s),
    // holding cannot pay: nothing is held and the calls are stock vLLM's.
    let trace = programs(1_000);
    let free = LatencyModel::prefill_nearly_free;
    let (stock, ws) = (
        replay(&host, &trace, 24, "vllm", free()),
        replay(&host, &trace, 24, "working-set", free()),
    );
    let held = ws.stage.as_ref().unwrap();
    assert_eq!((held.holds, held.requests_waited), (0, 0), "{held:?}");
    assert!(held.checks_not_paying > 0);
    assert!(
        ws.calls_per_min >= 0.98 * stock.calls_per_min,
        "{} vs {}",
        ws.calls_per_min,
        stock.calls_per_min
    );
}

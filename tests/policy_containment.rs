//! A policy that loops, eats memory or panics is stopped, reported with a typed error, and the
//! host answers the next call on a fresh instance.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentrt_runtime::types::{Event, ToolCall};
use agentrt_runtime::{PolicyError, PolicyHandle, SandboxLimits, SlotConfig};
use agentrt_tests::*;

fn probe_with(limits: SandboxLimits) -> (PolicyHandle, agentrt_runtime::PolicyEngine, tempfile::TempDir) {
    let (engine, cache) = engine();
    let config = SlotConfig::new("test/probe").with_limits(limits);
    let handle = PolicyHandle::start(&engine, load(&engine, "probe"), config).unwrap();
    (handle, engine, cache)
}

fn healthy(handle: &PolicyHandle) {
    let items = [block_item(1, 1, 1), block_item(2, 1, 2)];
    assert_eq!(
        handle.score(&items).unwrap(),
        vec![1.0, 2.0],
        "the next call is answered"
    );
}

#[test]
fn an_infinite_loop_is_stopped_at_its_deadline() {
    let deadline = Duration::from_millis(50);
    let (probe, _e, _c) = probe_with(SandboxLimits {
        call_deadline: deadline,
        ..SandboxLimits::default()
    });
    let started = Instant::now();
    let err = probe.score(&[block_item(PROBE_LOOP_KEY, 1, 1)]).unwrap_err();
    let took = started.elapsed();
    assert!(
        matches!(err, PolicyError::DeadlineExceeded { deadline: d, .. } if d == deadline),
        "{err}"
    );
    assert!(took >= deadline.mul_f32(0.9), "stopped early: {took:?}");
    // Generous: the point is that it stops, not how precisely (the epoch ticks every 1 ms).
    assert!(took < deadline * 20, "took {took:?} to stop");
    healthy(&probe);
    assert_eq!(probe.metrics().restarts(), 1);
    assert_eq!(probe.metrics().errors("deadline"), 1);
}

#[test]
fn unbounded_memory_growth_is_stopped_at_the_cap() {
    let cap = 8 << 20;
    let (probe, _e, _c) = probe_with(SandboxLimits {
        memory_bytes: cap,
        ..SandboxLimits::default()
    });
    let grow = Event::ToolCall(ToolCall {
        session: 1,
        agent: 1,
        tool: PROBE_GROW_TOOL,
        args_hash: 0,
        at_us: 0,
    });
    let err = probe.observe(&[grow]).unwrap_err();
    assert!(
        matches!(err, PolicyError::OutOfMemory { cap_bytes, .. } if cap_bytes == cap),
        "{err}"
    );
    assert!(err.to_string().contains("memory cap"), "{err}");
    healthy(&probe);
    assert_eq!(probe.metrics().errors("oom"), 1);
}

#[test]
fn a_panic_is_a_trap_and_the_next_call_is_served() {
    let (probe, _e, _c) = probe_with(SandboxLimits::default());
    let err = probe.predict(PROBE_PANIC_HORIZON).unwrap_err();
    assert!(matches!(err, PolicyError::Trap { .. }), "{err}");
    assert!(err.to_string().contains("predict"), "names the primitive: {err}");
    healthy(&probe);
    assert!(probe.predict(1).is_ok());
}

#[test]
fn ranking_falls_back_to_lru_when_the_policy_fails() {
    let (probe, _e, _c) = probe_with(SandboxLimits {
        call_deadline: Duration::from_millis(10),
        ..SandboxLimits::default()
    });
    // By the probe's scores (= keys) item 0 would rank first; LRU puts the most recent (item 2) first.
    let items = [
        block_item(PROBE_LOOP_KEY, 1, 5),
        block_item(1, 1, 1),
        block_item(2, 1, 9),
    ];
    let ranking = probe.rank(&items);
    assert!(matches!(ranking.fallback, Some(PolicyError::DeadlineExceeded { .. })));
    assert_eq!(ranking.order, vec![2, 0, 1]);
    assert_eq!(probe.metrics().fallbacks(), 1);
    assert!(probe.rank(&items[1..]).fallback.is_none());
}

#[test]
fn with_fuel_an_infinite_loop_is_stopped_by_its_instruction_budget() {
    let cache = tempfile::tempdir().unwrap();
    let engine = agentrt_runtime::PolicyEngine::new(agentrt_runtime::EngineOptions {
        cpu_bound: agentrt_runtime::CpuBound::Fuel,
        pooling: None,
        cache_dir: Some(cache.path().to_path_buf()),
        ..agentrt_runtime::EngineOptions::default()
    })
    .unwrap();
    let limits = SandboxLimits {
        call_fuel: 5_000_000,
        ..SandboxLimits::default()
    };
    let config = SlotConfig::new("test/probe").with_limits(limits);
    let probe = PolicyHandle::start(&engine, load(&engine, "probe"), config).unwrap();
    let err = probe.score(&[block_item(PROBE_LOOP_KEY, 1, 1)]).unwrap_err();
    assert!(
        matches!(err, PolicyError::FuelExhausted { fuel: 5_000_000, .. }),
        "{err}"
    );
    healthy(&probe);
    assert_eq!(probe.metrics().errors("fuel"), 1);
}

/// Where a test's tracing output goes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

#[test]
fn a_policy_flooding_the_log_cannot_forge_lines_and_is_rate_limited() {
    let limits = SandboxLimits::default();
    let (probe, _e, _c) = probe_with(limits.clone());
    let captured = Captured::default();
    let sink = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || sink.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::TRACE)
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        probe.observe(&[register(9, PROBE_LOG_FLOOD_AGENT, 9)]).unwrap();
        // A moment later the bucket has a line again: the first line says what was dropped.
        std::thread::sleep(Duration::from_millis(200));
        probe.observe(&[register(10, PROBE_LOG_FLOOD_AGENT, 10)]).unwrap();
    });
    let log = captured.text();
    let lines: Vec<&str> = log.lines().collect();
    let written = lines.iter().filter(|l| l.contains("probe line")).count() as u64;
    let burst = u64::from(limits.log_burst);
    assert!(
        (burst..burst + 10).contains(&written),
        "{written} of {} lines written, for a burst of {burst}",
        2 * PROBE_LOG_FLOOD_LINES
    );
    assert_eq!(probe.metrics().log_lines_dropped(), 2 * PROBE_LOG_FLOOD_LINES - written);
    for line in &lines {
        assert!(
            !line.trim_start().starts_with("ERROR agentrt_serve"),
            "a policy forged a host log line: {line}"
        );
    }
    assert!(
        lines
            .iter()
            .any(|l| l.contains("probe line 0\\nERROR agentrt_serve: forged") && l.contains("test/probe")),
        "the newline is escaped and the line tagged with its slot: {log}"
    );
    assert_eq!(
        lines.iter().filter(|l| l.contains("log lines dropped")).count(),
        1,
        "one summary line for the dropped ones: {log}"
    );
    assert!(lines.iter().any(|l| l.contains("dropped=")), "{log}");
}

//! A policy that loops, eats memory or panics is stopped, reported with a typed error, and the
//! host answers the next call on a fresh instance.

use std::time::{Duration, Instant};

use agentrt_runtime::types::{Event, ToolCall};
use agentrt_runtime::{PolicyError, PolicyHandle, Primitive, SandboxLimits, SlotConfig};
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

/// Pins the calling thread to one CPU (the one it is on) and returns it.
#[cfg(target_os = "linux")]
fn pin_to_current_cpu() -> usize {
    // SAFETY: plain libc calls on the calling thread with a zeroed, then filled, CPU set.
    unsafe {
        let cpu = libc::sched_getcpu().max(0) as usize;
        pin_to(cpu);
        cpu
    }
}

#[cfg(target_os = "linux")]
unsafe fn pin_to(cpu: usize) {
    let mut set: libc::cpu_set_t = std::mem::zeroed();
    libc::CPU_SET(cpu, &mut set);
    let status = libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    assert_eq!(status, 0, "sched_setaffinity to CPU {cpu}");
}

/// This thread's CPU time so far.
#[cfg(target_os = "linux")]
fn thread_cpu() -> Duration {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: writes one timespec through a pointer to a live local.
    assert_eq!(
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) },
        0
    );
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// The least CPU time of three `score` calls of one batch (the call runs on this thread).
#[cfg(target_os = "linux")]
fn score_cpu(probe: &PolicyHandle) -> Duration {
    let items = [block_item(1, 1, 1)];
    (0..3)
        .map(|_| {
            let started = thread_cpu();
            probe.score(&items).expect("an uncontended call fits its deadline");
            thread_cpu() - started
        })
        .min()
        .unwrap()
}

/// A call is charged the CPU it used, not the time other threads held its core: on a core shared
/// with seven busy threads, a call whose own work takes a third of its deadline is answered, though
/// it spends about twice its deadline on the clock (and less than the five-deadline backstop). (Judged by the wall clock, one tenant's load
/// would fail another tenant's policy.)
#[cfg(target_os = "linux")]
#[test]
fn a_call_kept_waiting_for_its_core_is_not_charged_for_the_wait() {
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
    use std::sync::Arc;

    // On a thread of its own: the pinning must not outlive the test.
    std::thread::spawn(|| {
        let deadline = Duration::from_millis(40);
        let probe_burning = |burn: u64| {
            let (engine, cache) = engine();
            let burn = burn.to_string();
            let config = SlotConfig::new("test/probe")
                .with_init([("burn", burn.as_str())])
                .with_limits(SandboxLimits {
                    call_deadline: deadline,
                    ..SandboxLimits::default()
                });
            let handle = PolicyHandle::start(&engine, load(&engine, "probe"), config).unwrap();
            (handle, engine, cache)
        };
        // Calibrate, in CPU time: how many iterations make a third of the deadline on this machine.
        let mut burn = 10_000_000u64;
        let mut calibrated = None;
        for _ in 0..4 {
            let (probe, engine, cache) = probe_burning(burn);
            let work = score_cpu(&probe);
            if work > deadline / 5 && work < deadline / 2 {
                calibrated = Some((probe, engine, cache, work));
                break;
            }
            burn = (burn as f64 * (deadline.as_secs_f64() / 3.0) / work.as_secs_f64().max(1e-4)) as u64;
        }
        let (probe, _e, _c, alone) = calibrated.expect("no loop length gave a call of a third of the deadline");

        let cpu = pin_to_current_cpu();
        let stop = Arc::new(AtomicBool::new(false));
        let spinners: Vec<_> = (0..7)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    // SAFETY: as in pin_to_current_cpu.
                    unsafe { pin_to(cpu) };
                    while !stop.load(Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(20));
        let started = Instant::now();
        let answer = probe.score(&[block_item(1, 1, 1)]);
        let took = started.elapsed();
        stop.store(true, Relaxed);
        spinners.into_iter().for_each(|s| s.join().unwrap());

        assert!(
            took > deadline,
            "the call took {took:?} on a shared core (alone {alone:?}): the contention this test needs did not happen"
        );
        assert_eq!(
            answer.unwrap(),
            vec![1.0],
            "answered after {took:?} on the clock, {alone:?} of work"
        );
        assert_eq!(probe.metrics().restarts(), 0);
        assert_eq!(probe.metrics().errors("deadline"), 0);
    })
    .join()
    .unwrap();
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

#[test]
fn a_policy_flooding_the_log_cannot_forge_lines_and_is_rate_limited() {
    let limits = SandboxLimits::default();
    let (probe, _e, _c) = probe_with(limits.clone());
    let captured = CapturedLog::default();
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

/// Run `f` with tracing captured; returns what was logged.
fn logged(f: impl FnOnce()) -> String {
    let captured = CapturedLog::default();
    let sink = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || sink.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    tracing::subscriber::with_default(subscriber, f);
    captured.text()
}

#[test]
fn a_policy_that_keeps_failing_is_suspended_logged_once_and_resumed_when_healthy() {
    let backoff = Duration::from_millis(300);
    let config = SlotConfig {
        breaker: agentrt_runtime::BreakerConfig {
            failure_threshold: 5,
            first_backoff: backoff,
            max_backoff: Duration::from_secs(60),
        },
        checkpoint_every: None,
        ..SlotConfig::new("test/probe").with_limits(SandboxLimits {
            call_deadline: Duration::from_secs(2),
            ..SandboxLimits::default()
        })
    };
    let (engine, _c) = engine();
    let probe = PolicyHandle::start(&engine, load(&engine, "probe"), config).unwrap();
    let requests = 500;
    let items = [block_item(1, 1, 1), block_item(2, 1, 9)];
    let log = logged(|| {
        for i in 0..requests {
            // Every event it is given makes it trap: a policy broken by its traffic.
            let err = probe.observe(&[register(i, PROBE_TRAP_AGENT, 1)]).unwrap_err();
            if i >= 5 {
                assert!(err.is_circuit_open(), "call {i}: {err}");
            }
            // Meanwhile a ranking is still answered, in LRU order, without calling the policy.
            let ranking = probe.rank(&items);
            if i >= 5 {
                assert!(matches!(ranking.fallback, Some(PolicyError::CircuitOpen { .. })));
                assert_eq!(ranking.order, vec![1, 0]);
            }
            if i >= 5 {
                assert!(probe.act().unwrap_err().is_circuit_open(), "no side effects");
            }
        }
    });
    let m = probe.metrics();
    let made = m.calls(Primitive::Observe) + m.calls(Primitive::Score) + m.calls(Primitive::Act);
    assert!(made <= 20, "{made} calls made for {} requests", 3 * requests);
    assert!(m.restarts() <= 10, "{} restarts", m.restarts());
    assert!(m.circuit_open());
    assert_eq!(m.circuit_opens(), 1);
    assert!(
        m.calls_skipped() >= 3 * u64::from(requests) - 20,
        "{} skipped",
        m.calls_skipped()
    );
    assert_eq!(
        log.lines().filter(|l| l.contains("circuit open")).count(),
        1,
        "one line for the outage: {log}"
    );
    let warnings = log.lines().filter(|l| l.contains(" WARN ")).count();
    // One per failure until the threshold (the last of them is the circuit's line).
    assert!(warnings <= 5, "{warnings} warnings: {log}");

    // After the backoff calls go through again (half-open), but a score answering says nothing
    // about observe, which failed: the slot closes only once observe answers too.
    std::thread::sleep(backoff + Duration::from_millis(50));
    let log = logged(|| healthy(&probe));
    assert!(m.circuit_open(), "score's success is not observe's trial");
    assert!(!log.contains("circuit closed"), "{log}");
    let log = logged(|| probe.observe(&[register(1, "a", 1)]).unwrap());
    assert!(!m.circuit_open());
    assert!(log.contains("circuit closed"), "{log}");
    assert_eq!(m.circuit_opens(), 1);
}

#[test]
fn a_trial_that_fails_reopens_the_circuit_for_longer() {
    let config = SlotConfig {
        breaker: agentrt_runtime::BreakerConfig {
            failure_threshold: 2,
            first_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(60),
        },
        ..SlotConfig::new("test/probe")
    };
    let (engine, _c) = engine();
    let probe = PolicyHandle::start(&engine, load(&engine, "probe"), config).unwrap();
    let trap = || probe.observe(&[register(1, PROBE_TRAP_AGENT, 1)]).unwrap_err();
    trap();
    trap();
    assert!(trap().is_circuit_open());
    std::thread::sleep(Duration::from_millis(120));
    assert!(matches!(trap(), PolicyError::Trap { .. }), "the trial is a real call");
    match trap() {
        PolicyError::CircuitOpen { retry_in, .. } => {
            assert!(retry_in > Duration::from_millis(150), "backoff doubled: {retry_in:?}")
        }
        other => panic!("{other}"),
    }
    assert_eq!(probe.metrics().circuit_opens(), 1);
}

#[test]
fn a_snapshot_that_loops_costs_one_restart_and_no_learned_state() {
    let config = SlotConfig {
        checkpoint_every: Some(Duration::from_millis(20)),
        ..SlotConfig::new("test/probe").with_limits(SandboxLimits {
            call_deadline: Duration::from_millis(100),
            ..SandboxLimits::default()
        })
    };
    let (engine, _c) = engine();
    let probe = PolicyHandle::start(&engine, load(&engine, "probe"), config).unwrap();
    let pause = || std::thread::sleep(Duration::from_millis(30));
    probe.observe(&[register(1, "a", 11)]).unwrap();
    pause();
    probe.observe(&[register(2, "b", 12)]).unwrap(); // checkpointed: a, b
    probe.observe(&[register(3, PROBE_SNAPSHOT_LOOP_AGENT, 13)]).unwrap();
    pause();
    probe.observe(&[register(4, "c", 14)]).unwrap(); // the periodic checkpoint loops
    assert_eq!(probe.metrics().checkpoint_failures(), 1);
    assert_eq!(probe.metrics().errors("deadline"), 1);
    for agent in 5..10 {
        pause();
        probe.observe(&[register(agent, "d", 10 + u64::from(agent))]).unwrap();
    }
    assert_eq!(probe.metrics().checkpoint_failures(), 1, "checkpoints back off");
    assert_eq!(
        probe.metrics().restarts(),
        1,
        "the instance is kept after its one restart"
    );
    let agents: Vec<u32> = probe.predict(1).unwrap().iter().map(|f| f.agent).collect();
    assert_eq!(agents, (1..10).collect::<Vec<_>>(), "everything learned is still there");
    healthy(&probe);
}

#[test]
fn oversize_results_are_refused_with_a_typed_error() {
    let (engine, _c) = engine();
    let limits = SandboxLimits {
        call_deadline: Duration::from_secs(2),
        ..SandboxLimits::default()
    };
    let cued = |cue: &str| {
        let config = SlotConfig::new("test/probe").with_limits(limits.clone());
        let probe = PolicyHandle::start(&engine, load(&engine, "probe"), config).unwrap();
        probe.observe(&[register(1, cue, 1)]).unwrap();
        probe
    };
    let too_large = |e: PolicyError, expected: &str, limit: usize| match e {
        PolicyError::ResultTooLarge { what, len, max, .. } => {
            assert_eq!((what, max), (expected, limit));
            assert!(len > max);
        }
        other => panic!("{other}"),
    };

    let probe = cued(PROBE_ACT_FLOOD_AGENT);
    let err = probe.act().unwrap_err();
    assert!(err.to_string().contains("act"), "{err}");
    too_large(err, "side effects", agentrt_runtime::results::MAX_SIDE_EFFECTS);
    assert_eq!(probe.metrics().errors("too_large"), 1);
    healthy(&probe);

    let probe = cued(PROBE_LONG_STRING_AGENT);
    too_large(
        probe.act().unwrap_err(),
        "string bytes",
        agentrt_runtime::results::MAX_SIDE_EFFECT_STRING_BYTES,
    );

    let probe = cued(PROBE_PREDICT_FLOOD_AGENT);
    too_large(
        probe.predict(1).unwrap_err(),
        "forecasts",
        agentrt_runtime::results::MAX_FORECASTS,
    );

    let probe = cued(PROBE_SNAPSHOT_FLOOD_AGENT);
    too_large(
        probe.snapshot().unwrap_err(),
        "snapshot bytes",
        agentrt_runtime::results::MAX_SNAPSHOT_BYTES,
    );
}

#[test]
fn the_memory_gauge_reports_the_instance_memory() {
    let (probe, _e, _c) = probe_with(SandboxLimits::default());
    healthy(&probe);
    let bytes = probe.metrics().memory_bytes();
    assert!(bytes >= 64 << 10, "at least one Wasm page: {bytes}");
    assert!(bytes <= SandboxLimits::default().memory_bytes as u64);
}

fn swapped_to_a_failing_probe(rollback_window: Duration) -> (PolicyHandle, Vec<u8>, tempfile::TempDir) {
    let (engine, cache) = engine();
    let config = SlotConfig {
        breaker: agentrt_runtime::BreakerConfig {
            failure_threshold: 3,
            ..agentrt_runtime::BreakerConfig::default()
        },
        rollback_window,
        ..SlotConfig::new("test/slot")
    };
    let slot = PolicyHandle::start(&engine, load(&engine, "lru"), config).unwrap();
    slot.observe(&[register(1, "a", 11), register(2, "b", 12)]).unwrap();
    let learned = slot.snapshot().unwrap();
    // A new version is swapped in (here the probe, as a different policy: from scratch) …
    slot.swap_fresh(load(&engine, "probe")).unwrap();
    assert!(slot.component().name().ends_with("probe.wasm"));
    // … and fails on every call it gets, right after the swap.
    for _ in 0..3 {
        let err = slot.observe(&[register(3, PROBE_TRAP_AGENT, 13)]).unwrap_err();
        assert!(matches!(err, PolicyError::Trap { .. }), "{err}");
    }
    (slot, learned, cache)
}

#[test]
fn a_swap_whose_new_component_keeps_failing_is_rolled_back_with_the_old_state() {
    let (slot, learned, _c) = swapped_to_a_failing_probe(Duration::from_secs(60));
    assert_eq!(slot.metrics().rollbacks(), 1);
    assert!(
        slot.component().name().ends_with("lru.wasm"),
        "{}",
        slot.component().name()
    );
    assert_eq!(slot.info().name, "lru");
    assert!(
        !slot.metrics().circuit_open(),
        "the old component runs; nothing is suspended"
    );
    assert_eq!(slot.snapshot().unwrap(), learned, "with the state it had at the swap");
    slot.observe(&[register(4, "d", 14)]).unwrap();
}

#[test]
fn past_the_rollback_window_a_failing_component_is_suspended_not_rolled_back() {
    let (slot, _, _c) = swapped_to_a_failing_probe(Duration::ZERO);
    assert_eq!(slot.metrics().rollbacks(), 0);
    assert!(slot.component().name().ends_with("probe.wasm"));
    assert!(slot.metrics().circuit_open());
}

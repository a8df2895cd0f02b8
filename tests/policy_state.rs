//! State survives what it must: snapshot → new instance → restore, a restart after a failure
//! (from the last checkpoint), and a hot swap to a new component.

use std::sync::Arc;

use agentrt_runtime::PolicyError;
use agentrt_tests::*;

#[test]
fn snapshot_restore_into_a_new_instance_preserves_state() {
    let (engine, _cache) = engine();
    let a = start(&engine, "probe", &[]);
    a.observe(&[register(1, "planner", 11), register(2, "coder", 22)])
        .unwrap();
    let state = a.snapshot().unwrap();

    let b = start(&engine, "probe", &[]);
    assert!(b.predict(1).unwrap().is_empty());
    b.restore(&state).unwrap();
    let (fa, fb) = (a.predict(3).unwrap(), b.predict(3).unwrap());
    assert_eq!(fa, fb);
    assert_eq!(fb.len(), 2);

    // A snapshot from another policy is refused with the policy's own message.
    let err = b.restore(b"not a probe snapshot").unwrap_err();
    assert!(
        matches!(&err, PolicyError::Rejected { message, .. } if message.contains("not from this policy")),
        "{err}"
    );
}

#[test]
fn a_restart_after_a_failure_resumes_from_the_last_checkpoint_and_replays_what_came_since() {
    let (engine, _cache) = engine();
    let probe = start(&engine, "probe", &[]);
    probe.observe(&[register(1, "planner", 11)]).unwrap();
    probe.checkpoint().unwrap();
    // After the checkpoint: kept in the slot's journal and replayed on the restart.
    probe.observe(&[register(2, "coder", 22)]).unwrap();

    probe.predict(PROBE_PANIC_HORIZON).unwrap_err();
    let after = probe.predict(1).unwrap();
    assert_eq!(after.iter().map(|f| f.agent).collect::<Vec<_>>(), vec![1, 2]);
    assert_eq!(probe.metrics().restarts(), 1);
}

#[test]
fn hot_swap_carries_state_and_a_failed_swap_keeps_the_old_policy() {
    let (engine, _cache) = engine();
    let probe = start(&engine, "probe", &[]);
    probe
        .observe(&[register(1, "planner", 11), register(2, "coder", 22)])
        .unwrap();

    // A new version (here: the same bytes loaded again) takes over with the learned state.
    let next = Arc::new(engine.load_file(&component_path("probe")).unwrap());
    let report = probe.swap(next).unwrap();
    assert!(report.state_bytes > 0);
    assert_eq!(probe.predict(1).unwrap().len(), 2);
    assert_eq!(probe.metrics().swaps(), 1);
    assert_eq!(probe.metrics().last_swap_pause(), Some(report.paused));

    // The LRU keeps no state, so it refuses the probe's: the swap fails and the probe stays.
    let err = probe.swap(load(&engine, "lru")).unwrap_err();
    assert!(matches!(err, PolicyError::Rejected { .. }), "{err}");
    assert_eq!(probe.info().name, "probe");
    assert_eq!(probe.predict(1).unwrap().len(), 2);
}

#[test]
fn swap_under_concurrent_calls_loses_nothing() {
    let (engine, _cache) = engine();
    let probe = Arc::new(start(&engine, "probe", &[]));
    let next = load(&engine, "probe");
    let callers: Vec<_> = (0..2u32)
        .map(|t| {
            let probe = probe.clone();
            std::thread::spawn(move || {
                for i in 0..200u32 {
                    probe
                        .observe(&[register(t * 1000 + i, "a", 1)])
                        .expect("no call fails during a swap");
                }
            })
        })
        .collect();
    for _ in 0..5 {
        probe.swap(next.clone()).unwrap();
    }
    for c in callers {
        c.join().unwrap();
    }
    assert_eq!(
        probe.predict(1).unwrap().len(),
        400,
        "every event reached a live instance"
    );
}

//! `agentrt sim run` says when a replay proves nothing: by default it sizes the cache from the
//! trace, so the engine must evict and each policy must rank; given a cache that holds the whole
//! trace, it warns that every policy ties instead of printing a table that looks like a result.
//! Every table comes with what its columns mean, and Bélády is named the offline bound.

use std::path::Path;
use std::process::Command;

fn agentrt(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_agentrt"))
        .args(args)
        .output()
        .expect("running agentrt");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "agentrt {args:?}: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// The `evictions` column of `policy`'s row.
fn evictions(table: &str, policy: &str) -> u64 {
    let header: Vec<&str> = table
        .lines()
        .find(|l| l.starts_with("policy "))
        .expect("a header")
        .split_whitespace()
        .collect();
    // Multi-word headers ("hit %", "Δ pp", …) split in two: count from the right, where the
    // last five columns are single words.
    let from_right = header.len()
        - header
            .iter()
            .position(|h| *h == "evictions")
            .expect("an evictions column");
    let row: Vec<&str> = table
        .lines()
        .find(|l| l.starts_with(policy))
        .unwrap_or_else(|| panic!("no {policy} row:\n{table}"))
        .split_whitespace()
        .collect();
    row[row.len() - from_right].parse().expect("a count")
}

#[test]
fn a_replay_sizes_its_cache_from_the_trace_and_says_when_it_proves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("mtbench.jsonl");
    let trace = trace.to_str().unwrap();
    agentrt(&[
        "sim",
        "gen",
        "--workload",
        "mtbench",
        "--sessions",
        "30",
        "--out",
        trace,
    ]);
    assert!(Path::new(trace).exists());

    let fitted = agentrt(&["sim", "run", "--trace", trace, "--policies", "lru,belady"]);
    assert!(fitted.contains("sized from the trace: a third of its"), "{fitted}");
    assert!(evictions(&fitted, "lru") > 0, "{fitted}");
    assert!(!fitted.contains("! the cache never filled"), "{fitted}");
    assert!(fitted.contains("belady (offline)"), "{fitted}");
    assert!(
        fitted.contains("What the columns say:") && fitted.contains("  gap: "),
        "{fitted}"
    );

    let roomy = agentrt(&[
        "sim",
        "run",
        "--trace",
        trace,
        "--policies",
        "lru,belady",
        "--capacity-blocks",
        "10000000",
    ]);
    assert_eq!(evictions(&roomy, "lru"), 0, "{roomy}");
    assert!(roomy.contains("! the cache never filled"), "{roomy}");
}

//! `agentrt sim run` says when a replay proves nothing: by default it sizes the cache from the
//! trace, so the engine must evict and each policy must rank; given a cache that holds the whole
//! trace, it warns that every policy ties instead of printing a table that looks like a result.
//! Every table comes with what its columns mean, and Bélády is named the offline bound. It warns
//! when `--hints` asks for hints the trace does not carry. `sim table` talks while it works (a
//! line per replay when stderr is not a terminal), sums up every policy in its footer, and says
//! that `--quick` figures are not the headline's.

use std::path::Path;
use std::process::Command;

/// agentrt's stdout and stderr (stderr a pipe, not a terminal), failing on a failed run.
fn agentrt_said(args: &[&str]) -> (String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_agentrt"))
        .args(args)
        .output()
        .expect("running agentrt");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "agentrt {args:?}: {stdout}\n{stderr}");
    (stdout, stderr)
}

fn agentrt(args: &[&str]) -> String {
    agentrt_said(args).0
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

#[test]
fn hints_asked_of_a_trace_without_them_are_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let generated = dir.path().join("gsm8k.jsonl");
    let generated = generated.to_str().unwrap();
    agentrt(&[
        "sim",
        "gen",
        "--workload",
        "gsm8k",
        "--sessions",
        "20",
        "--out",
        generated,
    ]);
    // A generated trace closes each session at its task's end: nothing to warn about.
    let replay = |trace: &str| {
        agentrt_said(&[
            "sim",
            "run",
            "--trace",
            trace,
            "--policies",
            "lru,closed-first",
            "--hints",
            "closed",
        ])
        .1
    };
    let said = replay(generated);
    assert!(!said.contains("carries no lifecycle hints"), "{said}");
    // The same trace without its hints, as a trace recorded without a framework's word.
    let bare = dir.path().join("bare.jsonl");
    let lines: Vec<String> = std::fs::read_to_string(generated)
        .unwrap()
        .lines()
        .map(|line| {
            let mut request: serde_json::Value = serde_json::from_str(line).unwrap();
            request.as_object_mut().unwrap().remove("hints");
            request.to_string()
        })
        .collect();
    std::fs::write(&bare, lines.join("\n") + "\n").unwrap();
    let said = replay(bare.to_str().unwrap());
    assert!(
        said.contains("warning: --hints closed: the trace carries no lifecycle hints"),
        "{said}"
    );
}

#[test]
fn a_quick_table_off_a_terminal_says_each_replay_sums_up_every_policy_and_notes_it_is_not_the_headline() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("table");
    let (table, progress) = agentrt_said(&[
        "sim",
        "table",
        "--quick",
        "--workloads",
        "gsm8k",
        "--sweep",
        "0.5",
        "--policies",
        "lru,ttl,cachesage,belady",
        "--out",
        out.to_str().unwrap(),
    ]);
    // Two capacities × four policies, a line each, the last at 100 %.
    let lines: Vec<&str> = progress.lines().filter(|l| l.starts_with("sim: ")).collect();
    assert_eq!(lines.len(), 8, "{progress}");
    assert!(lines[7].starts_with("sim: 8/8 replays (100 %)"), "{progress}");
    // The footer sums up each policy but the baselines, on the workload it ran.
    let footer = table
        .split("Each policy against LRU")
        .nth(1)
        .unwrap_or_else(|| panic!("no footer:\n{table}"));
    for policy in ["ttl", "cachesage"] {
        let block = footer
            .split(&format!("\n  {policy}\n"))
            .nth(1)
            .unwrap_or_else(|| panic!("no {policy} in the footer:\n{footer}"));
        assert!(block.trim_start().starts_with("gsm8k "), "{footer}");
    }
    assert!(
        !footer.contains("\n  lru\n") && !footer.contains("\n  belady\n"),
        "{footer}"
    );
    assert!(table.contains("Note: --quick replays 1/8"), "{table}");
    let markdown = std::fs::read_to_string(out.join("table.md")).unwrap();
    assert!(markdown.contains("Note: --quick replays 1/8"), "{markdown}");
}

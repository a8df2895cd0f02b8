//! The figures, the tables and the notes under them.

use super::*;
use crate::audit::{Content, EvictionAudit};
use crate::prepare::PreparedTrace;
use crate::scheduler::RunResult;

#[test]
fn host_tier_figures_appear_only_when_a_host_tier_ran() {
    let plain = summarize(&[run("lru", 300)]);
    assert_eq!(host_table(&plain), "");
    let json = run_json("t", 10, 16, &plain);
    assert!(
        json["policies"]["lru"].get("host").is_none(),
        "JSON without a host tier is unchanged"
    );

    let mut r = run("lru", 300);
    r.host = Some(crate::offload::HostTierFigures {
        policy: "arc".to_string(),
        blocks: 40,
        hit_tokens: 200,
        loads: 2,
        loaded_blocks: 13,
        loaded_bytes: 13 << 21,
        load_wait_us: 6000.0,
        ..Default::default()
    });
    let with = summarize(&[r]);
    let h = with[0].1.host.as_ref().unwrap();
    assert_eq!((h.gpu_hit_rate, h.host_hit_rate), (0.3, 0.2));
    assert_eq!(
        h.recomputed_tokens, 500,
        "1000 prompt tokens − 300 GPU hits − 200 loaded"
    );
    assert_eq!(h.load_wait_ms_mean, 3.0);
    let table = host_table(&with);
    let row = table.lines().nth(1).unwrap();
    for figure in ["arc", "30.0", "20.0", "50.0", "500", "0.03"] {
        assert!(
            row.split_whitespace().any(|w| w == figure),
            "{figure} missing from {row:?}"
        );
    }
    let json = run_json("t", 10, 16, &with);
    assert_eq!(json["policies"]["lru"]["host"]["host_hit_tokens"], 200);
}

fn run(policy: &str, hit: u64) -> RunResult {
    RunResult {
        policy: policy.to_string(),
        prompt_tokens: 1000,
        hit_tokens: hit,
        output_tokens: 500,
        ttft_us: vec![1000.0, 3000.0, f64::NAN],
        turn_us: vec![2000.0, 4000.0, f64::NAN],
        makespan_us: 1e6,
        ..RunResult::default()
    }
}

#[test]
fn deltas_and_gap_are_relative_to_lru_and_belady() {
    let s = summarize(&[run("lru", 400), run("cachesage", 600), run("belady", 800)]);
    let cs = &s[1].1;
    assert!((cs.hit_rate - 0.6).abs() < 1e-12);
    assert!((cs.delta_pp_vs_lru.unwrap() - 20.0).abs() < 1e-9);
    assert!((cs.gap_closed.unwrap() - 0.5).abs() < 1e-9);
    assert!((cs.ttft_ms_mean - 2.0).abs() < 1e-9);
    assert_eq!(cs.ttft_ms_p99, 3.0);
    assert_eq!(cs.throughput_tok_s, 500.0);
    let json = run_json("t.jsonl", 100, 16, &s);
    assert_eq!(json["policies"]["belady"]["hit_rate"], 0.8);
    assert!(table(&s).contains("cachesage"));
}

#[test]
fn a_replay_that_proves_nothing_says_why() {
    let with = |policy: &str, hit: u64, evictions: u64, events: u64, score_calls: u64| {
        let mut r = run(policy, hit);
        r.evictions = evictions;
        r.policy_stats.events = events;
        r.policy_stats.score_calls = score_calls;
        r
    };
    // The cache never filled: one note, whatever else.
    let idle = summarize(&[with("lru", 400, 0, 90, 0), with("belady", 400, 0, 0, 0)]);
    let notes = proves_nothing_notes(&idle);
    assert!(
        notes.starts_with("! the cache never filled") && notes.lines().count() == 1,
        "{notes}"
    );
    // It filled, but a Wasm policy never ranked, and LRU is at the bound.
    let flat = summarize(&[
        with("lru", 400, 50, 90, 12),
        with("mine", 400, 50, 90, 0),
        with("belady", 400, 40, 0, 0),
    ]);
    let notes = proves_nothing_notes(&flat);
    assert!(
        notes.contains("! mine ranked nothing: 0 score calls in 50 evictions"),
        "{notes}"
    );
    assert!(notes.contains("! LRU is within 0.1 pp of the offline bound"), "{notes}");
    assert!(!notes.contains("! lru ") && !notes.contains("! belady"), "{notes}");
    assert!(table(&flat).contains(&notes), "the table carries the notes");
    // A replay that compares what it meant to: no note.
    let fine = summarize(&[with("lru", 400, 50, 90, 12), with("belady", 600, 40, 0, 0)]);
    assert_eq!(proves_nothing_notes(&fine), "");
    let row = table(&fine)
        .lines()
        .find(|l| l.starts_with("belady (offline)"))
        .map(str::to_string);
    assert!(
        row.is_some_and(|r| r.split_whitespace().any(|w| w == "–")),
        "Bélády ranks nothing: –"
    );
}

#[test]
fn a_policy_that_failed_has_no_figures_a_loud_note_and_fails_the_run() {
    let mut broken = run("broken", 400);
    broken.policy_stats = crate::policies::PolicyStats {
        score_calls: 816,
        fallbacks: 816,
        failed_calls: 7,
        failures: [("score fuel".to_string(), 5), ("observe trap".to_string(), 2)].into(),
        restarts: 6,
        calls_skipped: 1600,
        gave_up: true,
        ..Default::default()
    };
    let s = summarize(&[run("lru", 400), broken]);
    let text = table(&s);
    let header: Vec<&str> = text.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header[header.len() - 6..],
        ["µs/item", "evictions", "rankings", "fallback", "failed", "restarts"]
    );
    let row = text.lines().find(|l| l.starts_with("broken")).unwrap();
    assert!(row.contains("FAILED: no figures"), "{row}");
    assert!(!row.contains("75.0"), "no hit rate for a failed run: {row}");
    let lru_row: Vec<&str> = text
        .lines()
        .find(|l| l.starts_with("lru"))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(lru_row[lru_row.len() - 3..], ["0", "0", "0"]);
    let note = text.lines().find(|l| l.starts_with("! broken")).expect("a note");
    assert!(
        note.contains("FAILED — 7 failed calls (observe trap ×2, score fuel ×5), 6 restarts"),
        "{note}"
    );
    assert!(note.contains("816 of 816 rankings fell back to LRU"), "{note}");
    assert!(note.contains("gave up on it"), "{note}");
    assert!(!text.contains("! lru"), "no note for a healthy policy");
    assert!(markdown_rows("w", &s).contains("| w | broken | failed (no figures) |"));
    let error = failed_replays(&s).unwrap_err().to_string();
    assert!(
        error.contains("1 replay(s) failed") && error.contains("broken (observe trap ×2, score fuel ×5)"),
        "{error}"
    );
    assert!(error.contains("--policy-fuel"), "the error names the fix: {error}");
    assert!(failed_replays(&s[..1]).is_ok(), "a healthy run is no failure");
    let json = run_json("t", 1, 16, &s);
    let broken = &json["policies"]["broken"];
    assert_eq!(broken["failures"]["score fuel"], 5);
    assert_eq!(
        (broken["restarts"].as_u64(), broken["failed"].as_bool()),
        (Some(6), Some(true))
    );
}

#[test]
fn the_regret_table_breaks_regrets_down_by_content_and_agent() {
    use crate::audit::Eviction;
    let text = r#"{"session": "s1", "agent": "coder", "after_ms": 0, "prompt": [{"seg": "sys/coder", "tokens": 16}], "output_tokens": 1}"#;
    let trace = PreparedTrace::new(&crate::trace::Trace::parse(text).unwrap(), 16, false);
    let eviction = |content, requested_again_us| Eviction {
        at_us: 1_000,
        hash: 1,
        agent: 1,
        session: 1,
        position: 0,
        content,
        requested_again_us,
    };
    let audit = EvictionAudit {
        policy: "lru".into(),
        block_size: 16,
        evictions: vec![
            eviction(Content::Session, Some(3_000)),
            eviction(Content::Session, None),
            eviction(Content::Shared, Some(5_000)),
        ],
    };
    let text = regret_table(&trace, &[&audit]);
    let row = text.lines().find(|l| l.starts_with("lru")).unwrap();
    let cells: Vec<&str> = row.split_whitespace().collect();
    // policy, evicted, regretted, %, tokens, anchor, shared, session, median gap (ms)
    assert_eq!(cells, ["lru", "3", "2", "66.7", "32", "0/0", "1/1", "1/2", "4"]);
    let coder = text.lines().find(|l| l.starts_with("coder")).unwrap();
    assert_eq!(coder.split_whitespace().collect::<Vec<_>>(), ["coder", "2"]);

    let json = serde_json::to_value(audit.summary()).unwrap();
    assert_eq!(json["regretted_tokens"], 32);
    assert_eq!(
        json["by_content"]["session"],
        serde_json::json!({"evicted": 2, "regretted": 1})
    );
    assert_eq!(json["median_regret_gap_ms"], 4.0);
}

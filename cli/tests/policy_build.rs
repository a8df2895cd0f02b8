//! A policy written outside any checkout, the whole way: in a temporary folder outside the
//! repository, for each of the five languages, `agentrt policy new` (a project with its README and
//! the SDK vendored in it) → `agentrt policy build --test` (toolchains installed on first use; the
//! component, the project's own tests where it lives, then the conformance kit passing every
//! property without a warning); then the Python one joins `agentrt sim table` beside LRU and
//! CacheSage by its file path and gets its own row. (The full `sim table --quick`, timed:
//! `sdk/scripts/standalone-walk.sh`.)
//!
//! One test for the whole path, to keep CI's time down. A language whose toolchain cannot be
//! installed is skipped, saying why, except under `AGENTRT_REQUIRE_LANGS` (CI), where it fails —
//! xtask's rule. Rust and Python are always required. The Rust project builds into
//! `CARGO_TARGET_DIR` when the test runs with one (as `cargo` would there), else its own `target/`.

use std::path::Path;
use std::process::{Command, Output};

const LANGUAGES: [&str; 5] = ["rust", "python", "js", "c", "go"];
/// Languages that are never skipped.
const REQUIRED: [&str; 2] = ["rust", "python"];

fn require_langs() -> bool {
    std::env::var("AGENTRT_REQUIRE_LANGS").is_ok_and(|v| !v.is_empty() && v != "0")
}

fn agentrt(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentrt"))
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("agentrt {args:?}: {e}"))
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn a_policy_outside_the_checkout_is_made_built_tested_and_joins_the_table_in_every_language() {
    let scratch = tempfile::Builder::new().prefix("agentrt-outside-").tempdir().unwrap();
    let outside = scratch.path().canonicalize().unwrap();
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize().unwrap();
    assert!(
        !outside.starts_with(&checkout),
        "{} is inside the checkout",
        outside.display()
    );

    let (mut passed, mut skipped) = (Vec::new(), Vec::new());
    for lang in LANGUAGES {
        let name = format!("mine-{lang}");
        let made = agentrt(&outside, &["policy", "new", &name, "--lang", lang]);
        assert!(made.status.success(), "{lang}: policy new\n{}", text(&made));
        let project = outside.join(&name);
        assert!(
            project.join("agentrt-sdk/VERSION").is_file(),
            "{lang}: the SDK is vendored"
        );

        assert!(
            project.join("README.md").is_file(),
            "{lang}: the project has its README"
        );
        let built = agentrt(&project, &["policy", "build", "--test"]);
        if !built.status.success() {
            let report = text(&built);
            let optional = !REQUIRED.contains(&lang) && !require_langs();
            assert!(
                optional && report.contains("toolchain is needed"),
                "{lang}: policy build\n{report}"
            );
            eprintln!("skipped {lang}: its toolchain is missing\n{report}");
            skipped.push(lang);
            continue;
        }
        let wasm = project.join("target").join(format!("{name}.wasm"));
        let report = String::from_utf8_lossy(&built.stdout);
        // Every language's SDK builds the current line (wit/README.md).
        assert!(
            report.contains(&format!("agentrt:policy@0.5.0): {}", wasm.display())),
            "{lang}: says where it went and the contract it speaks: {report}"
        );
        assert!(
            report.contains(&format!("tested {name}: its own tests pass")),
            "{lang}: the project's own tests ran where it lives:\n{}",
            text(&built)
        );
        assert!(
            report
                .lines()
                .any(|l| l.starts_with("pass  info") && l.ends_with(&format!(" {name} 0.1.0"))),
            "{lang}: the component is the skeleton:\n{report}"
        );
        assert!(
            report.contains(" passed, 0 failed, 0 not run") && !report.contains("warn  "),
            "{lang}:\n{report}"
        );
        passed.push(lang);
    }
    eprintln!("passed: {passed:?}; skipped: {skipped:?}");

    // The new policy beside the built-in ones, by path, on one quick workload and capacity (the
    // demo's `--quick` sizes; all six workloads take minutes in a debug build).
    let table = agentrt(
        &outside,
        &[
            "sim",
            "table",
            "--quick",
            "--workloads",
            "gsm8k",
            "--sweep",
            "0.5",
            "--policies",
            "lru,cachesage,./mine-python/target/mine-python.wasm",
            "--out",
            "table",
        ],
    );
    assert!(table.status.success(), "sim table\n{}", text(&table));
    let stdout = String::from_utf8_lossy(&table.stdout);
    let rows: Vec<&str> = stdout
        .lines()
        // The table's rows start at the margin; the footer's per-policy lines are indented.
        .filter(|l| !l.starts_with(char::is_whitespace))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|first| ["lru", "cachesage", "mine-python"].contains(first))
        .collect();
    // The headline table: one row per policy, the new one named by its file.
    assert_eq!(rows, ["lru", "cachesage", "mine-python"], "{stdout}");
    // results.json has it at both capacities (the headline and the 0.5 sweep).
    let results = std::fs::read_to_string(outside.join("table/results.json")).unwrap();
    assert!(
        results.matches("\"mine-python\"").count() >= 2,
        "results.json: {results}"
    );
}

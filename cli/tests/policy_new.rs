//! Every `agentrt policy new` skeleton builds and passes `agentrt policy test`: the skeletons are
//! written by the binary into the `policies/` folder of a scratch tree laid out like this checkout
//! (its `sdk/` and `wit/` are copies of this one's, its Cargo.toml names the Rust skeleton as a
//! member), built there by `cargo xtask build-policies --root`, and each component is run through
//! the conformance kit, which must pass every property.
//!
//! A language whose toolchain is missing leaves a `<name>.skipped` note instead of a component
//! (xtask's rule): it is skipped with that reason, except under `AGENTRT_REQUIRE_LANGS` (CI),
//! where it fails — as does xtask itself. Rust and Python are always required.
//!
//! The scratch tree lives in the target's tmp folder and keeps its `target/` between runs (the
//! first build of the Rust skeleton compiles the SDK's dependencies for wasm32, about a minute).

use std::path::{Path, PathBuf};
use std::process::Command;

const LANGUAGES: [&str; 5] = ["rust", "python", "js", "c", "go"];
/// Languages that are never skipped.
const REQUIRED: [&str; 2] = ["rust", "python"];

fn checkout() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize().unwrap()
}

fn require_langs() -> bool {
    std::env::var("AGENTRT_REQUIRE_LANGS").is_ok_and(|v| !v.is_empty() && v != "0")
}

fn run(command: &mut Command) -> String {
    let out = command.output().unwrap_or_else(|e| panic!("{command:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{command:?}: exit {:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// A copy of `from` without caches (links would not do: componentize-js reads only files under
/// the tree it builds in).
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap();
        if path.is_dir() {
            if !matches!(name.to_str(), Some("__pycache__" | "node_modules" | "target")) {
                copy_tree(&path, &to.join(name));
            }
        } else {
            std::fs::copy(&path, to.join(name)).unwrap();
        }
    }
}

/// A tree `xtask build-policies --root` can build: copies of this checkout's `sdk/` and `wit/`,
/// its lock file, and a Cargo.toml that is this workspace's with the Rust skeleton as the only
/// policy member (the workspace's shared versions and the `wasm` profile come with it).
fn scratch_tree(checkout: &Path, rust_skeleton: &str) -> PathBuf {
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join("policy-new-skeletons");
    let _ = std::fs::remove_dir_all(scratch.join("policies"));
    std::fs::create_dir_all(scratch.join("policies")).unwrap();
    for tree in ["sdk", "wit"] {
        let path = scratch.join(tree);
        let _ = std::fs::remove_dir_all(&path);
        copy_tree(&checkout.join(tree), &path);
    }
    std::fs::copy(checkout.join("Cargo.lock"), scratch.join("Cargo.lock")).unwrap();
    let manifest = std::fs::read_to_string(checkout.join("Cargo.toml")).unwrap();
    let start = manifest.find("members = [").expect("the workspace lists its members");
    let end = start + manifest[start..].find(']').unwrap() + 1;
    let members = format!("members = [\"sdk\", \"policies/{rust_skeleton}\"]");
    std::fs::write(
        scratch.join("Cargo.toml"),
        format!("{}{members}{}", &manifest[..start], &manifest[end..]),
    )
    .unwrap();
    scratch
}

#[test]
fn every_skeleton_builds_and_passes_the_conformance_kit() {
    let checkout = checkout();
    let agentrt = env!("CARGO_BIN_EXE_agentrt");
    let names: Vec<String> = LANGUAGES.iter().map(|lang| format!("skeleton-{lang}")).collect();
    let scratch = scratch_tree(&checkout, &names[0]);
    for (lang, name) in LANGUAGES.iter().zip(&names) {
        run(Command::new(agentrt)
            .args(["policy", "new", name, "--lang", lang, "--dir"])
            .arg(scratch.join("policies")));
    }
    // xtask from this checkout, built into this build's target folder (the one `cargo test` was
    // given, inherited through CARGO_TARGET_DIR); the skeletons go to the scratch tree's own.
    run(Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(&checkout)
        .args(["run", "--quiet", "-p", "xtask", "--", "build-policies", "--root"])
        .arg(&scratch));
    let components = scratch.join("target/components");
    let (mut passed, mut skipped) = (Vec::new(), Vec::new());
    for (lang, name) in LANGUAGES.iter().zip(&names) {
        let wasm = components.join(format!("{name}.wasm"));
        if !wasm.is_file() {
            let note = components.join(format!("{name}.skipped"));
            let reason = std::fs::read_to_string(&note)
                .unwrap_or_else(|_| panic!("{lang}: neither {} nor a note saying why", wasm.display()));
            assert!(
                !require_langs() && !REQUIRED.contains(lang),
                "{lang}: the skeleton was not built: {reason}"
            );
            eprintln!("skipped {lang}: {reason}");
            skipped.push(*lang);
            continue;
        }
        // Exit 0 is every property passing; the lines say so too, and that this is the skeleton.
        let report = run(Command::new(agentrt).args(["policy", "test"]).arg(&wasm));
        assert!(
            report
                .lines()
                .any(|l| l.starts_with("pass  info") && l.ends_with(&format!(" {name} 0.1.0"))),
            "{lang}: the skeleton's info names it:\n{report}"
        );
        assert!(
            report.contains(" passed, 0 failed, 0 not run") && !report.lines().any(|l| l.starts_with("FAIL")),
            "{lang}:\n{report}"
        );
        passed.push(*lang);
    }
    eprintln!(
        "passed: {}; skipped: {}",
        passed.join(", "),
        if skipped.is_empty() {
            "none".to_string()
        } else {
            skipped.join(", ")
        }
    );
    assert!(passed.len() >= REQUIRED.len());
}

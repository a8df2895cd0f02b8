//! Build orchestration: `cargo xtask <command>`.
//!
//! - `build-policies` — build every policy component (policies/*, tests/guests/*) into
//!   `target/components/<name>.wasm`: Rust crates as below, Python ones (`policies/*/app.py`) with
//!   componentize-py, which it installs from PyPI on first use (needs `python3`).
//! - `test` — build the components, run every test in the workspace, the Python policies' and
//!   the Python SDK's native tests (pytest), then the vLLM adapter's Python tests (pytest in `.venv-vllm`, made by `adapters/vllm/setup-venv.sh`; skipped, saying
//!   so, without it).
//! - `demo` — build the components and the `agentrt` binary, run its demo, then the short version
//!   of the evaluation table (`agentrt sim table --quick`, plots in `target/sim-quick/`).
//! - `bench` — build the components, then run the criterion benchmarks.
//!
//! Why `wasm32-unknown-unknown` + component encoding rather than `wasm32-wasip2`: the result imports
//! only `agentrt:policy/host` — no WASI surface at all, so a policy has no ambient capability even
//! in principle — and it is half the size (docs/background.md §9: 28 KB vs 56 KB for the same policy).

mod components;
mod python_policies;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

const USAGE: &str = "usage: cargo xtask <build-policies | test | demo | bench> [extra args for the underlying command]";

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let command = args.next().unwrap_or_default();
    let rest: Vec<String> = args.collect();
    let root = workspace_root();
    match command.as_str() {
        "build-policies" => components::build_all(&root).map(|_| ()),
        "test" => {
            components::build_all(&root)?;
            run(Command::new(cargo())
                .current_dir(&root)
                .args(["test", "--workspace"])
                .args(&rest))?;
            python_policies::test_all(&root)?;
            vllm_adapter_tests(&root)
        }
        "demo" => {
            components::build_all(&root)?;
            let agentrt = |args: &[&str]| {
                let mut cmd = Command::new(cargo());
                cmd.current_dir(&root)
                    .args(["run", "--release", "--quiet", "-p", "agentrt", "--"])
                    .args(args);
                cmd
            };
            // What the policies observe, score, predict and act on, on a short synthetic trace …
            run(agentrt(&["demo"]).args(&rest))?;
            // … then the evaluation's short version: five workloads, every policy, table + plots.
            run(&mut agentrt(&["sim", "table", "--quick", "--out", "target/sim-quick"]))
        }
        "bench" => {
            components::build_all(&root)?;
            run(Command::new(cargo())
                .current_dir(&root)
                .args(["bench", "--workspace"])
                .args(&rest))
        }
        _ => bail!("{USAGE}"),
    }
}

/// The vLLM plugin's tests and the real-vLLM end-to-end tests, in the venv that has vLLM.
fn vllm_adapter_tests(root: &Path) -> Result<()> {
    let python = root.join(".venv-vllm/bin/python");
    if !python.exists() {
        eprintln!("xtask: SKIPPED the vLLM adapter tests: no .venv-vllm (run `bash adapters/vllm/setup-venv.sh`)");
        return Ok(());
    }
    let status = Command::new(&python)
        .current_dir(root)
        .args(["-m", "pytest", "adapters/vllm/tests", "-q", "-rs"])
        .status()
        .context("starting pytest")?;
    // Exit 5 means pytest collected nothing (every module skipped itself): not a failure.
    match status.code() {
        Some(0) | Some(5) => Ok(()),
        _ => bail!("the vLLM adapter tests failed ({status})"),
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string())
}

/// Run a command, inheriting stdio, and fail with the command line if it fails.
fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().with_context(|| format!("starting {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed with {status}");
    }
    Ok(())
}

//! Build orchestration: `cargo xtask <command>`.
//!
//! - `build-policies` — build every policy component (policies/*, tests/guests/*) into
//!   `<target>/components/<name>.wasm`: Rust crates as below, Python ones (`policies/*/app.py`) with
//!   componentize-py, which it installs from PyPI on first use (needs `python3`), then JavaScript,
//!   C and Go ones (their modules). `--root DIR` builds another tree laid out like this one into
//!   `DIR/target`.
//! - `test` — build the components, run every test in the workspace, the Python policies' and
//!   the Python SDK's native tests (pytest), the lifecycle-hint package's tests in each venv that has
//!   a framework it hooks ([`hints_sdk`]: `.venv-vllm` for LangGraph, `~/.cache/agentrt/venv-agents`
//!   for the OpenAI Agents SDK and AutoGen; skipped, saying so, without them), then the vLLM adapter's Python tests (pytest in `.venv-vllm`, made by `adapters/vllm/setup-venv.sh`; skipped, saying
//!   so, without it), then the SGLang adapter's (pytest in `$AGENTRT_SGLANG_VENV`, default
//!   `~/.cache/agentrt/venv-sglang`, made by `adapters/sglang/setup-venv.sh`; skipped, saying so,
//!   without it).
//! - `demo` — build the components and the `agentrt` binary, run its demo, then the short version
//!   of the evaluation table (`agentrt sim table --quick`, plots in `<target>/sim-quick/`).
//! - `bench` — build the components, then run the criterion benchmarks.
//! - `dist` — what an operator deploys, into `<target>/dist/`: the release `agentrt`, the policy
//!   components beside it and the vLLM plugin's wheel ([`dist`]).
//!
//! `<target>` is `CARGO_TARGET_DIR` (relative to the workspace root when relative), `target` by
//! default ([`workspace`]). Every command xtask starts is told it, and `AGENTRT_COMPONENTS_DIR`,
//! so that tests, the demo and the vLLM tests load the components xtask just built.
//!
//! How each language is built, and its toolchain installed, is the crate `agentrt-policy-build`
//! (sdk/build), which `agentrt policy build` uses too; xtask only says what to build where.

mod components;
mod dist;
mod hints_sdk;
mod workspace;

use agentrt_policy_build::{c, go, js, python, run};

use anyhow::{bail, Context, Result};

use crate::workspace::Workspace;

const USAGE: &str =
    "usage: cargo xtask <build-policies [--root DIR] | test | demo | bench | dist> [extra args for the underlying command]";

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let command = args.next().unwrap_or_default();
    let rest: Vec<String> = args.collect();
    let workspace = Workspace::from_environment();
    match command.as_str() {
        "build-policies" => match rest.as_slice() {
            [] => components::build_all(&workspace).map(|_| ()),
            // Another tree laid out like this one (wit/, sdk/, policies/, a Cargo.toml naming its
            // Rust policies), built into its own target folder: host/cli/tests/policy_new.rs builds
            // `agentrt policy new` skeletons this way.
            [flag, root] if flag == "--root" => {
                let root = std::path::PathBuf::from(root);
                let target = root.join("target");
                components::build_all(&Workspace::new(root, Some(target.as_os_str()))).map(|_| ())
            }
            _ => bail!("{USAGE}"),
        },
        "test" => {
            components::build_all(&workspace)?;
            run(workspace.command(cargo()).args(["test", "--workspace"]).args(&rest))?;
            let tree = workspace.tree();
            python::test_all(&tree)?;
            js::test_all(&tree)?;
            c::test_all(&tree)?;
            go::test_all(&tree)?;
            hints_sdk::test_all(&workspace)?;
            vllm_adapter_tests(&workspace)?;
            sglang_adapter_tests(&workspace)
        }
        "demo" => {
            components::build_all(&workspace)?;
            let agentrt = |args: &[&str]| {
                let mut cmd = workspace.command(cargo());
                cmd.args(["run", "--release", "--quiet", "-p", "agentrt", "--"])
                    .args(args);
                cmd
            };
            // What the policies observe, score, predict and act on, on a short synthetic trace …
            run(agentrt(&["demo"]).args(&rest))?;
            // … then the evaluation's short version: five workloads, every policy, table + plots.
            let out = workspace.target.join("sim-quick");
            run(agentrt(&["sim", "table", "--quick", "--out"]).arg(out))
        }
        "dist" if rest.is_empty() => dist::dist(&workspace).map(|_| ()),
        "bench" => {
            components::build_all(&workspace)?;
            run(workspace.command(cargo()).args(["bench", "--workspace"]).args(&rest))
        }
        _ => bail!("{USAGE}"),
    }
}

/// The vLLM plugin's tests and the real-vLLM end-to-end tests, in the venv that has vLLM.
fn vllm_adapter_tests(workspace: &Workspace) -> Result<()> {
    let python = workspace.root.join(".venv-vllm/bin/python");
    if !python.exists() {
        eprintln!("xtask: SKIPPED the vLLM adapter tests: no .venv-vllm (run `bash adapters/vllm/setup-venv.sh`)");
        return Ok(());
    }
    // The end-to-end tests run the plugin as operators install it: the wheel `dist` builds.
    let wheels = workspace.target.join("dist-test-wheel");
    let _ = std::fs::remove_dir_all(&wheels);
    std::fs::create_dir_all(&wheels)?;
    let wheel = dist::build_wheel(workspace, &wheels)?;
    let status = workspace
        .command(&python)
        .args(["-m", "pytest", "adapters/vllm/tests", "-q", "-rs"])
        .env("AGENTRT_VLLM_WHEEL", &wheel)
        .status()
        .context("starting pytest")?;
    // Exit 5 means pytest collected nothing (every module skipped itself): not a failure.
    match status.code() {
        Some(0) | Some(5) => Ok(()),
        _ => bail!("the vLLM adapter tests failed ({status})"),
    }
}

/// The SGLang plugin's tests against SGLang's real radix cache, in the venv that has SGLang's
/// Python code (`adapters/sglang/setup-venv.sh`: `$AGENTRT_SGLANG_VENV`, default
/// `~/.cache/agentrt/venv-sglang`).
fn sglang_adapter_tests(workspace: &Workspace) -> Result<()> {
    let venv = match std::env::var_os("AGENTRT_SGLANG_VENV") {
        Some(dir) => std::path::PathBuf::from(dir),
        None => match std::env::var_os("HOME") {
            Some(home) => std::path::PathBuf::from(home).join(".cache/agentrt/venv-sglang"),
            None => {
                eprintln!("xtask: SKIPPED the SGLang adapter tests: neither AGENTRT_SGLANG_VENV nor HOME is set");
                return Ok(());
            }
        },
    };
    let python = venv.join("bin/python");
    if !python.exists() {
        eprintln!(
            "xtask: SKIPPED the SGLang adapter tests: no venv at {} (run `bash adapters/sglang/setup-venv.sh`)",
            venv.display()
        );
        return Ok(());
    }
    let status = workspace
        .command(&python)
        .args([
            "-m",
            "pytest",
            "adapters/sglang/tests",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
        ])
        .status()
        .context("starting pytest")?;
    // Exit 5 means pytest collected nothing (every module skipped itself): not a failure.
    match status.code() {
        Some(0) | Some(5) => Ok(()),
        _ => bail!("the SGLang adapter tests failed ({status})"),
    }
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string())
}

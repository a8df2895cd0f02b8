//! Build orchestration: `cargo xtask <command>`.
//!
//! - `build-policies [--langs L]` — build the policy components (policies/*, tests/guests/*) into
//!   `<target>/components/<name>.wasm`: Rust crates as below, Python ones (`policies/*/app.py`) with
//!   componentize-py, which it installs from PyPI on first use (needs `python3`), then JavaScript,
//!   C and Go ones (their modules); `--langs rust,python` builds only those ([`components`]).
//!   `--root DIR` builds another tree laid out like this one into `DIR/target`.
//! - `test` — build the components, run every test in the workspace, the Python policies' and
//!   the Python SDK's native tests (pytest), the lifecycle-hint package's tests in each venv that has
//!   a framework it hooks ([`hints_sdk`]: `.venv-vllm` for LangGraph, `~/.cache/agentrt/venv-agents`
//!   for the OpenAI Agents SDK and AutoGen, `venv-crewai` and `venv-metagpt`; skipped, saying so,
//!   without them), then the vLLM adapter's Python tests (pytest in `.venv-vllm`, made by `adapters/vllm/setup-venv.sh`; skipped, saying
//!   so, without it), then the SGLang adapter's (pytest in `$AGENTRT_SGLANG_VENV`, default
//!   `~/.cache/agentrt/venv-sglang`, made by `adapters/sglang/setup-venv.sh`; skipped, saying so,
//!   without it).
//! - `demo` — build the Rust components and the release `agentrt` without `serve` and `policy
//!   build` (cargo features), run its demo, then the short version of the evaluation table
//!   (`agentrt sim table --quick`, plots in `<target>/sim-quick/`); each step said and timed
//!   ([`steps`]).
//! - `bench` — build the components, then run the criterion benchmarks.
//! - `dist [--langs L]` — what an operator deploys, into `<target>/dist/`: the release `agentrt`,
//!   the policy components beside it and the wheels of the vLLM plugin and the hint package
//!   ([`dist`]).
//!
//! `<target>` is `CARGO_TARGET_DIR` (relative to the workspace root when relative), `target` by
//! default ([`workspace`]). Every command xtask starts is told it, and `AGENTRT_COMPONENTS_DIR`,
//! so that tests, the demo and the vLLM tests load the components xtask just built.
//!
//! How each language is built, and its toolchain installed, is the crate `agentrt-policy-build`
//! (sdk/build), which `agentrt policy build` uses too; xtask only says what to build where.
//!
//! ## Modules in detail
//!
//! `cargo xtask build-policies | test | demo | bench | dist` (`dist` = the release binary, the Rust
//! and Python policy components and the wheels of the vLLM plugin and the hint package in
//! `<target>/dist/`, each wheel built from a copy of its sources in `<target>/wheel-src/`);
//! `workspace` = the root and target folder, resolved once and passed to every command it starts
//! (with `AGENTRT_COMPONENTS_DIR`); `components` says what to build where and which languages
//! (`Languages`, `--langs`: every one for the tests, Rust's for the demo, Rust's and Python's for
//! `dist`) — every language's build and toolchain install is `agentrt-policy-build` (`sdk/build`);
//! `steps` = a long command's steps said and timed on stderr (`test`, `demo`, `dist`)

mod components;
mod dist;
mod hints_sdk;
mod steps;
mod workspace;

use agentrt_policy_build::{c, go, js, python, run};

use anyhow::{bail, Context, Result};

use crate::components::Languages;
use crate::steps::Steps;
use crate::workspace::Workspace;

const USAGE: &str =
    "usage: cargo xtask <build-policies [--root DIR] [--langs L] | test | demo | bench | dist [--langs L]> \
     [extra args for the underlying command]; L: `all` or a comma-separated list of rust, python, js, c, go";

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let command = args.next().unwrap_or_default();
    let rest: Vec<String> = args.collect();
    let workspace = Workspace::from_environment();
    match command.as_str() {
        "build-policies" => {
            let (languages, rest) = languages_flag(&rest, Languages::ALL)?;
            match rest.as_slice() {
                [] => components::build(&workspace, languages).map(|_| ()),
                // Another tree laid out like this one (wit/, sdk/, policies/, a Cargo.toml naming its
                // Rust policies), built into its own target folder: cli/tests/policy_new.rs builds
                // `agentrt policy new` skeletons this way.
                [flag, root] if flag == "--root" => {
                    let root = std::path::PathBuf::from(root);
                    let target = root.join("target");
                    components::build(&Workspace::new(root, Some(target.as_os_str())), languages).map(|_| ())
                }
                _ => bail!("{USAGE}"),
            }
        }
        "test" => test(&workspace, &rest),
        "demo" => demo(&workspace, &rest),
        "dist" => match languages_flag(&rest, Languages::RUST_AND_PYTHON)? {
            (languages, rest) if rest.is_empty() => dist::dist(&workspace, languages).map(|_| ()),
            _ => bail!("{USAGE}"),
        },
        "bench" => {
            components::build(&workspace, Languages::ALL)?;
            run(workspace.command(cargo()).args(["bench", "--workspace"]).args(&rest))
        }
        _ => bail!("{USAGE}"),
    }
}

/// Every test, each step said and timed ([`steps`]) so that a CI log shows where its minutes went.
/// `args` go to `cargo test`.
fn test(workspace: &Workspace, args: &[String]) -> Result<()> {
    let mut steps = Steps::new("test", 5);
    steps.run(
        "building every policy component (Rust, Python, JavaScript, C, Go)",
        "the first time minutes: toolchains install; seconds after",
        || components::build(workspace, Languages::ALL).map(|_| ()),
    )?;
    steps.run(
        "the Rust workspace's tests (cargo's lines follow)",
        "the first time the longest step: every crate compiled for tests",
        || run(workspace.command(cargo()).args(["test", "--workspace"]).args(args)),
    )?;
    let tree = workspace.tree();
    steps.run(
        "the other policy languages' own tests and the hint package's, in each venv that has a framework",
        "about a minute",
        || {
            python::test_all(&tree)?;
            js::test_all(&tree)?;
            c::test_all(&tree)?;
            go::test_all(&tree)?;
            hints_sdk::test_all(workspace)
        },
    )?;
    steps.run(
        "the vLLM adapter's tests (a real vLLM on CPU; the slowest listed at the end)",
        "20 to 30 min on two cores",
        || vllm_adapter_tests(workspace),
    )?;
    steps.run(
        "the SGLang adapter's tests (SGLang's real radix cache)",
        "a minute",
        || sglang_adapter_tests(workspace),
    )?;
    steps.finish();
    Ok(())
}

/// `--langs L` out of `args` (`default` without it), and the other arguments.
fn languages_flag(args: &[String], default: Languages) -> Result<(Languages, Vec<String>)> {
    let mut languages = default;
    let mut rest = Vec::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        if arg == "--langs" {
            let list = args.next().with_context(|| format!("--langs needs a value; {USAGE}"))?;
            languages = Languages::parse(list)?;
        } else {
            rest.push(arg.clone());
        }
    }
    Ok((languages, rest))
}

/// The main job: the Rust components (every policy the demo and the quick table run is Rust),
/// the release binary without `serve` and `policy build` (a third less CPU time to compile; a
/// later `cargo build --release -p agentrt` compiles the dependencies whose features `serve`
/// widens again), what the policies do on a
/// short trace, then the evaluation's short version (six workloads, every default policy, table +
/// plots) — each step said and timed. `args` go to `agentrt demo`.
fn demo(workspace: &Workspace, args: &[String]) -> Result<()> {
    let mut steps = Steps::new("demo", 4);
    steps.run(
        "building the Rust policy components",
        "the first time a minute or two, seconds after",
        || components::build(workspace, Languages::RUST),
    )?;
    steps.run(
        "building agentrt for the demo and the simulator (release, no `serve`; cargo's lines follow)",
        "the first time the longest step, minutes: wasmtime and Cranelift optimised; seconds after",
        || {
            run(workspace
                .command(cargo())
                .args(["build", "--release", "-p", "agentrt", "--no-default-features"]))
        },
    )?;
    let agentrt = workspace.target.join("release/agentrt");
    steps.run(
        "`agentrt demo`: what the built-in policies observe, score, predict and act on",
        "seconds",
        || run(workspace.command(&agentrt).arg("demo").args(args)),
    )?;
    let out = workspace.target.join("sim-quick");
    steps.run(
        "`agentrt sim table --quick`: the evaluation's short version (1/8 scale)",
        "about 30 s on two idle cores",
        || {
            run(workspace
                .command(&agentrt)
                .args(["sim", "table", "--quick", "--out"])
                .arg(&out))
        },
    )?;
    steps.finish();
    Ok(())
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
    let wheel = dist::build_wheel(workspace, &dist::VLLM_PLUGIN, &wheels)?;
    let status = workspace
        .command(&python)
        .args(["-m", "pytest", "adapters/vllm/tests", "-q", "-rs", "--durations=15"])
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

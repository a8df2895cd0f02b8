//! `cargo xtask dist`: what an operator deploys, in `<target>/dist/` — the release `agentrt`
//! (the built-in policies embedded), the policy components beside it in `components/` (where an
//! installed `agentrt` looks: docs/deploy.md), the vLLM plugin as a wheel
//! (`agentrt_vllm-VERSION-py3-none-any.whl`) for `pip install` into vLLM's environment or image,
//! and the hint package's (`agentrt_hints-VERSION-py3-none-any.whl`) for the frameworks'
//! environments. Components are Rust's and Python's unless `--langs` asks for more
//! ([`Languages`]): an operator needs no Node.js, zig or Go.
//!
//! Each wheel is built by pip from a copy of its sources under `<target>/wheel-src/`, so nothing
//! (setuptools' `build/`, `*.egg-info`) is written into the checkout. The vLLM plugin (setuptools;
//! it carries `agentrt_engine`, which its pyproject maps from `adapters/lib/python`) is built with
//! the vLLM venv's Python when `.venv-vllm` exists (its setuptools, no download), else `python3`
//! in pip's build isolation (setuptools from PyPI); the hint package (flit_core) with `python3`
//! in build isolation.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::components::{self, Languages};
use crate::steps::Steps;
use crate::workspace::Workspace;
use crate::{cargo, run};

/// A Python package of the checkout that ships as a wheel.
pub struct PythonPackage {
    /// Its folder (the one holding `pyproject.toml`), relative to the root.
    pub project: &'static str,
    /// Other folders its build reads, relative to the root.
    pub reads: &'static [&'static str],
    /// Whether the vLLM venv's setuptools can build it without a download.
    pub setuptools: bool,
}

/// The vLLM plugin.
pub const VLLM_PLUGIN: PythonPackage = PythonPackage {
    project: "adapters/vllm",
    reads: &["adapters/lib/python"],
    setuptools: true,
};

/// The lifecycle-hint package for agent frameworks.
pub const HINTS: PythonPackage = PythonPackage {
    project: "sdk/hints",
    reads: &[],
    setuptools: false,
};

/// Build everything into `<target>/dist/` (emptied first) and list what is there.
pub fn dist(workspace: &Workspace, languages: Languages) -> Result<PathBuf> {
    let mut steps = Steps::new("dist", 3);
    // Components before the binary: its build embeds the built-in ones.
    steps.run(
        &format!("building the policy components ({})", languages.names()),
        "seconds when built; the first build takes minutes",
        || components::build(workspace, languages),
    )?;
    steps.run(
        "building agentrt (release)",
        "seconds when built; the first time the longest step, minutes",
        || {
            run(workspace
                .command(cargo())
                .args(["build", "--release", "--locked", "-p", "agentrt"]))
        },
    )?;
    let dist = workspace.target.join("dist");
    steps.run("the wheels and the folder", "seconds", || {
        if dist.exists() {
            std::fs::remove_dir_all(&dist).with_context(|| format!("emptying {}", dist.display()))?;
        }
        let shipped = dist.join("components");
        std::fs::create_dir_all(&shipped).with_context(|| format!("creating {}", shipped.display()))?;
        copy(&workspace.target.join("release/agentrt"), &dist.join("agentrt"))?;
        for component in policy_components(workspace)? {
            let name = component.file_name().expect("a file");
            copy(&component, &shipped.join(name))?;
        }
        build_wheel(workspace, &VLLM_PLUGIN, &dist)?;
        build_wheel(workspace, &HINTS, &dist)?;
        Ok(())
    })?;
    eprintln!("xtask: dist in {}:", dist.display());
    for line in listing(&dist)? {
        eprintln!("  {line}");
    }
    steps.finish();
    Ok(dist)
}

/// The built components of `policies/*` (not the test fixtures of `tests/guests`).
fn policy_components(workspace: &Workspace) -> Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(workspace.components()).context("reading the components folder")? {
        let path = entry?.path();
        let is_policy = path.extension().is_some_and(|e| e == "wasm")
            && path
                .file_stem()
                .is_some_and(|stem| workspace.root.join("policies").join(stem).is_dir());
        if is_policy {
            found.push(path);
        }
    }
    found.sort();
    Ok(found)
}

/// `package`'s wheel, into `dist`; its path.
pub fn build_wheel(workspace: &Workspace, package: &PythonPackage, dist: &Path) -> Result<PathBuf> {
    let staged = stage_sources(workspace, package)?;
    let venv_python = workspace.root.join(".venv-vllm/bin/python");
    let mut pip = if package.setuptools && venv_python.exists() {
        let mut pip = workspace.command(&venv_python);
        pip.args(["-m", "pip", "wheel", "--no-build-isolation"]);
        pip
    } else {
        let mut pip = workspace.command("python3");
        pip.args(["-m", "pip", "wheel"]);
        pip
    };
    let before = wheels_in(dist)?;
    pip.args(["--no-deps", "--quiet", "--disable-pip-version-check", "--wheel-dir"])
        .arg(dist)
        .arg(&staged);
    run(&mut pip).with_context(|| format!("building the wheel of {}", package.project))?;
    wheels_in(dist)?
        .into_iter()
        .find(|wheel| !before.contains(wheel))
        .with_context(|| format!("pip left no wheel of {} in {}", package.project, dist.display()))
}

/// A copy of `package`'s folders under `<target>/wheel-src/`, laid out as in the checkout (a
/// pyproject may name `../lib/python`); its project folder.
fn stage_sources(workspace: &Workspace, package: &PythonPackage) -> Result<PathBuf> {
    let stage = workspace
        .target
        .join("wheel-src")
        .join(package.project.replace('/', "-"));
    if stage.exists() {
        std::fs::remove_dir_all(&stage).with_context(|| format!("emptying {}", stage.display()))?;
    }
    for folder in std::iter::once(package.project).chain(package.reads.iter().copied()) {
        copy_tree(&workspace.root.join(folder), &stage.join(folder))?;
    }
    Ok(stage.join(package.project))
}

/// Copy the sources under `from` to `to`, leaving out what builds and runs leave there.
fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    for entry in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let path = entry?.path();
        let name = path.file_name().expect("an entry").to_string_lossy().into_owned();
        let left_behind = matches!(name.as_str(), "build" | "__pycache__" | ".pytest_cache")
            || name.ends_with(".egg-info")
            || name.ends_with(".pyc");
        if left_behind {
            continue;
        }
        if path.is_dir() {
            copy_tree(&path, &to.join(&name))?;
        } else {
            copy(&path, &to.join(&name))?;
        }
    }
    Ok(())
}

fn wheels_in(dist: &Path) -> Result<Vec<PathBuf>> {
    let mut wheels = Vec::new();
    for entry in std::fs::read_dir(dist).with_context(|| format!("reading {}", dist.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "whl") {
            wheels.push(path);
        }
    }
    Ok(wheels)
}

fn copy(from: &Path, to: &Path) -> Result<()> {
    std::fs::copy(from, to).with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    Ok(())
}

/// Each file under `dist`, relative, with its size.
fn listing(dist: &Path) -> Result<Vec<String>> {
    let mut lines = Vec::new();
    let mut folders = vec![dist.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder)? {
            let path = entry?.path();
            if path.is_dir() {
                folders.push(path);
                continue;
            }
            let size = path.metadata()?.len();
            let relative = path.strip_prefix(dist).expect("under dist");
            lines.push(format!("{} ({} KB)", relative.display(), size.div_ceil(1024)));
        }
    }
    lines.sort();
    Ok(lines)
}

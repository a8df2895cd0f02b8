//! `cargo xtask dist`: what an operator deploys, in `<target>/dist/` — the release `agentrt`
//! (the built-in policies embedded), every policy component beside it in `components/` (where an
//! installed `agentrt` looks: docs/deploy.md), and the vLLM plugin as a wheel
//! (`agentrt_vllm-VERSION-py3-none-any.whl`) for `pip install` into vLLM's environment or image.
//!
//! The wheel is built with pip from `adapters/vllm` (pure Python, no compiler; it carries
//! `agentrt_engine`, which its pyproject maps from `adapters/lib/python`): with the vLLM
//! venv's Python when `.venv-vllm` exists (its setuptools, no download), else `python3` in pip's
//! build isolation (setuptools from PyPI).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::workspace::Workspace;
use crate::{cargo, components, run};

/// Build everything into `<target>/dist/` (emptied first) and list what is there.
pub fn dist(workspace: &Workspace) -> Result<PathBuf> {
    // Components before the binary: its build embeds the built-in ones.
    components::build_all(workspace)?;
    run(workspace
        .command(cargo())
        .args(["build", "--release", "--locked", "-p", "agentrt"]))?;
    let dist = workspace.target.join("dist");
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
    build_wheel(workspace, &dist)?;
    eprintln!("xtask: dist in {}:", dist.display());
    for line in listing(&dist)? {
        eprintln!("  {line}");
    }
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

/// The vLLM plugin's wheel, into `dist`; its path.
pub fn build_wheel(workspace: &Workspace, dist: &Path) -> Result<PathBuf> {
    let venv_python = workspace.root.join(".venv-vllm/bin/python");
    let mut pip = if venv_python.exists() {
        let mut pip = workspace.command(&venv_python);
        pip.args(["-m", "pip", "wheel", "--no-build-isolation"]);
        pip
    } else {
        let mut pip = workspace.command("python3");
        pip.args(["-m", "pip", "wheel"]);
        pip
    };
    pip.args(["--no-deps", "--quiet", "--disable-pip-version-check", "--wheel-dir"])
        .arg(dist)
        .arg(workspace.root.join("adapters/vllm"));
    run(&mut pip).context("building the vLLM plugin's wheel (adapters/vllm)")?;
    // pip leaves setuptools' build folder in the source tree; it is no part of the checkout.
    let _ = std::fs::remove_dir_all(workspace.root.join("adapters/vllm/build"));
    let wheel = std::fs::read_dir(dist)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .with_context(|| format!("pip left no wheel in {}", dist.display()))?;
    Ok(wheel)
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

//! Build every policy component of the workspace (policies/*, tests/guests/*) into
//! [`Workspace::components`]: the Rust crates, then the Python, JavaScript, C and Go policies —
//! each language's build and toolchain install live in `agentrt-policy-build`, which
//! `agentrt policy build` uses too.

use std::path::PathBuf;

use agentrt_policy_build::{c, go, js, python, rust};
use anyhow::Result;

use crate::cargo;
use crate::workspace::Workspace;

/// Build every component into [`Workspace::components`] (the runtime's component lookup finds
/// them there; the `agentrt` binary embeds the built-in ones when it is built after them).
pub fn build_all(workspace: &Workspace) -> Result<Vec<PathBuf>> {
    let out_dir = workspace.components();
    std::fs::create_dir_all(&out_dir)?;
    let tree = workspace.tree();
    let mut built = rust::build_all(&workspace.root, &workspace.target, &out_dir, || {
        workspace.command(cargo())
    })?;
    built.extend(python::build_all(&tree, &out_dir)?);
    built.extend(js::build_all(&tree, &out_dir)?);
    built.extend(c::build_all(&tree, &out_dir)?);
    built.extend(go::build_all(&tree, &out_dir)?);
    let names: Vec<String> = built
        .iter()
        .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .collect();
    eprintln!(
        "xtask: {} components in {}/: {}",
        built.len(),
        out_dir.display(),
        names.join(", ")
    );
    Ok(built)
}

//! Build policy crates for `wasm32-unknown-unknown` and encode each core module as a component;
//! then the policies in other languages: [`crate::python_policies`], [`crate::js_policies`], [`crate::c_policies`],
//! [`crate::go_policies`].

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::component_encoding::encode_component;
use anyhow::{bail, Context, Result};

use crate::workspace::Workspace;
use crate::{cargo, run};

const TARGET: &str = "wasm32-unknown-unknown";
/// Folders whose sub-folders are policy crates.
const POLICY_ROOTS: &[&str] = &["policies", "tests/guests"];

/// A policy crate to build.
struct PolicyCrate {
    /// Short name: the folder name, and the component's file name.
    name: String,
    package: String,
}

/// Build every component into [`Workspace::components`] (the runtime's component lookup finds
/// them there; the `agentrt` binary embeds the built-in ones when it is built after them).
pub fn build_all(workspace: &Workspace) -> Result<Vec<PathBuf>> {
    ensure_target()?;
    let root = &workspace.root;
    let crates = discover(root)?;
    let out_dir = workspace.components();
    std::fs::create_dir_all(&out_dir)?;
    let mut built = Vec::new();
    for krate in &crates {
        // One `cargo rustc` per crate: it is the only way to ask for a cdylib for this target while
        // the crates stay plain rlibs for native tests.
        run(workspace.command(cargo()).args([
            "rustc",
            "--quiet",
            "-p",
            &krate.package,
            "--target",
            TARGET,
            "--profile",
            "wasm",
            "--crate-type",
            "cdylib",
        ]))?;
        let core = workspace
            .target
            .join(TARGET)
            .join("wasm")
            .join(format!("{}.wasm", krate.package.replace('-', "_")));
        let out = out_dir.join(format!("{}.wasm", krate.name));
        encode_component(&core, &out)?;
        built.push(out);
    }
    built.extend(crate::python_policies::build_all(root, &out_dir)?);
    built.extend(crate::js_policies::build_all(root, &out_dir)?);
    built.extend(crate::c_policies::build_all(workspace, &out_dir)?);
    built.extend(crate::go_policies::build_all(workspace, &out_dir)?);
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

/// Every folder with a Cargo.toml under the policy roots, with its package name.
fn discover(root: &Path) -> Result<Vec<PolicyCrate>> {
    let mut crates = Vec::new();
    for policy_root in POLICY_ROOTS {
        let Ok(entries) = std::fs::read_dir(root.join(policy_root)) else {
            continue;
        };
        let mut dirs: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        dirs.sort();
        for dir in dirs {
            let manifest = dir.join("Cargo.toml");
            if !manifest.is_file() {
                continue;
            }
            let text = std::fs::read_to_string(&manifest)?;
            let package = text
                .lines()
                .find_map(|l| {
                    l.trim()
                        .strip_prefix("name = ")
                        .map(|v| v.trim_matches('"').to_string())
                })
                .with_context(|| format!("{}: no package name", manifest.display()))?;
            let name = dir.file_name().unwrap().to_string_lossy().into_owned();
            crates.push(PolicyCrate { name, package });
        }
    }
    Ok(crates)
}

/// Install the Wasm target if it is missing: `RUSTUP_AUTO_INSTALL=0` on CI means cargo will not.
fn ensure_target() -> Result<()> {
    let installed = Command::new("rustup").args(["target", "list", "--installed"]).output();
    match installed {
        Ok(out) if String::from_utf8_lossy(&out.stdout).lines().any(|l| l.trim() == TARGET) => Ok(()),
        Ok(_) => {
            eprintln!("xtask: installing the {TARGET} target");
            run(Command::new("rustup").args(["target", "add", TARGET]))
        }
        Err(e) => bail!("rustup is needed to add the {TARGET} target: {e}"),
    }
}

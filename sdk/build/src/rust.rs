//! The Rust policies: each crate built for `wasm32-unknown-unknown` as a cdylib and its core
//! module encoded as a component — a checkout's crates under `policies/` and `tests/guests/`
//! ([`build_all`]), or a standalone policy project's one crate ([`build_standalone`]).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::encoding::encode_component;
use crate::{note, run};

const TARGET: &str = "wasm32-unknown-unknown";
/// The profile policy components are built with: the workspace's, and every standalone
/// project's (`agentrt policy new` writes it).
const PROFILE: &str = "wasm";
/// Folders of a checkout whose sub-folders are policy crates.
const POLICY_ROOTS: &[&str] = &["policies", "tests/guests"];

/// A policy crate to build.
struct PolicyCrate {
    /// Short name: the folder name, and the component's file name.
    name: String,
    package: String,
}

/// Build every policy crate of the checkout at `root` into `out_dir`; `cargo` makes a cargo
/// command that runs in the workspace and builds into `target`.
pub fn build_all(root: &Path, target: &Path, out_dir: &Path, cargo: impl Fn() -> Command) -> Result<Vec<PathBuf>> {
    ensure_target()?;
    let mut built = Vec::new();
    for krate in discover(root)? {
        let out = out_dir.join(format!("{}.wasm", krate.name));
        // One `cargo rustc` per crate: it is the only way to ask for a cdylib for this target while
        // the crates stay plain rlibs for native tests.
        run(cargo()
            .args(["rustc", "--quiet", "-p", &krate.package])
            .args(wasm_args()))?;
        encode_component(&core_module(target, &krate.package), &out)?;
        built.push(out);
    }
    Ok(built)
}

/// Build the crate in `dir` (its own workspace, with a `wasm` profile) into the component `out`.
/// Cargo's target folder is the one cargo would use there: `CARGO_TARGET_DIR`, else `dir/target`.
pub fn build_standalone(dir: &Path, out: &Path) -> Result<()> {
    ensure_target()?;
    let manifest = dir.join("Cargo.toml");
    let package = package_name(&manifest)?;
    let text = std::fs::read_to_string(&manifest)?;
    if !text.lines().any(|l| l.trim() == format!("[profile.{PROFILE}]")) {
        bail!(
            "{}: no [profile.{PROFILE}] (the profile policy components are built with): \
             add the one `agentrt policy new NAME --lang rust` writes",
            manifest.display()
        );
    }
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(t) => dir.join(t),
        None => dir.join("target"),
    };
    note(&format!("cargo rustc {package} ({TARGET})"));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    run(Command::new(cargo)
        .current_dir(dir)
        .args(["rustc", "--quiet", "--manifest-path"])
        .arg(&manifest)
        .args(wasm_args()))?;
    encode_component(&core_module(&target, &package), out)
}

/// `cargo test` in the standalone crate in `dir` (its native tests, through the SDK's harness).
pub fn test_standalone(dir: &Path) -> Result<()> {
    note(&format!("cargo test {}", dir.display()));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    run(Command::new(cargo)
        .current_dir(dir)
        .args(["test", "--quiet", "--manifest-path"])
        .arg(dir.join("Cargo.toml")))
}

fn wasm_args() -> [&'static str; 6] {
    ["--target", TARGET, "--profile", PROFILE, "--crate-type", "cdylib"]
}

/// Where cargo leaves `package`'s core module.
fn core_module(target: &Path, package: &str) -> PathBuf {
    target
        .join(TARGET)
        .join(PROFILE)
        .join(format!("{}.wasm", package.replace('-', "_")))
}

/// The `name = "…"` of a manifest's package.
fn package_name(manifest: &Path) -> Result<String> {
    let text = std::fs::read_to_string(manifest).with_context(|| format!("reading {}", manifest.display()))?;
    text.lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("name = ")
                .map(|v| v.trim_matches('"').to_string())
        })
        .with_context(|| format!("{}: no package name", manifest.display()))
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
            let package = package_name(&manifest)?;
            let name = crate::sources::name(&dir);
            crates.push(PolicyCrate { name, package });
        }
    }
    Ok(crates)
}

/// Install the Wasm target if it is missing: `RUSTUP_AUTO_INSTALL=0` on CI means cargo will not.
pub fn ensure_target() -> Result<()> {
    let installed = Command::new("rustup").args(["target", "list", "--installed"]).output();
    match installed {
        Ok(out) if String::from_utf8_lossy(&out.stdout).lines().any(|l| l.trim() == TARGET) => Ok(()),
        Ok(_) => {
            note(&format!("installing the {TARGET} target"));
            run(Command::new("rustup").args(["target", "add", TARGET]))
        }
        Err(e) => bail!("rustup is needed to add the {TARGET} target: {e}"),
    }
}

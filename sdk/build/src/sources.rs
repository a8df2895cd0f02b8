//! What the language modules share about a policy written in a language other than Rust: finding
//! a checkout's policies under `policies/` (by the file that marks their language), the files its component is
//! built from, whether the component is older than them, the note left when its language's
//! toolchain is missing, and the build loop of the languages whose toolchain is optional.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::{Context, Result};

use crate::Tree;

/// Folders under `root/policies` holding `marker` (`app.py`, `policy.js`, `policy.c`, `go.mod`),
/// sorted.
pub fn discover(root: &Path, marker: &str) -> Result<Vec<PathBuf>> {
    let Ok(entries) = std::fs::read_dir(root.join("policies")) else {
        return Ok(Vec::new());
    };
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|d| d.join(marker).is_file())
        .collect();
    dirs.sort();
    Ok(dirs)
}

/// A policy folder's name: its component's name.
pub fn name(dir: &Path) -> String {
    dir.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// True for a file that is a test, not part of a component: `test_*.py`, `*.test.js`, `*_test.go`,
/// `test_*.c`.
fn is_test(name: &str) -> bool {
    name.starts_with("test_") || name.ends_with(".test.js") || name.ends_with("_test.go")
}

/// The files under each of `dirs` a component is built from: not caches, dependencies or tests
/// (`tests/` folders and test files), so editing a test does not rebuild a component.
pub fn source_files(dirs: &[&Path]) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut stack: Vec<PathBuf> = dirs.iter().map(|d| d.to_path_buf()).collect();
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let path = entry?.path();
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if path.is_dir() {
                if !matches!(name.as_str(), "__pycache__" | "tests" | "test" | "node_modules") {
                    stack.push(path);
                }
            } else if !is_test(&name) {
                files.push(path);
            }
        }
    }
    Ok(files)
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// `out` exists and is newer than every input.
pub fn is_current(out: &Path, inputs: &[PathBuf]) -> bool {
    let Some(built) = modified(out) else {
        return false;
    };
    inputs.iter().all(|i| modified(i).is_some_and(|t| t <= built))
}

/// The note beside a component that could not be built: `<name>.skipped`, holding why. The
/// cross-language tests read it to say "skipped" with the reason instead of failing.
pub fn skipped_note(out_dir: &Path, name: &str) -> PathBuf {
    out_dir.join(format!("{name}.skipped"))
}

/// Leave the note for every policy of a skipped language; `reason` names what is missing.
pub fn note_skipped(out_dir: &Path, dirs: &[PathBuf], reason: &str) -> Result<()> {
    for dir in dirs {
        std::fs::write(skipped_note(out_dir, &name(dir)), reason)?;
    }
    Ok(())
}

/// Take away a stale note once the component is built.
pub fn clear_skipped(out_dir: &Path, name: &str) {
    let _ = std::fs::remove_file(skipped_note(out_dir, name));
}

/// A language whose toolchain is optional (installed on first use; a missing one skips its
/// policies unless `AGENTRT_REQUIRE_LANGS` is set).
pub struct OptionalLanguage<'a> {
    /// As messages name it: `JavaScript`, `C`, `Go`.
    pub name: &'a str,
    /// The file that marks a policy folder of the language.
    pub marker: &'a str,
    /// The SDK's folder under [`Tree::sdk`]: every policy's component depends on it.
    pub sdk_dir: &'a str,
}

/// One policy to build: its folder, its name and where its component goes.
pub struct PolicyToBuild<'a> {
    pub dir: &'a Path,
    pub name: &'a str,
    pub out: &'a Path,
    /// The files the component is built from (its folder, the SDK, the contract).
    pub inputs: &'a [PathBuf],
}

/// Build every policy of `language` that `is_built` says is not: the toolchain is got once, on
/// the first policy that needs it (a missing one leaves a skipped note for each of the language's
/// policies and builds none), then `build` runs for each. Returns every component, built now or
/// before.
pub fn build_each<T>(
    tree: &Tree,
    out_dir: &Path,
    language: &OptionalLanguage,
    is_built: impl Fn(&PolicyToBuild) -> bool,
    toolchain: impl FnOnce() -> Result<T>,
    mut build: impl FnMut(&T, &PolicyToBuild) -> Result<()>,
) -> Result<Vec<PathBuf>> {
    let policies = discover(&tree.root, language.marker)?;
    let mut toolchain = Some(toolchain);
    let mut tools: Option<T> = None;
    let mut built = Vec::new();
    for dir in &policies {
        let name = name(dir);
        let out = out_dir.join(format!("{name}.wasm"));
        let inputs = source_files(&[dir, &tree.sdk.join(language.sdk_dir), &tree.contract()])?;
        let policy = PolicyToBuild {
            dir,
            name: &name,
            out: &out,
            inputs: &inputs,
        };
        if !is_built(&policy) {
            if tools.is_none() {
                let get = toolchain.take().expect("the toolchain is got once");
                match crate::toolchains::optional(language.name, get())? {
                    Ok(got) => tools = Some(got),
                    Err(reason) => {
                        note_skipped(out_dir, &policies, &reason)?;
                        return Ok(built);
                    }
                }
            }
            build(tools.as_ref().expect("got above"), &policy)?;
        }
        clear_skipped(out_dir, &name);
        built.push(out);
    }
    Ok(built)
}

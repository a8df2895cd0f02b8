//! What the language modules share about a policy written in a language other than Rust: finding
//! its folder under `policies/` (by the file that marks its language), the files its component is
//! built from, whether the component is older than them, and the note left when its language's
//! toolchain is missing.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::{Context, Result};

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

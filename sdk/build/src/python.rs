//! The Python policies (`app.py`; a checkout's `policies/*/app.py`): build each into a component with componentize-py,
//! and run their native tests (`test_*.py` beside each app, and the SDK's own) with pytest.
//!
//! componentize-py and pytest come from PyPI into a venv of their own
//! ([`toolchains::pip_venv`]: `~/.cache/agentrt/componentize-py-<version>`;
//! `$AGENTRT_COMPONENTIZE_PY` names another componentize-py, whose venv must have pytest).
//! `--stub-wasi` replaces CPython's WASI imports with trapping stubs: the component imports only
//! `agentrt:policy/host`, exactly like a Rust one, and the host's sandbox holds.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Result;

use crate::sources::{discover, is_current, name, source_files};
use crate::{note, run, toolchains, Tree};

/// The componentize-py release the Python SDK is written against (its bindings' module names —
/// `wit_world`, `componentize_py_types` — change between releases).
const COMPONENTIZE_PY_VERSION: &str = "0.25.1";
const PYTEST_VERSION: &str = "8.3.5";
/// The Python SDK (`agentrt_policy`) under [`Tree::sdk`], put on the app's path.
const SDK_DIR: &str = "python";
/// The app module of a Python policy folder.
pub const APP: &str = "app.py";

/// Build every `policies/*/app.py` of a checkout whose component is older than its sources;
/// returns the components (built now or already current).
pub fn build_all(tree: &Tree, out_dir: &Path) -> Result<Vec<PathBuf>> {
    let apps = discover(&tree.root, APP)?;
    let mut tools: Option<Toolchain> = None;
    let mut built = Vec::new();
    for dir in apps {
        let name = name(&dir);
        let out = out_dir.join(format!("{name}.wasm"));
        let inputs = source_files(&[&dir, &tree.sdk.join(SDK_DIR), &tree.contract()])?;
        if !is_current(&out, &inputs) {
            let tools = match &tools {
                Some(tools) => tools,
                None => tools.insert(Toolchain::get()?),
            };
            build(tools, tree, &dir, &name, &out)?;
        }
        built.push(out);
    }
    Ok(built)
}

/// Build the app in `dir` into the component `out`.
pub fn build(tools: &Toolchain, tree: &Tree, dir: &Path, name: &str, out: &Path) -> Result<()> {
    note(&format!("componentize-py {name} (CPython inside; ~10 s)"));
    let tmp = out.with_extension("wasm.tmp");
    run(Command::new(&tools.componentize_py)
        .current_dir(&tree.root)
        .arg("-d")
        .arg(tree.contract())
        .args(["-w", "policy", "componentize", "--stub-wasi", "-p"])
        .arg(dir)
        .arg("-p")
        .arg(tree.sdk.join(SDK_DIR))
        .args(["app", "-o"])
        .arg(&tmp)
        .stdout(std::process::Stdio::null()))?;
    Ok(std::fs::rename(&tmp, out)?)
}

/// Run the SDK's tests, then each Python policy's, natively in CPython on the bindings
/// componentize-py generates for the contract (one pytest per policy: each imports its `app`).
pub fn test_all(tree: &Tree) -> Result<()> {
    let root = &tree.root;
    let apps = discover(root, APP)?;
    let tools = Toolchain::get()?;
    let bindings = bindings(&tools, tree)?;
    let suites = std::iter::once(tree.sdk.join(SDK_DIR).join("tests")).chain(apps);
    for suite in suites {
        pytest(&tools, tree, &bindings, &suite)?;
    }
    Ok(())
}

/// Run the tests of the one policy in `dir` (its `test_*.py`), as [`test_all`] runs a checkout's.
pub fn test_one(tools: &Toolchain, tree: &Tree, dir: &Path) -> Result<()> {
    pytest(tools, tree, &bindings(tools, tree)?, dir)
}

/// The bindings of the contract (`componentize-py bindings`), into `<scratch>/py-bindings`.
fn bindings(tools: &Toolchain, tree: &Tree) -> Result<PathBuf> {
    let bindings = tree.scratch.join("py-bindings");
    let _ = std::fs::remove_dir_all(&bindings);
    run(Command::new(&tools.componentize_py)
        .current_dir(&tree.root)
        .arg("-d")
        .arg(tree.contract())
        .args(["-w", "policy", "bindings"])
        .arg(&bindings)
        .stdout(std::process::Stdio::null()))?;
    Ok(bindings)
}

/// pytest on `suite` (a policy's folder, whose `app` its tests import, or the SDK's tests).
fn pytest(tools: &Toolchain, tree: &Tree, bindings: &Path, suite: &Path) -> Result<()> {
    let mut path = vec![bindings.to_path_buf(), tree.sdk.join(SDK_DIR)];
    if suite.join(APP).is_file() {
        path.push(suite.to_path_buf());
    }
    // A standalone project vendors the SDK inside its folder: not its tests.
    let mut ignore = std::ffi::OsString::from("--ignore=");
    ignore.push(&tree.sdk);
    let shown = suite
        .strip_prefix(&tree.root)
        .ok()
        .filter(|relative| !relative.as_os_str().is_empty())
        .unwrap_or(suite);
    note(&format!("pytest {}", shown.display()));
    run(Command::new(&tools.python)
        .current_dir(&tree.root)
        .env("PYTHONPATH", std::env::join_paths(&path)?)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .args(tree.sdk.starts_with(suite).then_some(ignore))
        .arg(suite))
}

/// componentize-py and the Python that runs the native tests, from one venv.
pub struct Toolchain {
    componentize_py: PathBuf,
    python: PathBuf,
}

impl Toolchain {
    pub fn get() -> Result<Self> {
        if let Some(tool) = std::env::var_os("AGENTRT_COMPONENTIZE_PY") {
            let componentize_py = PathBuf::from(tool);
            let python = componentize_py.with_file_name("python");
            return Ok(Self {
                componentize_py,
                python,
            });
        }
        let venv = toolchains::pip_venv(
            &format!("componentize-py-{COMPONENTIZE_PY_VERSION}"),
            &[
                &format!("componentize-py=={COMPONENTIZE_PY_VERSION}"),
                &format!("pytest=={PYTEST_VERSION}"),
            ],
        )?;
        Ok(Self {
            componentize_py: venv.join("bin/componentize-py"),
            python: venv.join("bin/python"),
        })
    }
}

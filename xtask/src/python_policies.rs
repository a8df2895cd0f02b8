//! The Python policies (`policies/*/app.py`): build each into a component with componentize-py,
//! and run their native tests (`test_*.py` beside each app, and the SDK's own) with pytest.
//!
//! componentize-py and pytest come from PyPI into a venv of their own, versioned and kept outside
//! the clone (`~/.cache/agentrt/componentize-py-<version>`; `$AGENTRT_COMPONENTIZE_PY` names
//! another componentize-py, whose venv must have pytest), so a fresh checkout needs only
//! `python3`. `--stub-wasi` replaces CPython's WASI imports with trapping stubs: the component
//! imports only `agentrt:policy/host`, exactly like a Rust one, and the host's sandbox holds.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use anyhow::{bail, Context, Result};

use crate::run;
use crate::workspace::Workspace;

/// The componentize-py release the Python SDK is written against (its bindings' module names —
/// `wit_world`, `componentize_py_types` — change between releases).
const COMPONENTIZE_PY_VERSION: &str = "0.25.1";
const PYTEST_VERSION: &str = "8.3.5";
/// The Python SDK (`agentrt_policy`), put on the app's path.
const SDK_DIR: &str = "sdk/python";
/// The app module of a Python policy folder.
const APP: &str = "app.py";

/// Build every `policies/*/app.py` whose component is older than its sources; returns the
/// components (built now or already current).
pub fn build_all(root: &Path, out_dir: &Path) -> Result<Vec<PathBuf>> {
    let apps = discover(&root.join("policies"))?;
    if apps.is_empty() {
        return Ok(Vec::new());
    }
    let mut shared_inputs = source_files(&root.join(SDK_DIR))?;
    shared_inputs.extend(source_files(&root.join("wit"))?);
    let mut tools: Option<Toolchain> = None;
    let mut built = Vec::new();
    for dir in apps {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let out = out_dir.join(format!("{name}.wasm"));
        let mut inputs = source_files(&dir)?;
        inputs.extend(shared_inputs.iter().cloned());
        if !is_current(&out, &inputs) {
            let tools = match &tools {
                Some(tools) => tools,
                None => tools.insert(Toolchain::get()?),
            };
            eprintln!("xtask: componentize-py {name} (CPython inside; ~10 s)");
            let tmp = out.with_extension("wasm.tmp");
            run(Command::new(&tools.componentize_py)
                .current_dir(root)
                .args(["-d", "wit", "-w", "policy", "componentize", "--stub-wasi", "-p"])
                .arg(&dir)
                .args(["-p", SDK_DIR, "app", "-o"])
                .arg(&tmp)
                .stdout(std::process::Stdio::null()))?;
            std::fs::rename(&tmp, &out)?;
        }
        built.push(out);
    }
    Ok(built)
}

/// Run the SDK's tests, then each Python policy's, natively in CPython on the bindings
/// componentize-py generates for the contract (one pytest per policy: each imports its `app`).
pub fn test_all(workspace: &Workspace) -> Result<()> {
    let root = &workspace.root;
    let apps = discover(&root.join("policies"))?;
    let tools = Toolchain::get()?;
    let bindings = workspace.target.join("py-bindings");
    let _ = std::fs::remove_dir_all(&bindings);
    run(Command::new(&tools.componentize_py)
        .current_dir(root)
        .args(["-d", "wit", "-w", "policy", "bindings"])
        .arg(&bindings)
        .stdout(std::process::Stdio::null()))?;
    let suites = std::iter::once(root.join(SDK_DIR).join("tests")).chain(apps);
    for suite in suites {
        let mut path = vec![bindings.clone(), root.join(SDK_DIR)];
        if suite.join(APP).is_file() {
            path.push(suite.clone());
        }
        eprintln!("xtask: pytest {}", suite.strip_prefix(root).unwrap_or(&suite).display());
        run(Command::new(&tools.python)
            .current_dir(root)
            .env("PYTHONPATH", std::env::join_paths(&path)?)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
            .arg(&suite))?;
    }
    Ok(())
}

/// Policy folders with an `app.py`, sorted.
fn discover(policies: &Path) -> Result<Vec<PathBuf>> {
    let Ok(entries) = std::fs::read_dir(policies) else {
        return Ok(Vec::new());
    };
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|d| d.join(APP).is_file())
        .collect();
    dirs.sort();
    Ok(dirs)
}

/// The files under `dir` a component is built from: not Python's caches, not tests (`tests/`,
/// `test_*.py`), so editing a test does not rebuild a component.
fn source_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let path = entry?.path();
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if path.is_dir() {
                if name != "__pycache__" && name != "tests" {
                    stack.push(path);
                }
            } else if !name.starts_with("test_") {
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
fn is_current(out: &Path, inputs: &[PathBuf]) -> bool {
    let Some(built) = modified(out) else {
        return false;
    };
    inputs.iter().all(|i| modified(i).is_some_and(|t| t <= built))
}

/// componentize-py and the Python that runs the native tests, from one venv.
struct Toolchain {
    componentize_py: PathBuf,
    python: PathBuf,
}

impl Toolchain {
    /// The venv, installed on first use. A marker written last, naming what was installed,
    /// tells a finished install from an interrupted or older one, which is started over.
    fn get() -> Result<Self> {
        if let Some(tool) = std::env::var_os("AGENTRT_COMPONENTIZE_PY") {
            let componentize_py = PathBuf::from(tool);
            let python = componentize_py.with_file_name("python");
            return Ok(Self {
                componentize_py,
                python,
            });
        }
        let venv = cache_home()?.join(format!("agentrt/componentize-py-{COMPONENTIZE_PY_VERSION}"));
        let tools = Self {
            componentize_py: venv.join("bin/componentize-py"),
            python: venv.join("bin/python"),
        };
        let marker = venv.join(".agentrt-complete");
        let packages = [
            format!("componentize-py=={COMPONENTIZE_PY_VERSION}"),
            format!("pytest=={PYTEST_VERSION}"),
        ];
        let want = packages.join(" ");
        if std::fs::read_to_string(&marker).is_ok_and(|m| m == want) && tools.componentize_py.is_file() {
            return Ok(tools);
        }
        eprintln!("xtask: installing {want} into {} (from PyPI, once)", venv.display());
        let _ = std::fs::remove_dir_all(&venv);
        let python = std::env::var("AGENTRT_PYTHON").unwrap_or_else(|_| "python3".to_string());
        run(Command::new(&python).arg("-m").arg("venv").arg(&venv)).with_context(|| {
            format!("the Python policies need `{python} -m venv` to install componentize-py (AGENTRT_PYTHON names another interpreter)")
        })?;
        run(Command::new(&tools.python)
            .args(["-m", "pip", "install", "--quiet"])
            .args(&packages))
        .context("installing the Python policy toolchain from PyPI")?;
        if !tools.componentize_py.is_file() {
            bail!(
                "componentize-py installed, but {} is missing",
                tools.componentize_py.display()
            );
        }
        std::fs::write(&marker, want)?;
        Ok(tools)
    }
}

fn cache_home() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return Ok(PathBuf::from(dir));
    }
    let home = std::env::var_os("HOME").context("neither XDG_CACHE_HOME nor HOME is set")?;
    Ok(PathBuf::from(home).join(".cache"))
}

//! Build the Python policies (`policies/*/app.py`) into components with componentize-py.
//!
//! componentize-py comes from PyPI into a venv of its own, versioned and kept outside the clone
//! (`~/.cache/agentrt/componentize-py-<version>`, or `$AGENTRT_COMPONENTIZE_PY` naming the
//! executable), so a fresh checkout needs only `python3`. `--stub-wasi` replaces CPython's WASI
//! imports with trapping stubs: the component imports only `agentrt:policy/host`, exactly like a
//! Rust one, and the host's sandbox holds unchanged.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use anyhow::{bail, Context, Result};

use crate::run;

/// The componentize-py release the Python SDK is written against (its bindings' module names —
/// `wit_world`, `componentize_py_types` — change between releases).
const COMPONENTIZE_PY_VERSION: &str = "0.25.1";
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
    let mut shared_inputs = files_under(&root.join(SDK_DIR))?;
    shared_inputs.extend(files_under(&root.join("wit"))?);
    let mut componentize: Option<PathBuf> = None;
    let mut built = Vec::new();
    for dir in apps {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let out = out_dir.join(format!("{name}.wasm"));
        let mut inputs = files_under(&dir)?;
        inputs.extend(shared_inputs.iter().cloned());
        if !is_current(&out, &inputs) {
            let tool = match &componentize {
                Some(tool) => tool.clone(),
                None => componentize.insert(componentize_py()?).clone(),
            };
            eprintln!("xtask: componentize-py {name} (CPython inside; ~10 s)");
            let tmp = out.with_extension("wasm.tmp");
            run(Command::new(&tool)
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

/// Regular files under `dir`, skipping Python's caches.
fn files_under(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let path = entry?.path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "__pycache__") {
                    stack.push(path);
                }
            } else {
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

/// The componentize-py executable, installed into its venv on first use. A marker written last
/// tells a finished install from an interrupted one, which is started over.
fn componentize_py() -> Result<PathBuf> {
    if let Some(tool) = std::env::var_os("AGENTRT_COMPONENTIZE_PY") {
        return Ok(PathBuf::from(tool));
    }
    let venv = cache_home()?.join(format!("agentrt/componentize-py-{COMPONENTIZE_PY_VERSION}"));
    let tool = venv.join("bin/componentize-py");
    let marker = venv.join(".agentrt-complete");
    if marker.is_file() && tool.is_file() {
        return Ok(tool);
    }
    eprintln!(
        "xtask: installing componentize-py {COMPONENTIZE_PY_VERSION} into {} (from PyPI, once)",
        venv.display()
    );
    let _ = std::fs::remove_dir_all(&venv);
    let python = std::env::var("AGENTRT_PYTHON").unwrap_or_else(|_| "python3".to_string());
    run(Command::new(&python).arg("-m").arg("venv").arg(&venv)).with_context(|| {
        format!("the Python policies need `{python} -m venv` to install componentize-py (AGENTRT_PYTHON names another interpreter)")
    })?;
    run(Command::new(venv.join("bin/python")).args([
        "-m",
        "pip",
        "install",
        "--quiet",
        &format!("componentize-py=={COMPONENTIZE_PY_VERSION}"),
    ]))
    .context("installing componentize-py from PyPI")?;
    if !tool.is_file() {
        bail!("componentize-py installed, but {} is missing", tool.display());
    }
    std::fs::write(&marker, COMPONENTIZE_PY_VERSION)?;
    Ok(tool)
}

fn cache_home() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return Ok(PathBuf::from(dir));
    }
    let home = std::env::var_os("HOME").context("neither XDG_CACHE_HOME nor HOME is set")?;
    Ok(PathBuf::from(home).join(".cache"))
}

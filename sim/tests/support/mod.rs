//! What the fidelity tests share: finding the vLLM venv and running one of `sim/fidelity/`'s
//! replay scripts in it.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// The venv's interpreter: `$AGENTRT_VLLM_VENV` (as `adapters/vllm/setup-venv.sh` and `.ci/run`
/// use it), else the repository's `.venv-vllm`.
pub fn venv_python() -> Option<PathBuf> {
    let venv = std::env::var_os("AGENTRT_VLLM_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.venv-vllm"));
    let p = venv.join("bin/python");
    p.is_file().then_some(p)
}

/// Runs `sim/fidelity/<script>` with `args` under vLLM's CPU build and returns the report (the
/// last JSON line it printed) with the process's output; panics with its stderr when there is
/// no report.
pub fn replay_in_vllm(python: &Path, script: &str, args: &[&dyn AsRef<OsStr>]) -> (Value, Output) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fidelity").join(script);
    let out = Command::new(python)
        .arg(&script)
        .args(args.iter().map(|a| a.as_ref()))
        .env("VLLM_TARGET_DEVICE", "cpu")
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    let report = String::from_utf8_lossy(&out.stdout)
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| {
            panic!(
                "no JSON from {}; stderr:\n{}",
                script.display(),
                String::from_utf8_lossy(&out.stderr)
            )
        });
    (report, out)
}

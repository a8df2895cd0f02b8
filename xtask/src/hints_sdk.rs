//! The lifecycle-hint package's tests (`sdk/hints/tests`, pytest), once in each venv that has
//! an agent framework its hooks serve: the vLLM venv (`.venv-vllm`, LangGraph), the agents venv
//! (`$AGENTRT_AGENTS_VENV`, default `~/.cache/agentrt/venv-agents`: the OpenAI Agents SDK and
//! AutoGen), and CrewAI's and MetaGPT's (`$AGENTRT_CREWAI_VENV`, `$AGENTRT_METAGPT_VENV`, default
//! `~/.cache/agentrt/venv-crewai` and `venv-metagpt`, made by `sdk/hints/setup-venv.sh`). Each run
//! skips, saying why, the hook tests whose framework its venv lacks; a venv that is absent is
//! skipped as a whole, saying which script makes it. Their test of the real
//! proxy (`test_agentrt_serve.py`) runs the `agentrt` that `cargo test --workspace` just built
//! under `CARGO_TARGET_DIR`, with the components in `AGENTRT_COMPONENTS_DIR` (both set by
//! [`Workspace::command`]).

use std::path::PathBuf;

use anyhow::{bail, Context, Result};

use crate::workspace::Workspace;

const SUITE: &str = "sdk/hints/tests";

/// Run the suite in every venv that exists.
pub fn test_all(workspace: &Workspace) -> Result<()> {
    let vllm = Venv {
        python: workspace.root.join(".venv-vllm/bin/python"),
        frameworks: "LangGraph",
        setup: "bash adapters/vllm/setup-venv.sh",
    };
    let agents = Venv {
        python: cached_venv("AGENTRT_AGENTS_VENV", "venv-agents").join("bin/python"),
        frameworks: "the OpenAI Agents SDK and AutoGen",
        setup: "bash examples/setup-venv.sh",
    };
    let crewai = Venv {
        python: cached_venv("AGENTRT_CREWAI_VENV", "venv-crewai").join("bin/python"),
        frameworks: "CrewAI",
        setup: "bash sdk/hints/setup-venv.sh",
    };
    let metagpt = Venv {
        python: cached_venv("AGENTRT_METAGPT_VENV", "venv-metagpt").join("bin/python"),
        frameworks: "MetaGPT",
        setup: "bash sdk/hints/setup-venv.sh",
    };
    for venv in [vllm, agents, crewai, metagpt] {
        venv.test(workspace)?;
    }
    Ok(())
}

/// A venv of the setup scripts: `$variable`, else `~/.cache/agentrt/<name>`.
fn cached_venv(variable: &str, name: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os(variable) {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").unwrap_or_default();
    PathBuf::from(home).join(".cache/agentrt").join(name)
}

struct Venv {
    python: PathBuf,
    frameworks: &'static str,
    setup: &'static str,
}

impl Venv {
    fn test(&self, workspace: &Workspace) -> Result<()> {
        let skip = |why: &str| {
            eprintln!(
                "xtask: SKIPPED the hint hooks' tests against {}: {why} (run `{}`)",
                self.frameworks, self.setup
            );
        };
        if !self.python.exists() {
            skip(&format!("no {}", self.python.display()));
            return Ok(());
        }
        // A venv made by an older recipe may lack pytest: say so rather than fail.
        let has_pytest = workspace
            .command(&self.python)
            .args(["-c", "import pytest"])
            .stderr(std::process::Stdio::null())
            .status()
            .context("starting python")?
            .success();
        if !has_pytest {
            skip(&format!("no pytest in {}", self.python.display()));
            return Ok(());
        }
        eprintln!(
            "xtask: pytest {SUITE} with {} ({})",
            self.python.display(),
            self.frameworks
        );
        let status = workspace
            .command(&self.python)
            .args(["-m", "pytest", SUITE, "-q", "-rs", "-p", "no:cacheprovider"])
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .status()
            .context("starting pytest")?;
        if !status.success() {
            bail!(
                "the hint package's tests failed with {} ({status})",
                self.python.display()
            );
        }
        Ok(())
    }
}

//! For tests (feature `testing`): the real routers on free loopback ports — Dynamo's selection
//! service, from the venv `adapters/dynamo/setup-venv.sh` makes, and vLLM's router, from the venv
//! `adapters/vllm-router/setup-venv.sh` makes. Tests that need one print why and return when its
//! venv is missing.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `file` in the venv `$ENV_VAR` names, else in `~/.cache/agentrt/DEFAULT_VENV`; `Err` (the
/// reason to skip, naming `what` and the script that installs it) when it is missing.
fn venv_file(env_var: &str, default_venv: &str, file: &str, what: &str, setup: &str) -> Result<PathBuf, String> {
    let venv = std::env::var_os(env_var)
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/agentrt").join(default_venv)))
        .ok_or("HOME is not set")?;
    let path = venv.join(file);
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "{what} is not installed ({} is missing): run {setup}",
            path.display()
        ))
    }
}

/// The venv's Python: `$AGENTRT_DYNAMO_VENV`, else `~/.cache/agentrt/venv-dynamo`.
pub fn dynamo_python() -> Result<PathBuf, String> {
    venv_file(
        "AGENTRT_DYNAMO_VENV",
        "venv-dynamo",
        "bin/python",
        "the selection service",
        "adapters/dynamo/setup-venv.sh",
    )
}

/// vLLM's router binary: `$AGENTRT_VLLM_ROUTER_VENV/bin/vllm-router`, else
/// `~/.cache/agentrt/venv-vllm-router/bin/vllm-router`.
pub fn vllm_router_binary() -> Result<PathBuf, String> {
    venv_file(
        "AGENTRT_VLLM_ROUTER_VENV",
        "venv-vllm-router",
        "bin/vllm-router",
        "vLLM's router",
        "adapters/vllm-router/setup-venv.sh",
    )
}

fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

/// A router process on loopback, killed (by its pid) when dropped.
struct RouterProcess {
    child: Child,
    url: String,
}

impl RouterProcess {
    /// `command`, listening on `port`, once it answers `/health` (panics, naming `what`, when it
    /// exits first or does not answer within 60 s).
    async fn start(mut command: Command, port: u16, what: &str) -> Result<Self, String> {
        let child = command.spawn().map_err(|e| format!("starting {what}: {e}"))?;
        let mut process = Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(r) = http.get(format!("{}/health", process.url)).send().await {
                if r.status().is_success() {
                    return Ok(process);
                }
            }
            if let Ok(Some(status)) = process.child.try_wait() {
                panic!("{what} exited before it answered /health ({status})");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("{what} at {} did not answer /health within 60 s", process.url);
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RouterProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `python -m dynamo.select_service` on a free port, killed (by its pid) when dropped. It binds
/// every interface (the service has no flag for that); tests talk to it on loopback only.
pub struct SelectionService {
    process: RouterProcess,
    /// Its base URL, `http://127.0.0.1:PORT`.
    pub url: String,
}

impl SelectionService {
    /// Started and answering `/health`; `Err` (the reason to skip) when it is not installed.
    pub async fn start() -> Result<Self, String> {
        let python = dynamo_python()?;
        let port = free_port()?;
        let mut command = Command::new(python);
        command
            .args([
                "-m",
                "dynamo.select_service",
                "--port",
                &port.to_string(),
                "--threads",
                "1",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let process = RouterProcess::start(command, port, "the selection service").await?;
        Ok(Self {
            url: process.url.clone(),
            process,
        })
    }

    /// Stop it now (a router that dies).
    pub fn stop(&mut self) {
        self.process.stop();
    }
}

/// `vllm-router` on a free loopback port in front of `workers`, killed (by its pid) when dropped.
pub struct VllmRouter {
    _process: RouterProcess,
    /// Its base URL, `http://127.0.0.1:PORT`.
    pub url: String,
}

impl VllmRouter {
    /// Started with `args` (its `--policy …` and the rest) and answering `/health`; `Err` (the
    /// reason to skip) when it is not installed. Each worker must answer `GET /health`. Its
    /// stderr is the test's.
    pub async fn start(workers: &[&str], args: &[&str]) -> Result<Self, String> {
        let binary = vllm_router_binary()?;
        let (port, metrics) = (free_port()?, free_port()?);
        let mut command = Command::new(binary);
        command
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .arg("--worker-urls")
            .args(workers)
            .args(["--prometheus-port", &metrics.to_string(), "--log-level", "warning"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        let process = RouterProcess::start(command, port, "vllm-router").await?;
        Ok(Self {
            url: process.url.clone(),
            _process: process,
        })
    }
}

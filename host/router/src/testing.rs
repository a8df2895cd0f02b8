//! For tests (feature `testing`): the real routers on free loopback ports — Dynamo's selection
//! service, from the venv `adapters/dynamo/setup-venv.sh` makes, and vLLM's router, from the venv
//! `adapters/vllm-router/setup-venv.sh` makes. Tests that need one print why and return when its
//! venv is missing.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The venv's Python: `$AGENTRT_DYNAMO_VENV`, else `~/.cache/agentrt/venv-dynamo`.
pub fn dynamo_python() -> Result<PathBuf, String> {
    let venv = std::env::var_os("AGENTRT_DYNAMO_VENV")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/agentrt/venv-dynamo")))
        .ok_or("HOME is not set")?;
    let python = venv.join("bin/python");
    if python.is_file() {
        Ok(python)
    } else {
        Err(format!(
            "the selection service is not installed ({} is missing): run adapters/dynamo/setup-venv.sh",
            python.display()
        ))
    }
}

/// `python -m dynamo.select_service` on a free port, killed (by its pid) when dropped. It binds
/// every interface (the service has no flag for that); tests talk to it on loopback only.
pub struct SelectionService {
    child: Child,
    /// Its base URL, `http://127.0.0.1:PORT`.
    pub url: String,
}

impl SelectionService {
    /// Started and answering `/health`; `Err` (the reason to skip) when it is not installed.
    pub async fn start() -> Result<Self, String> {
        let python = dynamo_python()?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free port: {e}"))?
            .port();
        let child = Command::new(python)
            .args([
                "-m",
                "dynamo.select_service",
                "--port",
                &port.to_string(),
                "--threads",
                "1",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting the selection service: {e}"))?;
        let service = Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(r) = http.get(format!("{}/health", service.url)).send().await {
                if r.status().is_success() {
                    return Ok(service);
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "the selection service at {} did not answer /health within 60 s",
            service.url
        );
    }

    /// Stop it now (a router that dies).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for SelectionService {
    fn drop(&mut self) {
        self.stop();
    }
}

/// vLLM's router binary: `$AGENTRT_VLLM_ROUTER_VENV/bin/vllm-router`, else
/// `~/.cache/agentrt/venv-vllm-router/bin/vllm-router`; `Err` (the reason to skip) when missing.
pub fn vllm_router_binary() -> Result<PathBuf, String> {
    let venv = std::env::var_os("AGENTRT_VLLM_ROUTER_VENV")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/agentrt/venv-vllm-router")))
        .ok_or("HOME is not set")?;
    let binary = venv.join("bin/vllm-router");
    if binary.is_file() {
        Ok(binary)
    } else {
        Err(format!(
            "vLLM's router is not installed ({} is missing): run adapters/vllm-router/setup-venv.sh",
            binary.display()
        ))
    }
}

/// `vllm-router` on a free loopback port in front of `workers`, killed (by its pid) when dropped.
pub struct VllmRouter {
    child: Child,
    /// Its base URL, `http://127.0.0.1:PORT`.
    pub url: String,
}

impl VllmRouter {
    /// Started with `args` (its `--policy …` and the rest) and answering `/health`; `Err` (the
    /// reason to skip) when it is not installed. Each worker must answer `GET /health`.
    pub async fn start(workers: &[&str], args: &[&str]) -> Result<Self, String> {
        let binary = vllm_router_binary()?;
        let free = || {
            std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map(|a| a.port())
                .map_err(|e| format!("no free port: {e}"))
        };
        let (port, metrics) = (free()?, free()?);
        let mut command = Command::new(binary);
        command
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .arg("--worker-urls")
            .args(workers)
            .args(["--prometheus-port", &metrics.to_string(), "--log-level", "warning"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        let child = command.spawn().map_err(|e| format!("starting vllm-router: {e}"))?;
        let mut router = Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(r) = http.get(format!("{}/health", router.url)).send().await {
                if r.status().is_success() {
                    return Ok(router);
                }
            }
            if let Ok(Some(status)) = router.child.try_wait() {
                panic!("vllm-router exited before it answered /health ({status}); its stderr is above");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("vllm-router at {} did not answer /health within 60 s", router.url);
    }
}

impl Drop for VllmRouter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

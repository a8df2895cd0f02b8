//! For tests (feature `testing`): the real selection service on a free loopback port, from the
//! venv `adapters/dynamo/setup-venv.sh` makes. Tests that need it print why and return when the
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

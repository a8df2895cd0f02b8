//! Shared set-up of the MCP gateway's hostile tests: `agentrt serve` on loopback (the real router
//! and tenants, tenant keys `key-a`/`key-a2` → alpha, `key-b` → beta) with the gateway mounted in
//! front of a real MCP server that misbehaves on cue (`fixtures/mcp_hostile_server.py`, the
//! official Python SDK), and a raw MCP client: an attacker writes the bytes it likes — another's
//! session id, a number no double holds, a key twice — which an SDK client would not send.
// Each test binary uses part of this module.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::{Proxy, Setup};

pub const ALPHA: &str = "key-a";
/// Alpha's second key: the same tenant, another credential.
pub const ALPHA_2: &str = "key-a2";
pub const BETA: &str = "key-b";

/// The venv's Python (host/mcp/tests/python/setup-venv.sh), or why the test cannot run.
pub fn venv_python() -> Result<PathBuf, String> {
    let venv = std::env::var_os("AGENTRT_MCP_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/agentrt/venv-mcp"));
    let python = venv.join("bin/python");
    if python.is_file() {
        Ok(python)
    } else {
        Err(format!(
            "skipped: no MCP venv at {} (run `bash host/mcp/tests/python/setup-venv.sh`)",
            venv.display()
        ))
    }
}

/// `let python = python_or_skip!();` — returns from the test with a reason when the venv is missing.
#[macro_export]
macro_rules! python_or_skip {
    () => {
        match mcp_support::venv_python() {
            Ok(python) => python,
            Err(reason) => {
                eprintln!("{reason}");
                return;
            }
        }
    };
}

pub fn server_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/mcp_hostile_server.py")
}

/// The hostile server over Streamable HTTP; killed when dropped.
pub struct HostileServer {
    pub url: String,
    _child: tokio::process::Child,
}

impl HostileServer {
    pub async fn start(python: &Path) -> Self {
        Self::start_with(python, &[]).await
    }

    /// With extra arguments (`--json-response`).
    pub async fn start_with(python: &Path, extra: &[&str]) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = tokio::process::Command::new(python)
            .arg(server_script())
            .args(["--port", &port.to_string()])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("the hostile MCP server starts");
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "the hostile MCP server did not listen within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Self {
            url: format!("http://127.0.0.1:{port}/mcp"),
            _child: child,
        }
    }

    /// `--mcp-server` for a stdio instance of the same server.
    pub fn stdio_spec(python: &Path, name: &str) -> String {
        format!(
            "{name}=stdio:{} {} --stdio",
            python.display(),
            server_script().display()
        )
    }
}

/// `agentrt serve` with the gateway in front of `servers` (`NAME=URL|NAME=stdio:…`, no memo
/// unless `memo`), tenants alpha (two keys) and beta; `adjust` changes the gateway's options,
/// `setup` the proxy's.
pub async fn serve(
    servers: &[String],
    memo: bool,
    adjust: impl FnOnce(&mut agentrt_mcp::GatewayOptions) + 'static,
    setup: impl FnOnce(&mut Setup),
) -> Proxy {
    let servers: Vec<_> = servers
        .iter()
        .map(|s| agentrt_mcp::upstream::UpstreamSpec::parse(s).unwrap())
        .collect();
    let options: crate::support::McpOptions = Box::new(move |engine| {
        let mut options = agentrt_mcp::GatewayOptions {
            servers,
            memo_policy: memo.then(|| agentrt_mcp::MemoPolicy {
                component: agentrt_tests::load(engine, "tool-memo"),
                config: agentrt_runtime::SlotConfig::new("").with_init([("ttl-ms", "60000")]),
            }),
            ..agentrt_mcp::GatewayOptions::default()
        };
        adjust(&mut options);
        options
    });
    let mut s = Setup {
        keys: [(ALPHA, "alpha"), (ALPHA_2, "alpha"), (BETA, "beta")]
            .iter()
            .map(|(k, t)| (k.to_string(), t.to_string()))
            .collect(),
        mcp: Some(options),
        ..Setup::new("lru")
    };
    setup(&mut s);
    s.start().await
}

/// One HTTP answer, whole.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    /// Headers but `date` (which differs between any two answers), sorted.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    /// The JSON-RPC message of the body: the JSON itself, or the last SSE `data:` line that is one.
    pub fn message(&self) -> Value {
        if let Ok(value) = serde_json::from_str(&self.body) {
            return value;
        }
        self.body
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .rfind(|m| m.get("result").is_some() || m.get("error").is_some())
            .unwrap_or_else(|| panic!("no JSON-RPC answer in {} {:?}", self.status, self.body))
    }

    pub fn session_id(&self) -> Option<String> {
        self.headers
            .iter()
            .find(|(k, _)| k == "mcp-session-id")
            .map(|(_, v)| v.clone())
    }
}

/// An MCP client that sends what it is told, with a tenant key, at `/mcp/SERVER`.
#[derive(Clone)]
pub struct RawMcp {
    pub http: reqwest::Client,
    pub url: String,
    /// JSON-RPC ids: one per request (a session matches answers to requests by id).
    next_id: Arc<AtomicU64>,
}

pub const PROTOCOL: &str = "2025-06-18";

impl RawMcp {
    pub fn new(proxy: &Proxy, server: &str) -> Self {
        Self {
            http: reqwest::Client::new(),
            url: format!("{}/mcp/{server}", proxy.url),
            next_id: Arc::new(AtomicU64::new(1)),
        }
    }

    pub async fn send(
        &self,
        method: reqwest::Method,
        key: &str,
        session: Option<&str>,
        agent: &str,
        body: Option<String>,
    ) -> Answer {
        let mut request = self
            .http
            .request(method, &self.url)
            .bearer_auth(key)
            .header("accept", "application/json, text/event-stream")
            .header("x-agent-id", agent)
            .header("mcp-protocol-version", PROTOCOL);
        if let Some(session) = session {
            request = request.header("mcp-session-id", session);
        }
        if let Some(body) = body {
            request = request.header("content-type", "application/json").body(body);
        }
        let response = request.send().await.expect("the gateway answers");
        let status = response.status().as_u16();
        let mut headers: Vec<(String, String)> = response
            .headers()
            .iter()
            .filter(|(k, _)| *k != "date")
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
            .collect();
        headers.sort();
        let body = response.text().await.unwrap_or_default();
        Answer { status, headers, body }
    }

    pub async fn post(&self, key: &str, session: Option<&str>, body: String) -> Answer {
        self.send(reqwest::Method::POST, key, session, "raw-agent", Some(body))
            .await
    }

    /// `initialize` then `notifications/initialized`: the new session's id, or the refusal.
    pub async fn open(&self, key: &str) -> Result<String, Answer> {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}});
        let answer = self.post(key, None, init.to_string()).await;
        let Some(id) = answer.session_id().filter(|_| answer.status == 200) else {
            return Err(answer);
        };
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let done = self.post(key, Some(&id), initialized.to_string()).await;
        assert_eq!(done.status, 202, "{done:?}");
        Ok(id)
    }

    /// `tools/call` of `tool` with `arguments` written as they are (raw JSON text).
    pub async fn call_raw(&self, key: &str, session: &str, agent: &str, tool: &str, arguments: &str) -> Answer {
        let id = self.next_id.fetch_add(1, Relaxed);
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{arguments}}}}}"#
        );
        self.send(reqwest::Method::POST, key, Some(session), agent, Some(body))
            .await
    }

    pub async fn call(&self, key: &str, session: &str, tool: &str, arguments: Value) -> Answer {
        self.call_raw(key, session, "raw-agent", tool, &arguments.to_string())
            .await
    }

    pub async fn get(&self, key: &str, session: &str) -> Answer {
        self.send(reqwest::Method::GET, key, Some(session), "raw-agent", None)
            .await
    }

    pub async fn delete(&self, key: &str, session: &str) -> Answer {
        self.send(reqwest::Method::DELETE, key, Some(session), "raw-agent", None)
            .await
    }
}

/// The text of a successful tool result's first content block, parsed as JSON when it is.
pub fn result_text(message: &Value) -> Value {
    let text = message["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no tool result: {message}"));
    serde_json::from_str(text).unwrap_or(Value::String(text.to_string()))
}

/// The value of `name{labels}` in `/metrics` (0 when absent).
pub async fn metric(proxy: &Proxy, name: &str, labels: &str) -> f64 {
    let text = crate::support::metrics_text(proxy).await;
    let prefix = format!("{name}{{{labels}}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix).map(|v| v.parse().unwrap()))
        .unwrap_or(0.0)
}

/// The value of the unlabelled metric `name` in `/metrics` (0 when absent).
pub async fn metric_unlabelled(proxy: &Proxy, name: &str) -> f64 {
    let text = crate::support::metrics_text(proxy).await;
    let prefix = format!("{name} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix).map(|v| v.parse().unwrap()))
        .unwrap_or(0.0)
}

/// Resident memory of this process (the proxy runs in it), in MiB.
pub fn resident_mib() -> f64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: f64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0.0);
    pages * 4096.0 / (1 << 20) as f64
}

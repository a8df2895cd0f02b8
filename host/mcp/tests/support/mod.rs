//! Shared set-up of the gateway's tests: a real MCP server (tests/python/lookup_server.py, built
//! with the official Python SDK, in the venv tests/python/setup-venv.sh makes), the gateway on
//! loopback behind a tenancy that records every event, and rmcp clients that call it with the
//! proxy's identity headers.
// Each test binary uses part of this module.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::TcpListener as StdListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, StatusCode};
use http::{HeaderName, HeaderValue};
use rmcp::model::{CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{json, Value};

use agentrt_mcp::keys::tool_hash;
use agentrt_mcp::{Gateway, GatewayOptions, MemoPolicy, Refusal, Tenancy, TenantStream};
use agentrt_runtime::types::Event;
use agentrt_runtime::{PolicyRegistry, SlotConfig};

/// The venv's Python, or why the test cannot run.
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
        match support::venv_python() {
            Ok(python) => python,
            Err(reason) => {
                eprintln!("{reason}");
                return;
            }
        }
    };
}

pub fn server_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/lookup_server.py")
}

pub fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The Python lookup server over Streamable HTTP; killed when dropped.
pub struct LookupServer {
    pub url: String,
    pub port: u16,
    child: Child,
}

impl LookupServer {
    pub async fn start(python: &PathBuf, delay_ms: u64, change_every_ms: u64) -> Self {
        Self::start_on(python, free_port(), delay_ms, change_every_ms).await
    }

    pub async fn start_on(python: &PathBuf, port: u16, delay_ms: u64, change_every_ms: u64) -> Self {
        let child = Command::new(python)
            .arg(server_script())
            .args(["--port", &port.to_string()])
            .args(["--delay-ms", &delay_ms.to_string()])
            .args(["--change-every-ms", &change_every_ms.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the lookup server starts");
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "the lookup server did not listen on {port} within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Self {
            url: format!("http://127.0.0.1:{port}/mcp"),
            port,
            child,
        }
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for LookupServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Tenants by API key; every event each tenant's stream receives, in order.
pub struct RecordingTenancy {
    keys: HashMap<String, String>,
    registry: Arc<PolicyRegistry>,
    pub events: Arc<Mutex<HashMap<String, Vec<Event>>>>,
    clock: Instant,
}

/// The handle the recording tenancy gives agent `name` (as if the proxy had registered it):
/// `planner` is 7, every other name unknown (0).
pub fn handle_of(name: &str) -> u32 {
    if name == "planner" {
        7
    } else {
        0
    }
}

/// The session id the recording tenancy gives `key` in `tenant`.
pub fn session_of(tenant: &str, key: &str) -> u64 {
    tool_hash(&format!("{tenant}\0{key}"))
}

impl Tenancy for RecordingTenancy {
    fn tenant(&self, headers: &HeaderMap) -> Result<Arc<dyn TenantStream>, Refusal> {
        let key = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or_else(|| Refusal {
                status: StatusCode::UNAUTHORIZED,
                message: "missing `Authorization: Bearer <key>`".into(),
            })?;
        let name = self.keys.get(key).ok_or_else(|| Refusal {
            status: StatusCode::UNAUTHORIZED,
            message: "unknown API key".into(),
        })?;
        Ok(Arc::new(RecordingTenant {
            name: name.clone(),
            events: self.events.clone(),
            clock: self.clock,
        }))
    }

    fn registry(&self) -> Arc<PolicyRegistry> {
        self.registry.clone()
    }
}

struct RecordingTenant {
    name: String,
    events: Arc<Mutex<HashMap<String, Vec<Event>>>>,
    clock: Instant,
}

impl TenantStream for RecordingTenant {
    fn name(&self) -> &str {
        &self.name
    }
    fn agent(&self, name: &str) -> u32 {
        handle_of(name)
    }
    fn session(&self, key: &str) -> u64 {
        session_of(&self.name, key)
    }
    fn now_us(&self) -> u64 {
        self.clock.elapsed().as_micros() as u64
    }
    fn observe(&self, events: Vec<Event>) {
        self.events
            .lock()
            .unwrap()
            .entry(self.name.clone())
            .or_default()
            .extend(events);
    }
    /// No quota here: `agentrt serve`'s is tested through serve (tests/hostile/mcp_sessions.rs).
    fn admit(&self) -> Result<agentrt_mcp::InFlight, Refusal> {
        Ok(Box::new(()))
    }
}

/// A gateway on loopback.
pub struct TestGateway {
    pub url: String,
    pub gateway: Arc<Gateway>,
    pub events: Arc<Mutex<HashMap<String, Vec<Event>>>>,
    _cache: tempfile::TempDir,
}

/// Tenants `alpha` (key `key-a`) and `beta` (key `key-b`).
pub const TENANTS: [(&str, &str); 2] = [("key-a", "alpha"), ("key-b", "beta")];

/// The gateway in front of `servers` (`NAME=URL|stdio:…`), with the real tool-memo component
/// configured by `memo` (`None`: no memo).
pub async fn gateway(servers: &[String], memo: Option<&[(&str, &str)]>) -> TestGateway {
    gateway_with(servers, memo, |_| {}).await
}

pub async fn gateway_with(
    servers: &[String],
    memo: Option<&[(&str, &str)]>,
    adjust: impl FnOnce(&mut GatewayOptions),
) -> TestGateway {
    let (engine, cache) = agentrt_tests::engine();
    let memo_policy = memo.map(|init| MemoPolicy {
        component: agentrt_tests::load(&engine, "tool-memo"),
        config: SlotConfig::new("").with_init(init.iter().copied()),
    });
    let tenancy = Arc::new(RecordingTenancy {
        keys: TENANTS.iter().map(|(k, t)| (k.to_string(), t.to_string())).collect(),
        registry: Arc::new(PolicyRegistry::new(engine)),
        events: Arc::default(),
        clock: Instant::now(),
    });
    let mut options = GatewayOptions {
        servers: servers
            .iter()
            .map(|s| agentrt_mcp::upstream::UpstreamSpec::parse(s).unwrap())
            .collect(),
        memo_policy,
        ..GatewayOptions::default()
    };
    adjust(&mut options);
    let events = tenancy.events.clone();
    let gateway = Gateway::new(options, tenancy);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = agentrt_mcp::routes::router(&gateway);
    tokio::spawn(async move { axum::serve(listener, app).await });
    TestGateway {
        url,
        gateway,
        events,
        _cache: cache,
    }
}

impl TestGateway {
    pub fn events_of(&self, tenant: &str) -> Vec<Event> {
        self.events.lock().unwrap().get(tenant).cloned().unwrap_or_default()
    }

    pub fn metrics(&self) -> String {
        agentrt_exposition::render_one(self.gateway.clone())
    }

    /// The value of metric `name` with `labels` (`tenant="alpha",server="lookup"`).
    pub fn metric(&self, name: &str, labels: &str) -> f64 {
        let prefix = format!("{name}{{{labels}}} ");
        self.metrics()
            .lines()
            .find_map(|l| l.strip_prefix(&prefix).map(|v| v.parse().unwrap()))
            .unwrap_or(0.0)
    }
}

pub type Client = RunningService<RoleClient, ClientConfig>;

/// An rmcp client of `url` with the tenant `key` and identity headers.
pub async fn client(url: &str, key: &str, agent: &str, session: &str) -> Client {
    try_client(url, key, agent, session).await.expect("the client connects")
}

pub async fn try_client(url: &str, key: &str, agent: &str, session: &str) -> Result<Client, String> {
    let mut headers = HashMap::new();
    headers.insert(
        HeaderName::from_static("x-agent-id"),
        HeaderValue::from_str(agent).unwrap(),
    );
    headers.insert(
        HeaderName::from_static("x-session-id"),
        HeaderValue::from_str(session).unwrap(),
    );
    let config = StreamableHttpClientTransportConfig::with_uri(url)
        .auth_header(key)
        .custom_headers(headers);
    let transport = StreamableHttpClientTransport::with_client(reqwest::Client::new(), config);
    ClientConfig::new(ClientCapabilities::default(), Implementation::new("gateway-test", "0"))
        .serve(transport)
        .await
        .map_err(|e| e.to_string())
}

pub fn call(tool: &str, args: Value) -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new(tool.to_string());
    params.arguments = args.as_object().cloned();
    params
}

/// The JSON text of a tool result's first content block.
pub fn text(result: &CallToolResult) -> Value {
    let content = serde_json::to_value(&result.content).unwrap();
    let text = content[0]["text"].as_str().unwrap_or("null").to_string();
    serde_json::from_str(&text).unwrap_or(Value::String(text))
}

/// Whether a result was served from memory (the gateway's `_meta` mark).
pub fn is_memo_hit(result: &CallToolResult) -> bool {
    result
        .meta
        .as_ref()
        .and_then(|m| m.get(agentrt_mcp::MEMO_META_KEY))
        .is_some_and(|m| m["hit"] == json!(true))
}

/// The server's own counters (its `stats` tool: never memoized).
pub async fn server_stats(client: &Client) -> Value {
    text(&client.peer().call_tool(call("stats", json!({}))).await.unwrap())
}

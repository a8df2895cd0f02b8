//! The MCP servers behind the gateway: how each is reached, and one client session to it per
//! tenant.
//!
//! `--mcp-server NAME=URL` names a Streamable HTTP server; `--mcp-server NAME=stdio:COMMAND ARGS…`
//! a server the gateway launches and talks to over its stdin/stdout (arguments split on spaces,
//! no shell). Agents reach server NAME at `/mcp/NAME`.
//!
//! Each tenant gets its own client session to each server (its own child process for stdio
//! servers): whatever a server keeps per session — subscriptions, log level, state a tool builds —
//! is never shared between tenants. A session whose transport closed (the server died, the
//! network dropped) is replaced on the next request, so a server that comes back is used again.
//!
//! A stdio server's child process starts with the environment [`crate::child_env`] builds — never
//! agentrt's own. Errors name a server by [`UpstreamSpec::describe`]: the URL without credentials
//! or query, the program without its arguments.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{ClientCapabilities, ClientConfig, Implementation, ServerPeerInfo, Tool};
use rmcp::service::{Peer, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};

use crate::child_env::ChildEnv;
use crate::eligibility::{Eligibility, MemoRules};

/// How to reach one server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transport {
    /// Streamable HTTP at this URL.
    Http(String),
    /// A child process speaking MCP on stdio.
    Stdio {
        /// The program to run (the first word after `stdio:`).
        program: String,
        /// Its arguments, split on spaces (no shell).
        args: Vec<String>,
    },
}

/// One configured server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamSpec {
    /// The server's name, its route `/mcp/NAME` and its part of `SERVER/TOOL` names.
    pub name: String,
    /// How to reach it.
    pub transport: Transport,
}

impl UpstreamSpec {
    /// Parse `NAME=URL` or `NAME=stdio:COMMAND ARGS…` (`--mcp-server`). Errors never repeat the
    /// target: a URL may carry credentials, a command line a token.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let (name, target) = raw
            .split_once('=')
            .ok_or_else(|| "--mcp-server: expected NAME=URL or NAME=stdio:COMMAND (no `=` in the value)".to_string())?;
        validate_name(name).map_err(|e| format!("--mcp-server: {e}"))?;
        let transport = if let Some(command) = target.strip_prefix("stdio:") {
            let mut words = command.split_whitespace().map(str::to_string);
            let program = words
                .next()
                .ok_or_else(|| format!("--mcp-server {name}: `stdio:` names no command"))?;
            Transport::Stdio {
                program,
                args: words.collect(),
            }
        } else if target.starts_with("http://") {
            Transport::Http(target.to_string())
        } else {
            let scheme = target.split_once("://").map_or("", |(scheme, _)| scheme);
            let what = if scheme.is_empty() {
                "no URL scheme".to_string()
            } else {
                format!("the scheme `{}`", scheme.chars().take(16).collect::<String>())
            };
            return Err(format!(
                "--mcp-server {name}: the target ({what}) is neither an http:// URL nor stdio:COMMAND \
                 (https upstreams are not built in: reach them through a local TLS terminator)"
            ));
        };
        Ok(Self {
            name: name.to_string(),
            transport,
        })
    }

    /// Where the server is, for error messages: the URL without its credentials or query, or the
    /// program without its arguments.
    pub fn describe(&self) -> String {
        match &self.transport {
            Transport::Http(url) => format!("MCP server `{}` ({})", self.name, agentrt_guards::shown_url::shown(url)),
            Transport::Stdio { program, .. } => format!("MCP server `{}` (stdio: {program})", self.name),
        }
    }

    /// `text` (an error from the transport, which may quote the URL) without the URL's secrets.
    pub fn redact(&self, text: &str) -> String {
        let Transport::Http(url) = &self.transport else {
            return text.to_string();
        };
        agentrt_guards::shown_url::redact(text, url)
    }
}

/// A server name is 1–64 ASCII letters, digits, `-`, `_` or `.`: it is a URL path segment and a
/// metric label.
fn validate_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 64 {
        return Err("the server name must be 1 to 64 characters".into());
    }
    match name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        Some(c) => Err(format!(
            "the server name {name:?} contains {c:?}; use letters, digits, `-`, `_` or `.`"
        )),
        None => Ok(()),
    }
}

/// A live client session to one server for one tenant, and what it learned of the server's tools.
pub struct Connection {
    running: RunningService<RoleClient, ClientConfig>,
    /// Tool name → whether its results may be memoized; filled by listing the tools.
    tools: Mutex<Option<HashMap<String, Eligibility>>>,
}

impl Connection {
    /// The session's client side, to send requests to the server.
    pub fn peer(&self) -> &Peer<RoleClient> {
        self.running.peer()
    }

    /// True once the session or its transport closed: the next request makes a new one.
    pub fn is_closed(&self) -> bool {
        self.running.is_closed() || self.running.peer().is_transport_closed()
    }

    /// The server's answer to `initialize`: its capabilities, info and instructions.
    pub fn server_info(&self) -> Option<Arc<ServerPeerInfo>> {
        self.running.peer().peer_info()
    }

    /// Remember the server's tools (from a listing) under `rules`.
    pub fn learn_tools(&self, server: &str, tools: &[Tool], rules: &MemoRules) {
        let learned = tools
            .iter()
            .map(|t| (t.name.to_string(), rules.eligibility(server, t)))
            .collect();
        *self.tools.lock().unwrap_or_else(|p| p.into_inner()) = Some(learned);
    }

    /// What the last listing said of `tool`: `None` if there was no listing yet, `Some(None)` if
    /// the listing did not have it.
    pub fn tool(&self, tool: &str) -> Option<Option<Eligibility>> {
        self.tools
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|t| t.get(tool).copied())
    }

    /// The tool names of the last listing, sorted (for "unknown tool" errors).
    pub fn tool_names(&self) -> Vec<String> {
        let tools = self.tools.lock().unwrap_or_else(|p| p.into_inner());
        let mut names: Vec<String> = tools.iter().flat_map(|t| t.keys().cloned()).collect();
        names.sort();
        names
    }
}

type Slot = Arc<tokio::sync::Mutex<Option<Arc<Connection>>>>;

/// Every tenant's sessions to every server, made on first use.
pub struct Connections {
    slots: Mutex<HashMap<(String, String), Slot>>,
    /// How long a connection (the MCP handshake) may take.
    pub connect_timeout: Duration,
    /// The environment of stdio servers.
    stdio_env: ChildEnv,
}

impl Connections {
    /// No sessions yet; each is made on first use, within `connect_timeout`, a stdio server's
    /// child process with `stdio_env`.
    pub fn new(connect_timeout: Duration, stdio_env: ChildEnv) -> Self {
        Self {
            slots: Mutex::default(),
            connect_timeout,
            stdio_env,
        }
    }

    /// `tenant`'s live session to `spec`, connecting (or reconnecting) when there is none.
    /// Concurrent first requests wait for one connection instead of each making their own.
    pub async fn get(&self, tenant: &str, spec: &UpstreamSpec) -> Result<Arc<Connection>, String> {
        let slot = self
            .slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry((tenant.to_string(), spec.name.clone()))
            .or_default()
            .clone();
        let mut slot = slot.lock().await;
        if let Some(live) = slot.as_ref().filter(|c| !c.is_closed()) {
            return Ok(live.clone());
        }
        let connection = tokio::time::timeout(self.connect_timeout, connect(spec, &self.stdio_env))
            .await
            .map_err(|_| {
                format!(
                    "{} did not complete the MCP handshake within {:?}",
                    spec.describe(),
                    self.connect_timeout
                )
            })??;
        let connection = Arc::new(connection);
        *slot = Some(connection.clone());
        Ok(connection)
    }

    /// Drop `tenant`'s session to `server` (after a transport failure), so the next request
    /// makes a new one.
    pub async fn forget(&self, tenant: &str, server: &str) {
        let slot = self
            .slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(tenant.to_string(), server.to_string()))
            .cloned();
        if let Some(slot) = slot {
            slot.lock().await.take();
        }
    }
}

async fn connect(spec: &UpstreamSpec, stdio_env: &ChildEnv) -> Result<Connection, String> {
    let client = ClientConfig::new(
        // No sampling, roots or elicitation: the gateway cannot route a server's request back to
        // one of several agents, so it does not offer to.
        ClientCapabilities::default(),
        Implementation::new("agentrt-mcp-gateway", env!("CARGO_PKG_VERSION")),
    );
    let running = match &spec.transport {
        Transport::Http(url) => client
            .serve(StreamableHttpClientTransport::from_config(
                // rmcp holds a session's 17th request until one of 16 gets its answer's headers: a
                // server that answers a POST only when done (JSON response mode) would have one
                // agent's 16 stuck calls hold every other call of the tenant. Each call is its own
                // HTTP request; the tenant's in-flight quota and the call deadline bound them.
                StreamableHttpClientTransportConfig::with_uri(url.as_str()).max_concurrent_requests(usize::MAX),
            ))
            .await
            .map_err(|e| {
                format!(
                    "{}: MCP handshake failed: {}",
                    spec.describe(),
                    spec.redact(&e.to_string())
                )
            })?,
        Transport::Stdio { program, args } => {
            let mut command = tokio::process::Command::new(program);
            command.args(args);
            stdio_env.apply(&mut command);
            let child = TokioChildProcess::new(command)
                .map_err(|e| format!("{}: could not start {program}: {e}", spec.describe()))?;
            client
                .serve(child)
                .await
                .map_err(|e| format!("{}: MCP handshake failed: {e}", spec.describe()))?
        }
    };
    Ok(Connection {
        running,
        tools: Mutex::new(None),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_parse_from_flags_and_bad_ones_say_why() {
        let http = UpstreamSpec::parse("search=http://127.0.0.1:9000/mcp").unwrap();
        assert_eq!(http.transport, Transport::Http("http://127.0.0.1:9000/mcp".into()));
        let stdio = UpstreamSpec::parse("files=stdio:python3 server.py --root /tmp").unwrap();
        assert_eq!(
            stdio.transport,
            Transport::Stdio {
                program: "python3".into(),
                args: vec!["server.py".into(), "--root".into(), "/tmp".into()]
            }
        );
        assert!(UpstreamSpec::parse("nothing").unwrap_err().contains("NAME=URL"));
        assert!(UpstreamSpec::parse("a/b=http://x").unwrap_err().contains("'/'"));
        assert!(UpstreamSpec::parse("s=https://x").unwrap_err().contains("https"));
        assert!(UpstreamSpec::parse("s=stdio:").unwrap_err().contains("no command"));
    }

    #[test]
    fn credentials_in_a_url_never_reach_an_error() {
        let spec = UpstreamSpec::parse("s=http://user:hunter2@127.0.0.1:9/mcp?token=t0ken").unwrap();
        let shown = spec.describe();
        assert_eq!(shown, "MCP server `s` (http://***@127.0.0.1:9/mcp?***)");
        let error = spec.redact("error sending request for url (http://user:hunter2@127.0.0.1:9/mcp?token=t0ken)");
        assert!(!error.contains("hunter2") && !error.contains("t0ken"), "{error}");
        for bad in [
            "s=https://user:hunter2@x/mcp",
            "s=ftp://hunter2",
            "http://user:hunter2@x",
        ] {
            let error = UpstreamSpec::parse(bad).unwrap_err();
            assert!(!error.contains("hunter2"), "{error}");
        }
        let plain = UpstreamSpec::parse("s=http://127.0.0.1:9/mcp").unwrap();
        assert_eq!(plain.describe(), "MCP server `s` (http://127.0.0.1:9/mcp)");
    }
}

//! The gateway's command-line options, flattened into `agentrt serve`'s.

use std::sync::Arc;
use std::time::Duration;

use agentrt_runtime::{PolicyComponent, SlotConfig};

use crate::child_env::ChildEnv;
use crate::eligibility::MemoRules;
use crate::gateway::{
    GatewayOptions, MemoPolicy, DEFAULT_CALL_TIMEOUT, DEFAULT_MAX_SESSIONS_PER_TENANT, DEFAULT_SESSION_IDLE,
};
use crate::memo::MemoLimits;
use crate::memo_store::MemoBudget;
use crate::upstream::UpstreamSpec;

/// The `--mcp-*` flags of `agentrt serve`, as given; [`McpArgs::options`] checks them.
// clap makes a doc comment on an `Args` struct the `about` of the command it is flattened into,
// until that command's own doc replaces it: `agentrt serve`'s subcommand doc does (as for serve's
// other flag groups), so `serve --help` is unchanged.
#[derive(clap::Args, Debug, Clone)]
pub struct McpArgs {
    /// An MCP server to front at `/mcp/NAME`: `NAME=http://HOST:PORT/PATH` (Streamable HTTP) or
    /// `NAME=stdio:COMMAND ARGS…` (launched by the gateway, one process per tenant; arguments
    /// split on spaces). Repeatable. Without any, no `/mcp` routes.
    #[arg(long = "mcp-server", value_name = "NAME=URL|NAME=stdio:COMMAND")]
    pub servers: Vec<String>,
    /// Each tenant's tool-memo policy (slot `TENANT/tools`): a component name or `.wasm` path, or
    /// `none` for no memo (every call goes to its server).
    #[arg(long = "mcp-memo-policy", default_value = "tool-memo")]
    pub memo_policy: String,
    /// `key=value` passed to the tool-memo policy's `init` (repeatable), e.g. `ttl-ms=60000`.
    #[arg(long = "mcp-memo-config", value_name = "KEY=VALUE")]
    pub memo_config: Vec<String>,
    /// A tool whose results may be memoized although its server does not mark it read-only
    /// (`SERVER/TOOL`, repeatable). Only for tools known to have no side effects.
    #[arg(long = "mcp-memo-allow", value_name = "SERVER/TOOL")]
    pub memo_allow: Vec<String>,
    /// A tool whose results are never memoized, whatever its annotations (`SERVER/TOOL`, repeatable).
    #[arg(long = "mcp-memo-deny", value_name = "SERVER/TOOL")]
    pub memo_deny: Vec<String>,
    /// Results one tenant's memo keeps at most.
    #[arg(long = "mcp-memo-max-entries", default_value_t = MemoBudget::default().max_entries)]
    pub memo_max_entries: usize,
    /// Bytes of results one tenant's memo keeps at most.
    #[arg(long = "mcp-memo-max-bytes", default_value_t = MemoBudget::default().max_bytes)]
    pub memo_max_bytes: usize,
    /// The oldest result ever served, whatever the policy says (ms): the host's ceiling on TTLs.
    #[arg(long = "mcp-memo-max-age-ms", default_value_t = 3_600_000)]
    pub memo_max_age_ms: u64,
    /// How long a call waits for the policy's memo decision before going to the server (ms).
    #[arg(long = "mcp-memo-decision-ms", default_value_t = 50)]
    pub memo_decision_ms: u64,
    /// How long connecting to a server (the MCP handshake) may take (ms); at least 1.
    #[arg(long = "mcp-connect-timeout-ms", value_parser = agentrt_runtime::flag_values::at_least_one_ms, default_value_t = 10_000)]
    pub connect_timeout_ms: u64,
    /// A `Host` the `/mcp` routes accept (repeatable; default: loopback names only, against DNS
    /// rebinding); `*` accepts any (behind a proxy that checks it, or with tenant keys).
    #[arg(long = "mcp-allowed-host", value_name = "HOST")]
    pub allowed_hosts: Vec<String>,
    /// MCP sessions one tenant may have open at once, all servers together; an `initialize` past
    /// it gets 429.
    // The ids keep clear of serve's own `--max-sessions` and `--session-idle-ms`.
    #[arg(id = "mcp_max_sessions", long = "mcp-max-sessions", default_value_t = DEFAULT_MAX_SESSIONS_PER_TENANT)]
    pub max_sessions: usize,
    /// An MCP session without a request for this long is closed and its place freed (ms); at
    /// least 1.
    #[arg(id = "mcp_session_idle_ms", long = "mcp-session-idle-ms", value_parser = agentrt_runtime::flag_values::at_least_one_ms, default_value_t = DEFAULT_SESSION_IDLE.as_millis() as u64)]
    pub session_idle_ms: u64,
    /// How long a server may take to answer one request (ms); past it the request is cancelled at
    /// the server and the agent gets a JSON-RPC error (-32001). At least 1 (there is no "no
    /// timeout"); checked with or without `--mcp-server`.
    #[arg(long = "mcp-call-timeout-ms", value_parser = agentrt_runtime::flag_values::at_least_one_ms, default_value_t = DEFAULT_CALL_TIMEOUT.as_millis() as u64)]
    pub call_timeout_ms: u64,
    /// A variable a `stdio:` server gets besides PATH, HOME, LANG, LC_ALL, LC_CTYPE, TMPDIR and TZ
    /// (repeatable): `NAME` passes agentrt's own value, `NAME=VALUE` sets one. Nothing else of
    /// agentrt's environment reaches a stdio server.
    #[arg(long = "mcp-stdio-env", value_name = "NAME[=VALUE]")]
    pub stdio_env: Vec<String>,
}

impl McpArgs {
    /// The gateway's options, or `None` when no server is configured. `load` finds and loads the
    /// memo policy's component by name; `slot` gives its limits (the proxy's policy limits).
    pub fn options(
        &self,
        load: impl FnOnce(&str) -> anyhow::Result<Arc<PolicyComponent>>,
        slot: &SlotConfig,
        max_body_bytes: usize,
        max_json_depth: usize,
    ) -> anyhow::Result<Option<GatewayOptions>> {
        if self.servers.is_empty() {
            return Ok(None);
        }
        let servers = self.parse_servers()?;
        let rules = MemoRules {
            allow: entries(&self.memo_allow, "--mcp-memo-allow")?,
            deny: entries(&self.memo_deny, "--mcp-memo-deny")?,
        };
        let memo_policy = self.load_memo_policy(load, slot)?;
        self.check_limits()?;
        let stdio_env = ChildEnv::parse(&self.stdio_env).map_err(anyhow::Error::msg)?;
        let allowed_hosts = self.accepted_hosts();
        Ok(Some(GatewayOptions {
            servers,
            rules,
            memo_policy,
            memo_limits: MemoLimits {
                budget: MemoBudget {
                    max_entries: self.memo_max_entries,
                    max_bytes: self.memo_max_bytes,
                },
                decision_timeout: Duration::from_millis(self.memo_decision_ms),
                max_age_us: self.memo_max_age_ms.saturating_mul(1000),
            },
            connect_timeout: Duration::from_millis(self.connect_timeout_ms),
            allowed_hosts,
            max_body_bytes,
            max_json_depth,
            max_sessions_per_tenant: self.max_sessions,
            session_idle: Duration::from_millis(self.session_idle_ms),
            call_timeout: Duration::from_millis(self.call_timeout_ms),
            stdio_env,
            ..GatewayOptions::default()
        }))
    }

    /// The `--mcp-server` specs, parsed; a name may front one server only.
    fn parse_servers(&self) -> anyhow::Result<Vec<UpstreamSpec>> {
        let servers = self
            .servers
            .iter()
            .map(|raw| UpstreamSpec::parse(raw))
            .collect::<Result<Vec<_>, _>>()
            .map_err(anyhow::Error::msg)?;
        for (i, server) in servers.iter().enumerate() {
            anyhow::ensure!(
                servers[..i].iter().all(|s| s.name != server.name),
                "--mcp-server: the name `{}` is given twice",
                server.name
            );
        }
        Ok(servers)
    }

    /// The tool-memo policy's component and `init` config, or `None` for `--mcp-memo-policy none`.
    fn load_memo_policy(
        &self,
        load: impl FnOnce(&str) -> anyhow::Result<Arc<PolicyComponent>>,
        slot: &SlotConfig,
    ) -> anyhow::Result<Option<MemoPolicy>> {
        let name = match self.memo_policy.as_str() {
            "none" => return Ok(None),
            name => name,
        };
        let mut init = Vec::new();
        for pair in &self.memo_config {
            let (k, v) = pair
                .split_once('=')
                .ok_or_else(|| anyhow::anyhow!("--mcp-memo-config {pair:?}: expected KEY=VALUE"))?;
            init.push((k.to_string(), v.to_string()));
        }
        let component = load(name).map_err(|e| anyhow::anyhow!("--mcp-memo-policy {name}: {e:#}"))?;
        Ok(Some(MemoPolicy {
            component,
            config: SlotConfig { init, ..slot.clone() },
        }))
    }

    /// The timing and session limits, each at least 1, and the idle limit above the call limit.
    fn check_limits(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.memo_decision_ms > 0, "--mcp-memo-decision-ms must be at least 1");
        anyhow::ensure!(self.max_sessions > 0, "--mcp-max-sessions must be at least 1");
        anyhow::ensure!(self.call_timeout_ms > 0, "--mcp-call-timeout-ms must be at least 1");
        // A session is idle while a call of its runs: it must outlive the longest call.
        anyhow::ensure!(
            self.session_idle_ms > self.call_timeout_ms,
            "--mcp-session-idle-ms ({}) must exceed --mcp-call-timeout-ms ({}): a session would expire during a call",
            self.session_idle_ms,
            self.call_timeout_ms
        );
        Ok(())
    }

    /// The `Host` values the `/mcp` routes accept: empty for `*` (any), loopback names by default.
    fn accepted_hosts(&self) -> Vec<String> {
        if self.allowed_hosts.iter().any(|h| h == "*") {
            Vec::new()
        } else if self.allowed_hosts.is_empty() {
            GatewayOptions::default().allowed_hosts
        } else {
            self.allowed_hosts.clone()
        }
    }
}

fn entries(raw: &[String], flag: &str) -> anyhow::Result<std::collections::BTreeSet<String>> {
    raw.iter()
        .map(|r| MemoRules::parse_entry(r, flag).map_err(anyhow::Error::msg))
        .collect()
}

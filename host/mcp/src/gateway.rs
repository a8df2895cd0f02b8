//! The gateway's shared state: the configured servers, every tenant's client sessions and memo,
//! the agents' sessions and their owners, and the counters.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentrt_guards::body_read::{BodyBudget, BodyTiming};
use agentrt_runtime::{PolicyComponent, SlotConfig};

use crate::child_env::ChildEnv;
use crate::eligibility::MemoRules;
use crate::memo::{MemoLimits, TenantMemo};
use crate::memo_worker::MemoWorker;
use crate::metrics::{GatewayMetrics, SessionCounts};
use crate::sessions::SessionTable;
use crate::tenancy::{Tenancy, TenantStream};
use crate::upstream::{Connections, UpstreamSpec};

/// The registry slot of each tenant's tool-memo policy.
pub const TOOLS_SLOT: &str = "tools";

/// The policy that decides each tenant's memo, and its configuration.
#[derive(Clone)]
pub struct MemoPolicy {
    /// The tool-memo policy's component, started once per tenant.
    pub component: Arc<PolicyComponent>,
    /// Its limits and `init` pairs (the label is set per tenant when it is installed).
    pub config: SlotConfig,
}

/// How the gateway runs.
#[derive(Clone)]
pub struct GatewayOptions {
    /// The MCP servers fronted, each at `/mcp/NAME`; names are unique.
    pub servers: Vec<UpstreamSpec>,
    /// Which tools the operator allows or denies for the memo, by name.
    pub rules: MemoRules,
    /// `None`: no memo; every call goes to its server (events are still reported).
    pub memo_policy: Option<MemoPolicy>,
    /// Each tenant's memo budget, decision deadline and oldest servable result.
    pub memo_limits: MemoLimits,
    /// How long connecting to a server (the MCP handshake) may take.
    pub connect_timeout: Duration,
    /// `Host` values the MCP endpoint accepts (DNS-rebinding protection); empty: any.
    pub allowed_hosts: Vec<String>,
    /// The largest MCP request body accepted.
    pub max_body_bytes: usize,
    /// How deep objects and arrays may nest in an MCP request body (`--max-json-depth`); deeper
    /// gets 400 before anything parses or scans it.
    pub max_json_depth: usize,
    /// Sessions one tenant may have open at once, all servers together.
    pub max_sessions_per_tenant: usize,
    /// A session without a message for this long is closed (and its place freed).
    pub session_idle: Duration,
    /// How long one request to a server may take, from sending it to its answer.
    pub call_timeout: Duration,
    /// What a `stdio:` server's environment has besides the base (`child_env::BASE`).
    pub stdio_env: ChildEnv,
    /// The budget request bodies being read share (the proxy's, in `agentrt serve`), and how fast
    /// a body must arrive ([`agentrt_guards::body_read`]).
    pub body_budget: Arc<BodyBudget>,
    /// How fast an MCP request body must arrive.
    pub body_timing: BodyTiming,
}

/// Defaults of the limits above (the flags' defaults).
pub const DEFAULT_MAX_SESSIONS_PER_TENANT: usize = 1024;
/// rmcp's own default keep-alive.
pub const DEFAULT_SESSION_IDLE: Duration = Duration::from_secs(300);
/// The official TypeScript SDK's default request timeout (`DEFAULT_REQUEST_TIMEOUT_MSEC`).
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);

impl Default for GatewayOptions {
    fn default() -> Self {
        Self {
            servers: Vec::new(),
            rules: MemoRules::default(),
            memo_policy: None,
            memo_limits: MemoLimits::default(),
            connect_timeout: Duration::from_secs(10),
            allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "::1".into()],
            max_body_bytes: 4 << 20,
            max_json_depth: agentrt_guards::json_shape::DEFAULT_MAX_DEPTH,
            max_sessions_per_tenant: DEFAULT_MAX_SESSIONS_PER_TENANT,
            session_idle: DEFAULT_SESSION_IDLE,
            call_timeout: DEFAULT_CALL_TIMEOUT,
            stdio_env: ChildEnv::default(),
            // Standing alone, as `agentrt serve`'s defaults; serve gives its own budget.
            body_budget: BodyBudget::new(256 << 20, 64 << 20),
            body_timing: BodyTiming::default(),
        }
    }
}

/// The MCP gateway: one per server process, shared by every route and session.
pub struct Gateway {
    /// How it was configured.
    pub options: GatewayOptions,
    /// The server it is mounted in: tenants, their streams and the policy registry.
    pub tenancy: Arc<dyn Tenancy>,
    /// Each tenant's client sessions to the upstream servers.
    pub connections: Connections,
    /// Every agent session and who opened it.
    pub sessions: Arc<SessionTable>,
    /// Each tenant's memo; `None` when its policy did not start (calls then all go upstream).
    memos: Mutex<HashMap<String, Option<Arc<TenantMemo>>>>,
    /// Its counters, shown on `/metrics` by the gateway's [`agentrt_exposition::Report`].
    pub metrics: GatewayMetrics,
}

impl Gateway {
    /// A gateway with no connections yet: each tenant's servers are connected, and its memo
    /// policy started, on its first request.
    pub fn new(options: GatewayOptions, tenancy: Arc<dyn Tenancy>) -> Arc<Self> {
        Arc::new(Self {
            connections: Connections::new(options.connect_timeout, options.stdio_env.clone()),
            sessions: SessionTable::new(options.max_sessions_per_tenant),
            options,
            tenancy,
            memos: Mutex::default(),
            metrics: GatewayMetrics::default(),
        })
    }

    /// `tenant`'s memo, starting its tool-memo policy (slot `TENANT/tools`) on first use.
    pub fn memo(&self, tenant: &dyn TenantStream) -> Option<Arc<TenantMemo>> {
        let policy = self.options.memo_policy.as_ref()?;
        let mut memos = self.memos.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(memo) = memos.get(tenant.name()) {
            return memo.clone();
        }
        let started = self
            .tenancy
            .registry()
            .install(
                tenant.name(),
                TOOLS_SLOT,
                policy.component.clone(),
                policy.config.clone(),
            )
            .map_err(|e| e.to_string())
            .and_then(|handle| MemoWorker::spawn(tenant.name(), handle).map_err(|e| e.to_string()));
        let memo = match started {
            Ok(worker) => Some(Arc::new(TenantMemo::new(worker, self.options.memo_limits))),
            Err(error) => {
                // Said once: the tenant's calls all go to their servers from now on.
                tracing::warn!(tenant = tenant.name(), %error, "tool-memo policy did not start; no memo for this tenant");
                None
            }
        };
        memos.insert(tenant.name().to_string(), memo.clone());
        memo
    }
}

/// The gateway's families on `/metrics` ([`GatewayMetrics::report`]), each tenant's memo size and
/// sessions read now.
impl agentrt_exposition::Report for Gateway {
    fn report(&self, out: &mut agentrt_exposition::Exposition<'_>) -> std::fmt::Result {
        let mut sizes: Vec<(String, usize, usize)> = self
            .memos
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter_map(|(tenant, memo)| {
                let (entries, bytes) = memo.as_ref()?.size();
                Some((tenant.clone(), entries, bytes))
            })
            .collect();
        sizes.sort();
        let sessions = SessionCounts {
            open: self.sessions.open_per_tenant(),
            closed: self.sessions.closed(),
        };
        self.metrics.report(&sizes, &sessions, out)
    }
}

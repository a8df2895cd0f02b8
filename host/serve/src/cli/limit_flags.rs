//! The flag groups of `agentrt serve` that bound what clients and policies may use: the front
//! door's limits, each policy slot's sandbox, each tenant's tables and quotas. Each group turns
//! its flags into the settings its layer takes, refusing values that layer cannot run with.

use std::time::Duration;

use agentrt_runtime::flag_values;
use agentrt_runtime::{BreakerConfig, EngineOptions, SandboxLimits, SlotConfig};

use crate::front::limits::Limits;
use crate::front::request_budget::RequestBudget;
use crate::table::TableLimits;
use crate::tenant::quotas::{Quotas, DEFAULT_CPU_MS_PER_S, DEFAULT_MAX_IN_FLIGHT, DEFAULT_WARMUP_TOKENS_PER_S};
use crate::tenant::worker::DEFAULT_QUEUE_JOBS;

/// Every tenant's quotas (docs/security.md); a tenant over one gets a clear error or a throttled
/// side effect, never another tenant's capacity. Each tenant's policy memory is
/// `--policy-memory-mib`. The config file's `[defaults]` replace these, and a tenant's own
/// section may set any of them for that tenant.
#[derive(clap::Args, Debug)]
pub struct QuotaArgs {
    /// Requests one tenant may have in flight; more get 429 before their body is read. 0 = no limit.
    #[arg(long, default_value_t = DEFAULT_MAX_IN_FLIGHT)]
    pub tenant_max_in_flight: u64,
    /// Milliseconds of policy calls one tenant may spend per second on the request path; past it
    /// its events are dropped and its `act` gives no side effects until the budget refills
    /// (`agentrt_policy_throttled_total`). 0 = no budget.
    #[arg(long, default_value_t = DEFAULT_CPU_MS_PER_S)]
    pub policy_cpu_ms_per_s: u32,
    /// Prompt tokens of warm-ups one tenant may send upstream per second; past it its warm-ups
    /// are skipped (`agentrt_tenant_warmups_throttled_total`) until the budget refills. 0 = no limit.
    #[arg(long, default_value_t = DEFAULT_WARMUP_TOKENS_PER_S)]
    pub tenant_warmup_tokens_per_s: u64,
}

impl QuotaArgs {
    /// The quotas the flags give, each tenant's admission weight 1.
    pub fn quotas(&self) -> Quotas {
        Quotas {
            max_in_flight: self.tenant_max_in_flight,
            max_in_flight_from: crate::tenant::quotas::LimitSource::Flag,
            policy_cpu_ms_per_s: self.policy_cpu_ms_per_s,
            warmup_tokens_per_s: self.tenant_warmup_tokens_per_s,
            // Per tenant in --config (`admission_weight`); every tenant's is 1 otherwise.
            admission_weight: 1,
        }
    }
}

/// What the proxy keeps per tenant (docs/security.md); defaults are [`TableLimits::default`] and
/// [`DEFAULT_QUEUE_JOBS`]. Clients fill these tables; each forgets its least recently used entry.
#[derive(clap::Args, Debug)]
pub struct TableArgs {
    /// Agents (names → handles) kept per tenant.
    #[arg(long, default_value_t = TableLimits::default().max_agents)]
    pub max_agents: usize,
    /// Live sessions kept per tenant; one pushed out is reported ended to the policy.
    #[arg(long, default_value_t = TableLimits::default().max_sessions)]
    pub max_sessions: usize,
    /// Anchors (system prompt + tools) kept per tenant for warm-ups.
    #[arg(long, default_value_t = TableLimits::default().max_anchors)]
    pub max_anchors: usize,
    /// Bytes of those anchors per tenant, in MiB.
    #[arg(long, default_value_t = TableLimits::default().max_anchor_bytes >> 20)]
    pub max_anchor_mib: usize,
    /// Prompt shapes (one per session and agent) kept per tenant, for `continues`.
    #[arg(long, default_value_t = TableLimits::default().max_shapes)]
    pub max_shapes: usize,
    /// Bytes of those shapes per tenant, in MiB.
    #[arg(long, default_value_t = TableLimits::default().max_shape_bytes >> 20)]
    pub max_shape_mib: usize,
    /// Policy calls waiting per tenant; events beyond are dropped and counted
    /// (`agentrt_policy_events_dropped_total`), never waited for.
    #[arg(long, default_value_t = DEFAULT_QUEUE_JOBS)]
    pub policy_queue_jobs: usize,
}

impl TableArgs {
    /// The table limits the flags give; an error names a count flag set to 0.
    pub fn limits(&self) -> anyhow::Result<TableLimits> {
        for (flag, value) in [
            ("--max-agents", self.max_agents),
            ("--max-sessions", self.max_sessions),
            ("--max-anchors", self.max_anchors),
            ("--max-shapes", self.max_shapes),
            ("--policy-queue-jobs", self.policy_queue_jobs),
        ] {
            anyhow::ensure!(value > 0, "{flag} must be at least 1");
        }
        Ok(TableLimits {
            max_agents: self.max_agents,
            max_sessions: self.max_sessions,
            max_anchors: self.max_anchors,
            max_anchor_bytes: self.max_anchor_mib << 20,
            max_shapes: self.max_shapes,
            max_shape_bytes: self.max_shape_mib << 20,
        })
    }
}

/// Every tenant's policy slot's limits (docs/security.md); defaults are
/// [`SandboxLimits::default`] and [`SlotConfig::new`].
#[derive(clap::Args, Debug)]
pub struct PolicyLimitArgs {
    /// Most memory one policy instance may hold, its linear memories and tables together, in MiB.
    #[arg(long, default_value_t = (SandboxLimits::default().memory_bytes >> 20) as u64)]
    pub policy_memory_mib: u64,
    /// Most CPU time one policy call may use, copying its result included (time spent waiting for
    /// a core is not charged; at most 5× this on the clock); then it is interrupted.
    #[arg(long, default_value_t = SandboxLimits::default().call_deadline.as_millis() as u64)]
    pub policy_deadline_ms: u64,
    /// Failed calls of one primitive in a row that suspend a policy (its circuit opens: it is not
    /// called, rankings are LRU, no side effects; one trial call after 1 s, doubling to 60 s).
    /// 0 = never suspend.
    #[arg(long, default_value_t = BreakerConfig::default().failure_threshold)]
    pub policy_failure_threshold: u32,
    /// A hot swap whose new policy reaches the failure threshold within this long is rolled back
    /// to the previous policy and its state. 0 = never roll back.
    #[arg(long, default_value_t = SlotConfig::new("").rollback_window.as_millis() as u64)]
    pub policy_rollback_window_ms: u64,
}

impl PolicyLimitArgs {
    /// The slot settings (besides `init`) every tenant gets.
    pub fn slot_config(&self) -> anyhow::Result<SlotConfig> {
        let limits =
            SandboxLimits::from_flags(self.policy_memory_mib, self.policy_deadline_ms).map_err(anyhow::Error::msg)?;
        Ok(SlotConfig {
            breaker: BreakerConfig {
                failure_threshold: self.policy_failure_threshold,
                ..BreakerConfig::default()
            },
            rollback_window: Duration::from_millis(self.policy_rollback_window_ms),
            ..SlotConfig::new("").with_limits(limits)
        })
    }

    /// Engine options whose instance pool fits the memory cap.
    pub fn engine_options(&self, slot: &SlotConfig) -> EngineOptions {
        let mut options = EngineOptions::default();
        if let Some(pool) = &mut options.pooling {
            pool.max_memory_bytes = pool.max_memory_bytes.max(slot.limits.memory_bytes);
        }
        options
    }
}

/// The front door's limits (docs/security.md); defaults are [`Limits::default`].
#[derive(clap::Args, Debug)]
pub struct LimitArgs {
    /// Client connections open at once; a connection beyond it is closed at once. At least 1.
    #[arg(long, value_parser = flag_values::at_least_one, default_value_t = Limits::default().max_connections)]
    pub max_connections: usize,
    /// A connection must send a request's complete headers within this long of being accepted
    /// (or of its previous response), or it is closed. At least 1.
    #[arg(long, value_parser = flag_values::at_least_one_ms, default_value_t = Limits::default().header_read_timeout.as_millis() as u64)]
    pub header_read_timeout_ms: u64,
    /// Bytes one connection may buffer of a request's head (request line and headers; 8192 or
    /// more); a longer head gets 431. Times --max-connections, what slow clients may hold.
    #[arg(long, value_parser = flag_values::at_least_one, default_value_t = Limits::default().max_header_bytes)]
    pub max_header_bytes: usize,
    /// Largest request body on the OpenAI routes; larger ones get 413. At least 1.
    #[arg(long, value_parser = flag_values::at_least_one, default_value_t = Limits::default().max_body_bytes)]
    pub max_body_bytes: usize,
    /// Largest policy component the admin API accepts; larger ones get 413. At least 1.
    #[arg(long, value_parser = flag_values::at_least_one, default_value_t = Limits::default().max_upload_bytes)]
    pub max_upload_bytes: usize,
    /// Time to connect to the upstream; then 504. At least 1 (there is no "no timeout").
    #[arg(long, value_parser = flag_values::at_least_one_ms, default_value_t = Limits::default().upstream_connect_timeout.as_millis() as u64)]
    pub upstream_connect_timeout_ms: u64,
    /// Time from sending a request upstream to its response headers; then 504. vLLM sends a
    /// non-streamed reply's headers when the whole completion is done, so size it above the
    /// longest queueing plus generation. At least 1 (there is no "no timeout").
    #[arg(long, value_parser = flag_values::at_least_one_ms, default_value_t = Limits::default().upstream_first_byte_timeout.as_millis() as u64)]
    pub upstream_first_byte_timeout_ms: u64,
    /// Longest silence between two pieces of an upstream response; then 504 (or, mid-stream, an
    /// SSE error event). At least 1 (there is no "no timeout").
    #[arg(long, value_parser = flag_values::at_least_one_ms, default_value_t = Limits::default().upstream_idle_timeout.as_millis() as u64)]
    pub upstream_idle_timeout_ms: u64,
    /// Largest non-streamed upstream reply; larger ones get 502. Streams are not buffered. At
    /// least 1.
    #[arg(long, value_parser = flag_values::at_least_one, default_value_t = Limits::default().max_upstream_reply_bytes)]
    pub max_upstream_reply_bytes: usize,
    /// JSON elements (objects, arrays and values) one request body may hold; more get 413
    /// before the body is parsed. At least 1 (there is no "no limit").
    #[arg(long, value_parser = flag_values::at_least_one, default_value_t = RequestBudget::default().max_json_elements)]
    pub max_json_elements: usize,
    /// How deep objects and arrays may nest in a request body or an MCP message (1–127); deeper
    /// gets 400 before it is parsed. Bounds the stack every walk of client JSON may take.
    #[arg(long, default_value_t = RequestBudget::default().max_json_depth)]
    pub max_json_depth: usize,
    /// Messages (or Responses input items) one request may hold; more get 400. At least 1.
    #[arg(long, value_parser = flag_values::at_least_one, default_value_t = RequestBudget::default().max_items)]
    pub max_request_items: usize,
    /// Tools one request may define; more get 400. 0 = requests may define no tools.
    #[arg(long, default_value_t = RequestBudget::default().max_tools)]
    pub max_request_tools: usize,
    /// While the proxy's workers run later than this (every core busy, requests queued), new
    /// model requests get 503 with Retry-After at once instead of waiting. 0 = never shed.
    #[arg(long, default_value_t = Limits::default().shed_lag.map_or(0, |d| d.as_millis() as u64))]
    pub shed_lag_ms: u64,
    /// Longest silence while a request body is read, on every route (model calls, hints, MCP,
    /// policy uploads); then 408 and the connection is closed. Also the grace before
    /// --body-min-bytes-per-s counts. At least 1.
    #[arg(long, value_parser = flag_values::at_least_one_ms, default_value_t = Limits::default().body_timing.idle.as_millis() as u64)]
    pub body_idle_timeout_ms: u64,
    /// Slowest average rate a request body may arrive at once --body-idle-timeout-ms of grace
    /// is over (its deadline moves back a second for every this many bytes received); then 408.
    /// 0 = no rate, only the idle timeout.
    #[arg(long, default_value_t = Limits::default().body_timing.min_bytes_per_s)]
    pub body_min_bytes_per_s: u64,
    /// Bytes of request bodies being read at once, all tenants together, in MiB; a body past it
    /// gets 503 with Retry-After (refused before a byte is read when it announces its length).
    /// At least --max-body-bytes and --max-upload-bytes.
    #[arg(long, value_parser = flag_values::at_least_one, default_value_t = Limits::default().max_reading_bytes >> 20)]
    pub max_reading_mib: usize,
    /// Bytes of one tenant's request bodies being read at once, in MiB; a body past it gets 429
    /// with Retry-After. At least --max-body-bytes.
    #[arg(long, value_parser = flag_values::at_least_one, default_value_t = Limits::default().max_reading_bytes_per_tenant >> 20)]
    pub max_reading_mib_per_tenant: usize,
    /// Policy uploads (`PUT /admin/tenants/NAME/policy`) in progress at once for one tenant,
    /// whoever sends them; more get 429 before a byte is read. At least 1.
    #[arg(long, value_parser = flag_values::at_least_one, default_value_t = Limits::default().max_uploads_per_tenant)]
    pub max_uploads_per_tenant: usize,
    /// On SIGTERM or Ctrl-C: stop accepting, let requests in flight finish for at most this long,
    /// then cut what is left (each cut request logged) and exit. Keep it under the
    /// orchestrator's grace period (Kubernetes: terminationGracePeriodSeconds, 30 s). At least 1.
    #[arg(long, value_parser = flag_values::at_least_one_ms, default_value_t = Limits::default().drain_timeout.as_millis() as u64)]
    pub drain_timeout_ms: u64,
    /// The kernel's buffer on each side of a stream, in KiB: a client connection's send buffer
    /// (SO_SNDBUF) and an upstream connection's receive buffer (SO_RCVBUF) — what a client that
    /// reads slowly can make the kernel hold for it, on the proxy's side and the engine's. 0 = the
    /// kernel's own autotuning (up to tcp_wmem's and tcp_rmem's maximum, 4 and 6 MiB by default).
    #[arg(long, default_value_t = Limits::default().socket_buffer.map_or(0, |b| b >> 10))]
    pub socket_buffer_kib: usize,
}

/// hyper's smallest read buffer (it panics below it).
const MIN_HEADER_BYTES: usize = 8192;

impl LimitArgs {
    /// The front door's limits the flags give (their parsers, [`flag_values`], refused a 0
    /// where a limit needs at least 1).
    pub fn limits(&self) -> anyhow::Result<Limits> {
        anyhow::ensure!(
            self.max_header_bytes >= MIN_HEADER_BYTES,
            "--max-header-bytes must be at least {MIN_HEADER_BYTES} (the HTTP server's smallest read buffer)"
        );
        anyhow::ensure!(
            (1..=agentrt_guards::json_shape::PARSER_DEPTH_LIMIT).contains(&self.max_json_depth),
            "--max-json-depth must be between 1 and {} (the JSON parser's own limit)",
            agentrt_guards::json_shape::PARSER_DEPTH_LIMIT
        );
        let (reading, reading_per_tenant) = (self.max_reading_mib << 20, self.max_reading_mib_per_tenant << 20);
        anyhow::ensure!(
            reading_per_tenant >= self.max_body_bytes && reading >= reading_per_tenant.max(self.max_upload_bytes),
            "--max-reading-mib-per-tenant must hold one body of --max-body-bytes, and --max-reading-mib one of \
             --max-upload-bytes and the per-tenant budget (a body larger than its budget could never be read)"
        );
        let ms = Duration::from_millis;
        Ok(Limits {
            max_connections: self.max_connections,
            header_read_timeout: ms(self.header_read_timeout_ms),
            max_header_bytes: self.max_header_bytes,
            max_body_bytes: self.max_body_bytes,
            max_upload_bytes: self.max_upload_bytes,
            upstream_connect_timeout: ms(self.upstream_connect_timeout_ms),
            upstream_first_byte_timeout: ms(self.upstream_first_byte_timeout_ms),
            upstream_idle_timeout: ms(self.upstream_idle_timeout_ms),
            max_upstream_reply_bytes: self.max_upstream_reply_bytes,
            shed_lag: (self.shed_lag_ms > 0).then(|| ms(self.shed_lag_ms)),
            body_timing: agentrt_guards::body_read::BodyTiming {
                idle: ms(self.body_idle_timeout_ms),
                min_bytes_per_s: self.body_min_bytes_per_s,
            },
            max_reading_bytes: reading,
            max_reading_bytes_per_tenant: reading_per_tenant,
            max_uploads_per_tenant: self.max_uploads_per_tenant,
            drain_timeout: ms(self.drain_timeout_ms),
            socket_buffer: (self.socket_buffer_kib > 0).then_some(self.socket_buffer_kib << 10),
            budget: RequestBudget {
                max_json_elements: self.max_json_elements,
                max_json_depth: self.max_json_depth,
                max_items: self.max_request_items,
                max_tools: self.max_request_tools,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Args {
        #[command(flatten)]
        policy: PolicyLimitArgs,
        #[command(flatten)]
        tables: TableArgs,
    }

    fn tables(args: &[&str]) -> anyhow::Result<TableLimits> {
        Args::try_parse_from(std::iter::once("serve").chain(args.iter().copied()))?
            .tables
            .limits()
    }

    #[test]
    fn table_flags_default_to_the_table_defaults_and_set_each_cap() {
        assert_eq!(tables(&[]).unwrap(), TableLimits::default());
        let set = tables(&["--max-sessions", "10", "--max-anchor-mib", "2", "--max-agents", "7"]).unwrap();
        assert_eq!(
            (set.max_sessions, set.max_anchor_bytes, set.max_agents),
            (10, 2 << 20, 7)
        );
        assert!(tables(&["--max-sessions", "0"])
            .unwrap_err()
            .to_string()
            .contains("--max-sessions"));
        assert!(tables(&["--policy-queue-jobs", "0"]).is_err());
    }

    fn slot(args: &[&str]) -> anyhow::Result<SlotConfig> {
        Args::try_parse_from(std::iter::once("serve").chain(args.iter().copied()))?
            .policy
            .slot_config()
    }

    #[test]
    fn policy_limits_default_to_the_runtime_defaults() {
        let config = slot(&[]).unwrap();
        let defaults = SlotConfig::new("");
        assert_eq!(config.limits.memory_bytes, defaults.limits.memory_bytes);
        assert_eq!(config.limits.call_deadline, defaults.limits.call_deadline);
        assert_eq!(config.breaker, defaults.breaker);
        assert_eq!(config.rollback_window, defaults.rollback_window);
    }

    #[test]
    fn policy_limit_flags_set_every_slot() {
        let config = slot(&[
            "--policy-memory-mib",
            "300",
            "--policy-deadline-ms",
            "50",
            "--policy-failure-threshold",
            "0",
            "--policy-rollback-window-ms",
            "0",
        ])
        .unwrap();
        assert_eq!(config.limits.memory_bytes, 300 << 20);
        assert_eq!(config.limits.call_deadline, Duration::from_millis(50));
        assert_eq!(config.breaker.failure_threshold, 0);
        assert_eq!(config.rollback_window, Duration::ZERO);
        let args = Args::try_parse_from(["serve", "--policy-memory-mib", "300"]).unwrap();
        let engine = args.policy.engine_options(&config);
        assert_eq!(
            engine.pooling.unwrap().max_memory_bytes,
            300 << 20,
            "the pool fits the cap"
        );
        assert!(slot(&["--policy-deadline-ms", "0"]).is_err());
        assert!(slot(&["--policy-memory-mib", "0"]).is_err());
    }
}

//! A replay's engine settings: the cache, the scheduler's limits, how session ends are told.

use crate::latency::LatencyModel;

/// Engine settings of a replay.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// vLLM's `num_gpu_blocks` (the null block included).
    pub num_blocks: usize,
    /// vLLM's `max_num_seqs` (H100 default for the API server: 1024).
    pub max_num_seqs: usize,
    /// vLLM's `max_num_batched_tokens` (H100 default for the API server: 8192).
    pub max_batched_tokens: u32,
    pub latency: LatencyModel,
    /// Measure the policy's state every this many steps.
    pub state_sample_steps: u64,
    /// Cache shares by tenant name (`sim run --share`). With shares, every tenant runs its own
    /// instance of the policy over its own blocks and [`crate::arbiter::TenantArbiter`] picks
    /// which tenant gives up a block; tenants not named get no guarantee and no limit. `None`:
    /// one policy instance ranks every block, whoever stored it.
    pub shares: Option<Vec<(String, agentrt_runtime::Share)>>,
    /// Policy slots beside the cache policy (`sim run --slot NAME=COMPONENT`), in slot order: they
    /// hear every request event and answer through side effects only (merged as `serve` merges
    /// them); the cache policy stays the one that ranks blocks.
    pub slots: Vec<(String, crate::policies::PolicySpec)>,
    /// vLLM's priority scheduling, with the slots' `set-priority` demotions as request priorities
    /// (`sim run --engine-priorities`, as `serve --engine-priorities` in front of a vLLM started
    /// with `--scheduling-policy priority`). Off: FCFS, and `set-priority` is counted, not used.
    pub engine_priorities: bool,
    /// When the policy hears that a session ended (`session-end`).
    pub session_ends: SessionEnds,
    /// Which of the trace's lifecycle hints the policy hears, for which sessions (`--hints`).
    pub hints: crate::hints::HintsTold,
    /// Every `after_ms` of the trace times this (`sim run --time-scale`): > 1 stretches arrivals
    /// and waits, lowering the load; < 1 compresses them.
    pub time_scale: f64,
    /// Sessions' start times (their first request's `after_ms`) times this as well
    /// (`--arrival-scale`, `--target-utilisation`): more or fewer sessions at once, each with the
    /// trace's own waits between its calls.
    pub arrival_scale: f64,
    /// vLLM's host-memory tier (`sim run --host-blocks`): `None` = no offloading connector.
    pub host_tier: Option<crate::offload::connector::HostTierConfig>,
    /// Closed-loop programs (`sim knee --programs N`): at most N sessions live at once, started
    /// in trace order, the next as soon as one gives its last answer (the trace's start times
    /// are ignored) — how agent benchmarks run N parallel workflows. `None`: sessions start at
    /// their trace times.
    pub programs: Option<usize>,
    /// Continuum's engine (TTL pins after tool calls, program-level FCFS) instead of vLLM's.
    pub continuum: Option<super::ContinuumConfig>,
}

/// When a replay tells the policy that a session ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SessionEnds {
    /// What `agentrt serve` can know: a session with no request arriving or finishing for this
    /// long (`--session-idle-ms`, the same default) is reported ended; its next request, if any,
    /// starts it again. The default.
    Idle { ms: f64 },
    /// Knowledge of the future, no serving host has it: right after the session's last request.
    Oracle,
}

/// `agentrt serve --session-idle-ms`'s default.
pub const DEFAULT_SESSION_IDLE_MS: f64 = 60_000.0;

impl SessionEnds {
    pub fn name(&self) -> String {
        match self {
            SessionEnds::Idle { ms } => format!("idle {:.0} s (as serve infers them)", ms / 1000.0),
            SessionEnds::Oracle => "oracle (the trace's last request)".to_string(),
        }
    }
}

impl Default for SessionEnds {
    fn default() -> Self {
        SessionEnds::Idle {
            ms: DEFAULT_SESSION_IDLE_MS,
        }
    }
}

impl SimConfig {
    pub fn new(num_blocks: usize) -> Self {
        Self {
            num_blocks,
            max_num_seqs: 1024,
            max_batched_tokens: 8192,
            latency: LatencyModel::default(),
            state_sample_steps: 512,
            shares: None,
            slots: Vec::new(),
            engine_priorities: false,
            session_ends: SessionEnds::default(),
            hints: crate::hints::HintsTold::default(),
            time_scale: 1.0,
            arrival_scale: 1.0,
            host_tier: None,
            programs: None,
            continuum: None,
        }
    }

    /// A trace's `after_us` between two calls of a session as replay time (ns), under
    /// [`Self::time_scale`].
    pub fn after_ns(&self, after_us: f64) -> u64 {
        (after_us * self.time_scale * 1000.0) as u64
    }

    /// A session's start (its first request's `after_us`) as replay time (ns), under both scales.
    pub fn start_ns(&self, after_us: f64) -> u64 {
        (after_us * self.time_scale * self.arrival_scale * 1000.0) as u64
    }
}

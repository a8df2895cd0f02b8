//! Errors, typed by what went wrong and naming where.

use std::fmt;
use std::time::Duration;

use crate::call_clock::Overrun;

/// Which primitive or lifecycle call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Primitive {
    /// `info`: the policy's name, version and what it implements.
    Info,
    /// `init`: configuring a fresh instance.
    Init,
    /// `observe`: a batch of request events.
    Observe,
    /// `observe-blocks`: a batch of packed KV-block events.
    ObserveBlocks,
    /// `score` (and `score-packed`): one priority per candidate, for rankings.
    Score,
    /// `predict`: forecasts of activity within a horizon.
    Predict,
    /// `act`: side effects for the host to carry out.
    Act,
    /// `snapshot`: serialising the learned state, at a checkpoint or a swap.
    Snapshot,
    /// `restore`: loading a snapshot into a fresh instance.
    Restore,
}

impl Primitive {
    /// Whether the call starts an instance (`info`, `init`, `restore`): it runs once per instance
    /// and may wait on the clock longer than a call of the request stream
    /// ([`crate::call_clock::START_UP_WALL_LIMIT`]).
    pub fn starts_an_instance(self) -> bool {
        matches!(self, Primitive::Info | Primitive::Init | Primitive::Restore)
    }

    /// Every primitive, in declaration order: the index per-primitive counters use.
    pub const ALL: [Primitive; 9] = [
        Primitive::Info,
        Primitive::Init,
        Primitive::Observe,
        Primitive::ObserveBlocks,
        Primitive::Score,
        Primitive::Predict,
        Primitive::Act,
        Primitive::Snapshot,
        Primitive::Restore,
    ];

    /// The primitive's name in `wit/policy.wit` (`observe-blocks`), as logs and metric labels
    /// show it.
    pub fn name(self) -> &'static str {
        match self {
            Primitive::Info => "info",
            Primitive::Init => "init",
            Primitive::Observe => "observe",
            Primitive::ObserveBlocks => "observe-blocks",
            Primitive::Score => "score",
            Primitive::Predict => "predict",
            Primitive::Act => "act",
            Primitive::Snapshot => "snapshot",
            Primitive::Restore => "restore",
        }
    }
}

impl fmt::Display for Primitive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A component could not be loaded: it is not a component, implements another world, or needs
/// imports this host does not grant. The message says which, and names the source.
#[derive(Debug, thiserror::Error)]
#[error("{source_name}: {reason}")]
pub struct LoadError {
    /// The file path or the name given with the bytes.
    pub source_name: String,
    /// What is wrong with it, for a person to read.
    pub reason: String,
}

impl LoadError {
    pub(crate) fn new(source_name: &str, reason: impl Into<String>) -> Self {
        Self {
            source_name: source_name.to_string(),
            reason: reason.into(),
        }
    }
}

/// A call into a policy failed. The instance that failed has been discarded; the next call runs on
/// a fresh one (restored from the last checkpoint when there is one). Every variant names the slot
/// (`policy`: its [`SlotConfig::label`](crate::SlotConfig::label)).
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The guest trapped: a panic, `unreachable`, an out-of-bounds access, a bad result.
    #[error("policy `{policy}` trapped in {primitive}: {message}")]
    Trap {
        /// The slot's label.
        policy: String,
        /// The call that failed.
        primitive: Primitive,
        /// wasmtime's account of the trap, with its causes.
        message: String,
    },

    /// The call ran past its CPU deadline, or waited on the clock past its limit, and was
    /// interrupted.
    #[error("policy `{policy}` {}", overrun_story(*.primitive, *.deadline, .overrun))]
    DeadlineExceeded {
        /// The slot's label.
        policy: String,
        /// The call that failed.
        primitive: Primitive,
        /// The deadline the call ran past
        /// ([`SandboxLimits::call_deadline`](crate::SandboxLimits::call_deadline)).
        deadline: Duration,
        /// Whether the policy computed too long or the host kept it waiting.
        overrun: Overrun,
    },

    /// The call burned its fuel (instruction budget) and was stopped.
    #[error("policy `{policy}` used up its fuel ({fuel}) in {primitive}")]
    FuelExhausted {
        /// The slot's label.
        policy: String,
        /// The call that failed.
        primitive: Primitive,
        /// The fuel each call is given
        /// ([`SandboxLimits::call_fuel`](crate::SandboxLimits::call_fuel)).
        fuel: u64,
    },

    /// The guest tried to grow its memory past the cap.
    #[error("policy `{policy}` hit its memory cap of {cap_bytes} bytes in {primitive}")]
    OutOfMemory {
        /// The slot's label.
        policy: String,
        /// The call that failed.
        primitive: Primitive,
        /// The instance's memory cap, in bytes.
        cap_bytes: usize,
    },

    /// The guest returned an error (`init` or `restore` refused its input).
    #[error("policy `{policy}` rejected {primitive}: {message}")]
    Rejected {
        /// The slot's label.
        policy: String,
        /// The call that failed.
        primitive: Primitive,
        /// The guest's own error message.
        message: String,
    },

    /// The guest answered, but the answer breaks the contract (e.g. the wrong number of scores).
    #[error("policy `{policy}` broke the contract in {primitive}: {message}")]
    BadOutput {
        /// The slot's label.
        policy: String,
        /// The call that failed.
        primitive: Primitive,
        /// What the answer got wrong, e.g. `3 scores for 4 items`.
        message: String,
    },

    /// The guest returned more than the host accepts (too many side effects or forecasts, too
    /// long a string, too large a snapshot). Refused before the oversize part was copied.
    #[error("policy `{policy}` returned too much from {primitive}: {what} of {len}, over the limit of {max}")]
    ResultTooLarge {
        /// The slot's label.
        policy: String,
        /// The call that failed.
        primitive: Primitive,
        /// What was too large, e.g. `side effects` or `string bytes`.
        what: &'static str,
        /// How many (items or bytes) the guest returned.
        len: usize,
        /// How many the host accepts.
        max: usize,
    },

    /// No instance could be created (instantiation or `init` failed).
    #[error("policy `{policy}` is unavailable: {message}")]
    Unavailable {
        /// The slot's label.
        policy: String,
        /// Why instantiation or `init` failed.
        message: String,
    },

    /// No instance could be created because every instance slot of the engine's pool is in use
    /// (one per running policy, two during a swap): an operator sizes the pool, not the policy.
    #[error("policy `{policy}` has no instance: the engine's instance pool is full ({message})")]
    PoolFull {
        /// The slot's label.
        policy: String,
        /// wasmtime's pool error, naming the limit that was reached.
        message: String,
    },

    /// The slot's circuit breaker is open after repeated failures: the call was not made. The
    /// breaker logged this once when it opened; callers should not log it again per call.
    #[error(
        "policy `{policy}` is suspended after repeated failures; {primitive} not called (next trial in {retry_in:?})"
    )]
    CircuitOpen {
        /// The slot's label.
        policy: String,
        /// The call that was not made.
        primitive: Primitive,
        /// How long until the breaker lets one trial call through.
        retry_in: Duration,
    },
}

/// The end of a [`PolicyError::DeadlineExceeded`] message: what ran out, and whose fault it was.
fn overrun_story(primitive: Primitive, deadline: Duration, overrun: &Overrun) -> String {
    match overrun {
        Overrun::Cpu => format!("exceeded its {deadline:?} deadline in {primitive}"),
        Overrun::Waiting { on_clock, cpu } => {
            let used = match cpu {
                Some(cpu) => format!("having used {cpu:.1?} of its {deadline:?} of CPU"),
                None => format!("(its deadline: {deadline:?})"),
            };
            format!(
                "was stopped in {primitive} after {on_clock:.1?} on the clock, {used}: the host kept \
                 the call waiting (too few cores for its load, or a slow disk), the policy did not \
                 compute too long; give the host more CPU or run fewer tenants on it"
            )
        }
    }
}

impl PolicyError {
    /// A short label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            PolicyError::Trap { .. } => "trap",
            PolicyError::DeadlineExceeded { .. } => "deadline",
            PolicyError::FuelExhausted { .. } => "fuel",
            PolicyError::OutOfMemory { .. } => "oom",
            PolicyError::Rejected { .. } => "rejected",
            PolicyError::BadOutput { .. } => "bad_output",
            PolicyError::ResultTooLarge { .. } => "too_large",
            PolicyError::Unavailable { .. } => "unavailable",
            PolicyError::PoolFull { .. } => "pool_full",
            PolicyError::CircuitOpen { .. } => "circuit_open",
        }
    }

    /// True when the call was not made because the slot's breaker is open (already logged once).
    pub fn is_circuit_open(&self) -> bool {
        matches!(self, PolicyError::CircuitOpen { .. })
    }
}

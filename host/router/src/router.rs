//! What a router answers: where a request goes, where one *would* go, and the lifecycle of a
//! booking (the router counts a routed request as load on its replica until it is released).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::replica::ReplicaId;

/// A boxed future, so [`Router`] can be used as `dyn Router`.
pub type RouterFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, RouterError>> + Send + 'a>>;

/// One request to place.
#[derive(Debug, Clone, Default)]
pub struct RouteRequest {
    /// The prompt's token ids, exactly as the engine will see them (the router hashes them into
    /// blocks and matches them against each replica's cached blocks).
    pub token_ids: Vec<u32>,
    /// The request's `cache_salt`, if any: the engine's block hashes start from it.
    pub cache_salt: Option<String>,
    /// The session (tenant-scoped), for session stickiness.
    pub session: Option<String>,
    /// The model's answer length the caller expects (`max_tokens`), for the router's load.
    pub expected_output_tokens: Option<u32>,
    /// Unique id of the booking this request makes (the router's `selection_id`).
    pub booking_id: String,
    /// Where agentrt would like the request to go, and where it may go.
    pub hints: Hints,
}

/// What agentrt knows that the router does not, as the router's hints ([`crate::hints`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hints {
    /// Prefer this replica while it is eligible (Dynamo's `affinity_target`: an unknown or
    /// unschedulable target is ignored and the request routes as usual).
    pub affinity: Option<ReplicaId>,
    /// Only these replicas (Dynamo's `allowed_worker_ids`): e.g. the ones answering.
    pub allowed: Option<Vec<ReplicaId>>,
}

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The replica chosen.
    pub replica: ReplicaId,
    /// The router's booking to complete and release; `None` when nothing was booked.
    pub booking: Option<String>,
    /// Prompt tokens the router expects the replica to have cached.
    pub cached_tokens: Option<u32>,
}

/// A router: Dynamo's selection service ([`crate::SelectionClient`]), the session-sticky fallback
/// ([`crate::SessionSticky`]), or a router under a deadline with that fallback
/// ([`crate::FallbackRouter`]).
pub trait Router: Send + Sync {
    /// Place `request` and book it on its replica.
    fn route<'a>(&'a self, request: &'a RouteRequest) -> RouterFuture<'a, Route>;
    /// Where `request` would go now, booking nothing (where a warm-up should go).
    fn peek<'a>(&'a self, request: &'a RouteRequest) -> RouterFuture<'a, ReplicaId>;
    /// The booked request's prompt is processed (its first token came back).
    fn prefill_complete<'a>(&'a self, booking: &'a str) -> RouterFuture<'a, ()>;
    /// The booked request is over.
    fn release<'a>(&'a self, booking: &'a str) -> RouterFuture<'a, ()>;
}

/// Why a router did not answer. Each names what failed and where.
#[derive(Debug, thiserror::Error)]
pub enum RouterError {
    /// The request did not reach the router, or its answer did not come back whole (connection
    /// refused, reset, …).
    #[error("router at {url}: {route} could not be sent: {detail}")]
    Unreachable {
        /// The router's base URL.
        url: String,
        /// The call, as `METHOD /path`.
        route: String,
        /// The HTTP client's error with its causes.
        detail: String,
    },
    /// The router took longer than the client's timeout.
    #[error("router at {url}: {route} did not answer within {after:?}")]
    Timeout {
        /// The router's base URL.
        url: String,
        /// The call, as `METHOD /path`.
        route: String,
        /// The timeout that ran out.
        after: Duration,
    },
    /// The router answered with an error status, or with an answer agentrt cannot use (a worker
    /// that did not come up schedulable).
    #[error("router at {url}: {route} answered {status}: {message}")]
    Status {
        /// The router's base URL.
        url: String,
        /// The call, as `METHOD /path`.
        route: String,
        /// The HTTP status; 0 when agentrt refused to send the call (what is missing is in
        /// `message`).
        status: u16,
        /// The router's `error` text, or what was wrong.
        message: String,
    },
    /// The router answered 2xx with a body that does not parse as the expected answer.
    #[error("router at {url}: {route} answered something unreadable: {detail}")]
    BadAnswer {
        /// The router's base URL.
        url: String,
        /// The call, as `METHOD /path`.
        route: String,
        /// The JSON parser's error.
        detail: String,
    },
    /// The router named a worker id that is none of the configured replicas.
    #[error("router chose replica {0}, which agentrt does not know")]
    UnknownReplica(ReplicaId),
    /// The request's allowed replicas ([`Hints::allowed`]) leave none to choose from.
    #[error("no replica is eligible for this request")]
    NoReplica,
}

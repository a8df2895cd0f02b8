//! # agentrt-router — several replicas behind a KV-aware router
//!
//! agentrt does not route by itself: it asks an existing, maintained KV-aware router — NVIDIA
//! Dynamo's selection service (`python -m dynamo.select_service`, the same core as the
//! `dynamo-kv-router` crate) — and feeds it what only the runtime layer knows.
//!
//! - [`replica`]: the replicas (`NAME=URL`), each with the id the router knows it by;
//! - [`router`]: the [`Router`] trait — where a request goes, where it *would* go (for
//!   warm-ups), and the booking's lifecycle (prefill complete, release);
//! - [`selection`]: the selection service's HTTP API (wire types checked against 1.6.1's source)
//!   and its client;
//! - [`sticky`]: the fallback, session-sticky rendezvous hashing;
//! - [`fallback`]: a router under a deadline, degrading to the fallback when it is down, slow or
//!   wrong — a user request never fails because of the router;
//! - [`hints`]: agentrt's knowledge (which replica holds an agent's anchor, where its warm-up
//!   went) turned into the router's hints.
//!
//! ## Modules in detail
//!
//! Several replicas behind a KV-aware router (docs/replicas.md): `replica` (`NAME=URL`, ids from
//! names), `router` (the `Router` trait: route, peek, prefill complete, release), `selection`
//! (NVIDIA Dynamo's selection service: `wire` = its HTTP API as of 1.6.1, `client`), `sticky` (the
//! fallback: session-sticky rendezvous hashing), `fallback` (a router under a deadline, resting
//! after a failure, the fallback behind it), `hints` (where each agent's anchor went, and was
//! evicted → `affinity_target`); `testing` (feature): the real selection service and vLLM's router
//! as test fixtures.

#![warn(missing_docs)]

pub mod fallback;
pub mod hints;
pub mod replica;
pub mod router;
pub mod selection;
pub mod sticky;
#[cfg(feature = "testing")]
pub mod testing;

pub use fallback::{Decider, FallbackRouter, Routed, RoutingCounters};
pub use hints::{HintRule, Placement};
pub use replica::{Replica, ReplicaId, Replicas};
pub use router::{Hints, Route, RouteRequest, Router, RouterError, RouterFuture};
pub use selection::SelectionClient;
pub use sticky::SessionSticky;

//! # agentrt-sdk — write agentrt policies in Rust
//!
//! A policy is a type that implements [`Policy`] and is exported with [`export_policy!`]. Built for
//! `wasm32-unknown-unknown` and encoded as a component (`cargo xtask build-policies`), it loads in
//! the agentrt host; built natively, the same type runs in [`testing::Harness`] so its logic can be
//! unit-tested with plain `cargo test`, through the same dispatch code the component uses.
//!
//! ```ignore
//! #[derive(Default)]
//! struct MostRecent;
//!
//! impl agentrt_sdk::Policy for MostRecent {
//!     fn info() -> agentrt_sdk::PolicyInfo { agentrt_sdk::info("most-recent", "keeps recent items") }
//!     fn score(&mut self, items: &[agentrt_sdk::Item]) -> Vec<f32> {
//!         agentrt_sdk::recency_scores(items)
//!     }
//! }
//! agentrt_sdk::export_policy!(MostRecent);
//! ```
//!
//! See `sdk/README.md` for the whole workflow.

// The generated bindings name this crate by path; let that path resolve inside it too.
extern crate self as agentrt_sdk;

pub mod bindings;
pub mod config;
mod dispatch;
mod export;
pub mod host;
pub mod packed;
mod policy;
pub mod ranking;
pub mod state;
pub mod testing;

pub use bindings::agentrt::policy::types::{
    AgentHandle, AgentRegistered, BlockEvent, BlockOp, Continuation, Deny, EndReason, EngineCapacity, EngineLoad,
    Event, Forecast, ForecastKind, Handoff, Hedge, Item, ItemKind, LogLevel, Pin, PolicyInfo, Preload, RequestArrival,
    RequestFinish, SessionEnd, SessionId, SessionWait, SetPriority, SideEffect, Tier, ToolCall, ToolReturn, WaitKind,
    WarmPrefix,
};
pub use config::Config;
pub use policy::{info, recency_scores, Policy};

/// The WIT package version this SDK implements.
pub const CONTRACT_VERSION: &str = "0.5.0";

#[doc(hidden)]
pub mod __private {
    pub use crate::dispatch::Dispatcher;
    pub use crate::export::PolicyCell;
    pub use wit_bindgen;
}

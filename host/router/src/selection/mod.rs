//! NVIDIA Dynamo's standalone selection service (`python -m dynamo.select_service`,
//! `ai-dynamo-runtime` 1.6.1): [`wire`] is its HTTP API as far as agentrt uses it, [`client`]
//! talks to it.

pub mod client;
pub mod wire;

pub use client::SelectionClient;

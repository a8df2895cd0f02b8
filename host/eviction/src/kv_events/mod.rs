//! vLLM's KV-cache events (`--kv-events-config`): decode, track sequence, feed a policy.
//!
//! The one vLLM-specific part of this crate: the batch layout ([`decode`]), the publisher's
//! frames and replay socket ([`subscriber`]) and [`KvEventsConfig::for_vllm`] are vLLM's
//! (0.32–0.33). Everything else here — the socket, [`wire`](crate::wire), the ranker, pins — is
//! what every engine plugin speaks.

pub mod decode;
pub mod sink;
pub mod subscriber;

pub use decode::{decode_batch, DecodeError, EventBatch, KvEvent};
pub use sink::{pack_event, BlockSink, Forward};
pub use subscriber::{KvEventSubscriber, KvEventsConfig, SocketMode};

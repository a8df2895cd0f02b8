//! vLLM's KV-cache events (`--kv-events-config`): decode, track sequence, feed a policy.

pub mod decode;
pub mod sink;
pub mod subscriber;

pub use decode::{decode_batch, DecodeError, EventBatch, KvEvent};
pub use sink::{pack_event, BlockSink, Forward};
pub use subscriber::{KvEventSubscriber, KvEventsConfig, SocketMode};

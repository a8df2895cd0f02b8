//! Decoding vLLM's KV-cache event batches (msgpack, as `msgspec` writes them).
//!
//! Layout (vLLM 0.32–0.33, `vllm/distributed/kv_events.py`): a batch is an array
//! `[ts: f64, events: [..], data_parallel_rank?: int]`; each event is a map whose first key is
//! `"type"` (the struct's name) and whose defaulted fields are left out. Block hashes are u64 (the
//! low 64 bits of the sha256 block hash, big-endian) unless the engine runs with
//! `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0`, when they are raw bytes — both are accepted and
//! reduced the same way, so the hashes match the ones the plugin reports.
//!
//! Unknown event types and unknown fields are tolerated (newer vLLMs add fields); a field of the
//! wrong type is an error that names its path, e.g. `events[2].block_hashes[0]`.

use std::fmt;

use rmpv::Value;

/// A decoded batch.
#[derive(Debug, Clone, PartialEq)]
pub struct EventBatch {
    /// When the engine published the batch: seconds since the Unix epoch, on the engine's clock.
    pub ts: f64,
    /// The batch's events, in the order the engine emitted them.
    pub events: Vec<KvEvent>,
    /// The data-parallel rank of the engine that published it; `None` when left out.
    pub data_parallel_rank: Option<i64>,
}

/// One KV-cache event. Only the fields agentrt uses are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvEvent {
    /// Full blocks entered the prefix cache: one run of a prompt, in order.
    BlockStored {
        /// The run's blocks, each reduced to 64 bits (see the module doc).
        block_hashes: Vec<u64>,
        /// The block before the run in its prompt; `None` when the run starts the prompt.
        parent_block_hash: Option<u64>,
        /// Tokens per block.
        block_size: u32,
        /// Number of token ids carried (the ids themselves are not kept).
        tokens: u32,
        /// The cache tier (`GPU`, `CPU`, …); `None` means the GPU ([`KvEvent::is_gpu`]).
        medium: Option<String>,
        /// The KV-cache group (one per attention type in a hybrid model); `None` when left out.
        group_idx: Option<i64>,
        /// The session id of the request that stored the run, when it gave one.
        session_id: Option<String>,
    },
    /// Blocks left the cache (evicted, or moved out of this tier).
    BlockRemoved {
        /// The blocks, reduced as in [`KvEvent::BlockStored`].
        block_hashes: Vec<u64>,
        /// The cache tier; `None` means the GPU.
        medium: Option<String>,
        /// The KV-cache group; `None` when left out.
        group_idx: Option<i64>,
    },
    /// The engine dropped its whole prefix cache (a reset).
    AllBlocksCleared,
    /// An event type this version does not know; skipped.
    Unknown(String),
}

impl KvEvent {
    /// Whether the event is about the GPU tier (vLLM's `medium` "GPU", or unset). Offloading tiers
    /// (CPU, storage) publish on the same stream; their blocks are not eviction candidates.
    pub fn is_gpu(&self) -> bool {
        let medium = match self {
            KvEvent::BlockStored { medium, .. } | KvEvent::BlockRemoved { medium, .. } => medium,
            _ => return true,
        };
        medium.as_deref().is_none_or(|m| m.eq_ignore_ascii_case("GPU"))
    }
}

/// A batch that could not be decoded, with where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    /// Where in the batch, e.g. `events[2].block_hashes[0]`.
    pub path: String,
    /// What was found there instead of what was expected.
    pub what: String,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at {}: {}", self.path, self.what)
    }
}

impl std::error::Error for DecodeError {}

fn err(path: impl Into<String>, what: impl Into<String>) -> DecodeError {
    DecodeError {
        path: path.into(),
        what: what.into(),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Nil => "nil",
        Value::Boolean(_) => "bool",
        Value::Integer(_) => "int",
        Value::F32(_) | Value::F64(_) => "float",
        Value::String(_) => "string",
        Value::Binary(_) => "bytes",
        Value::Array(_) => "array",
        Value::Map(_) => "map",
        Value::Ext(..) => "ext",
    }
}

/// Decode one batch payload (the third ZMQ frame).
pub fn decode_batch(payload: &[u8]) -> Result<EventBatch, DecodeError> {
    let mut rd = payload;
    // Depth 16 is plenty (batch → events → event → extra_keys → tuple) and bounds recursion on
    // hostile input.
    let value =
        rmpv::decode::read_value_with_max_depth(&mut rd, 16).map_err(|e| err("batch", format!("not msgpack: {e}")))?;
    if !rd.is_empty() {
        return Err(err("batch", format!("{} trailing bytes", rd.len())));
    }
    let Value::Array(fields) = value else {
        return Err(err("batch", format!("expected an array, got {}", type_name(&value))));
    };
    if !(2..=3).contains(&fields.len()) {
        return Err(err(
            "batch",
            format!("expected [ts, events, dp_rank?], got {} fields", fields.len()),
        ));
    }
    let ts = fields[0]
        .as_f64()
        .ok_or_else(|| err("ts", format!("expected a float, got {}", type_name(&fields[0]))))?;
    let Value::Array(raw_events) = &fields[1] else {
        return Err(err(
            "events",
            format!("expected an array, got {}", type_name(&fields[1])),
        ));
    };
    let data_parallel_rank = match fields.get(2) {
        None | Some(Value::Nil) => None,
        Some(v) => Some(
            v.as_i64()
                .ok_or_else(|| err("data_parallel_rank", format!("expected an int, got {}", type_name(v))))?,
        ),
    };
    let events = raw_events
        .iter()
        .enumerate()
        .map(|(i, e)| decode_event(e, &format!("events[{i}]")))
        .collect::<Result<_, _>>()?;
    Ok(EventBatch {
        ts,
        events,
        data_parallel_rank,
    })
}

/// The fields of one event map, looked up by name.
struct Fields<'a> {
    path: &'a str,
    entries: &'a [(Value, Value)],
}

impl<'a> Fields<'a> {
    fn get(&self, name: &str) -> Option<&'a Value> {
        self.entries
            .iter()
            .find(|(k, _)| k.as_str() == Some(name))
            .map(|(_, v)| v)
            .filter(|v| !v.is_nil())
    }

    fn at(&self, name: &str) -> String {
        format!("{}.{name}", self.path)
    }

    fn hashes(&self, name: &str) -> Result<Vec<u64>, DecodeError> {
        let v = self.get(name).ok_or_else(|| err(self.at(name), "missing"))?;
        let Value::Array(items) = v else {
            return Err(err(self.at(name), format!("expected an array, got {}", type_name(v))));
        };
        items
            .iter()
            .enumerate()
            .map(|(i, h)| block_hash(h).map_err(|what| err(format!("{}[{i}]", self.at(name)), what)))
            .collect()
    }

    fn opt_hash(&self, name: &str) -> Result<Option<u64>, DecodeError> {
        self.get(name)
            .map(|v| block_hash(v).map_err(|what| err(self.at(name), what)))
            .transpose()
    }

    fn opt_string(&self, name: &str) -> Result<Option<String>, DecodeError> {
        self.get(name)
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| err(self.at(name), format!("expected a string, got {}", type_name(v))))
            })
            .transpose()
    }

    fn opt_int(&self, name: &str) -> Result<Option<i64>, DecodeError> {
        self.get(name)
            .map(|v| {
                v.as_i64()
                    .ok_or_else(|| err(self.at(name), format!("expected an int, got {}", type_name(v))))
            })
            .transpose()
    }
}

/// A block hash as vLLM publishes it: an int, or bytes reduced like vLLM's
/// `maybe_convert_block_hash` (big-endian, low 64 bits).
fn block_hash(v: &Value) -> Result<u64, String> {
    match v {
        Value::Integer(i) => i
            .as_u64()
            .or_else(|| i.as_i64().map(|s| s as u64))
            .ok_or_else(|| "integer out of range".to_string()),
        Value::Binary(b) => {
            let tail = &b[b.len().saturating_sub(8)..];
            Ok(tail.iter().fold(0u64, |acc, byte| (acc << 8) | u64::from(*byte)))
        }
        other => Err(format!("expected an int or bytes hash, got {}", type_name(other))),
    }
}

fn decode_event(v: &Value, path: &str) -> Result<KvEvent, DecodeError> {
    let Value::Map(entries) = v else {
        return Err(err(path, format!("expected a map, got {}", type_name(v))));
    };
    let f = Fields { path, entries };
    let kind = f
        .get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| err(f.at("type"), "missing or not a string"))?;
    Ok(match kind {
        "BlockStored" => {
            let tokens = match f.get("token_ids") {
                Some(Value::Array(ids)) => ids.len() as u32,
                Some(other) => {
                    return Err(err(
                        f.at("token_ids"),
                        format!("expected an array, got {}", type_name(other)),
                    ))
                }
                None => 0,
            };
            KvEvent::BlockStored {
                block_hashes: f.hashes("block_hashes")?,
                parent_block_hash: f.opt_hash("parent_block_hash")?,
                block_size: f.opt_int("block_size")?.unwrap_or(0).clamp(0, u32::MAX as i64) as u32,
                tokens,
                medium: f.opt_string("medium")?,
                group_idx: f.opt_int("group_idx")?,
                session_id: f.opt_string("session_id")?,
            }
        }
        "BlockRemoved" => KvEvent::BlockRemoved {
            block_hashes: f.hashes("block_hashes")?,
            medium: f.opt_string("medium")?,
            group_idx: f.opt_int("group_idx")?,
        },
        "AllBlocksCleared" => KvEvent::AllBlocksCleared,
        other => KvEvent::Unknown(other.to_string()),
    })
}

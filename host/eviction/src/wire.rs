//! The eviction wire protocol between an engine plugin (vLLM's `adapters/vllm/agentrt_vllm`,
//! SGLang's `adapters/sglang/agentrt_sglang`) and [`EvictionService`](crate::EvictionService),
//! over a Unix stream socket. The protocol names no engine; the examples below are vLLM's.
//!
//! A compact binary format rather than msgpack: the plugin packs and unpacks it with Python's
//! `struct`/`array` in one call per message, which is cheaper on vLLM's scheduler thread than any
//! msgpack encoder, and the Rust side reads it without allocation per item.
//!
//! Every integer is little-endian. A **frame** is
//!
//! ```text
//! u32 length  (bytes that follow, kind included; at most MAX_FRAME)
//! u8  kind
//! ... body
//! ```
//!
//! | kind | direction | body |
//! |---|---|---|
//! | `0x01` HELLO  | plugin → host | `u16 protocol`, `u16 n`, `n` bytes UTF-8 (the engine's version, for logs) |
//! | `0x81` HELLO_OK | host → plugin | `u16 protocol`: the highest version both sides speak (see below) |
//! | `0x02` AGENT  | plugin → host | `u32 wire_agent` (high bit set), `u16 n`, `n` bytes UTF-8 agent name |
//! | `0x03` BLOCKS | plugin → host | `k × 3 u64`: block events packed exactly as for `observe-blocks` (op, position, agent in word 0; hash; parent hash), the agent field holding a wire agent id — except that a *removed* event's third word holds the wire agent of the request whose allocation evicted the block (0: none known), which the host counts per tenant and zeroes before any policy sees it |
//! | `0x04` RANK   | plugin → host | `u32 request_id`, `u32 want`, `u32 missed`, `k ×` item (below) |
//! | `0x84` RANKED | host → plugin | `u32 request_id`, `u8 flags` (bit 0: the policy failed, LRU order; bit 1: a declined list follows), `u32 n`, `n × u32` item indices, evict-first first; with flag bit 1: `u32 d`, `d × u32` indices of items the policy declines to store |
//!
//! A RANK item is 40 bytes: `u64 block_hash`, `u64 session`, `u64 last_access`, `u32 wire_agent`,
//! `u32 tokens`, `u32 position` (the block's first token offset in its prompt), `u32 tier` (0 =
//! the GPU prefix cache, 1 = the host-memory tier; protocol 1 called this field `reserved` and
//! always sent 0, so an old plugin's items are GPU items). RANKED returns `min(want, k)` indices.
//! `missed` counts the RANKs the plugin gave up waiting for since its previous RANK, so the host's
//! counters show deadline misses too.
//!
//! **The host tier** (protocol 2). vLLM's offloading connector keeps a second copy of computed
//! blocks in host memory; the plugin's host-tier manager asks, over this same connection, which
//! resident copies to drop first (a RANK of host-tier items, answered as for the GPU) and which
//! blocks about to be copied are worth storing (a RANK of host-tier items with `want` 0: the
//! answer's declined list names the items the policy scored below zero, `wit/policy.wit`'s rule).
//! A RANK that holds host-tier items is answered with flag bit 1 and the declined list (empty when
//! the policy declines nothing or failed); a RANK of GPU items alone never carries it, so a
//! protocol-1 plugin never sees it. BLOCKS events carry their tier in word 0's bits 4..8, as the
//! packed form of `observe-blocks` does.
//!
//! **Versions.** HELLO_OK answers the highest protocol both sides speak: `min(plugin's, host's)`.
//! A protocol-1 plugin (GPU only) gets 1 and works as before; a protocol-2 plugin that gets 1 (an
//! older host) keeps its host tier in vLLM's own order and stores everything.
//!
//! **Wire agent ids.** A request names its agent in `vllm_xargs.agentrt_agent` either as an integer
//! (an agent handle the proxy already assigned: sent as is, high bit clear) or as a string (the
//! plugin defines it once per connection with AGENT under an id with the high bit set, and the
//! host resolves the name to a handle). 0 is "unknown agent".
//!
//! **Sessions** travel as u64: an integer `agentrt_session` as is, a string through
//! [`session_hash`] (FNV-1a 64 — the plugin implements the same function).
//!
//! Only RANK gets an answer, so tags and touches cost no round trip; the plugin sends its
//! buffered BLOCKS in the same write as the RANK that follows them, so the policy scores with
//! everything the engine did before. The host answers in request order; a plugin that gave up
//! waiting (its deadline passed) drops late answers by `request_id`.

use std::fmt;

use agentrt_runtime::types::Tier;

/// Bumped on any incompatible change; HELLO carries it and the host refuses another.
pub const PROTOCOL_VERSION: u16 = 2;

/// The oldest protocol this host still answers (GPU items only).
pub const MIN_PROTOCOL_VERSION: u16 = 1;

/// Largest frame either side accepts (a RANK of 64 Ki items is 2.5 MiB).
pub const MAX_FRAME: usize = 4 << 20;

/// Wire agent ids with this bit set name agents defined by an AGENT frame.
pub const DEFINED_AGENT_BIT: u32 = 1 << 31;

/// Bytes per RANK item.
pub const ITEM_BYTES: usize = 40;

// Frame kinds, as in the table above: plugin → host below 0x80, host → plugin answers with the
// high bit set.
/// HELLO: the plugin's protocol version and its engine's version, first on a connection.
pub const KIND_HELLO: u8 = 0x01;
/// AGENT: defines a wire agent id for an agent name, for the rest of the connection.
pub const KIND_AGENT: u8 = 0x02;
/// BLOCKS: packed block events (tags, touches, removals).
pub const KIND_BLOCKS: u8 = 0x03;
/// RANK: candidates to order for eviction; the only frame that gets an answer.
pub const KIND_RANK: u8 = 0x04;
/// HELLO_OK: the host accepts the plugin's protocol.
pub const KIND_HELLO_OK: u8 = 0x81;
/// RANKED: the answer to a RANK.
pub const KIND_RANKED: u8 = 0x84;

/// RANKED flag: the policy failed and the order is LRU's.
pub const FLAG_FALLBACK: u8 = 1;

/// RANKED flag: a declined list follows the indices (host-tier RANKs, protocol 2).
pub const FLAG_DECLINED: u8 = 2;

/// A RANK item's `tier` field for the GPU prefix cache (what protocol 1's `reserved` 0 meant).
pub const TIER_GPU: u32 = 0;

/// A RANK item's `tier` field for the host-memory tier.
pub const TIER_HOST: u32 = 1;

/// One candidate in a RANK frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WireItem {
    /// The block's hash, as its BLOCKS events name it.
    pub block_hash: u64,
    /// The session the block was last used by (an integer id, or a [`session_hash`]); 0: none.
    pub session: u64,
    /// The engine's logical clock at the block's last use; larger is more recent.
    pub last_access: u64,
    /// The agent that owns the block, as a wire agent id; 0: unknown.
    pub wire_agent: u32,
    /// Tokens the block holds.
    pub tokens: u32,
    /// The offset of the block's first token in its prompt.
    pub position: u32,
    /// Whose decision this is: the GPU prefix cache's or the host-memory tier's.
    pub tier: Tier,
}

/// A decoded plugin → host message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// HELLO: first on a connection.
    Hello {
        /// The plugin's [`PROTOCOL_VERSION`].
        protocol: u16,
        /// The engine's version string (vLLM's or SGLang's), for logs.
        engine_version: String,
    },
    /// AGENT: `wire_agent` names `name` from now on.
    Agent {
        /// The id, with [`DEFINED_AGENT_BIT`] set.
        wire_agent: u32,
        /// The agent's name, as the request's `vllm_xargs.agentrt_agent` gave it.
        name: String,
    },
    /// Packed block events (3 words each), agent fields still wire ids.
    Blocks(Vec<u64>),
    /// RANK: order `items` for eviction.
    Rank {
        /// Echoed in the RANKED answer, so a plugin that stopped waiting can drop it.
        request_id: u32,
        /// How many indices the plugin needs (it gets `min(want, items.len())`).
        want: u32,
        /// RANKs the plugin gave up waiting for since its previous RANK.
        missed: u32,
        /// The candidates.
        items: Vec<WireItem>,
    },
}

/// A decoded host → plugin message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// HELLO_OK: the host speaks the plugin's protocol.
    HelloOk {
        /// The host's [`PROTOCOL_VERSION`].
        protocol: u16,
    },
    /// RANKED: the answer to the RANK of the same `request_id`.
    Ranked {
        /// The RANK's `request_id`.
        request_id: u32,
        /// The policy failed (or is suspended) and the order is LRU's ([`FLAG_FALLBACK`]).
        fallback: bool,
        /// Indices into the RANK's items, the block to evict first first.
        evict_first: Vec<u32>,
        /// Indices of host-tier items the policy declines to store (scored below zero). `Some`
        /// (possibly empty) answers a RANK that held host-tier items, `None` one of GPU items
        /// only: only the former carries the list on the wire ([`FLAG_DECLINED`]).
        declined: Option<Vec<u32>>,
    },
}

/// Why a frame body could not be decoded. The frame boundary is still known, so the reader skips
/// the frame and carries on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireError {
    /// The frame's kind byte.
    pub kind: u8,
    /// What was wrong with its body, e.g. `truncated at want: need 4 bytes, 1 left`.
    pub what: String,
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "frame kind {:#04x}: {}", self.kind, self.what)
    }
}

impl std::error::Error for WireError {}

/// FNV-1a 64 of a session id string: what the plugin sends for a string `agentrt_session` (or a
/// vLLM `session_id`). The proxy should hash session ids the same way so that both views agree.
pub fn session_hash(session: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in session.as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// A little-endian reader over a frame body that reports what was missing.
struct Body<'a> {
    kind: u8,
    bytes: &'a [u8],
}

impl<'a> Body<'a> {
    fn err(&self, what: impl Into<String>) -> WireError {
        WireError {
            kind: self.kind,
            what: what.into(),
        }
    }

    fn take(&mut self, n: usize, field: &str) -> Result<&'a [u8], WireError> {
        if self.bytes.len() < n {
            return Err(self.err(format!(
                "truncated at {field}: need {n} bytes, {} left",
                self.bytes.len()
            )));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn u16(&mut self, field: &str) -> Result<u16, WireError> {
        Ok(u16::from_le_bytes(self.take(2, field)?.try_into().unwrap()))
    }

    fn u32(&mut self, field: &str) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.take(4, field)?.try_into().unwrap()))
    }

    fn u64(&mut self, field: &str) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.take(8, field)?.try_into().unwrap()))
    }

    fn string(&mut self, field: &str) -> Result<String, WireError> {
        let n = self.u16(field)? as usize;
        let raw = self.take(n, field)?;
        String::from_utf8(raw.to_vec()).map_err(|_| self.err(format!("{field} is not UTF-8")))
    }

    fn finish(&self) -> Result<(), WireError> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err(self.err(format!("{} trailing bytes", self.bytes.len())))
        }
    }
}

/// Decode a plugin → host frame from its kind and body (the length prefix already stripped).
pub fn decode_request(kind: u8, body: &[u8]) -> Result<Request, WireError> {
    let mut b = Body { kind, bytes: body };
    let request = match kind {
        KIND_HELLO => Request::Hello {
            protocol: b.u16("protocol")?,
            engine_version: b.string("engine version")?,
        },
        KIND_AGENT => {
            let wire_agent = b.u32("agent id")?;
            if wire_agent & DEFINED_AGENT_BIT == 0 {
                return Err(b.err(format!(
                    "AGENT defines id {wire_agent:#x} without the defined-agent bit"
                )));
            }
            Request::Agent {
                wire_agent,
                name: b.string("agent name")?,
            }
        }
        KIND_BLOCKS => {
            if !body.len().is_multiple_of(24) {
                return Err(b.err(format!(
                    "BLOCKS body of {} bytes is not a whole number of 24-byte events",
                    body.len()
                )));
            }
            let words = body
                .chunks_exact(8)
                .map(|w| u64::from_le_bytes(w.try_into().unwrap()))
                .collect();
            return Ok(Request::Blocks(words));
        }
        KIND_RANK => {
            let request_id = b.u32("request id")?;
            let want = b.u32("want")?;
            let missed = b.u32("missed")?;
            let items = rank_items(&mut b)?;
            Request::Rank {
                request_id,
                want,
                missed,
                items,
            }
        }
        other => {
            return Err(WireError {
                kind: other,
                what: "unknown frame kind".into(),
            })
        }
    };
    b.finish()?;
    Ok(request)
}

/// A RANK frame's items: the rest of its body, [`ITEM_BYTES`] each.
fn rank_items(b: &mut Body<'_>) -> Result<Vec<WireItem>, WireError> {
    if !b.bytes.len().is_multiple_of(ITEM_BYTES) {
        return Err(b.err(format!(
            "RANK items of {} bytes are not a whole number of {ITEM_BYTES}-byte items",
            b.bytes.len()
        )));
    }
    let mut items = Vec::with_capacity(b.bytes.len() / ITEM_BYTES);
    while !b.bytes.is_empty() {
        items.push(WireItem {
            block_hash: b.u64("item hash")?,
            session: b.u64("item session")?,
            last_access: b.u64("item last access")?,
            wire_agent: b.u32("item agent")?,
            tokens: b.u32("item tokens")?,
            position: b.u32("item position")?,
            tier: match b.u32("item tier")? {
                TIER_GPU => Tier::Gpu,
                TIER_HOST => Tier::Host,
                other => return Err(b.err(format!("item {} has tier {other} (0 = gpu, 1 = host)", items.len()))),
            },
        });
    }
    Ok(items)
}

/// Decode a host → plugin frame (used by tests and tools that play the plugin's part).
pub fn decode_reply(kind: u8, body: &[u8]) -> Result<Reply, WireError> {
    let mut b = Body { kind, bytes: body };
    let reply = match kind {
        KIND_HELLO_OK => Reply::HelloOk {
            protocol: b.u16("protocol")?,
        },
        KIND_RANKED => {
            let request_id = b.u32("request id")?;
            let flags = b.take(1, "flags")?[0];
            let n = b.u32("count")? as usize;
            let mut evict_first = Vec::with_capacity(n.min(1 << 16));
            for _ in 0..n {
                evict_first.push(b.u32("index")?);
            }
            let declined = if flags & FLAG_DECLINED != 0 {
                let d = b.u32("declined count")? as usize;
                let mut declined = Vec::with_capacity(d.min(1 << 16));
                for _ in 0..d {
                    declined.push(b.u32("declined index")?);
                }
                Some(declined)
            } else {
                None
            };
            Reply::Ranked {
                request_id,
                fallback: flags & FLAG_FALLBACK != 0,
                evict_first,
                declined,
            }
        }
        other => {
            return Err(WireError {
                kind: other,
                what: "unknown frame kind".into(),
            })
        }
    };
    b.finish()?;
    Ok(reply)
}

/// Start a frame: reserves the length prefix, which [`finish_frame`] fills in.
fn start_frame(out: &mut Vec<u8>, kind: u8) -> usize {
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    out.push(kind);
    at
}

fn finish_frame(out: &mut [u8], at: usize) {
    let len = (out.len() - at - 4) as u32;
    out[at..at + 4].copy_from_slice(&len.to_le_bytes());
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    let bytes = &s.as_bytes()[..s.len().min(u16::MAX as usize)];
    out.extend_from_slice(&(bytes.len() as u16).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// Append `reply` as a frame.
pub fn encode_reply(reply: &Reply, out: &mut Vec<u8>) {
    match reply {
        Reply::HelloOk { protocol } => {
            let at = start_frame(out, KIND_HELLO_OK);
            out.extend_from_slice(&protocol.to_le_bytes());
            finish_frame(out, at);
        }
        Reply::Ranked {
            request_id,
            fallback,
            evict_first,
            declined,
        } => {
            let at = start_frame(out, KIND_RANKED);
            out.extend_from_slice(&request_id.to_le_bytes());
            let mut flags = if *fallback { FLAG_FALLBACK } else { 0 };
            if declined.is_some() {
                flags |= FLAG_DECLINED;
            }
            out.push(flags);
            out.extend_from_slice(&(evict_first.len() as u32).to_le_bytes());
            for index in evict_first {
                out.extend_from_slice(&index.to_le_bytes());
            }
            if let Some(declined) = declined {
                out.extend_from_slice(&(declined.len() as u32).to_le_bytes());
                for index in declined {
                    out.extend_from_slice(&index.to_le_bytes());
                }
            }
            finish_frame(out, at);
        }
    }
}

/// Append `request` as a frame (the plugin's side, for tests and tools).
pub fn encode_request(request: &Request, out: &mut Vec<u8>) {
    match request {
        Request::Hello {
            protocol,
            engine_version,
        } => {
            let at = start_frame(out, KIND_HELLO);
            out.extend_from_slice(&protocol.to_le_bytes());
            put_string(out, engine_version);
            finish_frame(out, at);
        }
        Request::Agent { wire_agent, name } => {
            let at = start_frame(out, KIND_AGENT);
            out.extend_from_slice(&wire_agent.to_le_bytes());
            put_string(out, name);
            finish_frame(out, at);
        }
        Request::Blocks(words) => {
            let at = start_frame(out, KIND_BLOCKS);
            for word in words {
                out.extend_from_slice(&word.to_le_bytes());
            }
            finish_frame(out, at);
        }
        Request::Rank {
            request_id,
            want,
            missed,
            items,
        } => {
            let at = start_frame(out, KIND_RANK);
            out.extend_from_slice(&request_id.to_le_bytes());
            out.extend_from_slice(&want.to_le_bytes());
            out.extend_from_slice(&missed.to_le_bytes());
            for item in items {
                out.extend_from_slice(&item.block_hash.to_le_bytes());
                out.extend_from_slice(&item.session.to_le_bytes());
                out.extend_from_slice(&item.last_access.to_le_bytes());
                out.extend_from_slice(&item.wire_agent.to_le_bytes());
                out.extend_from_slice(&item.tokens.to_le_bytes());
                out.extend_from_slice(&item.position.to_le_bytes());
                let tier = match item.tier {
                    Tier::Gpu => TIER_GPU,
                    Tier::Host => TIER_HOST,
                };
                out.extend_from_slice(&tier.to_le_bytes());
            }
            finish_frame(out, at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip_request(request: Request) {
        let mut buf = Vec::new();
        encode_request(&request, &mut buf);
        let len = u32::from_le_bytes(buf[..4].try_into().unwrap()) as usize;
        assert_eq!(len, buf.len() - 4);
        assert_eq!(decode_request(buf[4], &buf[5..]).unwrap(), request);
    }

    #[test]
    fn requests_round_trip() {
        roundtrip_request(Request::Hello {
            protocol: PROTOCOL_VERSION,
            engine_version: "0.32.0+cpu".into(),
        });
        roundtrip_request(Request::Agent {
            wire_agent: DEFINED_AGENT_BIT | 3,
            name: "planner".into(),
        });
        roundtrip_request(Request::Blocks(vec![1 | (7 << 32), 0xabc, 0]));
        roundtrip_request(Request::Rank {
            request_id: 9,
            want: 2,
            missed: 1,
            items: vec![WireItem {
                block_hash: u64::MAX,
                session: 5,
                last_access: 77,
                wire_agent: 2,
                tokens: 32,
                position: 64,
                tier: Tier::Gpu,
            }],
        });
        roundtrip_request(Request::Rank {
            request_id: 10,
            want: 0,
            missed: 0,
            items: vec![WireItem {
                block_hash: 3,
                session: 0,
                last_access: 1,
                wire_agent: 0,
                tokens: 16,
                position: 0,
                tier: Tier::Host,
            }],
        });
    }

    /// A RANK as a protocol-1 plugin packs it: the item's last field, `reserved`, is 0.
    fn protocol1_rank(last_field: u32) -> Vec<u8> {
        let mut body = Vec::new();
        for word in [7u32, 1, 0] {
            body.extend_from_slice(&word.to_le_bytes());
        }
        for word in [0xabcu64, 5, 99] {
            body.extend_from_slice(&word.to_le_bytes());
        }
        for word in [2u32, 16, 32, last_field] {
            body.extend_from_slice(&word.to_le_bytes());
        }
        body
    }

    #[test]
    fn an_old_plugins_reserved_zero_is_the_gpu_tier() {
        let Request::Rank { items, .. } = decode_request(KIND_RANK, &protocol1_rank(0)).unwrap() else {
            panic!("not a RANK");
        };
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].tier, Tier::Gpu);
        assert_eq!((items[0].block_hash, items[0].position), (0xabc, 32));
        let Request::Rank { items, .. } = decode_request(KIND_RANK, &protocol1_rank(1)).unwrap() else {
            panic!("not a RANK");
        };
        assert_eq!(items[0].tier, Tier::Host);
        let e = decode_request(KIND_RANK, &protocol1_rank(2)).unwrap_err();
        assert!(e.what.contains("item 0 has tier 2"), "{e}");
    }

    #[test]
    fn encoded_items_carry_their_tier_in_the_old_reserved_field() {
        for (tier, field) in [(Tier::Gpu, 0u32), (Tier::Host, 1)] {
            let mut buf = Vec::new();
            encode_request(
                &Request::Rank {
                    request_id: 7,
                    want: 1,
                    missed: 0,
                    items: vec![WireItem {
                        block_hash: 0xabc,
                        session: 5,
                        last_access: 99,
                        wire_agent: 2,
                        tokens: 16,
                        position: 32,
                        tier,
                    }],
                },
                &mut buf,
            );
            assert_eq!(&buf[5..], &protocol1_rank(field)[..], "{tier:?}");
        }
    }

    #[test]
    fn a_gpu_answer_keeps_protocol_1s_layout_and_a_host_answer_adds_the_declined_list() {
        let mut gpu = Vec::new();
        encode_reply(
            &Reply::Ranked {
                request_id: 4,
                fallback: false,
                evict_first: vec![2, 0],
                declined: None,
            },
            &mut gpu,
        );
        // u32 request_id, u8 flags = 0, u32 n, n × u32: what a protocol-1 plugin decodes.
        assert_eq!(gpu.len(), 4 + 1 + 9 + 8);
        assert_eq!(gpu[4 + 1 + 4], 0, "no flag bit a protocol-1 plugin does not know");
        let mut host = Vec::new();
        encode_reply(
            &Reply::Ranked {
                request_id: 5,
                fallback: false,
                evict_first: vec![],
                declined: Some(vec![1, 3]),
            },
            &mut host,
        );
        assert_eq!(host[4 + 1 + 4], FLAG_DECLINED);
        assert_eq!(host.len(), 4 + 1 + 9 + 4 + 8);
    }

    #[test]
    fn replies_round_trip() {
        for reply in [
            Reply::HelloOk { protocol: 1 },
            Reply::Ranked {
                request_id: 4,
                fallback: true,
                evict_first: vec![2, 0, 1],
                declined: None,
            },
            Reply::Ranked {
                request_id: 6,
                fallback: false,
                evict_first: vec![1],
                declined: Some(vec![0, 1]),
            },
            Reply::Ranked {
                request_id: 8,
                fallback: true,
                evict_first: vec![],
                declined: Some(vec![]),
            },
        ] {
            let mut buf = Vec::new();
            encode_reply(&reply, &mut buf);
            assert_eq!(decode_reply(buf[4], &buf[5..]).unwrap(), reply);
        }
    }

    #[test]
    fn malformed_bodies_say_what_and_where() {
        let e = decode_request(KIND_BLOCKS, &[0; 23]).unwrap_err();
        assert!(e.what.contains("24-byte"), "{e}");
        let e = decode_request(KIND_RANK, &[0; 6]).unwrap_err();
        assert!(e.what.contains("truncated at want"), "{e}");
        let e = decode_request(KIND_AGENT, &[1, 0, 0, 0, 0, 0]).unwrap_err();
        assert!(e.what.contains("defined-agent bit"), "{e}");
        let e = decode_request(0x7f, &[]).unwrap_err();
        assert_eq!(e.kind, 0x7f);
        let mut hello = Vec::new();
        encode_request(
            &Request::Hello {
                protocol: 1,
                engine_version: "x".into(),
            },
            &mut hello,
        );
        hello.push(0);
        let e = decode_request(hello[4], &hello[5..]).unwrap_err();
        assert!(e.what.contains("trailing"), "{e}");
    }

    #[test]
    fn session_hash_is_fnv1a() {
        // Reference values of FNV-1a 64.
        assert_eq!(session_hash(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(session_hash("a"), 0xaf63_dc4c_8601_ec8c);
    }
}

"""The eviction wire protocol, plugin side. The authoritative description (and the host side) is
``host/eviction/src/wire.rs``; this mirrors it with ``struct`` so that packing costs one C call.

Frames: ``u32 length (LE, kind included) | u8 kind | body``. Little-endian throughout.
"""

from __future__ import annotations

import struct
import sys
from array import array

# 2 adds the host-memory tier: a RANK item's last field (``reserved`` in 1, always 0) carries the
# tier, and RANKED answers a host-tier RANK with the stores the policy declines. The host answers
# HELLO with the highest version both speak; a host that answers 1 knows no tiers.
PROTOCOL_VERSION = 2
KNOWN_PROTOCOLS = (1, 2)
MAX_FRAME = 4 << 20
DEFINED_AGENT_BIT = 1 << 31

KIND_HELLO = 0x01
KIND_AGENT = 0x02
KIND_BLOCKS = 0x03
KIND_RANK = 0x04
KIND_HELLO_OK = 0x81
KIND_RANKED = 0x84
FLAG_FALLBACK = 1
FLAG_DECLINED = 2  # a declined list follows the indices (host-tier RANKs)

# tier ordinals of the WIT enum (gpu, host): a RANK item's last field, bits 4..8 of word 0
TIER_GPU = 0
TIER_HOST = 1

# block-op ordinals of the WIT enum (stored, touched, removed, all-cleared)
OP_STORED = 0
OP_TOUCHED = 1
OP_REMOVED = 2
OP_ALL_CLEARED = 3
MAX_POSITION = (1 << 24) - 1

_HEADER = struct.Struct("<IB")
_RANK_HEAD = struct.Struct("<IBIII")  # length, kind, request_id, want, missed
ITEM = struct.Struct("<QQQIIII")  # hash, session, last_access, agent, tokens, position, tier
_MASK64 = (1 << 64) - 1


def fnv1a64(text: str) -> int:
    """FNV-1a 64 of the UTF-8 bytes: how string session ids become u64 (same as the host's
    ``wire::session_hash``)."""
    h = 0xCBF29CE484222325
    for byte in text.encode("utf-8"):
        h ^= byte
        h = (h * 0x100000001B3) & _MASK64
    return h


def frame(kind: int, body: bytes) -> bytes:
    return _HEADER.pack(len(body) + 1, kind) + body


def _string(text: str) -> bytes:
    raw = text.encode("utf-8")[:0xFFFF]
    return struct.pack("<H", len(raw)) + raw


def hello(engine_version: str) -> bytes:
    return frame(KIND_HELLO, struct.pack("<H", PROTOCOL_VERSION) + _string(engine_version))


def agent(wire_agent: int, name: str) -> bytes:
    return frame(KIND_AGENT, struct.pack("<I", wire_agent) + _string(name))


def block_word0(op: int, wire_agent: int, position: int, tier: int = TIER_GPU) -> int:
    """Word 0 of a packed block event (op, tier, position, agent), as ``observe-blocks`` wants it."""
    return op | (tier << 4) | (min(position, MAX_POSITION) << 8) | (wire_agent << 32)


def blocks(words: array) -> bytes:
    """A BLOCKS frame from an ``array('Q')`` of packed events (3 words each)."""
    if sys.byteorder != "little":
        words = array("Q", words)
        words.byteswap()
    return frame(KIND_BLOCKS, words.tobytes())


def rank(request_id: int, want: int, missed: int, items: list[tuple], tier: int = TIER_GPU) -> bytes:
    """A RANK frame; each item is ``(hash, session, last_access, agent, tokens, position)``, all
    of them candidates of ``tier``."""
    parts = [_RANK_HEAD.pack(1 + 12 + ITEM.size * len(items), KIND_RANK, request_id, want, missed)]
    pack = ITEM.pack
    parts.extend(pack(h, s, t, a, n, p, tier) for (h, s, t, a, n, p) in items)
    return b"".join(parts)


class FrameReader:
    """Accumulates bytes and yields whole frames as ``(kind, body)``."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def feed(self, data: bytes) -> None:
        self.buf += data

    def next(self):
        if len(self.buf) < 4:
            return None
        (length,) = struct.unpack_from("<I", self.buf, 0)
        if length == 0 or length > MAX_FRAME:
            raise ValueError(f"frame length {length} out of range")
        if len(self.buf) < 4 + length:
            return None
        kind = self.buf[4]
        body = bytes(self.buf[5 : 4 + length])
        del self.buf[: 4 + length]
        return kind, body


def decode_ranked(body: bytes) -> tuple[int, bool, list[int], list[int] | None]:
    """``(request_id, fallback, evict-first indices, declined indices)``; declined is ``None``
    when the answer carries no list (GPU RANKs, or a host that knows no tiers)."""
    request_id, flags, n = struct.unpack_from("<IBI", body, 0)
    end = 9 + 4 * n
    if len(body) < end:
        raise ValueError(f"RANKED body of {len(body)} bytes does not hold {n} indices")
    order = list(struct.unpack_from(f"<{n}I", body, 9)) if n else []
    declined = None
    if flags & FLAG_DECLINED:
        if len(body) < end + 4:
            raise ValueError(f"RANKED body of {len(body)} bytes lacks its declined count")
        (d,) = struct.unpack_from("<I", body, end)
        end += 4 + 4 * d
        if len(body) < end:
            raise ValueError(f"RANKED body of {len(body)} bytes does not hold {d} declined indices")
        declined = list(struct.unpack_from(f"<{d}I", body, end - 4 * d)) if d else []
    if len(body) != end:
        raise ValueError(f"RANKED body of {len(body)} bytes has {len(body) - end} trailing bytes")
    return request_id, bool(flags & FLAG_FALLBACK), order, declined


def decode_hello_ok(body: bytes) -> int:
    (protocol,) = struct.unpack_from("<H", body, 0)
    return protocol

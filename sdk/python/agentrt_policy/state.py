"""Snapshots in the Rust SDK's compact layout (sdk/src/state.rs): a 4-byte tag, a u16 format
version, then little-endian fields. `Reader` fails with a `ValueError` naming what is wrong, which
`restore` passes on to the host as its refusal."""

import struct
from typing import Tuple

_FORMATS = {"u8": "<B", "u16": "<H", "u32": "<I", "u64": "<Q", "f32": "<f"}


class Writer:
    def __init__(self, magic: bytes, version: int):
        if len(magic) != 4:
            raise ValueError("a snapshot tag is 4 bytes")
        self._buf = bytearray(magic) + struct.pack("<H", version)

    def _put(self, kind: str, value) -> "Writer":
        self._buf += struct.pack(_FORMATS[kind], value)
        return self

    def u8(self, v: int) -> "Writer":
        return self._put("u8", v)

    def u16(self, v: int) -> "Writer":
        return self._put("u16", v)

    def u32(self, v: int) -> "Writer":
        return self._put("u32", v)

    def u64(self, v: int) -> "Writer":
        return self._put("u64", v)

    def f32(self, v: float) -> "Writer":
        return self._put("f32", v)

    def finish(self) -> bytes:
        return bytes(self._buf)


class Reader:
    @staticmethod
    def open(state: bytes, magic: bytes) -> Tuple["Reader", int]:
        """The reader past the header, and the format version found."""
        if len(state) < 6 or state[:4] != magic:
            raise ValueError(f"snapshot is not from this policy (expected tag {magic.decode(errors='replace')!r})")
        return Reader(state[6:]), struct.unpack("<H", state[4:6])[0]

    def __init__(self, rest: bytes):
        self._rest = memoryview(rest)
        self._at = 0

    def _take(self, kind: str):
        fmt = _FORMATS[kind]
        size = struct.calcsize(fmt)
        if self._at + size > len(self._rest):
            raise ValueError("snapshot is truncated")
        value = struct.unpack_from(fmt, self._rest, self._at)[0]
        self._at += size
        return value

    def u8(self) -> int:
        return self._take("u8")

    def u16(self) -> int:
        return self._take("u16")

    def u32(self) -> int:
        return self._take("u32")

    def u64(self) -> int:
        return self._take("u64")

    def f32(self) -> float:
        return self._take("f32")

    def finish(self) -> None:
        """Fail unless every byte was read: trailing bytes mean a format mismatch."""
        left = len(self._rest) - self._at
        if left:
            raise ValueError(f"snapshot has {left} unexpected trailing bytes")

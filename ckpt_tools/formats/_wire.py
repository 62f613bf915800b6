"""Bounds-checked decoding primitives shared by the table, bundle and V1 readers.

All reads go through :class:`Cursor`, so a truncated or malformed file raises
:class:`~ckpt_tools.errors.CorruptCheckpointError` naming the file and the byte offset instead of
an ``IndexError`` deep inside a parser.
"""

from __future__ import annotations

import struct

from ..errors import CorruptCheckpointError

_U32 = struct.Struct("<I")


class Cursor:
    """A read position over a bytes-like buffer, with every read bounds-checked.

    Args:
        data: the buffer (``bytes``, ``memoryview`` or ``mmap``).
        path: file name used in error messages.
        base: absolute file offset of ``data[0]``, so errors report file positions.
        start: first readable index; ``end`` (default ``len(data)``) is one past the last.
    """

    __slots__ = ("data", "path", "base", "pos", "end")

    def __init__(self, data, path: str, *, base: int = 0, start: int = 0, end: int | None = None):
        self.data = data
        self.path = path
        self.base = base
        self.pos = start
        self.end = len(data) if end is None else end

    def error(self, message: str, pos: int | None = None) -> CorruptCheckpointError:
        """Returns (does not raise) an error located at ``pos`` (default: current position)."""
        return CorruptCheckpointError(
            message, path=self.path, offset=self.base + (self.pos if pos is None else pos)
        )

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def read(self, n: int) -> memoryview:
        """Returns the next ``n`` bytes as a memoryview (no copy) and advances."""
        if n < 0 or n > self.end - self.pos:
            raise self.error(f"expected {n} more bytes but only {self.end - self.pos} remain "
                             "(file truncated or corrupt)")
        start = self.pos
        self.pos += n
        return memoryview(self.data)[start : start + n]

    def varint(self, limit_bits: int = 64) -> int:
        """Decodes a base-128 varint of at most ``limit_bits`` bits."""
        data, pos, end = self.data, self.pos, self.end
        result = 0
        shift = 0
        while True:
            if pos >= end:
                raise self.error("varint runs past the end of its block")
            b = data[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                break
            shift += 7
            if shift >= limit_bits:
                raise self.error(f"varint longer than {limit_bits} bits")
        self.pos = pos
        return result

    def u32(self) -> int:
        return _U32.unpack(self.read(4))[0]



def encode_varint(value: int) -> bytes:
    """Encodes a non-negative integer as a base-128 varint."""
    if value < 0:
        raise ValueError(f"varint must be non-negative, got {value}")
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)

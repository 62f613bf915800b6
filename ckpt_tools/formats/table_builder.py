"""LevelDB table builder: the inverse of :mod:`.table`, used for bundle ``.index`` files.

Bit-compatible with TensorFlow's ``table::TableBuilder`` without compression: prefix-shared
keys with a restart point every 16 entries, one index block, an empty metaindex block and the
48-byte footer.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from . import crc
from ._wire import encode_varint
from .table import MAGIC

BLOCK_SIZE = 256 * 1024  # TensorFlow's table block size for bundles
RESTART_INTERVAL = 16


class _BlockBuilder:
    def __init__(self, restart_interval: int):
        self.interval = restart_interval
        self.buf = bytearray()
        self.restarts = [0]
        self.count = 0
        self.last = b""

    def add(self, key: bytes, value: bytes) -> None:
        shared = 0
        if self.count < self.interval:
            limit = min(len(key), len(self.last))
            while shared < limit and key[shared] == self.last[shared]:
                shared += 1
        else:
            self.restarts.append(len(self.buf))
            self.count = 0
        self.buf += encode_varint(shared) + encode_varint(len(key) - shared)
        self.buf += encode_varint(len(value)) + key[shared:] + value
        self.last = key
        self.count += 1

    def finish(self) -> bytes:
        out = self.buf + b"".join(struct.pack("<I", r) for r in self.restarts)
        return bytes(out + struct.pack("<I", len(self.restarts)))

    def size(self) -> int:
        return len(self.buf) + 4 * (len(self.restarts) + 1)


def build_table(items: Iterable[tuple[bytes, bytes]], block_size: int = BLOCK_SIZE) -> bytes:
    """Returns a LevelDB-format table holding ``items`` (which must be sorted by key).

    Raises:
        ValueError: if keys are not strictly increasing.
    """
    out = bytearray()
    index = _BlockBuilder(1)

    def emit(block: bytes) -> tuple[int, int]:
        offset = len(out)
        out.extend(block)
        trailer = b"\x00" + struct.pack("<I", crc.mask(crc.crc32c(block + b"\x00")))
        out.extend(trailer)
        return offset, len(block)

    block = _BlockBuilder(RESTART_INTERVAL)
    prev = None
    for key, value in items:
        if prev is not None and key <= prev:
            raise ValueError(f"table keys must be strictly increasing: {key!r} after {prev!r}")
        prev = key
        block.add(key, value)
        if block.size() >= block_size:
            offset, size = emit(block.finish())
            index.add(block.last, encode_varint(offset) + encode_varint(size))
            block = _BlockBuilder(RESTART_INTERVAL)
    if block.count or not index.count:
        offset, size = emit(block.finish())
        index.add(block.last, encode_varint(offset) + encode_varint(size))
    meta_handle = emit(_BlockBuilder(1).finish())
    index_handle = emit(index.finish())
    footer = b"".join(encode_varint(v) for v in (*meta_handle, *index_handle))
    footer = footer.ljust(40, b"\x00") + struct.pack("<II", MAGIC & 0xFFFFFFFF, MAGIC >> 32)
    return bytes(out + footer)

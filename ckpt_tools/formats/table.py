"""Reader for the LevelDB-style immutable table used by ``.index`` files and V1 checkpoints.

Layout (TensorFlow ``tsl/lib/io/table*.cc``): data blocks, a metaindex block, an index block,
then a 48-byte footer holding the metaindex and index handles and a magic number. Each block is
followed by a 5-byte trailer (compression type + masked CRC32C of block + type byte). Block
entries share key prefixes with their predecessor; restart points close the block.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..errors import CorruptCheckpointError, UnsupportedFormatError
from . import crc
from ._record import Frozen
from ._wire import Cursor

FOOTER_SIZE = 48
MAGIC = 0xDB4775248B80FB57
BLOCK_TRAILER_SIZE = 5
_NO_COMPRESSION = 0
_SNAPPY = 1
MAX_KEY_BYTES = 64 << 10  # longest key accepted (TensorFlow names are far shorter)
# Keys share prefixes, so a small file can spell huge keys: their total is capped relative to
# the file, keeping memory and time proportional to what is on disk.
_KEY_BUDGET_BASE, _KEY_BUDGET_RATIO = 16 << 20, 16
_SNAPPY_MAX_RATIO = 22  # a 3-byte copy tag yields at most 64 bytes


class BlockHandle(Frozen):
    """Position of a block in the file; ``size`` excludes the 5-byte trailer."""

    offset: int
    size: int
    _fields = ("offset", "size")

    def __init__(self, offset: int, size: int) -> None:
        self.__dict__.update(offset=offset, size=size)

    @classmethod
    def decode(cls, cur: Cursor) -> BlockHandle:
        return cls(cur.varint(), cur.varint())


class Table:
    """Iterates the key/value entries of a table file in key order.

    Args:
        data: the whole file (``bytes`` or ``mmap``).
        path: file name for error messages.
        verify: check block CRCs (on by default; cheap next to protobuf parsing).

    Raises:
        CorruptCheckpointError: on a bad footer, magic number, block, or checksum.
    """

    def __init__(self, data, path: str, *, verify: bool = True):
        self.data = data
        self.path = path
        self.verify = verify
        self._key_budget = _KEY_BUDGET_BASE + _KEY_BUDGET_RATIO * len(data)
        if len(data) < FOOTER_SIZE:
            raise CorruptCheckpointError(
                f"file is {len(data)} bytes, smaller than the {FOOTER_SIZE}-byte table footer "
                "(truncated or not a checkpoint)", path=path)
        footer_at = len(data) - FOOTER_SIZE
        cur = Cursor(data, path, start=footer_at)
        self.metaindex = BlockHandle.decode(cur)
        self.index = BlockHandle.decode(cur)
        cur.pos = len(data) - 8
        magic = cur.u32() | (cur.u32() << 32)
        if magic != MAGIC:
            raise CorruptCheckpointError(
                f"bad table magic number 0x{magic:016x}, expected 0x{MAGIC:016x} "
                "(not a TensorFlow checkpoint index, or truncated)", path=path,
                offset=len(data) - 8)  # the magic is the footer's last 8 bytes

    def _block(self, handle: BlockHandle) -> bytes | memoryview:
        end = handle.offset + handle.size + BLOCK_TRAILER_SIZE
        if end > len(self.data):
            raise CorruptCheckpointError(
                f"block [{handle.offset}, {end}) lies outside the {len(self.data)}-byte file",
                path=self.path, offset=handle.offset)
        view = memoryview(self.data)
        body = view[handle.offset : handle.offset + handle.size]
        ctype = self.data[handle.offset + handle.size]
        if self.verify:
            stored = int.from_bytes(view[end - 4 : end], "little")
            actual = crc.mask(crc.crc32c(view[handle.offset : end - 4]))
            if stored != actual:
                raise CorruptCheckpointError(
                    f"block checksum mismatch (stored 0x{stored:08x}, computed 0x{actual:08x})",
                    path=self.path, offset=handle.offset)
        if ctype == _NO_COMPRESSION:
            return body
        if ctype == _SNAPPY:
            return snappy_decompress(body, self.path, handle.offset)
        raise UnsupportedFormatError(
            f"{self.path}: unsupported block compression type {ctype} at byte {handle.offset}")

    def _entries(self, handle: BlockHandle) -> Iterator[tuple[bytes, bytes | memoryview]]:
        block = self._block(handle)
        return self.block_entries(handle, block, self.entries_end(handle, block))

    def entries_end(self, handle: BlockHandle, block) -> int:
        """Returns where the entries of ``block`` (the block at ``handle``) end: the start of
        its restart array.

        Raises:
            CorruptCheckpointError: the block is too short or its restart count is invalid.
        """
        size = len(block)
        if size < 4:
            raise CorruptCheckpointError("block shorter than its restart count",
                                         path=self.path, offset=handle.offset)
        num_restarts = int.from_bytes(block[size - 4 :], "little")
        limit = size - 4 * (1 + num_restarts)
        if num_restarts == 0 or limit < 0:
            raise CorruptCheckpointError(
                f"block has an invalid restart count {num_restarts}",
                path=self.path, offset=handle.offset)
        return limit

    def block_entries(self, handle: BlockHandle, block, limit: int
                      ) -> Iterator[tuple[bytes, bytes | memoryview]]:
        """Yields ``(key, value)`` for the entries of ``block[:limit]`` (the block at
        ``handle``, ``limit`` from :meth:`entries_end`).

        Raises:
            CorruptCheckpointError: on a malformed entry.
        """
        # base=0 when decompressed: offsets then refer to the uncompressed block.
        cur = Cursor(block, self.path, base=handle.offset, end=limit)
        key = b""
        raw = bytes(block)  # indexing bytes is ~3x cheaper than indexing a memoryview
        pos = 0
        while pos < limit:
            # Fast path (almost every entry): three one-byte varints, everything in bounds;
            # the position kept in a local and the value handed out as bytes (the readers
            # copy it to bytes anyway).
            if pos + 3 <= limit:
                shared, non_shared, value_len = raw[pos], raw[pos + 1], raw[pos + 2]
                start = pos + 3 + non_shared
                end = start + value_len
                if (shared | non_shared | value_len) < 0x80 and shared <= len(key) and (
                        end <= limit):
                    key = key[:shared] + raw[pos + 3 : start]
                    pos = end
                    yield key, raw[start:end]
                    continue
            cur.pos = pos
            shared = cur.varint(32)
            non_shared = cur.varint(32)
            value_len = cur.varint(32)
            if shared > len(key):
                raise cur.error(f"entry shares {shared} key bytes but previous key has {len(key)}")
            if shared + non_shared > MAX_KEY_BYTES:
                raise cur.error(f"key of {shared + non_shared} bytes is longer than the "
                                f"{MAX_KEY_BYTES} accepted")
            self._key_budget -= shared + non_shared
            if self._key_budget < 0:
                raise cur.error("keys add up to more bytes than a table of this size can "
                                "reasonably hold (prefix-sharing keys growing without end?)")
            key = key[:shared] + bytes(cur.read(non_shared))
            value = cur.read(value_len)
            pos = cur.pos
            yield key, value

    def data_blocks(self) -> Iterator[tuple[BlockHandle, bytes | memoryview, int]]:
        """Yields ``(handle, block, entries end)`` for every data block, in index order, each
        block read (and its checksum verified) when the iteration reaches it.

        Raises:
            CorruptCheckpointError: on a malformed index block or data block.
        """
        for _, handle_bytes in self._entries(self.index):
            hcur = Cursor(handle_bytes, self.path)
            handle = BlockHandle.decode(hcur)
            block = self._block(handle)
            yield handle, block, self.entries_end(handle, block)

    def ordered(self, handle: BlockHandle, block, limit: int, prev: bytes | None
                ) -> Iterator[tuple[bytes, bytes | memoryview]]:
        """:meth:`block_entries`, checking that keys increase strictly (from ``prev``, the
        key before this block; ``None`` for the first block).

        Raises:
            CorruptCheckpointError: on malformed entries or keys out of order.
        """
        for key, value in self.block_entries(handle, block, limit):
            if prev is not None and key <= prev:
                raise CorruptCheckpointError(
                    f"keys out of order: {key!r} after {prev!r}",
                    path=self.path, offset=handle.offset)
            prev = key
            yield key, value

    def decode_block(self, decoder, block, limit: int, prev: bytes | None, *args):
        """Runs a compiled block decoder (``cwire.bundle_block``) over ``block[:limit]`` with
        this table's key budget and key limit; returns its answer (``None``: the decoder
        declined, and the caller reads the block with :meth:`ordered`). The budget is charged
        only when the decoder accepted the block."""
        got = decoder(block, limit, prev, self._key_budget, MAX_KEY_BYTES, *args)
        if got is not None:
            self._key_budget = got[2]
        return got

    def items(self) -> Iterator[tuple[bytes, bytes | memoryview]]:
        """Yields ``(key, value)`` for every entry, walking data blocks in index order.

        Raises:
            CorruptCheckpointError: on malformed blocks or keys that are not strictly increasing.
        """
        prev: bytes | None = None
        for handle, block, limit in self.data_blocks():
            for key, value in self.ordered(handle, block, limit, prev):
                prev = key
                yield key, value


def snappy_decompress(src, path: str = "<block>", offset: int = 0) -> bytes:
    """Decompresses a raw Snappy block (used by some TF 0.x/1.x tables).

    Implemented here because TF only writes Snappy blocks in old files and a compiled dependency
    for that rare case is not worth it.

    Raises:
        CorruptCheckpointError: if the stream is malformed.
    """
    cur = Cursor(src, path, base=offset)
    expected = cur.varint(32)
    if expected > _SNAPPY_MAX_RATIO * len(src):
        raise cur.error(f"snappy block of {len(src)} bytes claims {expected} decompressed bytes")
    out = bytearray()
    while cur.remaining:
        tag = cur.read(1)[0]
        kind = tag & 3
        if kind == 0:  # literal
            n = tag >> 2
            if n >= 60:
                extra = n - 59
                n = int.from_bytes(cur.read(extra), "little")
            if len(out) + n + 1 > expected:
                raise cur.error(f"snappy block decompresses past its declared {expected} bytes")
            out += cur.read(n + 1)
            continue
        if kind == 1:
            length = ((tag >> 2) & 7) + 4
            dist = ((tag >> 5) << 8) | cur.read(1)[0]
        elif kind == 2:
            length = (tag >> 2) + 1
            dist = int.from_bytes(cur.read(2), "little")
        else:
            length = (tag >> 2) + 1
            dist = int.from_bytes(cur.read(4), "little")
        if dist == 0 or dist > len(out):
            raise cur.error("snappy copy refers before the start of the output")
        if len(out) + length > expected:
            raise cur.error(f"snappy block decompresses past its declared {expected} bytes")
        start = len(out) - dist
        if dist >= length:
            out += out[start : start + length]
        else:  # an overlapping copy repeats the last ``dist`` bytes
            out += (out[start:] * (length // dist + 1))[:length]
    if len(out) != expected:
        raise cur.error(f"snappy block decompressed to {len(out)} bytes, expected {expected}")
    return bytes(out)

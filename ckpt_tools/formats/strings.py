"""The DT_STRING tensor codec of TensorFlow's tensor bundle, in one place.

Layout (``tensor_bundle.cc``: ``WriteStringTensor``): a varint length per element, a masked
CRC32C of the lengths (each as uint32, or uint64 when it does not fit), then the bytes. The
entry's CRC covers the length bytes-as-integers, the length CRC and the bytes, in that order.
"""

from __future__ import annotations

import struct

from . import crc
from ._record import Record
from ._wire import Cursor, encode_varint


def _length_bytes(lengths) -> bytes:
    return b"".join(
        struct.pack("<I", n) if n <= 0xFFFFFFFF else struct.pack("<Q", n) for n in lengths)


class DecodedStrings(Record):
    """What :func:`decode_strings` found; ``problems`` is empty when the tensor is sound."""

    items: list[bytes]
    problems: list[str]
    _fields = ("items", "problems")

    def __init__(self, items: list[bytes], problems: list[str]) -> None:
        self.items = items
        self.problems = problems


def decode_strings(data, count: int, *, path: str, offset: int = 0,
                   expected_crc: int | None = None, verify: bool = True,
                   keep: bool = True) -> DecodedStrings:
    """Decodes ``count`` strings from ``data`` and checks both checksums when ``verify``.

    Returns:
        :class:`DecodedStrings`: the items (empty when ``keep`` is false) and every problem found.

    Raises:
        CorruptCheckpointError: when the lengths themselves cannot be read (truncated varints).

    Example:
        >>> blob, c = encode_strings([b"ab", b"c"])
        >>> decode_strings(blob, 2, path="x", expected_crc=c).items
        [b'ab', b'c']
    """
    if count > len(data):
        return DecodedStrings([], [f"claims {count} elements in {len(data)} bytes"])
    cur = Cursor(data, path, base=offset)
    lengths = [cur.varint() for _ in range(count)]
    stored_len_crc = bytes(cur.read(4))
    problems = []
    if sum(lengths) != cur.remaining:
        problems.append(f"lengths add up to {sum(lengths)} bytes but {cur.remaining} remain")
    if verify:
        running = crc.crc32c(_length_bytes(lengths))
        if crc.mask(running) != int.from_bytes(stored_len_crc, "little"):
            problems.append("length checksum mismatch")
        running = crc.crc32c(data[cur.pos :], crc.crc32c(stored_len_crc, running))
        if expected_crc is not None and crc.mask(running) != expected_crc:
            problems.append(f"checksum mismatch (stored 0x{expected_crc:08x}, computed "
                            f"0x{crc.mask(running):08x})")
    items = [bytes(cur.read(n)) for n in lengths] if keep and not problems else []
    return DecodedStrings(items, problems)


def encode_strings(values) -> tuple[bytes, int]:
    """Serializes strings as a DT_STRING tensor; returns ``(bytes, masked CRC32C)``."""
    items = [v if isinstance(v, bytes) else str(v).encode("utf-8") for v in values]
    lengths = b"".join(encode_varint(len(v)) for v in items)
    running = crc.crc32c(_length_bytes(len(v) for v in items))
    length_crc = struct.pack("<I", crc.mask(running))
    running = crc.crc32c(length_crc, running)
    body = b"".join(items)
    running = crc.crc32c(body, running)
    return lengths + length_crc + body, crc.mask(running)

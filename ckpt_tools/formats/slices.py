"""Tensor slices of partitioned variables and their OrderedCode checkpoint keys.

A partitioned variable ``emb`` (graph parts ``emb/part_0``…) is saved as one full-name entry that
lists its slices, plus one entry per slice under ``EncodeTensorNameSlice(name, slice)``
(``tensorflow/core/util/saved_tensor_slice_util.cc``): OrderedCode ``NumIncreasing(0)``, the
name as an escaped string, ``NumIncreasing(rank)``, then signed start/length per dimension. The
key sorts before every ordinary name because it starts with ``\\x00``.
"""

from __future__ import annotations

import itertools
import math
import re
from array import array

from ..errors import CorruptCheckpointError, UnsupportedFormatError
from ._record import Frozen

FULL = -1  # TensorFlow's kFullExtent: "length" of a dimension that is not sliced


class TensorSlice(Frozen):
    """Per-dimension ``(start, length)`` pairs; ``length == -1`` means the whole dimension."""

    extents: tuple[tuple[int, int], ...]
    _fields = ("extents",)

    def __init__(self, extents: tuple[tuple[int, int], ...]) -> None:
        self.__dict__["extents"] = extents

    @classmethod
    def from_proto(cls, proto, rank: int | None = None) -> TensorSlice:
        """Builds a slice from a ``TensorSliceProto`` (missing extents cover whole dims)."""
        ext = [(e.start, e.length if e.HasField("length") else FULL) for e in proto.extent]
        if rank is not None and not ext:
            ext = [(0, FULL)] * rank
        return cls(tuple(ext))

    @classmethod
    def full(cls, rank: int) -> TensorSlice:
        return cls(((0, FULL),) * rank)

    def resolve(self, shape: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
        """Returns concrete ``(start, length)`` per dimension of a tensor of ``shape``.

        Raises:
            CorruptCheckpointError: if the slice does not fit inside ``shape``.
        """
        if len(self.extents) != len(shape):
            raise CorruptCheckpointError(
                f"slice of rank {len(self.extents)} does not match tensor rank {len(shape)}")
        out = []
        for (start, length), dim in zip(self.extents, shape, strict=True):
            if length == FULL:
                start, length = 0, dim
            if start < 0 or length < 0 or start + length > dim:
                raise CorruptCheckpointError(
                    f"slice [{start}:{start + length}] lies outside dimension of size {dim}")
            out.append((start, length))
        return tuple(out)

    def shape(self, full_shape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(length for _, length in self.resolve(full_shape))

    def index(self, full_shape: tuple[int, ...]) -> tuple[slice, ...]:
        """Returns a NumPy index selecting this slice from an array of ``full_shape``."""
        return tuple(slice(s, s + n) for s, n in self.resolve(full_shape))

    def is_full(self, full_shape: tuple[int, ...]) -> bool:
        return all(s == 0 and n == d for (s, n), d in zip(self.resolve(full_shape), full_shape,
                                                          strict=True))

    def __str__(self) -> str:  # TensorFlow's "0,4:-" text form
        return ":".join("-" if n == FULL else f"{s},{n}" for s, n in self.extents)


_MAX_GRID_CELLS = 1 << 21  # cells of the boundary grid marked one by one (2 M: about a second)
_MAX_PAIRWISE = 4096  # slices compared pair by pair when the grid would be larger


def check_partition(name: str, shape: tuple[int, ...], slices, *,
                    complete: bool = True) -> list[tuple[tuple[int, int], ...]]:
    """Checks, by extents, that ``slices`` tile a tensor of ``shape`` exactly.

    With ``complete=False`` a gap is allowed (one part of a :func:`fragment_groups` group):
    the slices must still lie inside ``shape`` and not overlap.

    Every slice must lie inside ``shape``, no two may share an element, and together they must
    cover every element. Disjointness is proven box against box, so overlapping slices that
    leave a gap of the same size cannot pass, as they would if only element counts were summed;
    once the boxes are disjoint and inside, equal volume means exact cover.

    Returns:
        the resolved ``(start, length)`` extents of each slice, in the order given.

    Raises:
        CorruptCheckpointError: naming the tensor, on a slice outside the shape, two
            overlapping slices, or a gap.
        UnsupportedFormatError: more than 4096 slices split along several dimensions so
            finely that proving them disjoint would take too long (TensorFlow partitions
            along one dimension only).
    """
    boxes = []
    for s in slices:
        try:
            boxes.append(s.resolve(shape))
        except CorruptCheckpointError as exc:
            raise CorruptCheckpointError(f"partitioned tensor {name!r}: slice {s}: {exc}") from None
    solid = [i for i, b in enumerate(boxes) if all(n > 0 for _, n in b)]  # empty ones hold nothing
    pair = _first_overlap(name, boxes, solid, shape)
    if pair is not None:
        raise CorruptCheckpointError(
            f"partitioned tensor {name!r}: slices {slices[pair[0]]} and {slices[pair[1]]} "
            "overlap")
    covered = sum(math.prod(n for _, n in boxes[i]) for i in solid)
    total = math.prod(shape)
    if covered != total and complete:
        raise CorruptCheckpointError(
            f"partitioned tensor {name!r}: its {len(boxes)} slices cover {covered} of "
            f"{total} elements (a gap)")
    return boxes


def leaves_gap(shape: tuple[int, ...], slices) -> bool:
    """True when ``slices`` lie inside ``shape`` without overlapping but do not cover it (so
    :func:`check_partition` would refuse them only for the gap)."""
    try:
        check_partition("", shape, slices, complete=False)
    except (CorruptCheckpointError, UnsupportedFormatError):
        return False
    boxes = [s.resolve(shape) for s in slices]
    return sum(math.prod(n for _, n in b) for b in boxes) != math.prod(shape)


# The part's own segment, cut from its front by as many characters as the slot's variable
# scope is long (TF1 slot_creator): part_K, art_K ... _K, K (scopes ema_scope, ..., e).
_PART = re.compile(r"(?:(?<=/)|^)(?:part|art|rt|t|)_?(\d+)(?=/|$)")


def fragment_groups(gapped: dict) -> dict[str, tuple[str, ...]]:
    """Groups the partitioned entries that each hold one part of one tensor under its own name.

    TensorFlow 1's slot creator names the partitioned slot of a partitioned variable
    ``<full name>/<slot name cut at the length of the part's name>``; when the slot is made
    under another ``variable_scope`` (``ema.apply()`` inside ``variable_scope("ema_scope")``)
    the cut leaves the part in the key: the shadow of ``net/w`` (parts ``net/w/part_0``,
    ``net/w/part_1``) is saved as ``net/w//w/part_0/avg`` and ``net/w//w/part_1/avg``, each a
    "partitioned" tensor of the full shape holding only its own slice. A scope of another
    length cuts into the part's own name: ``net/w/t_0/avg`` (scope ``ema``), ``net/w/0/avg``
    (scope ``e``). TensorFlow restores them
    part by part; together they are one tensor.

    Args:
        gapped: name -> :class:`~ckpt_tools.formats.entry.TensorEntry` of partitioned entries
            whose slices leave a gap (:func:`leaves_gap`).

    Returns:
        group name (the key with its last ``part_K`` written ``part_*``) -> the member keys in
        part order, only for groups that prove it: two or more members whose names differ only
        in that ``K``, numbered ``0..n-1``, one slice each, same dtype and shape, slices in part
        order, together tiling the shape exactly. Other gapped entries are left out (corrupt).
    """
    by_pattern: dict[str, list[tuple[int, str]]] = {}
    for name in gapped:
        found = list(_PART.finditer(name))
        if not found:
            continue
        last = found[-1]
        pattern = name[:last.start()] + "part_*" + name[last.end():]
        by_pattern.setdefault(pattern, []).append((int(last.group(1)), name))
    groups: dict[str, tuple[str, ...]] = {}
    for pattern, members in by_pattern.items():
        members.sort()
        entries = [gapped[n] for _, n in members]
        first = entries[0]
        if (len(members) < 2 or [k for k, _ in members] != list(range(len(members)))
                or pattern in gapped
                or any(len(e.slices) != 1 or e.dtype != first.dtype or e.shape != first.shape
                       for e in entries)):
            continue
        slices = [e.slices[0] for e in entries]
        try:
            boxes = check_partition(pattern, first.shape, slices)
        except (CorruptCheckpointError, UnsupportedFormatError):
            continue
        if list(boxes) != sorted(boxes):  # part K holds the K-th slice
            continue
        groups[pattern] = tuple(n for _, n in members)
    return groups


def _first_overlap(name: str, boxes, solid: list[int], shape) -> tuple[int, int] | None:
    """Returns two overlapping boxes (indexes into ``boxes``), or None when all are disjoint."""
    if len(solid) < 2:
        return None
    rank = len(shape)
    varying = [d for d in range(rank) if len({boxes[i][d] for i in solid}) > 1]
    if not varying:  # two or more identical boxes
        return solid[0], solid[1]
    if len(varying) == 1:  # TensorFlow's case: split along one dimension, sorted intervals
        d = varying[0]
        order = sorted(solid, key=lambda i: boxes[i][d][0])
        for a, b in zip(order, order[1:], strict=False):
            if boxes[b][d][0] < boxes[a][d][0] + boxes[a][d][1]:
                return a, b
        return None
    # Several dimensions split: mark the cells of the grid the boxes' edges draw.
    bounds = [sorted({0, shape[d]} | {boxes[i][d][0] for i in solid}
                     | {boxes[i][d][0] + boxes[i][d][1] for i in solid}) for d in range(rank)]
    cells = math.prod(len(b) - 1 for b in bounds)
    if cells <= _MAX_GRID_CELLS:
        where = [{v: k for k, v in enumerate(b)} for b in bounds]
        strides = [math.prod(len(b) - 1 for b in bounds[d + 1:]) for d in range(rank)]
        owner = array("l", [-1]) * cells
        for i in solid:
            ranges = [range(where[d][s], where[d][s + n]) for d, (s, n) in enumerate(boxes[i])]
            for cell in itertools.product(*ranges):
                flat = sum(c * st for c, st in zip(cell, strides, strict=True))
                if owner[flat] >= 0:
                    return owner[flat], i
                owner[flat] = i
        return None
    if len(solid) > _MAX_PAIRWISE:
        raise UnsupportedFormatError(
            f"partitioned tensor {name!r} has {len(solid)} slices split along {len(varying)} "
            "dimensions; too many to prove disjoint")
    order = sorted(solid, key=lambda i: boxes[i][varying[0]][0])
    for k, i in enumerate(order):
        for j in order[:k]:
            pairs = zip(boxes[i], boxes[j], strict=True)
            if all(max(a, c) < min(a + n, c + m) for (a, n), (c, m) in pairs):
                return j, i
    return None


def _signed(value: int) -> bytes:
    """OrderedCode WriteSignedNumIncreasing: n bytes encode [-2^(7n-1), 2^(7n-1))."""
    n = 1
    while not -(1 << (7 * n - 1)) <= value < (1 << (7 * n - 1)):
        n += 1
    header = ((1 << n) - 1) << (7 * n)
    return ((value % (1 << (8 * n))) ^ header).to_bytes(n, "big")


def _unsigned(value: int) -> bytes:
    """OrderedCode WriteNumIncreasing: a length byte, then the big-endian minimal bytes."""
    body = value.to_bytes((value.bit_length() + 7) // 8, "big")
    return bytes((len(body),)) + body


def _read_unsigned(buf: bytes, pos: int) -> tuple[int, int]:
    if pos >= len(buf) or buf[pos] > 8 or pos + 1 + buf[pos] > len(buf):
        raise CorruptCheckpointError("malformed rank in slice key")
    n = buf[pos]
    return int.from_bytes(buf[pos + 1 : pos + 1 + n], "big"), pos + 1 + n


def _read_signed(buf: bytes, pos: int) -> tuple[int, int]:
    if pos >= len(buf):
        raise CorruptCheckpointError("slice key ends inside a number")
    negative = not buf[pos] & 0x80
    bits = int.from_bytes(buf[pos : pos + 2], "big") << (16 - 8 * len(buf[pos : pos + 2]))
    if negative:
        bits ^= 0xFFFF
    n = 0
    while n < 10 and bits & (0x8000 >> n):  # count leading bits equal to the sign bit
        n += 1
    if n == 0 or pos + n > len(buf):
        raise CorruptCheckpointError("malformed number in slice key")
    raw = int.from_bytes(buf[pos : pos + n], "big") ^ (((1 << n) - 1) << (7 * n))
    if raw >= 1 << (8 * n - 1):
        raw -= 1 << (8 * n)
    return raw, pos + n


def encode_key(name: str, tslice: TensorSlice) -> bytes:
    """Returns TensorFlow's ``EncodeTensorNameSlice(name, slice)`` key bytes."""
    escaped = bytearray()
    for b in name.encode("utf-8"):
        escaped += b"\x00\xff" if b == 0 else b"\xff\x00" if b == 0xFF else bytes((b,))
    out = bytearray(b"\x00") + escaped + b"\x00\x01" + _unsigned(len(tslice.extents))
    for start, length in tslice.extents:
        out += _signed(start) + _signed(length)
    return bytes(out)


def decode_key(key: bytes) -> tuple[str, TensorSlice]:
    """Inverts :func:`encode_key`.

    Raises:
        CorruptCheckpointError: if ``key`` is not a well-formed slice key.
    """
    if not key.startswith(b"\x00"):
        raise CorruptCheckpointError(f"not a slice key: {key[:40]!r}")
    name = bytearray()
    i = 1
    while True:
        if i + 1 >= len(key):
            raise CorruptCheckpointError(f"unterminated name in slice key {key[:40]!r}")
        c = key[i]
        if c == 0x00:
            nxt = key[i + 1]
            if nxt == 0x01:
                i += 2
                break
            if nxt != 0xFF:
                raise CorruptCheckpointError(f"bad escape in slice key {key[:40]!r}")
            name.append(0)
            i += 2
        elif c == 0xFF:
            if key[i + 1] != 0x00:
                raise CorruptCheckpointError(f"bad escape in slice key {key[:40]!r}")
            name.append(0xFF)
            i += 2
        else:
            name.append(c)
            i += 1
    rank, i = _read_unsigned(key, i)
    if not 0 <= rank <= 64:
        raise CorruptCheckpointError(f"slice key has an impossible rank {rank}")
    extents = []
    for _ in range(rank):
        start, i = _read_signed(key, i)
        length, i = _read_signed(key, i)
        extents.append((start, length))
    if i != len(key):
        raise CorruptCheckpointError(f"trailing bytes in slice key {key[:40]!r}")
    try:
        text = name.decode("utf-8")
    except UnicodeDecodeError:
        text = name.decode("latin-1")
    return text, TensorSlice(tuple(extents))

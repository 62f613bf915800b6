"""The tensor-reading half of :class:`~ckpt_tools.formats.bundle.BundleReader` (the mixin
:class:`TensorReads`: bytes, CRC verdicts, chunks, strings, partitioned tensors), and the
bundle's file names and shape rules both halves use (:func:`data_path`, :func:`shape_of`,
:data:`NO_CRC`), which :mod:`.bundle` imports back for its importers. The index, the shards'
maps and closing stay in :mod:`.bundle`."""

from __future__ import annotations

import math
from collections.abc import Iterator

from ..errors import CorruptCheckpointError, RemoteAccessError
from . import crc, dtypes
from ._io import release_pages, view
from .entry import TensorEntry
from .slices import TensorSlice
from .strings import decode_strings

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the list path
if TYPE_CHECKING:
    import numpy as np


def data_path(prefix: str, shard: int, num_shards: int) -> str:
    """Returns the data file name TensorFlow uses for ``shard`` of ``num_shards``."""
    return f"{prefix}.data-{shard:05d}-of-{num_shards:05d}"


MAX_RANK = 64  # TensorFlow's TensorShape::MaxDimensions()

# TensorFlow's BundleReader::GetValue compares Unmask(entry.crc32c()) with the CRC32C of the
# bytes it read, always, whatever the reader's options: an entry without the field reads as 0
# (proto3), so such a tensor is refused ("Checksum does not match") unless its data's masked
# CRC32C is 0 itself (which TensorFlow's writer stores as an absent field). Every read here
# does the same, verified or not: an absent CRC never turns checking off. The full entry of a
# partitioned tensor stores no bytes and no CRC; each slice carries its own (checked on read).
NO_CRC = (" has no CRC32C in its index entry; TensorFlow reads that as 0 and refuses the "
          "tensor (Checksum does not match)")


def shape_of(proto, name: str | None = None) -> tuple[int, ...]:
    """Returns the dimensions of a ``TensorShapeProto``.

    Raises:
        CorruptCheckpointError: on an unknown rank, a rank above 64 or a negative dimension
            (naming tensor ``name`` when given).
    """
    what = f"tensor {name!r}" if name is not None else "stored tensor"
    if proto.unknown_rank:
        raise CorruptCheckpointError(f"{what} has unknown rank")
    if len(proto.dim) > MAX_RANK:
        raise CorruptCheckpointError(f"{what} has rank {len(proto.dim)}, above the maximum "
                                     f"{MAX_RANK}")
    dims = tuple(d.size for d in proto.dim)
    if any(d < 0 for d in dims):
        raise CorruptCheckpointError(f"{what} has a negative dimension: {dims}")
    return dims


class TensorReads:
    """Reading stored tensors: a mixin of :class:`~ckpt_tools.formats.bundle.BundleReader` (its
    entries, shards and ``verify``)."""

    def raw(self, entry: TensorEntry) -> memoryview:
        """Returns the stored bytes of a (non-partitioned) entry without copying.

        Raises:
            CorruptCheckpointError: if the bytes lie outside the data file.
        """
        mm = self._shard(entry.shard_id)
        end = entry.offset + entry.stored_bytes
        if not getattr(mm, "size_known", True):
            return self._first_read(mm, entry, end)
        if end > len(mm):
            raise CorruptCheckpointError(
                f"tensor {entry.name!r} spans bytes [{entry.offset}, {end}) but the file has "
                f"{len(mm)} bytes (truncated data shard)",
                path=data_path(self.prefix, entry.shard_id, self.num_shards))
        return view(mm, entry.offset, end)

    def _first_read(self, mm, entry: TensorEntry, end: int) -> memoryview:
        """The first read of an http(s) shard, whose size only its answer tells (no HEAD
        request before it): then the shard's extents are checked as others are at open."""
        try:
            data = view(mm, entry.offset, end)
        except RemoteAccessError:  # (Shorter: the shard's real size is known now)
            if not mm.size_known:
                raise
            self._check_extents(entry.shard_id, len(mm))  # past its end: truncated
            raise
        self._check_extents(entry.shard_id, len(mm))
        return data

    def check_crc(self, entry: TensorEntry, data) -> None:
        """Raises CorruptCheckpointError if ``data`` does not match the entry's CRC32C (an
        entry without one is checked against 0, as TensorFlow does)."""
        self._crc_verdict(entry, crc.crc32c_parallel(data))  # large tensors: every core

    def _crc_verdict(self, entry: TensorEntry, computed: int) -> None:
        """Raises CorruptCheckpointError unless ``computed`` (an unmasked CRC32C of all the
        entry's bytes) matches the stored one."""
        actual = crc.mask(computed)
        if not entry.crc32c and actual != 0:
            raise CorruptCheckpointError(
                f"tensor {entry.name!r}{NO_CRC} (computed 0x{actual:08x})", path=self.index_path)
        if actual != (entry.crc32c or 0):
            raise CorruptCheckpointError(
                f"checksum mismatch for tensor {entry.name!r} (stored 0x{entry.crc32c:08x}, "
                f"computed 0x{actual:08x}): the data file is corrupt",
                path=data_path(self.prefix, entry.shard_id, self.num_shards),
                offset=entry.offset)

    def _read_entry(self, entry: TensorEntry, shape: tuple[int, ...]) -> np.ndarray:
        import numpy as np  # deferred: listing never reads tensors

        count = math.prod(shape)
        if entry.dtype == dtypes.STRING:
            return self._read_strings(entry, shape, count)
        item = dtypes.itemsize(entry.dtype)
        dt = dtypes.numpy_dtype(entry.dtype, self.big_endian)
        if item * count != entry.stored_bytes:
            raise CorruptCheckpointError(
                f"tensor {entry.name!r} of shape {shape} and dtype {entry.dtype_name} needs "
                f"{item * count} bytes but its entry says {entry.stored_bytes}",
                path=self.index_path)
        data = self.raw(entry)
        if self.verify or not entry.crc32c:  # an absent CRC is refused even unverified
            self.check_crc(entry, data)
        arr = np.frombuffer(data, dtype=dt, count=count).reshape(shape)
        if self.big_endian and dt.itemsize > 1:
            return arr.astype(dt.newbyteorder("="))
        if entry.offset % max(dt.alignment, 1):
            return arr.copy()  # unaligned views are slow for every later operation
        return arr

    def plan_reads(self, names: list[str]) -> None:
        """Tells remote data shards which tensors are about to be read, in that order (see
        :meth:`.remote_readahead.RemoteFile.plan`); local shards need no plan."""
        spans: dict[int, list[tuple[int, int]]] = {}
        for name in names:
            entry = self.entries.get(name)
            if entry is not None and not entry.slices and entry.stored_bytes:
                spans.setdefault(entry.shard_id, []).append(
                    (entry.offset, entry.offset + entry.stored_bytes))
        for shard_id, planned in spans.items():
            plan = getattr(self._shard(shard_id), "plan", None)
            if plan is not None:
                plan(planned)

    def iter_chunks(self, name: str, max_bytes: int = 1 << 20, verify: bool | None = None,
                    release: bool = False) -> Iterator[np.ndarray] | None:
        """Returns an iterator over the flat values of tensor ``name`` in chunks of at most
        ``max_bytes``, or ``None`` when the tensor is not one contiguous run of numbers
        (strings, partitioned variables: use :meth:`read`).

        Verified reads make one pass: each chunk is added to the running CRC32C just before
        it is handed out, so the consumer reads it from cache, and the last ``next()`` raises
        :class:`CorruptCheckpointError` if the checksum does not match (a tensor of one chunk
        is checked before that chunk is handed out). A consumer must
        therefore not commit what it computed until the iterator is exhausted. ``verify``
        overrides the reader's setting (``False``: a second pass over checked bytes). With
        ``release`` each chunk's pages are unmapped from this process once the consumer asks
        for the next chunk (the page cache keeps them; views still work, faulting them back),
        so resident memory stays at one chunk however large the tensor (streaming export).

        Raises:
            KeyError: if ``name`` is not in the checkpoint.
        """
        entry = self.entries[name]
        if entry.slices or entry.dtype == dtypes.STRING:
            return None
        return self._chunks(entry, max_bytes, self.verify if verify is None else verify, release)

    def _chunks(self, entry: TensorEntry, max_bytes: int, verify: bool,
                release: bool) -> Iterator[np.ndarray]:
        import numpy as np  # deferred: listing never reads tensors

        dt = dtypes.numpy_dtype(entry.dtype, self.big_endian)
        item = max(dt.itemsize, 1)
        if item * entry.num_elements != entry.stored_bytes:
            raise CorruptCheckpointError(
                f"tensor {entry.name!r} of shape {entry.shape} and dtype {entry.dtype_name} "
                f"needs {item * entry.num_elements} bytes but its entry says "
                f"{entry.stored_bytes}", path=self.index_path)
        data = self.raw(entry)
        check = verify or not entry.crc32c  # an absent CRC is refused even unverified
        step = max(item, max_bytes // item * item)
        swap = self.big_endian and item > 1
        unaligned = bool(entry.offset % max(dt.alignment, 1))
        mm = self._shard(entry.shard_id) if release else None
        if 0 < len(data) <= step:  # one chunk (most tensors): checked before it is handed out
            if check:
                self._crc_verdict(entry, crc.crc32c(data))
            arr = np.frombuffer(data, dtype=dt)
            yield arr.astype(dt.newbyteorder("=")) if swap else arr.copy() if unaligned else arr
            if mm is not None:
                release_pages(mm, entry.offset, len(data))
            return
        running = 0
        for start in range(0, len(data), step):
            piece = data[start : start + step]
            if check:
                running = crc.crc32c(piece, running)
            arr = np.frombuffer(piece, dtype=dt)
            if swap:
                arr = arr.astype(dt.newbyteorder("="))
            elif unaligned:
                arr = arr.copy()
            yield arr
            if mm is not None:
                release_pages(mm, entry.offset + start, len(piece))
        if check:
            self._crc_verdict(entry, running)

    def _read_strings(self, entry: TensorEntry, shape, count: int) -> np.ndarray:
        import numpy as np  # deferred: listing never reads tensors

        data = self.raw(entry)
        path = data_path(self.prefix, entry.shard_id, self.num_shards)
        if count > len(data):
            raise CorruptCheckpointError(
                f"string tensor {entry.name!r} claims {count} elements in {len(data)} bytes",
                path=path, offset=entry.offset)
        decoded = decode_strings(data, count, path=path, offset=entry.offset,
                                 expected_crc=entry.crc32c or 0,
                                 verify=self.verify or not entry.crc32c)
        if decoded.problems and not entry.crc32c and any(
                p.startswith("checksum mismatch") for p in decoded.problems):
            raise CorruptCheckpointError(f"string tensor {entry.name!r}{NO_CRC}",
                                         path=self.index_path)
        if decoded.problems:
            raise CorruptCheckpointError(
                f"string tensor {entry.name!r}: {'; '.join(decoded.problems)}",
                path=path, offset=entry.offset)
        out = np.empty(count, dtype=object)
        out[:] = decoded.items
        return out.reshape(shape)

    def read(self, name: str) -> np.ndarray:
        """Returns the tensor stored under ``name``, assembling partitioned variables.

        Raises:
            KeyError: if ``name`` is not in the checkpoint.
            CorruptCheckpointError: on checksum or size mismatches.
        """
        entry = self.entries[name]
        if not entry.slices:
            return self._read_entry(entry, entry.shape)
        return self._assemble(entry)

    def _assemble(self, entry: TensorEntry) -> np.ndarray:
        import numpy as np  # deferred: listing never reads tensors

        # The slices were proven at open to tile the shape, each stored with the bytes its
        # extent needs (_check_sizes): allocating the whole tensor is bounded by the file.
        parts = []
        for tslice, sub in self.slice_entries(entry.name):
            self.raw(sub)
            parts.append((tslice, sub, tslice.shape(entry.shape)))
        dt = np.dtype(object) if entry.dtype == dtypes.STRING else dtypes.numpy_dtype(entry.dtype)
        out = np.empty(entry.shape, dtype=dt)
        for tslice, sub, sub_shape in parts:
            out[tslice.index(entry.shape)] = self._read_entry(sub, sub_shape)
        return out

    def slice_entries(self, name: str) -> list[tuple[TensorSlice, TensorEntry]]:
        """Returns ``(slice, stored entry)`` pairs of a partitioned tensor (empty if not one).

        Raises:
            CorruptCheckpointError: if a listed slice is not stored.
        """
        out = []
        for s in self.entries[name].slices:
            sub = self._slice_entries.get((name, s))
            if sub is None:
                raise CorruptCheckpointError(
                    f"partitioned tensor {name!r} lists slice {s} that is not stored",
                    path=self.index_path)
            out.append((s, sub))
        return out

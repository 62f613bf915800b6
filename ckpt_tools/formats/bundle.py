"""Reader for TensorFlow V2 checkpoints ("tensor bundles"): ``<prefix>.index`` + data shards.

The index is a table (see :mod:`ckpt_tools.formats.table`) whose ``""`` entry is a
``BundleHeaderProto``
and whose other entries are ``BundleEntryProto`` records pointing into
``<prefix>.data-SSSSS-of-NNNNN``. Data shards are memory-mapped and tensors returned as NumPy
views over the mapping, so reading costs page faults, not copies.
"""

from __future__ import annotations

import math
import mmap
from collections.abc import Iterator

from ..errors import (
    CheckpointNotFoundError,
    CorruptCheckpointError,
    RemoteAccessError,
    UnsupportedFormatError,
)
from . import crc, dtypes
from ._io import (
    close_map,
    gc_paused,
    map_file,
    open_ranged,
    regular_size,
    release_pages,
    remote_session,
    sizes_listed,
    view,
)
from .bundle_wire import WireError, decode_entry, decode_header
from .entry import TensorEntry, bundle_entry
from .slices import TensorSlice, check_partition, decode_key, fragment_groups, leaves_gap
from .strings import decode_strings
from .table import Table

try:  # the compiled .index fast path (setup.py); without it Python reads every entry alike
    from ..cwire import bundle_block as _c_block
except ImportError:  # no compiler at install time, or a source checkout never built
    _c_block = None

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the list path
if TYPE_CHECKING:
    import numpy as np

_LITTLE, _BIG = 0, 1
_MAX_BUNDLE_VERSION = 1  # TensorFlow's kTensorBundleVersion


def _known_dtypes() -> bytes:
    """``known[d]`` is 1 for each one-byte ``DataType`` enum ``d`` the reader accepts (what
    :meth:`BundleReader._entry` checks with :func:`dtypes.dtype_name`), else 0."""
    return bytes([dtypes.is_known(d) for d in range(128)])


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


_UNMAP_APART = 64 << 20  # see BundleReader.close


class BundleReader:
    """Reads one V2 checkpoint.

    Args:
        prefix: checkpoint prefix (``model.ckpt-1000``), i.e. the ``.index`` path minus suffix.
        verify: check CRC32C of index blocks and of every tensor read.

    Raises:
        CheckpointNotFoundError: if ``<prefix>.index`` does not exist.
        CorruptCheckpointError: if the index is malformed.
    """

    format = "v2"
    keras = None  # TensorFlow bundles keep EMA facts in the .meta and object graph

    def __init__(self, prefix: str, *, verify: bool = True):
        self.prefix = prefix
        self.index_path = prefix + ".index"
        self.verify = verify
        self._store = remote_session(prefix)  # a URL's reads stay with the listing they saw
        try:
            index = map_file(self.index_path)
        except FileNotFoundError:
            raise CheckpointNotFoundError(f"{self.index_path}: no such file") from None
        except IsADirectoryError:
            raise CheckpointNotFoundError(f"{self.index_path}: is a directory") from None
        self.entries: dict[str, TensorEntry] = {}
        self._slice_entries: dict[tuple[str, TensorSlice], TensorEntry] = {}
        self._shards: dict[int, object] = {}
        self._known_dtypes: set[int] = set()  # enum values already checked (one check each)
        try:
            with gc_paused():  # one entry object per tensor, no cycles
                self._parse(Table(index, self.index_path, verify=verify))
        finally:
            close_map(index)

    # -- index -----------------------------------------------------------------------------
    def _parse(self, table: Table) -> None:
        prev: bytes | None = None  # the last key read (None: not even the header yet)
        known = _known_dtypes() if _c_block is not None else b""
        for handle, block, limit in table.data_blocks():
            if _c_block is not None:  # the compiled fast path (see ckpt_tools/cwire.c)
                got = table.decode_block(_c_block, block, limit, prev, TensorEntry, known)
                if got is not None:
                    entries, last, _, max_shard, header, deferred = got
                    if header is not None:
                        self._header(header)
                    if last is None or max_shard < self.num_shards:  # else Python names it
                        self.entries.update(entries)
                        for key, value in deferred:  # in order, as the loop below would
                            self._add(key, value)
                        prev = last
                        continue
            for key, value in table.ordered(handle, block, limit, prev):
                if prev is None:
                    if key != b"":
                        raise CorruptCheckpointError("index has no bundle header entry",
                                                     path=self.index_path)
                    self._header(bytes(value))
                else:
                    self._add(key, value)
                prev = key
        if prev is None:
            raise CorruptCheckpointError("index has no bundle header entry", path=self.index_path)
        for name, _ in self._slice_entries:
            if name not in self.entries:
                raise CorruptCheckpointError(f"slice of {name!r} has no full-tensor entry",
                                             path=self.index_path)
        if sizes_listed(self.prefix):  # else each shard when it is first read
            self._check_extents()
        self._check_sizes()

    def _add(self, key: bytes, value) -> None:
        """Adds the tensor (or partition slice) entry stored under ``key``."""
        if key.startswith(b"\x00"):
            name, tslice = decode_key(key)
            self._slice_entries[(name, tslice)] = self._entry(name, value, key)
            return
        try:
            name = key.decode("utf-8")
        except UnicodeDecodeError:
            name = key.decode("latin-1")
        self.entries[name] = self._entry(name, value, key)

    def _header(self, value: bytes) -> None:
        """Reads the ``BundleHeaderProto`` (the index's ``""`` entry).

        Raises:
            CorruptCheckpointError, UnsupportedFormatError: an invalid or too new header.
        """
        try:
            num_shards, endianness, min_consumer = decode_header(value)
        except WireError as exc:
            raise CorruptCheckpointError(f"cannot parse entry '': {exc}",
                                         path=self.index_path) from None
        self.num_shards = 1 if num_shards is None else num_shards
        if self.num_shards < 1 or self.num_shards > 100_000:
            raise CorruptCheckpointError(f"header claims {self.num_shards} shards",
                                         path=self.index_path)
        if endianness not in (_LITTLE, _BIG):
            raise CorruptCheckpointError(f"unknown endianness {endianness}",
                                         path=self.index_path)
        self.big_endian = endianness == _BIG
        if min_consumer > _MAX_BUNDLE_VERSION:
            raise UnsupportedFormatError(
                f"{self.index_path}: bundle needs reader version {min_consumer}, "
                f"this reader supports {_MAX_BUNDLE_VERSION}")

    def _merge_fragments(self, gapped: dict[str, tuple[TensorEntry, Exception]]) -> None:
        """Reads each :func:`~.slices.fragment_groups` group (the parts of one tensor that TF1
        saved under one name per part) as one partitioned entry named after the group
        (``net/w//w/part_*/avg``); ``extra["fragments"]`` keeps the stored keys, in slice order,
        so writers can store them as TensorFlow did.

        Raises:
            CorruptCheckpointError: a gapped entry (``gapped``: name -> (entry, the error
                naming its gap)) that no group fills.
        """
        groups = fragment_groups({n: e for n, (e, _) in gapped.items()})
        grouped = {m for members in groups.values() for m in members}
        for name, (_, exc) in gapped.items():
            if name not in grouped:
                raise CorruptCheckpointError(str(exc), path=self.index_path)
        group_of = {m: g for g, members in groups.items() for m in members}
        merged: dict[str, TensorEntry] = {}
        for name, entry in self.entries.items():
            group = group_of.get(name)
            if group is None:
                merged[name] = entry
                continue
            if group in merged:
                continue
            members = groups[group]
            slices = tuple(self.entries[m].slices[0] for m in members)
            for member, tslice in zip(members, slices, strict=True):
                sub = self._slice_entries.pop((member, tslice), None)
                if sub is None:
                    raise CorruptCheckpointError(
                        f"partitioned tensor {member!r} lists slice {tslice} that is not "
                        "stored", path=self.index_path)
                self._slice_entries[(group, tslice)] = sub
            whole = bundle_entry(group, entry.dtype, entry.shape, 0, 0, 0, None, slices)
            whole.extra["fragments"] = members
            merged[group] = whole
        self.entries = merged

    def _check_extents(self, shard: int | None = None, size: int | None = None) -> None:
        """Refuses entries whose bytes pass the end of their data shard (one ``stat`` per shard;
        only ``shard``, of ``size`` bytes, when given).

        Done at open, so every command (``list`` included) refuses an index that points outside
        its data, and a missing shard is exit 3 naming it for every command alike (an index
        listed without its data would pass for a whole checkpoint). Over ``http(s)://`` a
        shard's size costs a request, so each shard is checked when it is first read instead.
        """
        stored = [e for e in self.entries.values() if not e.slices]
        stored += self._slice_entries.values()
        sizes: dict[int, int] = {} if shard is None else {shard: size}
        for e in stored:
            if shard is not None and e.shard_id != shard:
                continue
            if e.shard_id not in sizes:
                path = data_path(self.prefix, e.shard_id, self.num_shards)
                try:
                    sizes[e.shard_id] = regular_size(path)
                except CheckpointNotFoundError:
                    raise CheckpointNotFoundError(
                        f"{path}: data shard {e.shard_id} of {self.num_shards} is missing "
                        f"(the index names {e.name!r} in it)") from None
            size = sizes[e.shard_id]
            if e.offset + e.stored_bytes > size:
                raise CorruptCheckpointError(
                    f"tensor {e.name!r} spans bytes [{e.offset}, {e.offset + e.stored_bytes}) "
                    f"but the file has {size} bytes (truncated data shard)",
                    path=data_path(self.prefix, e.shard_id, self.num_shards))

    def _check_sizes(self) -> None:
        """Refuses shapes that claim more elements than the stored bytes hold, and partitions
        whose slices do not tile the tensor: nothing is ever allocated from a shape alone."""
        gapped: dict[str, tuple[TensorEntry, Exception]] = {}
        items: dict[int, int] = {}  # dtype -> itemsize, looked up once per dtype
        prod = math.prod
        for entry in self.entries.values():
            if not entry.slices and entry.dtype != dtypes.STRING:
                # The common case, _check_size's first test inline (100,000 entries of a
                # large index): a fixed-size dtype whose shape fits its stored bytes.
                item = items.get(entry.dtype)
                if item is None:
                    item = items[entry.dtype] = dtypes.itemsize(entry.dtype)
                if not item or item * prod(entry.shape) == entry.stored_bytes:
                    continue
            if entry.slices:
                try:
                    boxes = check_partition(entry.name, entry.shape, entry.slices)
                except CorruptCheckpointError as exc:
                    # One part of a tensor saved under one key per part leaves a gap that
                    # another fills (_merge_fragments); anything else is corrupt.
                    if len(entry.slices) != 1 or not leaves_gap(entry.shape, entry.slices):
                        raise CorruptCheckpointError(str(exc), path=self.index_path) from None
                    gapped[entry.name] = (entry, exc)
                    boxes = check_partition(entry.name, entry.shape, entry.slices,
                                            complete=False)
                for tslice, box in zip(entry.slices, boxes, strict=True):
                    sub = self._slice_entries.get((entry.name, tslice))
                    if sub is None:
                        raise CorruptCheckpointError(
                            f"partitioned tensor {entry.name!r} lists slice {tslice} that is "
                            "not stored", path=self.index_path)
                    if sub.dtype != entry.dtype:
                        raise CorruptCheckpointError(
                            f"slice {tslice} of {entry.name!r} has dtype {sub.dtype_name}, the "
                            f"tensor {entry.dtype_name}", path=self.index_path)
                    self._check_size(sub, tuple(n for _, n in box), f"slice {tslice} of ")
            else:
                self._check_size(entry, entry.shape, "")
        if gapped:
            self._merge_fragments(gapped)

    def _check_size(self, entry: TensorEntry, shape: tuple[int, ...], what: str) -> None:
        count = math.prod(shape)
        item = dtypes.itemsize(entry.dtype)
        if item and item * count != entry.stored_bytes:
            raise CorruptCheckpointError(
                f"{what}tensor {entry.name!r} of shape {list(shape)} and dtype "
                f"{entry.dtype_name} needs {item * count} bytes but its entry says "
                f"{entry.stored_bytes}", path=self.index_path)
        if entry.dtype == dtypes.STRING and count > entry.stored_bytes:
            raise CorruptCheckpointError(  # every string needs at least its length byte
                f"{what}string tensor {entry.name!r} claims {count} elements in "
                f"{entry.stored_bytes} bytes", path=self.index_path)

    def _entry(self, name: str, value, key: bytes) -> TensorEntry:
        # A varint walk, not protobuf: see bundle_wire (list decodes one entry per tensor).
        try:
            dtype, shape, unknown_rank, shard_id, offset, size, crc32c, raw_slices = \
                decode_entry(bytes(value))
        except WireError as exc:
            raise CorruptCheckpointError(f"cannot parse entry {key!r}: {exc}",
                                         path=self.index_path) from None
        if unknown_rank:
            raise CorruptCheckpointError(f"tensor {name!r} has unknown rank",
                                         path=self.index_path)
        if len(shape) > MAX_RANK:
            raise CorruptCheckpointError(f"tensor {name!r} has rank {len(shape)}, above the "
                                         f"maximum {MAX_RANK}", path=self.index_path)
        if shape and min(shape) < 0:
            raise CorruptCheckpointError(f"tensor {name!r} has a negative dimension: {shape}",
                                         path=self.index_path)
        if dtype not in self._known_dtypes:
            try:
                dtypes.dtype_name(dtype)
            except UnsupportedFormatError:
                raise UnsupportedFormatError(
                    f"{self.index_path}: tensor {name!r} has unknown TensorFlow DataType enum "
                    f"{dtype} (a newer TensorFlow's type, or a damaged entry)") from None
            self._known_dtypes.add(dtype)
        if shard_id < 0 or shard_id >= self.num_shards or offset < 0 or size < 0:
            raise CorruptCheckpointError(
                f"entry {name!r} points at shard {shard_id} offset {offset} size {size}, "
                f"outside the {self.num_shards} shard(s)", path=self.index_path)
        slices = tuple([self._slice(raw, len(shape), key) for raw in raw_slices]
                       ) if raw_slices else ()
        return bundle_entry(name, dtype, shape, shard_id, offset, size, crc32c, slices)

    def _slice(self, raw: bytes, rank: int, key: bytes) -> TensorSlice:
        from ._protos import TensorSliceProto  # partitioned variables only: protobuf on demand

        try:
            proto = TensorSliceProto.FromString(raw)
        except Exception as exc:  # protobuf raises DecodeError
            raise CorruptCheckpointError(f"cannot parse entry {key!r}: {exc}",
                                         path=self.index_path) from None
        return TensorSlice.from_proto(proto, rank)

    # -- data ------------------------------------------------------------------------------
    def files(self) -> list[str]:
        """Returns the index and every data shard."""
        return [self.index_path, *self.data_files()]

    def data_files(self) -> list[str]:
        return [data_path(self.prefix, i, self.num_shards) for i in range(self.num_shards)]

    def _shard(self, shard_id: int):
        mm = self._shards.get(shard_id)
        if mm is None:
            path = data_path(self.prefix, shard_id, self.num_shards)
            try:
                mm = open_ranged(path, self._extents(shard_id), self._store)
            except FileNotFoundError:
                raise CheckpointNotFoundError(
                    f"{path}: data shard {shard_id} of {self.num_shards} is missing") from None
            self._shards[shard_id] = mm
        return mm

    def _extents(self, shard_id: int) -> list[tuple[int, int]]:
        """Byte ranges of the tensors stored in one shard (a remote shard reads ahead along
        them when tensors are read in storage order)."""
        stored = [e for e in self.entries.values() if not e.slices]
        stored += self._slice_entries.values()
        return [(e.offset, e.offset + e.stored_bytes) for e in stored if e.shard_id == shard_id]

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

    def close(self) -> None:
        """Unmaps the data shards.

        Unmapping costs as much as the pages read through the map (each is unmapped in turn:
        ~5 ms per GB here, a tenth of a verified read of it), so shards of
        :data:`_UNMAP_APART` bytes and more beyond the first are unmapped on threads of their
        own, at the same time (the kernel unmaps ranges of one process in parallel)."""
        maps = list(self._shards.values())
        self._shards.clear()
        apart = [mm for mm in maps[1:]
                 if isinstance(mm, mmap.mmap) and not mm.closed and len(mm) >= _UNMAP_APART]
        threads = []
        if apart:
            import threading  # a large read only (listing never maps data)

            threads = [threading.Thread(target=close_map, args=(mm,), name="ckpt-unmap")
                       for mm in apart]
            for thread in threads:
                thread.start()
        skip = {id(mm) for mm in apart}
        for mm in maps:
            if id(mm) not in skip:
                close_map(mm)
        for thread in threads:
            thread.join()

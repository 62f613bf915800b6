"""Check a whole checkpoint: index structure, every tensor's CRC32C, shards, slices, ``.meta``.

Unlike :func:`~ckpt_tools.open_checkpoint`, which stops at the first problem, :func:`verify`
keeps going and reports every problem it finds, each with the file and byte offset. It walks the
index block by block (so one bad block does not hide the others), checks each entry against its
data shard, and recomputes checksums without building arrays, in chunks, so memory stays flat
for any checkpoint size. The data checks are written independently of the reader on purpose:
a verifier should not share the reader's blind spots.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from .checkpoint import Checkpoint, Location, locate
from .errors import CheckpointError, CorruptCheckpointError
from .formats import crc, dtypes
from .formats._io import close_map, map_file, open_ranged, view
from .formats._protos import BundleEntryProto, BundleHeaderProto
from .formats._wire import Cursor
from .formats.bundle import NO_CRC, data_path, shape_of
from .formats.entry import TensorEntry
from .formats.meta import read_meta_graph
from .formats.objgraph import OBJECT_GRAPH_KEY, parse_object_graph
from .formats.savedmodel import read_saved_model
from .formats.slices import TensorSlice, check_partition, decode_key, fragment_groups, leaves_gap
from .formats.strings import decode_strings
from .formats.table import BlockHandle, Table
from .formats.v1 import shard_files

CHUNK = 16 << 20  # bytes checksummed between progress updates
MAX_LISTED = 10  # missing shards reported one by one; the rest are counted

#: ``progress(done, total)``: work done so far (bytes of tensor data for V2, tensors for V1).
ProgressFn = Callable[[int, int], None]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a checkpoint.

    Attributes:
        file: the file the problem is in.
        offset: byte offset in ``file``, when known.
        message: what is wrong (and what was expected).
        tensor: the checkpoint key concerned, if any.
    """

    file: str
    offset: int | None
    message: str
    tensor: str | None = None

    def __str__(self) -> str:
        where = self.file if self.offset is None else f"{self.file} at byte {self.offset}"
        return f"{where}: {self.message}"

    def to_dict(self) -> dict:
        return {"file": self.file, "offset": self.offset, "message": self.message,
                "tensor": self.tensor}


@dataclass
class VerifyReport:
    """Result of :func:`verify`.

    Attributes:
        path: the checkpoint prefix (V2) or file (V1, Keras HDF5 / ``.keras``).
        format: ``"v2"``, ``"v1"``, ``"h5"`` or ``"keras"`` (the last three have no
            per-tensor checksums: every value is decoded instead).
        files: files examined.
        tensors: stored tensors (or slices) whose data was checked.
        bytes: bytes of tensor data checksummed.
        problems: everything found wrong, in file order.
        unreferenced: data file -> bytes that no index entry points at (informational;
            TensorFlow never leaves gaps, so a non-zero value hints at a foreign writer).
    """

    path: str
    format: str
    files: list[str] = field(default_factory=list)
    tensors: int = 0
    bytes: int = 0
    problems: list[Problem] = field(default_factory=list)
    unreferenced: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when no problem was found."""
        return not self.problems

    def add(self, file: str, offset: int | None, message: str, tensor: str | None = None) -> None:
        self.problems.append(Problem(file, offset, message, tensor))

    def add_error(self, exc: CheckpointError, file: str, tensor: str | None = None) -> None:
        """Records a library error, splitting its ``"<file> at byte N: "`` prefix off."""
        path = getattr(exc, "path", None) or file
        offset = getattr(exc, "offset", None)
        text = str(exc)
        for prefix in (f"{path} at byte {offset}: ", f"{path}: "):
            if text.startswith(prefix):
                text = text[len(prefix):]
                break
        self.problems.append(Problem(path, offset, text, tensor))

    def to_dict(self) -> dict:
        """The ``ckpt verify --json`` document."""
        return {"checkpoint": self.path, "format": self.format, "ok": self.ok,
                "files": list(self.files), "tensors": self.tensors, "bytes": self.bytes,
                "problems": [p.to_dict() for p in self.problems],
                "unreferenced_bytes": dict(self.unreferenced)}


def verify(target: str | os.PathLike | Checkpoint, *,
           progress: ProgressFn | None = None) -> VerifyReport:
    """Checks every structure and checksum of a checkpoint and reports all problems.

    Args:
        target (`str` or `Checkpoint`): any path :func:`~ckpt_tools.open_checkpoint` accepts,
            or an open checkpoint (only its location is used; the files are re-read).
        progress (`Callable[[int, int], None]`, *optional*): called with ``(done, total)``
            as data is checked, for a progress bar.

    Returns:
        `VerifyReport`: ``report.ok`` is True when nothing is wrong.

    Raises:
        CheckpointNotFoundError: if there is no checkpoint at ``target``.
        CorruptCheckpointError: if ``target`` is a file that is not a checkpoint at all.

    Example:
        >>> report = verify("fixtures/linear_v2")  # doctest: +SKIP
        >>> report.ok, report.tensors
        (True, 5)
    """
    loc = target.location if isinstance(target, Checkpoint) else locate(target)
    report = VerifyReport(path=loc.prefix, format=loc.format)
    if loc.format == "v2":
        _verify_v2(loc.prefix, report, progress)
    elif loc.format != "v1":  # Keras HDF5 / .keras: no checksums, decode every value
        _read_all(loc, report, progress)
    else:
        _verify_v1(loc, report, progress)
    if loc.meta_path:
        report.files.append(loc.meta_path)
        try:
            read_meta_graph(loc.meta_path)
        except CheckpointError as exc:
            report.add_error(exc, loc.meta_path)
    if loc.saved_model:
        report.files.append(loc.saved_model)
        try:
            read_saved_model(loc.saved_model)
        except CheckpointError as exc:
            report.add_error(exc, loc.saved_model)
    return report


# -- table -----------------------------------------------------------------------------------
def _walk_table(data, path: str, report: VerifyReport) -> list[tuple[bytes, memoryview, int]]:
    """Returns every readable ``(key, value, block offset)``, recording problems on the way."""
    try:
        table = Table(data, path, verify=True)
        index = list(table._entries(table.index))
    except CheckpointError as exc:
        report.add_error(exc, path)
        return []
    out: list[tuple[bytes, memoryview, int]] = []
    prev: bytes | None = None
    for separator, handle_bytes in index:
        try:
            handle = BlockHandle.decode(Cursor(handle_bytes, path))
            block = list(table._entries(handle))
        except CheckpointError as exc:
            report.add_error(exc, path)
            continue
        for key, value in block:
            if prev is not None and key <= prev:
                report.add(path, handle.offset, f"keys out of order: {key!r} after {prev!r}")
            prev = key
            out.append((key, value, handle.offset))
        if block and block[-1][0] > bytes(separator):
            report.add(path, handle.offset, f"index separator {bytes(separator)!r} sorts before "
                       f"the block's last key {block[-1][0]!r}")
    return out


# -- V2 --------------------------------------------------------------------------------------
def _verify_v2(prefix: str, report: VerifyReport, progress: ProgressFn | None) -> None:
    index_path = prefix + ".index"
    report.files.append(index_path)
    index = map_file(index_path)
    items: list = []
    try:
        items = _walk_table(index, index_path, report)
        num_shards = _header(items, index_path, report)
        entries, slices = _entries(items, index_path, num_shards, report)
        _check_slices(entries, slices, index_path, report)
        _check_shards(prefix, num_shards, entries, slices, report, progress)
    finally:
        del items
        close_map(index)


def _header(items, index_path: str, report: VerifyReport) -> int:
    """Returns the shard count the header claims (1 when it cannot be read)."""
    if not items or items[0][0] != b"":
        if items or not report.problems:
            report.add(index_path, None, "index has no bundle header entry")
        return 1
    try:
        header = BundleHeaderProto.FromString(bytes(items[0][1]))
    except Exception as exc:
        report.add(index_path, items[0][2], f"cannot parse bundle header: {exc}")
        return 1
    shards = header.num_shards if header.HasField("num_shards") else 1
    if not 1 <= shards <= 100_000:
        report.add(index_path, items[0][2], f"header claims {shards} shards")
        shards = 1
    if header.endianness not in (0, 1):
        report.add(index_path, items[0][2], f"unknown endianness {header.endianness}")
    return shards


def _entries(items, index_path: str, num_shards: int, report: VerifyReport):
    entries: dict[str, TensorEntry] = {}
    slices: dict[tuple[str, TensorSlice], TensorEntry] = {}
    for key, value, block_at in items[1:] if items and items[0][0] == b"" else items:
        try:
            if key.startswith(b"\x00"):
                name, tslice = decode_key(key)
                slices[(name, tslice)] = _entry(name, value, num_shards)
            else:
                name = key.decode("utf-8", "replace")
                entries[name] = _entry(name, value, num_shards)
        except CheckpointError as exc:
            report.add(index_path, block_at, f"entry {key[:60]!r}: {exc}")
    return entries, slices


def _entry(name: str, value, num_shards: int) -> TensorEntry:
    try:
        p = BundleEntryProto.FromString(bytes(value))
    except Exception as exc:
        raise CorruptCheckpointError(f"cannot parse BundleEntryProto: {exc}") from None
    shape = shape_of(p.shape, name)
    dtypes.dtype_name(p.dtype)
    if not 0 <= p.shard_id < num_shards or p.offset < 0 or p.size < 0:
        raise CorruptCheckpointError(
            f"points at shard {p.shard_id} offset {p.offset} size {p.size}, outside the "
            f"{num_shards} shard(s)")
    return TensorEntry(name=name, dtype=p.dtype, shape=shape, shard_id=p.shard_id,
                       offset=p.offset, stored_bytes=p.size,
                       crc32c=p.crc32c if p.HasField("crc32c") else None,
                       slices=tuple(TensorSlice.from_proto(s, len(shape)) for s in p.slices))


def _check_slices(entries, slices, index_path: str, report: VerifyReport) -> None:
    for (name, tslice), sub in slices.items():
        full = entries.get(name)
        if full is None:
            report.add(index_path, None, f"slice {tslice} of {name!r} has no full-tensor entry",
                       name)
        elif tslice not in full.slices:
            report.add(index_path, None, f"slice {tslice} of {name!r} is stored but not listed "
                       "in its full-tensor entry", name)
        elif sub.dtype != full.dtype:
            report.add(index_path, None, f"slice {tslice} of {name!r} has dtype "
                       f"{dtypes.dtype_name(sub.dtype)}, the tensor {full.dtype_name}", name)
    # The parts of one tensor that TF1 saved under one key per part each leave a gap that
    # the others fill (fragment_groups): each part must lie inside and not overlap.
    gapped = {n: e for n, e in entries.items() if len(e.slices) == 1
              and leaves_gap(e.shape, e.slices)}
    parts = {m for members in fragment_groups(gapped).values() for m in members}
    for name, full in entries.items():
        if not full.slices:
            continue
        try:
            boxes = check_partition(name, full.shape, full.slices, complete=name not in parts)
        except CheckpointError as exc:
            report.add(index_path, None, str(exc), name)
            boxes = [None] * len(full.slices)
        item = dtypes.itemsize(full.dtype)
        for tslice, box in zip(full.slices, boxes, strict=True):
            sub = slices.get((name, tslice))
            if sub is None:
                report.add(index_path, None, f"partitioned tensor {name!r} lists slice {tslice} "
                           "that is not stored", name)
                continue
            if box is None or not item:
                continue
            need = item * math.prod(n for _, n in box)
            if sub.stored_bytes != need:
                report.add(index_path, None, f"slice {tslice} of {name!r} stores "
                           f"{sub.stored_bytes} bytes, expected {need}", name)


def _check_shards(prefix, num_shards, entries, slices, report, progress) -> None:
    stored = [e for e in entries.values() if not e.slices] + list(slices.values())
    by_shard: dict[int, list[TensorEntry]] = {}
    for e in stored:
        by_shard.setdefault(e.shard_id, []).append(e)
    maps, missing = {}, []
    for shard in range(num_shards):
        path = data_path(prefix, shard, num_shards)
        try:
            maps[shard] = open_ranged(path, [(e.offset, e.offset + e.stored_bytes)
                                             for e in by_shard.get(shard, ())])
            report.files.append(path)
        except FileNotFoundError:
            missing.append(shard)
            if len(missing) <= MAX_LISTED:
                report.add(path, None, f"data shard {shard} of {num_shards} is missing "
                           f"({len(by_shard.get(shard, ()))} tensor(s) stored there)")
    if len(missing) > MAX_LISTED:
        report.add(prefix + ".index", None, f"{len(missing) - MAX_LISTED} more of the "
                   f"{num_shards} data shards are missing")
    total = sum(e.stored_bytes for e in stored if e.shard_id in maps)
    done = 0
    try:
        for shard, mm in maps.items():
            path = data_path(prefix, shard, num_shards)
            ranges = []
            for e in sorted(by_shard.get(shard, ()), key=lambda e: e.offset):
                end = e.offset + e.stored_bytes
                if end > len(mm):
                    report.add(path, e.offset, f"tensor {e.name!r} spans bytes [{e.offset}, "
                               f"{end}) but the file has {len(mm)} bytes (truncated?)", e.name)
                    done += e.stored_bytes
                    continue
                if ranges and e.offset < ranges[-1][1] and e.stored_bytes:
                    report.add(path, e.offset, f"tensor {e.name!r} overlaps {ranges[-1][2]!r} "
                               f"(bytes [{e.offset}, {min(end, ranges[-1][1])}))", e.name)
                ranges.append((e.offset, end, e.name))
                tick = (lambda n, base=done: progress(base + n, total)) if progress else None
                message = _check_data(e, mm, path, tick)
                if message:
                    report.add(path, e.offset, message, e.name)
                report.tensors += 1
                report.bytes += e.stored_bytes
                done += e.stored_bytes
                if progress:
                    progress(done, total)
            report.unreferenced[path] = len(mm) - _union(ranges)
        graph = entries.get(OBJECT_GRAPH_KEY)
        if graph is not None and graph.shard_id in maps:
            _check_object_graph(graph, maps[graph.shard_id], report,
                                data_path(prefix, graph.shard_id, num_shards))
    finally:
        for mm in maps.values():
            close_map(mm)


def _union(ranges) -> int:
    covered, reach = 0, 0
    for start, end, _ in ranges:  # sorted by start
        if end > reach:
            covered += end - max(start, reach)
            reach = end
    return covered


def _check_data(e: TensorEntry, mm, path: str, tick: Callable[[int], None] | None) -> str | None:
    """Returns what is wrong with one stored tensor's bytes, or None."""
    count = e.num_elements
    item = dtypes.itemsize(e.dtype)
    data = view(mm, e.offset, e.offset + e.stored_bytes)
    if e.dtype == dtypes.STRING:
        return _check_strings(e, data, count, path)
    if item and item * count != e.stored_bytes:
        return (f"tensor {e.name!r} of shape {list(e.shape)} and dtype {e.dtype_name} needs "
                f"{item * count} bytes but its entry says {e.stored_bytes}")
    running = 0
    for start in range(0, len(data), CHUNK):
        running = crc.crc32c(data[start : start + CHUNK], running)
        if tick:
            tick(min(start + CHUNK, len(data)))
    actual = crc.mask(running)
    if actual != _stored_crc(e):
        if not e.crc32c:
            return f"tensor {e.name!r}{NO_CRC} (computed 0x{actual:08x})"
        return (f"checksum mismatch for tensor {e.name!r} (stored 0x{e.crc32c:08x}, computed "
                f"0x{actual:08x})")
    return None


# An absent CRC is checked as 0, never skipped: see formats.bundle.NO_CRC.


def _stored_crc(e: TensorEntry) -> int:
    """The CRC32C TensorFlow checks ``e``'s bytes against: an absent field is 0."""
    return e.crc32c or 0


def _check_strings(e: TensorEntry, view, count: int, path: str) -> str | None:
    try:
        problems = decode_strings(view, count, path=path, offset=e.offset,
                                  expected_crc=_stored_crc(e), keep=False).problems
    except CorruptCheckpointError as exc:
        return f"string tensor {e.name!r}: {exc}"
    if problems and not e.crc32c:
        problems = [f"{p} (its index entry has no CRC32C; TensorFlow reads that as 0 and "
                    "refuses the tensor)" if p.startswith("checksum mismatch") else p
                    for p in problems]
    return f"string tensor {e.name!r}: {'; '.join(problems)}" if problems else None


def _check_object_graph(entry: TensorEntry, mm, report: VerifyReport, path: str) -> None:
    if entry.dtype != dtypes.STRING or entry.num_elements != 1:
        report.add(path, entry.offset, f"{OBJECT_GRAPH_KEY} is not a scalar string tensor",
                   entry.name)
        return
    data = view(mm, entry.offset, entry.offset + entry.stored_bytes)
    cur = Cursor(data, path, base=entry.offset)
    try:
        n = cur.varint()
        cur.read(4)
        parse_object_graph(bytes(cur.read(n)), f"{path}: {OBJECT_GRAPH_KEY}")
    except CheckpointError as exc:
        report.add_error(exc, path, entry.name)


# -- V1 and formats without checksums ------------------------------------------------------
def _verify_v1(loc: Location, report: VerifyReport, progress: ProgressFn | None) -> None:
    for path in shard_files(loc.prefix):  # every shard of a sharded V1 checkpoint
        report.files.append(path)
        data = map_file(path)
        try:
            _walk_table(data, path, report)
        finally:
            close_map(data)
    clean = not report.problems
    if clean:  # otherwise the reader would only stop at the problem already reported
        _read_all(loc, report, progress)


def _read_all(loc: Location, report: VerifyReport, progress: ProgressFn | None) -> None:
    """Decodes every tensor (V1 and HDF5 store no per-tensor checksums)."""
    if not report.files:
        report.files.append(loc.prefix)
    try:
        ckpt = Checkpoint(loc, verify=True, meta=False)
    except CheckpointError as exc:
        report.add_error(exc, loc.prefix)
        return
    with ckpt:
        if loc.format == "keras" and ckpt.reader.config is None:
            # Keras refuses such an archive; the weights themselves are read as stored.
            report.add(loc.prefix, None, "no config.json in the archive: Keras cannot load it")
        names = ckpt.keys()
        for i, name in enumerate(names):
            try:
                ckpt.tensor(name)
                report.tensors += 1
            except CheckpointError as exc:
                report.add_error(exc, loc.prefix, name)
            if progress:
                progress(i + 1, len(names))

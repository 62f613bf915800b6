"""The V2 (tensor bundle) half of :func:`ckpt_tools.verify.verify`, and the table walk V1 shares.

Walks the index block by block (one bad block does not hide the others), checks the header,
every entry against its data shard, partitioned variables' slices, and recomputes each
tensor's CRC32C in chunks without building arrays. Written independently of the reader on
purpose: a verifier should not share the reader's blind spots.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from .errors import CheckpointError, CorruptCheckpointError
from .formats import crc, dtypes
from .formats._io import close_map, map_file, open_ranged, view
from .formats._protos import BundleEntryProto, BundleHeaderProto
from .formats._wire import Cursor
from .formats.bundle import NO_CRC, data_path, shape_of
from .formats.entry import TensorEntry
from .formats.objgraph import OBJECT_GRAPH_KEY, parse_object_graph
from .formats.partial_parts import averaged_parts
from .formats.slices import TensorSlice, check_partition, decode_key, fragment_groups, leaves_gap
from .formats.strings import decode_strings
from .formats.table import BlockHandle, Table
from .wording import counted

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .verify import ProgressFn, VerifyReport

CHUNK = 16 << 20  # bytes checksummed between progress updates
MAX_LISTED = 10  # missing shards reported one by one; the rest are counted


# -- table -----------------------------------------------------------------------------------
def walk_table(data, path: str, report: VerifyReport) -> list[tuple[bytes, memoryview, int]]:
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
def verify_v2(prefix: str, report: VerifyReport, progress: ProgressFn | None) -> None:
    index_path = prefix + ".index"
    report.files.append(index_path)
    index = map_file(index_path)
    items: list = []
    try:
        items = walk_table(index, index_path, report)
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
            f"{counted(num_shards, 'shard')}")
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
    # the average of some parts of a partitioned variable (partial_parts) leaves a gap too
    for name, e in entries.items():
        if e.slices and name not in parts and leaves_gap(e.shape, e.slices):
            try:
                averaged_parts(entries, {name: (e, CheckpointError(""))}, index_path)
            except CheckpointError:
                continue
            parts.add(name)
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
                           f"({counted(len(by_shard.get(shard, ())), 'tensor')} stored there)")
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

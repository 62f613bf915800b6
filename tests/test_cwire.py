"""The compiled ``.index``/``.meta`` fast paths (``ckpt_tools/cwire.c``) against the Python path.

``cwire`` is an accelerator, not a second parser: it decodes the layout TensorFlow writes and
hands everything else back to the pure-Python path, so every result must equal the Python
path's and every failure must be the same error (type and message). Each test reads the same
bytes twice, once with the compiled functions and once without (as an install without a C
compiler does): every fixture under fixtures/, and mutated, truncated and hand-built index,
entry and ``VariableDef`` bytes. ``cwire.c`` is compiled here from source (as setup.py does),
so the test does not depend on how the package was installed.
"""

from __future__ import annotations

import importlib.util
import math
import random
import shutil
import struct
from pathlib import Path

import pytest
from _corpus import FIXTURES, ROOT, build_table, bundle_index, entry_proto

from ckpt_tools.errors import CheckpointError
from ckpt_tools.formats import bundle, crc, meta
from ckpt_tools.formats._protos import BundleHeaderProto, CollectionEntry, VariableDef
from ckpt_tools.formats.table import Table

INDEXES = sorted(FIXTURES.rglob("*.index"))
METAS = sorted(FIXTURES.rglob("*.meta"))


def _outcome(read):
    """``("ok", what read() returned)`` or ``("error", exception type, message)``."""
    try:
        return ("ok", read())
    except (CheckpointError, ValueError) as exc:
        return ("error", type(exc).__name__, str(exc))


def _index_snapshot(prefix: Path, verify: bool):
    reader = bundle.BundleReader(str(prefix), verify=verify)
    try:
        return (reader.num_shards, reader.big_endian,
                [(name, type(e), list(e.__dict__.items())) for name, e in reader.entries.items()],
                [(k, list(e.__dict__.items())) for k, e in reader._slice_entries.items()])
    finally:
        reader.close()


def _both_index(monkeypatch, cwire, prefix: Path, verify: bool = True):
    """Reads ``prefix`` with and without the compiled path; asserts the same outcome."""
    monkeypatch.setattr(bundle, "_c_block", None)
    python = _outcome(lambda: _index_snapshot(prefix, verify))
    monkeypatch.setattr(bundle, "_c_block", cwire.bundle_block)
    compiled = _outcome(lambda: _index_snapshot(prefix, verify))
    assert compiled == python
    return python


def _meta_snapshot(read):
    graph = read()
    return (graph.tensorflow_version, graph.tags, graph.saver_version, graph.saver_sharded,
            list(graph.collections.items()),
            [(k, type(v), list(v.__dict__.items())) for k, v in graph.variables.items()])


def _both_meta(monkeypatch, cwire, read):
    monkeypatch.setattr(meta, "_c_variable_list", None)
    python = _outcome(lambda: _meta_snapshot(read))
    monkeypatch.setattr(meta, "_c_variable_list", cwire.variable_list)
    compiled = _outcome(lambda: _meta_snapshot(read))
    assert compiled == python
    return python


def _workdir(tmp_path: Path, index: Path) -> Path:
    """A copy of the checkpoint whose ``.index`` is ``index`` (data shards included); returns
    its prefix."""
    prefix = index.name[: -len(".index")]
    for f in index.parent.iterdir():
        if f.name.startswith(prefix + ".data-"):
            shutil.copy(f, tmp_path)
    return tmp_path / prefix


# -- every fixture -----------------------------------------------------------------------------
def test_fixtures_exist():
    assert len(INDEXES) >= 15 and len(METAS) >= 8


@pytest.mark.parametrize("index", INDEXES, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_every_fixture_index_reads_alike(monkeypatch, cwire, index):
    got = _both_index(monkeypatch, cwire, index.with_suffix(""))
    assert got[0] == "ok" and got[1][2], got  # read, with entries


@pytest.mark.parametrize("path", METAS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_every_fixture_meta_reads_alike(monkeypatch, cwire, path):
    got = _both_meta(monkeypatch, cwire, lambda: meta.read_meta_graph(str(path)))
    assert got[0] == "ok" and got[1][5], got  # read, with variables


def test_the_compiled_path_is_taken(monkeypatch, cwire):
    """The fixtures' entries are decoded in C (not all handed back to Python)."""
    calls = []
    monkeypatch.setattr(bundle, "_c_block", lambda *a: calls.append(cwire.bundle_block(*a))
                        or calls[-1])
    prefix = FIXTURES / "towers_bn" / "model.ckpt-30"
    bundle.BundleReader(str(prefix)).close()
    assert calls and all(c is not None for c in calls)
    assert sum(1 for c in calls for e in c[0].values() if e is not None) > 10


# -- mutated and truncated index bytes ---------------------------------------------------------
def _mutate(rnd: random.Random, data: bytes) -> bytes:
    buf = bytearray(data)
    for _ in range(rnd.randint(1, 3)):
        op, at = rnd.randrange(5), rnd.randrange(len(buf) + 1)
        if op == 0 and buf:
            buf[at % len(buf)] ^= 1 << rnd.randrange(8)
        elif op == 1 and buf:
            buf[at % len(buf)] = rnd.randrange(256)
        elif op == 2:
            del buf[at:]
        elif op == 3:
            buf[at:at] = bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 6)))
        else:
            del buf[at : at + rnd.randint(1, 12)]
    return bytes(buf)


@pytest.mark.parametrize("index", INDEXES[::2], ids=lambda p: str(p.relative_to(FIXTURES)))
def test_mutated_index_bytes_read_alike(monkeypatch, cwire, tmp_path, index):
    """Random flips, truncations, insertions in the whole file, read without block checksums
    so they reach the entry decoders (and with them, where they mostly stop at the CRC)."""
    prefix = _workdir(tmp_path, index)
    original = index.read_bytes()
    rnd = random.Random(index.name)
    outcomes = set()
    for i in range(60):
        Path(f"{prefix}.index").write_bytes(_mutate(rnd, original))
        outcomes.add(_both_index(monkeypatch, cwire, prefix, verify=i % 4 != 0)[0])
    assert "error" in outcomes


def _rebuilt(data: bytes, change) -> bytes:
    """The table's entries, changed by ``change(items)``, written with valid checksums."""
    items = [(bytes(k), bytes(v)) for k, v in Table(data, "x").items()]
    return build_table(change(items))


@pytest.mark.parametrize("index", INDEXES, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_mutated_entries_behind_valid_checksums_read_alike(monkeypatch, cwire, tmp_path, index):
    prefix = _workdir(tmp_path, index)
    original = index.read_bytes()
    rnd = random.Random(str(index.relative_to(FIXTURES)))  # not the clone's path
    outcomes = set()
    for _ in range(40):
        def change(items):
            for _ in range(rnd.randint(1, 3)):
                i = rnd.randrange(len(items))
                key, value = items[i]
                if rnd.random() < 0.25 and i:
                    key = _mutate(rnd, key)
                else:
                    value = _mutate(rnd, value)
                items[i] = (key, value)
            return items
        Path(f"{prefix}.index").write_bytes(_rebuilt(original, change))
        outcomes.add(_both_index(monkeypatch, cwire, prefix)[0])
    assert "error" in outcomes  # and each "ok" read alike (in _both_index)


# -- hand-built entries: every way out of the canonical layout ---------------------------------
def _one(tmp_path: Path, entries: dict[bytes, bytes], num_shards: int = 1) -> Path:
    prefix = tmp_path / "h"
    Path(f"{prefix}.index").write_bytes(bundle_index(entries, num_shards))
    for s in range(num_shards):
        Path(f"{bundle.data_path(str(prefix), s, num_shards)}").write_bytes(b"\0" * 4096)
    return prefix


_CANON = entry_proto(1, (2, 3), offset=0, size=24, crc32c=5)
CASES = {
    "canonical": {b"a": _CANON, b"b": entry_proto(1, (), offset=24, size=4)},
    "no crc": {b"a": entry_proto(1, (6,), offset=0, size=24)},
    "crc zero": {b"a": entry_proto(1, (6,), offset=0, size=24, crc32c=0)},
    "big offset": {b"a": entry_proto(1, (1,), offset=4000, size=4, crc32c=1)},
    "huge offset": {b"a": entry_proto(1, (1,), offset=1 << 40, size=4, crc32c=1)},
    "negative offset": {b"a": entry_proto(1, (1,), offset=-8, size=4)},
    "negative dim": {b"a": entry_proto(1, (-1,), size=4)},
    "dim of 200": {b"a": entry_proto(4, (200,), size=200)},
    "dim byte 0xff": {b"a": b"\x08\x04\x12\x04\x12\x02\x08\xff\x28\x7f"},  # Python's quirk
    # dims of 2 to 10 varint bytes (most real shapes): decoded in C as the general walk does
    "dims of 300 x 3": {b"a": entry_proto(1, (300, 3), size=3600)},
    "dims of 2 to 9 bytes": {b"a": entry_proto(1, (1 << 7, 1 << 14, 1 << 21, 1 << 28, 1 << 35,
                                                    1 << 42, 1 << 49, 1 << 56), size=4)},
    "dim of 2**63 - 1": {b"a": entry_proto(1, ((1 << 63) - 1,), size=4)},
    "dim of 2**63": {b"a": b"\x08\x01\x12\x0d\x12\x0b\x08" + b"\x80" * 9 + b"\x01\x28\x04"},
    "dim varint of 11 bytes": {b"a": b"\x08\x01\x12\x0e\x12\x0c\x08" + b"\x80" * 10
                               + b"\x00\x28\x04"},
    "dim varint not minimal": {b"a": b"\x08\x01\x12\x05\x12\x03\x08\x82\x00\x28\x08"},
    "dim varint ends early": {b"a": b"\x08\x01\x12\x05\x12\x03\x08\x02\x00\x28\x08"},
    "dim varint runs on": {b"a": b"\x08\x01\x12\x05\x12\x03\x08\x82\x82\x28\x08"},
    "dim length 1": {b"a": b"\x08\x01\x12\x03\x12\x01\x08\x28\x04"},
    "dim length past shape": {b"a": b"\x08\x01\x12\x04\x12\x05\x08\x02\x28\x08"},
    "dim with a name": {b"a": b"\x08\x01\x12\x07\x12\x05\x08\x02\x12\x01x\x28\x08"},
    "second dim malformed": {b"a": b"\x08\x01\x12\x08\x12\x03\x08\x82\x01\x12\x01\x08"
                             b"\x28\x04"},
    "rank 65": {b"a": entry_proto(1, (1,) * 65, size=4)},
    "unknown dtype": {b"a": entry_proto(99, (1,), size=4)},
    "ref dtype": {b"a": entry_proto(101, (1,), size=4)},
    "dtype 0": {b"a": entry_proto(0, (1,), size=4)},
    "shard 1 of 1": {b"a": entry_proto(1, (1,), size=4, shard_id=1)},
    "size mismatch": {b"a": entry_proto(1, (3,), size=4)},
    "past the data": {b"a": entry_proto(1, (2000,), size=8000)},
    "truncated value": {b"a": _CANON[:-3]},
    "trailing byte": {b"a": _CANON + b"\x00"},
    "unknown field": {b"a": _CANON + b"\x48\x01"},
    "fields reordered": {b"a": b"\x28\x04\x08\x01\x12\x00"},
    "empty value": {b"a": b""},
    "string": {b"s": entry_proto(7, (1,), size=8)},
    "not utf-8": {b"\xff\xfe": entry_proto(1, (1,), size=4)},
    "utf-8 name": {"w\u00e9ight/\u4e2d".encode(): entry_proto(1, (1,), size=4)},
    "long keys": {b"k" * 200 + bytes([i]): entry_proto(1, (1,), offset=4 * i, size=4)
                  for i in range(1, 40)},
    "slices": {b"p": entry_proto(1, (4,), slices=[[(0, 2)], [(2, 2)]])},
    "many": {f"v{i:04d}".encode(): entry_proto(1 + i % 3, (i % 5 + 1,), size=4 * (i % 5 + 1))
             for i in range(300)},
}


@pytest.mark.parametrize("case", list(CASES))
def test_hand_built_entries_read_alike(monkeypatch, cwire, tmp_path, case):
    _both_index(monkeypatch, cwire, _one(tmp_path, CASES[case]))


def test_dims_of_several_bytes_are_decoded_in_c(monkeypatch, cwire, tmp_path):
    """Real shapes have dims of 128 and more (two-byte varints and longer): C decodes them
    (the Python path's fast layout does not), with the values the general walk gives."""
    shapes = [(300, 3), (128, 2), (1 << 14, 0), (0, 1 << 35)]
    entries = {f"v{i}".encode(): entry_proto(1, shape, size=4 * math.prod(shape)) for i, shape
               in enumerate(shapes)}
    prefix = _one(tmp_path, entries)
    calls = []
    monkeypatch.setattr(bundle, "_c_block", lambda *a: calls.append(cwire.bundle_block(*a))
                        or calls[-1])
    reader = bundle.BundleReader(str(prefix), verify=False)
    try:
        assert [reader.entries[f"v{i}"].shape for i in range(len(shapes))] == shapes
    finally:
        reader.close()
    assert calls and all(c is not None and not c[5] for c in calls)  # nothing deferred
    _both_index(monkeypatch, cwire, prefix, verify=False)


def test_wrong_shard_is_named_as_the_python_path_names_it(monkeypatch, cwire, tmp_path):
    entries = {f"v{i}".encode(): entry_proto(1, (1,), size=4, shard_id=i % 2) for i in range(9)}
    entries[b"v7"] = entry_proto(1, (1,), size=4, shard_id=5)
    got = _both_index(monkeypatch, cwire, _one(tmp_path, entries, num_shards=2))
    assert got[0] == "error" and "'v7' points at shard 5" in got[2]


def _table(blocks: list[list[tuple[int, bytes, bytes]]], order_keys: list[bytes]) -> bytes:
    """A table of data blocks given as ``(shared, new key bytes, value)`` entries (prefix
    sharing exactly as given, even when wrong), one restart point each."""
    out = bytearray()

    def varint(n: int) -> bytes:
        b = bytearray()
        while True:
            b.append((n & 0x7F) | (0x80 if n >> 7 else 0))
            n >>= 7
            if not n:
                return bytes(b)

    def emit(block: bytes) -> bytes:
        handle = varint(len(out)) + varint(len(block))
        out.extend(block + b"\x00" + struct.pack("<I", crc.mask(crc.crc32c(block + b"\x00"))))
        return handle

    handles = []
    for entries in blocks:
        body = b"".join(varint(s) + varint(len(k)) + varint(len(v)) + k + v for s, k, v in entries)
        handles.append(emit(body + struct.pack("<II", 0, 1)))
    meta_handle = emit(struct.pack("<II", 0, 1))
    index = b"".join(varint(0) + varint(len(k)) + varint(len(h)) + k + h
                     for k, h in zip(order_keys, handles, strict=True))
    index_handle = emit(index + struct.pack("<II", 0, 1))
    magic = 0xDB4775248B80FB57
    return bytes(out + (meta_handle + index_handle).ljust(40, b"\x00")
                 + struct.pack("<II", magic & 0xFFFFFFFF, magic >> 32))


_HEADER = BundleHeaderProto(num_shards=1, endianness=0).SerializeToString()
_V = entry_proto(1, (1,), size=4)
TABLES = {
    "two blocks": [[(0, b"", _HEADER), (0, b"a", _V)], [(0, b"b", _V), (1, b"c", _V)]],
    "shared prefix": [[(0, b"", _HEADER), (0, b"layer/w", _V), (6, b"x", _V), (7, b"/m", _V)]],
    "out of order in a block": [[(0, b"", _HEADER), (0, b"b", _V), (0, b"a", _V)]],
    "equal keys": [[(0, b"", _HEADER), (0, b"a", _V), (1, b"", _V)]],
    "out of order across blocks": [[(0, b"", _HEADER), (0, b"b", _V)], [(0, b"a", _V)]],
    "no header": [[(0, b"a", _V)]],
    "header twice": [[(0, b"", _HEADER), (0, b"", _HEADER)]],
    "shares more than the key": [[(0, b"", _HEADER), (0, b"a", _V), (5, b"b", _V)]],
    "empty first block": [[], [(0, b"", _HEADER), (0, b"a", _V)]],
    "bad header": [[(0, b"", b"\x08\x00"), (0, b"a", _V)]],
    "slow-form entry": [[(0, b"", _HEADER), (0, b"x" * 150, _V), (150, b"y" * 130, _V)]],
    # Keys sharing a long prefix charge the key budget (16 MiB + 16 x file size) on every
    # slow-form entry: exhausted in the second block, which the C path hands to Python
    # (a key that is not UTF-8) after it charged the first.
    "key budget in one block": [
        [(0, b"", _HEADER), (0, b"k" * 60000, _V)]
        + [(60000, bytes([65 + i // 26, 97 + i % 26]), _V) for i in range(400)]],
    "key budget across blocks": [
        [(0, b"", _HEADER), (0, b"k" * 60000, _V)]
        + [(60000, bytes([65 + i // 26, 97 + i % 26]), _V) for i in range(200)],
        [(0, b"k" * 60000 + b"\xff", _V)]
        + [(60001, bytes([65 + i // 26, 97 + i % 26]), _V) for i in range(200)]],
}


@pytest.mark.parametrize("case", list(TABLES))
def test_hand_built_tables_read_alike(monkeypatch, cwire, tmp_path, case):
    blocks = TABLES[case]
    prefix = tmp_path / "t"  # the index block's keys: only their order matters
    Path(f"{prefix}.index").write_bytes(_table(blocks, [bytes([i]) for i in range(len(blocks))]))
    Path(f"{prefix}.data-00000-of-00001").write_bytes(b"\0" * 64)
    got = _both_index(monkeypatch, cwire, prefix)
    if case.startswith("key budget"):
        assert got[0] == "error" and "keys add up" in got[2]
    if case == "key budget across blocks":
        monkeypatch.setattr(bundle, "_c_block", cwire.bundle_block)
        calls = []
        monkeypatch.setattr(bundle, "_c_block", lambda *a: calls.append(cwire.bundle_block(*a))
                            or calls[-1])
        _outcome(lambda: _index_snapshot(prefix, True))
        assert calls[0] is not None and calls[1] is None  # C charged block 1, Python block 2


def test_compiled_block_decoder_checks_its_arguments(cwire):
    known = bytes(128)
    for args in [(b"", 1, None, 0, 1, bundle.TensorEntry, known),  # limit past the block
                 (b"", 0, "x", 0, 1, bundle.TensorEntry, known),  # prev not bytes
                 (b"", 0, None, 0, 1, 3, known),  # not a class
                 (b"", 0, None, 0, 1, int, known),  # not one object.__new__ may build
                 (b"", 0, None, 0, 1, bundle.TensorEntry, b"")]:  # known of the wrong size
        with pytest.raises(TypeError):
            cwire.bundle_block(*args)
    for cls in (3, int, str):
        with pytest.raises(TypeError):
            cwire.variable_list([], {}, {}, meta._variable, "x", cls)


# -- VariableDef lists: every way out of the common layout -------------------------------------
def _vd(name: str = "v:0", trainable: bool | None = None, **fields) -> bytes:
    v = VariableDef(variable_name=name, **fields)
    if trainable is not None:
        v.trainable = trainable
    return v.SerializeToString()


def _partitioned(name: str, full: str) -> bytes:
    v = VariableDef(variable_name=name)
    s = v.save_slice_info_def
    s.full_name = full
    s.full_shape.extend([4, 2])
    s.var_offset.extend([2, 0])
    s.var_shape.extend([2, 2])
    return v.SerializeToString()


VDEFS = [
    _vd(), _vd("w:0", True, initializer_name="w/Assign", snapshot_name="w/read:0"),
    _vd("w:0", False), b"\x0a\x01z\x38\x02", _vd("x:1"), _vd("y"), _vd("a:b:0"),
    _vd("a:b:c"), _vd(""), b"",
    _vd("\u00e9t\u00e9:0"), b"\x0a\x03\xff\xfe\x00",  # not UTF-8: replaced
    _partitioned("emb/part_1:0", "emb"), _partitioned("emb/part_0:0", ""),
    b"\x38\x01\x0a\x01z", b"\x0a\x01z\x0a\x02zz",  # trainable first; the last name wins
    b"\x0a\x01z\x38" + b"\x80" * 9 + b"\x02",  # 10-byte varint whose low 64 bits are 0
    b"\x0a\x01z\x38" + b"\x80" * 10 + b"\x01",  # 11 bytes: too long
    b"\x0a\x01z\x39" + b"\x00" * 8, b"\x0a\x01z\x3d" + b"\x00" * 3,  # fixed64 / short fixed32
    b"\x0a\x01z\xf8\x07\x01", b"\x0a\x01z\x03", b"\x07", b"\x0a\x05ab", b"\x0a",
    b"\x0a\x81\x01" + b"n" * 129, b"\x0a\x01z\x0b\x0c",
]


def test_variable_defs_read_alike(monkeypatch, cwire):
    for raw in VDEFS:
        for values in ([raw], [raw, raw, _vd()], [_vd("w:0", True), raw], [_vd("w:0"), raw]):
            entry = _collection_entry("variables", values)

            def read(entry=entry):
                graph = meta.MetaGraph(path="g.meta")
                meta._add_collection(graph, entry, {})
                return graph

            _both_meta(monkeypatch, cwire, read)


def _collection_entry(key: str, values: list[bytes]) -> bytes:
    """A serialized ``CollectionDef`` entry (``MetaGraphDef.collection_def``) of VariableDefs."""
    entry = CollectionEntry(key=key)
    entry.value.bytes_list.value.extend(values)
    return entry.SerializeToString()


@pytest.mark.parametrize("path", METAS[::2], ids=lambda p: str(p.relative_to(FIXTURES)))
def test_mutated_variable_defs_read_alike(monkeypatch, cwire, path):
    """Every fixture's VariableDefs, byte-mutated, through ``_add_collection`` both ways."""
    values = []
    for number, wire, value in meta._fields(path.read_bytes()):
        if number == 4 and wire == 2:
            key, kinds = meta._collection(value)
            if key in meta.VARIABLE_COLLECTIONS:
                values += kinds.get(2, [])
    assert values
    rnd = random.Random(path.name)  # not the clone's path: the same draws everywhere
    outcomes = set()
    for _ in range(150):
        chosen = [_mutate(rnd, v) if rnd.random() < 0.5 else v
                  for v in rnd.sample(values, min(4, len(values)))]
        entry = _collection_entry("trainable_variables", chosen)

        def read(entry=entry):
            graph = meta.MetaGraph(path=str(path))
            meta._add_collection(graph, entry, {})
            return graph

        outcomes.add(_both_meta(monkeypatch, cwire, read)[0])
    assert outcomes == {"ok", "error"}


@pytest.mark.parametrize("path", METAS[1::3], ids=lambda p: str(p.relative_to(FIXTURES)))
def test_mutated_meta_files_read_alike(monkeypatch, cwire, tmp_path, path):
    original = path.read_bytes()
    rnd = random.Random(path.name)
    victim = tmp_path / path.name
    for _ in range(30):
        victim.write_bytes(_mutate(rnd, original))
        _both_meta(monkeypatch, cwire, lambda: meta.read_meta_graph(str(victim)))


def test_install_built_the_compiled_decoder(cwire):
    """Where a compiler works (``cwire`` built), an installed package (``pip install -e``, a
    wheel) has ckpt_tools.cwire too, and the readers use it: setup.py marks it optional, so a
    broken build would only show as a slower ``ckpt list``. A source checkout on PYTHONPATH
    was never built."""
    here = ROOT / "ckpt_tools"
    if not [*here.glob("cwire*.so"), *here.glob("cwire*.pyd")]:
        pytest.skip("this checkout was not built (pip install -e builds the extension)")
    importlib.import_module("ckpt_tools.cwire")
    assert bundle._c_block is not None and meta._c_variable_list is not None

"""Reads that never hang, blow up or lie (issue 10, section 3): TensorFlow checkpoint files.

Every attack runs the real command line in a forked child (``_bounded.run_bounded``) and must
give the documented exit code, one ``error:`` line naming the file (and the tensor where there
is one), no traceback, in under 10 s and 300 MB, and leave its input byte-for-byte untouched.
The hostile files are made by hand with ``_corpus``'s independent table writer: TensorFlow never
writes them.
"""

from __future__ import annotations

import os
import shutil
import socket
import struct
import tempfile
from pathlib import Path

import numpy as np
import pytest
from _bounded import assert_refused, run_bounded
from _corpus import _varint, build_table, bundle_index, entry_proto, tree_hashes, write_bundle

from ckpt_tools.errors import CorruptCheckpointError
from ckpt_tools.formats import crc
from ckpt_tools.formats._protos import SavedTensorSlices
from ckpt_tools.formats.bundle_writer import BundleWriter
from ckpt_tools.formats.slices import TensorSlice, check_partition, encode_key

CORRUPT = 4
DATA = "m.data-00000-of-00001"


def _every_command(d: Path, name: str, out: Path) -> list[list]:
    """Every ``ckpt`` command that reads checkpoint ``d`` (``name``: a stored tensor)."""
    return [["list", d], ["show", d, name], ["stats", d], ["verify", d],
            ["export", d, "--out", out / "x.npz", "--allow-missing"],
            ["restore-ema", d, "--out", out / "baked", "--allow-missing"],
            ["map", d, "--allow-missing"], ["diff", d, d]]


def _bundle(d: Path, entries: dict[bytes, bytes], data: bytes) -> Path:
    d.mkdir(parents=True)
    (d / "m.index").write_bytes(bundle_index(entries))
    (d / DATA).write_bytes(data)
    return d


# -- 1. FIFOs, devices, sockets and directories where a file belongs -------------------------
def _make(kind: str, path: Path) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "device":
        path.symlink_to("/dev/zero")  # endless: must never be read
    else:
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
        s.close()


KINDS = {"fifo": "a FIFO", "directory": "a directory", "device": "a device",
         "socket": "a socket"}


def test_non_regular_files_are_refused_at_once():
    # A short base directory: a socket's path must fit in 108 bytes.
    base = Path(tempfile.mkdtemp(prefix="ckh", dir="/tmp"))
    try:
        argvs, expect = [], []
        for kind, words in KINDS.items():
            shard = write_bundle(base / f"d_{kind}" / "m", {"a": np.arange(4, dtype=np.float32)})
            (shard.parent / DATA).unlink()
            _make(kind, shard.parent / DATA)
            for argv in (["list", shard.parent], ["show", shard.parent, "a"]):
                argvs.append(argv)
                expect.append((DATA, words))
            idx = write_bundle(base / f"i_{kind}" / "m", {"a": np.zeros(2, np.float32)})
            (idx.parent / "m.index").unlink()
            _make(kind, idx.parent / "m.index")
            for argv in (["list", idx.parent], ["list", idx.parent / "m.index"]):
                argvs.append(argv)
                expect.append(("m.index", words))
            meta = write_bundle(base / f"m_{kind}" / "m", {"a": np.zeros(2, np.float32)})
            _make(kind, meta.parent / "m.meta")
            for argv in (["list", meta.parent], ["list", meta.parent / "m.meta"]):
                argvs.append(argv)
                expect.append(("m.meta", words))
            (base / f"k_{kind}").mkdir()
            _make(kind, base / f"k_{kind}" / "model.keras")
            keras = base / f"k_{kind}"
            for argv in (["list", keras / "model.keras"], ["list", keras]):
                argvs.append(argv)
                expect.append(("model.keras", words))
        before = tree_hashes(base)
        for run, says in zip(run_bounded(argvs), expect, strict=True):
            assert_refused(run, CORRUPT, *says)
        assert tree_hashes(base) == before
    finally:
        shutil.rmtree(base)


# -- 2. Entries that pass the end of their shard: exit 4 for every command --------------------
def test_entry_past_shard_end_fails_every_command(tmp_path):
    d = _bundle(tmp_path / "past", {b"a": entry_proto(1, (6,), offset=0, size=24)}, b"\0" * 16)
    out = tmp_path / "out"
    out.mkdir()
    before = tree_hashes(d)
    for run in run_bounded(_every_command(d, "a", out)):
        says = ("past",) if run.argv[0] == "verify" else (DATA, "'a'", "spans bytes [0, 24)")
        assert_refused(run, CORRUPT, *says)
    assert tree_hashes(d) == before
    assert not list(out.iterdir()), "nothing may be written from a checkpoint that lies"


def test_entry_past_second_shard_end_fails_list(tmp_path):
    d = tmp_path / "two"
    d.mkdir()
    (d / "m.index").write_bytes(bundle_index({
        b"a": entry_proto(1, (2,), size=8), b"b": entry_proto(1, (2,), shard_id=1, offset=4,
                                                             size=8)}, num_shards=2))
    (d / "m.data-00000-of-00002").write_bytes(b"\0" * 8)
    (d / "m.data-00001-of-00002").write_bytes(b"\0" * 8)
    [run] = run_bounded([["list", d]])
    assert_refused(run, CORRUPT, "m.data-00001-of-00002", "'b'", "spans bytes [4, 12)")


# -- 3. Partitioned tensors: disjoint, inside, covering — by extents --------------------------
def _partitioned(d: Path, shape, extents: list[list[tuple[int, int]]]) -> Path:
    entries, data = {b"w": entry_proto(1, shape, slices=extents)}, bytearray()
    for ext in extents:
        sub = np.arange(np.prod([n for _, n in ext]), dtype=np.float32).tobytes()
        entries[encode_key("w", TensorSlice(tuple(ext)))] = entry_proto(
            1, tuple(n for _, n in ext), offset=len(data), size=len(sub),
            crc32c=crc.mask(crc.crc32c(sub)))
        data += sub
    return _bundle(d, entries, bytes(data))


BAD_PARTITIONS = {
    # Element counts add up (2 + 2 == 4) but [1, 2) is stored twice and [3, 4) never.
    "overlap_with_gap": ((4,), [[(0, 2)], [(1, 2)]], "overlap"),
    "outside": ((4,), [[(0, 2)], [(2, 5)]], "outside"),
    "gap": ((4,), [[(0, 2)]], "cover 2 of 4"),
    "duplicate": ((2, 2), [[(0, 1), (0, 2)], [(0, 1), (0, 2)]], "overlap"),
    "overlap_2d": ((2, 2), [[(0, 2), (0, 1)], [(0, 1), (0, 2)], [(1, 1), (1, 1)]], "overlap"),
}


@pytest.mark.parametrize("case", sorted(BAD_PARTITIONS))
def test_bad_partitions_are_refused_by_reader_verify_and_writer(case, tmp_path):
    shape, extents, words = BAD_PARTITIONS[case]
    d = _partitioned(tmp_path / case, shape, extents)
    out = tmp_path / "out"
    out.mkdir()
    before = tree_hashes(d)
    argvs = [["list", d], ["show", d, "w"], ["verify", d], ["export", d, "--out", out / "x.npz"],
             ["restore-ema", d, "--out", out / "baked", "--allow-missing"]]
    for run in run_bounded(argvs):
        assert_refused(run, CORRUPT, case, words)
        if run.argv[0] != "verify":
            assert "m.index" in run.err and "'w'" in run.err
    assert tree_hashes(d) == before
    assert not list(out.iterdir()), "restore-ema/export must not bake a bad partition"
    slices = [TensorSlice(tuple(e)) for e in extents]
    with pytest.raises(CorruptCheckpointError, match=words):
        check_partition("w", shape, slices)
    (tmp_path / "w").mkdir()
    writer = BundleWriter(str(tmp_path / "w" / "m"))
    try:
        with pytest.raises(CorruptCheckpointError, match=words):
            writer.add_partitioned("w", 1, shape, slices)
    finally:
        writer.abort()


def test_good_partitions_pass_the_extent_check():
    grid = [TensorSlice(((r, 2), (c, 3))) for r in (0, 2) for c in (0, 3)]
    assert len(check_partition("g", (4, 6), grid)) == 4
    assert check_partition("f", (5,), [TensorSlice(((0, -1),))]) == [((0, 5),)]
    rows = [TensorSlice(((i, 1), (0, -1))) for i in range(300)]
    assert len(check_partition("r", (300, 7), rows[::-1])) == 300


@pytest.mark.parametrize("force_pairwise", [False, True])
def test_partition_check_agrees_with_counting_every_element(force_pairwise, monkeypatch):
    """Random 3-D slices: accepted exactly when every element is covered once."""
    import random

    from ckpt_tools.formats import slices as slices_mod

    if force_pairwise:
        monkeypatch.setattr(slices_mod, "_MAX_GRID_CELLS", 0)
    rng = random.Random(10)
    accepted = 0
    for _ in range(1500):
        shape = tuple(rng.randint(1, 3) for _ in range(3))
        parts = []
        for _ in range(rng.randint(1, 6)):
            ext = []
            for dim in shape:
                start = rng.randint(0, dim - 1)
                ext.append((start, rng.randint(1, dim - start)))
            parts.append(TensorSlice(tuple(ext)))
        if rng.random() < 0.3:  # also whole tilings, split along one or two dimensions
            cut = rng.randint(1, shape[0])
            parts = [TensorSlice(((0, cut), (0, -1), (0, -1)))]
            if cut < shape[0]:
                parts.append(TensorSlice(((cut, shape[0] - cut), (0, -1), (0, -1))))
        count = np.zeros(shape, int)
        for p in parts:
            count[p.index(shape)] += 1
        truth = bool((count == 1).all())
        try:
            check_partition("t", shape, parts)
            accepted += 1
            assert truth, parts
        except CorruptCheckpointError:
            assert not truth, parts
    assert accepted > 100


def _v1_partitioned(path: Path, shape, extents) -> Path:
    meta = SavedTensorSlices()
    t = meta.meta.tensor.add(name="w", type=1)
    for dim in shape:
        t.shape.dim.add(size=dim)
    items = [(b"", meta.SerializeToString())]
    for ext in extents:
        s = t.slice.add()
        for start, length in ext:
            s.extent.add(start=start, length=length)
        value = SavedTensorSlices()
        value.data.name = "w"
        value.data.data.dtype = 1
        value.data.data.float_val.extend([1.0] * int(np.prod([n for _, n in ext])))
        items.append((encode_key("w", TensorSlice(tuple(ext))), value.SerializeToString()))
    items[0] = (b"", meta.SerializeToString())
    path.write_bytes(build_table(sorted(items)))
    return path


@pytest.mark.parametrize("case", ["overlap_with_gap", "outside", "gap"])
def test_v1_reader_checks_partitions_by_extents(case, tmp_path):
    shape, extents, words = BAD_PARTITIONS[case]
    path = _v1_partitioned(tmp_path / f"{case}.ckpt", shape, extents)
    before = tree_hashes(path)
    for run in run_bounded([["show", path, "w"], ["verify", path]]):
        assert_refused(run, CORRUPT, f"{case}.ckpt", words)
    assert tree_hashes(path) == before


# -- 4. Index tables --------------------------------------------------------------------------
def _table_blocks(data_block: bytes, ctype: int = 0, last_key: bytes = b"\xff") -> bytes:
    """A table file whose one data block is ``data_block`` stored with compression ``ctype``."""
    out = bytearray()

    def emit(block: bytes, kind: int = 0) -> bytes:
        handle = _varint(len(out)) + _varint(len(block))
        trailer = bytes((kind,))
        out.extend(block + trailer + struct.pack("<I", crc.mask(crc.crc32c(block + trailer))))
        return handle

    data = emit(data_block, ctype)
    meta = emit(struct.pack("<II", 0, 1))
    index_block = (_varint(0) + _varint(len(last_key)) + _varint(len(data)) + last_key + data
                   + struct.pack("<II", 0, 1))
    index = emit(index_block)
    magic = 0xDB4775248B80FB57
    footer = (meta + index).ljust(40, b"\0") + struct.pack("<II", magic & 0xFFFFFFFF, magic >> 32)
    return bytes(out + footer)


def _header_entry() -> bytes:
    from ckpt_tools.formats._protos import BundleHeaderProto

    header = BundleHeaderProto(num_shards=1)
    header.version.producer = 1
    value = header.SerializeToString()
    return _varint(0) + _varint(0) + _varint(len(value)) + value


def test_prefix_sharing_keys_growing_to_60kb_stay_bounded(tmp_path):
    """60,000 entries, each key one byte longer than the last (1.8 GB of keys in 700 KB)."""
    value = entry_proto(1, (0,))
    body = bytearray(_header_entry())
    body += _varint(0) + _varint(1) + _varint(len(value)) + b"k" + value
    for i in range(1, 60_000):
        body += _varint(i) + _varint(1) + _varint(len(value)) + b"k" + value
    d = tmp_path / "keys"
    d.mkdir()
    (d / "m.index").write_bytes(_table_blocks(bytes(body) + struct.pack("<II", 0, 1)))
    (d / DATA).write_bytes(b"")
    long_key = tmp_path / "long"
    long_key.mkdir()
    (long_key / "m.index").write_bytes(bundle_index({b"k" * 70_000: value}))
    (long_key / DATA).write_bytes(b"")
    before = tree_hashes(tmp_path)
    runs = run_bounded([["list", d], ["verify", d], ["list", long_key]])
    assert_refused(runs[0], CORRUPT, "m.index", "keys add up")
    assert_refused(runs[1], CORRUPT, "keys")
    assert_refused(runs[2], CORRUPT, "m.index", "longer than")
    assert tree_hashes(tmp_path) == before


def _snappy_literals(data: bytes) -> bytes:
    """``data`` as Snappy literal elements of at most 60 bytes each."""
    return b"".join(bytes(((len(data[i : i + 60]) - 1) << 2,)) + data[i : i + 60]
                    for i in range(0, len(data), 60))


def test_snappy_decoding_stops_at_the_declared_length(tmp_path):
    block = _header_entry() + struct.pack("<II", 0, 1)
    # Declares the true size, then keeps copying: 64 bytes per 3 input bytes, forever.
    runaway = _varint(len(block)) + _snappy_literals(block)
    runaway += b"\xfe\x01\x00" * 50_000  # copy 64 bytes from 1 back
    # Declares 4 GB in a few hundred bytes.
    liar = _varint(0xFFFFFFFF) + _snappy_literals(block)
    for name, stream in (("runaway", runaway), ("liar", liar)):
        d = tmp_path / name
        d.mkdir()
        (d / "m.index").write_bytes(_table_blocks(stream, ctype=1, last_key=b""))
        (d / DATA).write_bytes(b"")
    ok = tmp_path / "ok"
    ok.mkdir()
    good = _varint(len(block)) + _snappy_literals(block)
    (ok / "m.index").write_bytes(_table_blocks(good, ctype=1, last_key=b""))
    (ok / DATA).write_bytes(b"")
    before = tree_hashes(tmp_path)
    runs = run_bounded([["list", tmp_path / "runaway"], ["list", tmp_path / "liar"],
                        ["list", ok]])
    assert_refused(runs[0], CORRUPT, "runaway", "m.index", "past its declared")
    assert_refused(runs[1], CORRUPT, "liar", "m.index", "claims 4294967295")
    assert runs[2].code == 0, runs[2].err
    assert tree_hashes(tmp_path) == before


def test_rank_negative_dims_and_counts_beyond_the_file(tmp_path):
    cases = {
        "rank": (entry_proto(1, (1,) * 65, size=4), "rank 65"),
        "negative": (entry_proto(1, (4, -1), size=16), "negative dimension"),
        "count": (entry_proto(1, (10**6,), size=16), "needs 4000000 bytes"),
        "strings": (entry_proto(7, (10**9,), size=16), "claims 1000000000 elements"),
    }
    argvs, expect = [], []
    for name, (proto, words) in cases.items():
        d = _bundle(tmp_path / name, {b"bad_tensor": proto}, b"\0" * 16)
        for argv in (["list", d], ["show", d, "bad_tensor"], ["stats", d],
                     ["export", d, "--out", tmp_path / f"{name}.npz"]):
            argvs.append(argv)
            expect.append((name, "m.index", "'bad_tensor'", words))
    before = tree_hashes(tmp_path)
    for run, says in zip(run_bounded(argvs), expect, strict=True):
        assert_refused(run, CORRUPT, *says)
    assert tree_hashes(tmp_path) == before
    assert not list(tmp_path.glob("*.npz"))


# -- 5. Allocation bounded by what the file holds --------------------------------------------
def test_shapes_claiming_more_bytes_than_exist(tmp_path):
    """show/stats/export on such a tensor: exit 4 naming it, never MemoryError (70)."""
    huge = _bundle(tmp_path / "huge", {
        b"ok": entry_proto(1, (4,), size=16, crc32c=crc.mask(crc.crc32c(b"\0" * 16))),
        b"big": entry_proto(1, (10**5, 10**5), offset=16, size=4 * 10**10)}, b"\0" * 32)
    v1 = tmp_path / "fill.ckpt"
    meta = SavedTensorSlices()
    t = meta.meta.tensor.add(name="big", type=1)
    for dim in (10**5, 10**5):
        t.shape.dim.add(size=dim)
    value = SavedTensorSlices()
    value.data.data.float_val.append(1.0)
    v1.write_bytes(build_table([(b"", meta.SerializeToString()),
                                (encode_key("big", TensorSlice(())), value.SerializeToString())]))
    argvs = []
    for target in (huge, v1):
        argvs += [["show", target, "big"], ["stats", target],
                  ["export", target, "--out", tmp_path / "x.npz"]]
    before = tree_hashes(tmp_path)
    for run in run_bounded(argvs):
        name = "huge" if run.argv[1] == str(huge) else "fill.ckpt"
        assert_refused(run, CORRUPT, name, "'big'")
    assert tree_hashes(tmp_path) == before
    assert not (tmp_path / "x.npz").exists()


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_non_regular_files_inside_savedmodels_and_sharded_v1(kind, tmp_path):
    """The SavedModel proto, its variables' index and data, and a V1 shard: exit 4, no hang."""
    fixtures = Path(__file__).resolve().parent.parent / "fixtures"
    saved, sharded = fixtures / "savedmodel_tf1", fixtures / "sharded_v1"
    if not (saved / "saved_model.pb").is_file() or not sharded.is_dir():
        pytest.skip("the SavedModel / sharded V1 fixtures are not generated")
    roles = {"pb": "saved_model.pb", "index": "variables/variables.index",
             "data": "variables/variables.data-00000-of-00001"}
    argvs, expect = [], []
    for role, name in roles.items():
        d = tmp_path / role
        shutil.copytree(saved, d)
        (d / name).unlink()
        _make(kind, d / name)
        for argv in (["list", d], ["show", d, "x"]):
            argvs.append(argv)
            expect.append((name.rpartition("/")[2], KINDS[kind]))
    v1 = tmp_path / "v1"
    shutil.copytree(sharded, v1)
    shard = sorted(v1.glob("*-00001-of-0000*"))[0]
    shard.unlink()
    _make(kind, shard)
    for argv in (["list", v1], ["list", v1 / shard.name]):
        argvs.append(argv)
        expect.append((shard.name, KINDS[kind]))
    before = tree_hashes(tmp_path)
    for run, says in zip(run_bounded(argvs), expect, strict=True):
        assert_refused(run, CORRUPT, *says)
    assert tree_hashes(tmp_path) == before


def test_truncated_v1_shard_names_the_magic_numbers_byte(fixture_copy, capsys):
    """A V1 shard cut to 50 bytes: the footer's magic number is read at byte 42 (its last 8
    bytes), and the message says so, naming the shard."""
    from _corpus import run_cli

    d = fixture_copy("sharded_v1")
    shard = d / "model.ckpt-7-00001-of-00002"
    with open(shard, "r+b") as f:
        f.truncate(50)
    code, _, err = run_cli(["list", str(d)], capsys)
    assert code == 4, err
    assert f"{shard} at byte 42: bad table magic number" in err, err


@pytest.mark.parametrize("stored", [[1.0], [1.0, 2.0]])
def test_v1_slice_holding_fewer_values_than_its_extent_is_refused(tmp_path, stored):
    """A V1 slice stores every value: one value for a 4-element slice is corrupt (TensorFlow's
    Restore op says "Error copying slice data"), never a fill of that value."""
    meta = SavedTensorSlices()
    t = meta.meta.tensor.add(name="w", type=1)
    t.shape.dim.add(size=4)
    t.slice.add().extent.add(start=0, length=4)
    value = SavedTensorSlices()
    value.data.name = "w"
    value.data.data.dtype = 1
    value.data.data.float_val.extend(stored)
    path = tmp_path / "one_val.ckpt"
    path.write_bytes(build_table(sorted([
        (b"", meta.SerializeToString()),
        (encode_key("w", TensorSlice(((0, 4),))), value.SerializeToString())])))
    before = tree_hashes(path)
    for run in run_bounded([["show", path, "w"], ["verify", path],
                            ["export", path, "--raw", "--out", tmp_path / "w.npz"]]):
        assert_refused(run, CORRUPT, "one_val.ckpt", f"slice has {len(stored)} values, "
                       "expected 4")
    assert tree_hashes(path) == before and not (tmp_path / "w.npz").exists()


def test_state_file_naming_a_file_that_is_not_a_checkpoint_names_both(fixture_copy, capsys):
    from _corpus import run_cli

    d = fixture_copy("linear_v2")
    other = d.parent / "notes.txt"
    other.write_text("not a checkpoint\n")
    (d / "checkpoint").write_text(f'model_checkpoint_path: "{other}"\n')
    code, _, err = run_cli(["list", str(d)], capsys)
    assert code == CORRUPT, err
    assert f"{d / 'checkpoint'}: names checkpoint '{other}'" in err, err


@pytest.mark.parametrize("cut", [10, 16018, -10])
def test_truncated_keras_archive_says_so(tmp_path, capsys, cut):
    from _corpus import run_cli
    from helpers import FIXTURES

    data = (FIXTURES / "keras_ema" / "model.keras").read_bytes()
    path = tmp_path / "t.keras"
    path.write_bytes(data[:cut])
    code, _, err = run_cli(["list", str(path)], capsys)
    assert code == CORRUPT, err
    assert f"{path}: not a readable .keras archive: the zip is truncated or damaged" in err
    assert "not a TensorFlow checkpoint" not in err


def test_symlink_loop_in_place_of_a_data_shard_is_exit_4(fixture_copy, capsys):
    from _corpus import run_cli

    d = fixture_copy("linear_v2")
    shard = next(d.glob("*.data-*"))
    shard.unlink()
    os.symlink("loop_b", d / "loop_a")
    os.symlink("loop_a", d / "loop_b")
    os.symlink("loop_a", shard)
    for argv in (["list", str(d)], ["verify", str(d)], ["show", str(d), "W"]):
        code, out, err = run_cli(argv, capsys)
        assert code == CORRUPT, (argv, err)
        assert f"{shard}: is a symbolic link loop" in err, err

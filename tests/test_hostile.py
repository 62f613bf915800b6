"""Hostile inputs: every bad file gives one line on stderr, a documented exit code, no traceback.

The corpus is built once per session in a temporary directory from checkpoints TensorFlow wrote
(``_make_corpus.py``) and from hand-made index files (``_corpus.bundle_index``) holding entries
TensorFlow never writes (absurd shapes and offsets). Inputs are hashed before and after each
command to prove nothing reads-and-writes them. Most cases run in-process through
``ckpt_tools.cli.main``; a representative set runs ``python -m ckpt_tools`` in a subprocess.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from _corpus import (
    FIXTURES,
    build_table,
    bundle_index,
    entry_proto,
    run_cli,
    run_subprocess,
    tf_corpus,
    tree_hashes,
)

from ckpt_tools.formats import crc
from ckpt_tools.formats._protos import SavedTensorSlices
from ckpt_tools.formats.slices import TensorSlice, encode_key

# Exit codes documented in the README ("Exit codes and errors").
NOT_FOUND, CORRUPT, UNSUPPORTED = 3, 4, 5


@dataclass(frozen=True)
class Bad:
    """One hostile input and what ``ckpt`` must say about it."""

    argv: tuple[str, ...]  # command line after "ckpt"
    target: Path  # the file or directory hashed before/after
    code: int  # expected exit code
    says: tuple[str, ...]  # substrings the error line must contain (file name + problem)


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> Path:
    return tf_corpus(tmp_path_factory.getbasetemp())


def _mutated(src: Path, dst: Path, name: str, change) -> Path:
    """Copies checkpoint directory ``src`` to ``dst`` and applies ``change`` to file ``name``."""
    shutil.copytree(src, dst)
    path = dst / name
    data = path.read_bytes()
    new = change(data)
    if new is None:
        path.unlink()
    else:
        path.write_bytes(new)
    return dst


def _flip(at: int):
    def change(data: bytes) -> bytes:
        buf = bytearray(data)
        buf[at % len(buf)] ^= 0xFF
        return bytes(buf)
    return change


def _v2_bundle(prefix: Path, entries: dict[bytes, bytes], data: bytes = b"\0" * 16) -> Path:
    prefix.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{prefix}.index").write_bytes(bundle_index(entries))
    Path(f"{prefix}.data-00000-of-00001").write_bytes(data)
    return prefix


def _v1_file(path: Path, name: str, dtype: int, shape: tuple[int, ...], fill) -> Path:
    meta = SavedTensorSlices()
    t = meta.meta.tensor.add(name=name, type=dtype)
    for d in shape:
        t.shape.dim.add(size=d)
    value = SavedTensorSlices()
    fill(value.data.data)
    key = encode_key(name, TensorSlice(()))
    path.write_bytes(build_table([(b"", meta.SerializeToString()),
                                  (key, value.SerializeToString())]))
    return path


@pytest.fixture(scope="session")
def bad_inputs(corpus, tmp_path_factory) -> dict[str, Bad]:
    """Builds every hostile input once; returns case name -> :class:`Bad`."""
    root = tmp_path_factory.mktemp("hostile")
    v2 = corpus / "v2"
    index, data, meta = "model.ckpt-2.index", "model.ckpt-2.data-00000-of-00001", \
        "model.ckpt-2.meta"
    cases: dict[str, Bad] = {}

    def add(name, argv, target, code, *says):
        cases[name] = Bad(tuple(str(a) for a in argv), target, code, says)

    d = _mutated(v2, root / "trunc_index", index, lambda b: b[: len(b) // 2])
    add("truncated_index", ["list", d], d, CORRUPT, index, "magic")
    d = _mutated(v2, root / "trunc_data", data, lambda b: b[:20])
    add("truncated_data_show", ["show", d, "words"], d, CORRUPT, data, "truncated")
    add("truncated_data_verify", ["verify", d], d, CORRUPT, "trunc_data", "12 problems")
    d = _mutated(v2, root / "flip_data", data, _flip(1))
    add("flipped_data_show", ["show", d, "W"], d, CORRUPT, data, "checksum mismatch")
    add("flipped_data_stats", ["stats", d], d, CORRUPT, data, "checksum mismatch")
    add("flipped_data_verify", ["verify", d], d, CORRUPT, "1 problem found")
    d = _mutated(v2, root / "flip_index", index, _flip(12))
    add("flipped_index", ["list", d], d, CORRUPT, index, "block checksum mismatch")
    d = _mutated(v2, root / "bad_magic", index, _flip(-1))
    add("wrong_magic", ["list", d], d, CORRUPT, index, "bad table magic number")
    d = _mutated(v2, root / "no_shard", data, lambda b: None)
    add("missing_shard_show", ["show", d, "W"], d, NOT_FOUND, data, "is missing")
    add("missing_shard_verify", ["verify", d], d, CORRUPT, "no_shard", "problem")
    d = _mutated(v2, root / "empty_index", index, lambda b: b"")
    add("empty_index", ["list", d], d, CORRUPT, index, "0 bytes")
    (root / "empty.ckpt").write_bytes(b"")
    add("empty_file", ["list", root / "empty.ckpt"], root / "empty.ckpt", CORRUPT,
        "empty.ckpt", "not a TensorFlow checkpoint")
    (root / "nothing").mkdir()
    add("empty_dir", ["list", root / "nothing"], root / "nothing", NOT_FOUND, "nothing",
        "holds no checkpoint")
    (root / "stale").mkdir()
    (root / "stale" / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-99"\n')
    add("state_file_missing_prefix", ["list", root / "stale"], root / "stale", NOT_FOUND,
        "model.ckpt-99", "names checkpoint")
    (root / "bad_escape").mkdir()
    (root / "bad_escape" / "checkpoint").write_text('model_checkpoint_path: "a\\x"\n')
    add("state_file_bad_escape", ["list", root / "bad_escape"], root / "bad_escape",
        NOT_FOUND, "bad_escape", "names checkpoint")
    d = _mutated(v2, root / "bad_meta", meta, lambda b: b"this is not a MetaGraphDef\n" * 4)
    add("meta_not_metagraph", ["list", d], d, CORRUPT, meta, "not a MetaGraphDef")
    png = root / "image.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0\0\0\rIHDR" + os.urandom(64))
    add("png_file", ["list", png], png, CORRUPT, "image.png", "not a TensorFlow checkpoint")
    txt = root / "notes.txt"
    txt.write_text("hello, I am not a checkpoint\n" * 10)
    add("text_file", ["list", txt], txt, CORRUPT, "notes.txt", "not a TensorFlow checkpoint")
    add("text_file_verify", ["verify", txt], txt, CORRUPT, "notes.txt")
    h5 = root / "text.weights.h5"  # named as Keras weights: the error says HDF5 (r26 F5)
    h5.write_text("hello\n")
    add("text_weights_h5", ["list", h5], h5, CORRUPT, "text.weights.h5", "not an HDF5 file")
    try:
        import h5py
        import numpy as np

        h5 = root / "data.h5"
        with h5py.File(h5, "w") as f:
            f.create_dataset("images", data=np.zeros((4, 4), np.uint8))
            f.attrs["title"] = "not keras weights"
        add("hdf5_not_keras", ["list", h5], h5, -1, "data.h5")
    except ImportError:
        pass
    keras = FIXTURES / "keras_ema" / "model.weights.h5"
    if keras.is_file():  # damaged HDF5 metadata: h5py raises RuntimeError deep in visititems
        buf = bytearray(keras.read_bytes())
        for i in range(3000, len(buf), 997):
            buf[i] ^= 0x55
        (root / "damaged.weights.h5").write_bytes(bytes(buf))
        add("hdf5_damaged", ["list", root / "damaged.weights.h5"], root / "damaged.weights.h5",
            CORRUPT, "damaged.weights.h5", "cannot read HDF5")
    # Hand-made indexes with entries no TensorFlow writes: must fail fast, allocate nothing.
    huge = _v2_bundle(root / "absurd" / "shape", {b"w": entry_proto(1, (10**12, 10**6),
                                                                    size=4 * 10**18)})
    add("absurd_shape", ["show", huge, "w"], huge.parent, CORRUPT, "shape.data", "spans bytes")
    off = _v2_bundle(root / "absurd" / "offset", {b"w": entry_proto(1, (4,), offset=2**60,
                                                                     size=16)})
    add("absurd_offset", ["show", off, "w"], off.parent, CORRUPT, "offset.data", "spans bytes")
    strs = _v2_bundle(root / "absurd" / "strings", {b"w": entry_proto(7, (10**12,), size=16)})
    add("absurd_string_count", ["show", strs, "w"], strs.parent, CORRUPT, "strings.index",
        "'w' claims")
    part = _v2_bundle(root / "absurd" / "part", {
        b"w": entry_proto(1, (10**12, 10**6), slices=[[(0, 10**12), (0, 10**6)]]),
        encode_key("w", TensorSlice(((0, 10**12), (0, 10**6)))): entry_proto(1, (1,), size=16)})
    add("absurd_partitioned", ["show", part, "w"], part.parent, CORRUPT, "part.index", "needs")
    add("absurd_verify", ["verify", huge], huge.parent, CORRUPT, "shape", "problem")
    oob = _v2_bundle(root / "absurd" / "slice", {
        b"w": entry_proto(1, (4,), slices=[[(2, 5)]]),
        encode_key("w", TensorSlice(((2, 5),))): entry_proto(1, (5,), size=20)}, b"\0" * 20)
    add("slice_outside_tensor", ["show", oob, "w"], oob.parent, CORRUPT, "slice", "outside")
    dt = _v2_bundle(root / "absurd" / "dtype", {b"w": entry_proto(77, (1,), size=4)})
    add("unknown_dtype", ["list", dt], dt.parent, UNSUPPORTED, "dtype", "tensor 'w'",
        "DataType enum 77")
    big_int = struct.pack("<q", 10**12)
    obj = _v2_bundle(root / "absurd" / "objgraph", {b"_CHECKPOINTABLE_OBJECT_GRAPH": entry_proto(
        9, (), size=8, crc32c=crc.mask(crc.crc32c(big_int)))}, big_int)
    add("object_graph_not_string", ["list", obj], obj.parent, CORRUPT, "objgraph",
        "not a scalar string")
    (root / "v1").mkdir()
    fill = _v1_file(root / "v1" / "fill.ckpt", "w", 1, (10**5, 10**5),
                    lambda t: t.float_val.append(1.0))
    add("v1_fill_bomb", ["show", fill, "w"], fill, CORRUPT, "fill.ckpt", "claims")
    odd = _v1_file(root / "v1" / "odd.ckpt", "w", 1, (2,),
                   lambda t: setattr(t, "tensor_content", b"abc"))
    add("v1_tensor_content_size", ["show", odd, "w"], odd, CORRUPT, "odd.ckpt", "tensor_content")
    cplx = _v1_file(root / "v1" / "cplx.ckpt", "w", 8, (2,),
                    lambda t: t.scomplex_val.extend([1.0, 2.0, 3.0]))
    add("v1_odd_complex", ["show", cplx, "w"], cplx, CORRUPT, "cplx.ckpt", "complex")
    return cases


def _check_error(code: int, err: str, bad: Bad) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err
    assert len(lines) == 1, f"expected one error line, got:\n{err}"
    assert lines[0].startswith("error: ")
    if bad.code == -1:  # no reader for this format: any documented failure code will do
        assert code in (NOT_FOUND, CORRUPT, UNSUPPORTED), (code, err)
    else:
        assert code == bad.code, (code, err)
    for part in bad.says:
        assert part in lines[0], f"{part!r} not in {lines[0]!r}"


CASES = [
    "truncated_index", "truncated_data_show", "truncated_data_verify", "flipped_data_show",
    "flipped_data_stats", "flipped_data_verify", "flipped_index", "wrong_magic",
    "missing_shard_show", "missing_shard_verify", "empty_index", "empty_file", "empty_dir",
    "state_file_missing_prefix", "state_file_bad_escape", "meta_not_metagraph", "png_file",
    "text_file", "text_file_verify", "text_weights_h5", "hdf5_not_keras", "hdf5_damaged",
    "absurd_shape", "absurd_offset", "absurd_string_count", "absurd_partitioned", "absurd_verify",
    "slice_outside_tensor", "unknown_dtype", "object_graph_not_string", "v1_fill_bomb",
    "v1_tensor_content_size", "v1_odd_complex",
]


@pytest.mark.parametrize("case", CASES)
def test_bad_input_in_process(bad_inputs, case, capsys):
    if case not in bad_inputs:
        pytest.skip("h5py or the Keras fixtures are not available")
    bad = bad_inputs[case]
    before = tree_hashes(bad.target)
    code, out, err = run_cli(list(bad.argv), capsys)
    if bad.argv[0] in ("verify", "stats"):
        # These report on stdout and finish with one summary/error line on stderr.
        err = "\n".join(line for line in err.splitlines() if line.startswith("error: "))
    _check_error(code, err, bad)
    assert tree_hashes(bad.target) == before, "input was modified"


SUBPROCESS_CASES = ["truncated_index", "flipped_data_show", "missing_shard_show", "empty_dir",
                    "png_file", "absurd_shape", "meta_not_metagraph"]


@pytest.mark.parametrize("case", SUBPROCESS_CASES)
def test_bad_input_subprocess(bad_inputs, case):
    bad = bad_inputs[case]
    before = tree_hashes(bad.target)
    proc = run_subprocess(list(bad.argv))
    _check_error(proc.returncode, proc.stderr, bad)
    assert proc.stdout == ""
    assert tree_hashes(bad.target) == before


def test_debug_flag_shows_traceback(bad_inputs):
    bad = bad_inputs["flipped_index"]
    proc = run_subprocess(["--debug", *bad.argv])
    assert proc.returncode == CORRUPT
    assert "Traceback (most recent call last)" in proc.stderr
    assert "CorruptCheckpointError" in proc.stderr and "block checksum" in proc.stderr


def test_absurd_entries_need_no_memory(bad_inputs):
    """Under a 1.5 GiB address-space limit, every absurd entry still fails cleanly and fast."""
    argvs = [list(bad_inputs[c].argv) for c in CASES if c.startswith(("absurd", "v1_", "object"))]
    script = textwrap.dedent(f"""
        import json, resource
        resource.setrlimit(resource.RLIMIT_AS, (1536 << 20, 1536 << 20))
        from ckpt_tools.cli import main
        codes = []
        for argv in {argvs!r}:
            try:
                main(argv)
            except SystemExit as exc:
                codes.append(exc.code)
        print("CODES", json.dumps(codes))
    """)
    import subprocess

    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    codes = json.loads(proc.stdout.split("CODES ")[-1])
    assert len(codes) == len(argvs) and all(c in (CORRUPT, UNSUPPORTED) for c in codes), codes
    assert "MemoryError" not in proc.stderr and "internal error" not in proc.stderr


def test_paths_with_spaces_and_unicode_work(corpus, tmp_path, capsys):
    home = tmp_path / "dir with spaces" / "ünïcødé ✓"
    shutil.copytree(corpus / "v2", home)
    before = tree_hashes(home)
    for argv in (["list", home], ["verify", home], ["show", home, "W"], ["stats", home],
                 ["diff", home, "--ema"], ["diff", home / "model.ckpt-1", home],
                 ["list", home / "model.ckpt-2.index"], ["list", home / "model.ckpt-2.meta"]):
        code, out, err = run_cli([str(a) for a in argv], capsys)
        assert code == 0, (argv, err)
        assert out
    proc = run_subprocess(["show", str(home), "b"])
    assert proc.returncode == 0 and "[-1.5, -3. ,  0. ]" in proc.stdout
    assert tree_hashes(home) == before


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="root ignores directory permissions")
def test_read_only_out_directory(corpus, tmp_path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        code, _, err = run_cli(["restore-ema", str(corpus / "v2"), "--allow-missing",
                                "--out", str(ro / "out")], capsys)
    finally:
        ro.chmod(0o755)
    assert code in (1, 7) and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (ro / "out").exists()


def test_out_path_through_a_file(corpus, tmp_path, capsys):
    """``--out`` below a regular file cannot be created: one line, non-zero, input untouched."""
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    before = tree_hashes(corpus / "v2")
    code, _, err = run_cli(["restore-ema", str(corpus / "v2"), "--allow-missing",
                            "--out", str(blocker / "out")], capsys)
    assert code in (1, 7), err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and "blocker" in err
    assert tree_hashes(corpus / "v2") == before and blocker.read_text() == "x"


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc")
@pytest.mark.parametrize("command", ["restore-ema", "export"])
def test_unwritable_out_location_is_refused_even_as_root(corpus, command, capsys):
    # /proc accepts no new files, whoever asks: the read-only case that root cannot bypass.
    before = tree_hashes(corpus / "v2")
    out = "/proc/ckpt_out" if command == "restore-ema" else "/proc/ckpt_out.npz"
    code, _, err = run_cli([command, str(corpus / "v2"), "--allow-missing", "--out", out],
                           capsys)
    assert code == 7 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert out in err
    assert tree_hashes(corpus / "v2") == before

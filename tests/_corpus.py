"""Shared helpers for the verify/show/diff and hostile-input tests.

- :func:`tf_corpus` writes small checkpoints with real TensorFlow (``_make_corpus.py``, in a
  process forked from the tests' TensorFlow fork server) once per test session.
- :func:`build_table` / :func:`bundle_index` write ``.index`` files by hand, independently of
  ``ckpt_tools`` (a second implementation of the table format), for entries TensorFlow would
  never write (absurd shapes and offsets).
- :func:`run_cli` runs ``ckpt`` in-process through ``ckpt_tools.cli.main`` and returns
  ``(exit code, stdout, stderr)``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ckpt_tools.formats import crc
from ckpt_tools.formats._protos import BundleEntryProto, BundleHeaderProto

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
_MAGIC = 0xDB4775248B80FB57
_BUILT: dict[str, Path] = {}


def tf_corpus(base: Path) -> Path:
    """Returns a directory holding the ``_make_corpus.py`` cases (built once per session).

    Skips the calling test when TensorFlow is not installed.
    """
    if "dir" in _BUILT:
        return _BUILT["dir"]
    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("TensorFlow is not installed")
    from _tf_runner import run_python

    out = base / "tf_corpus"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
    # Its own process still, forked from the tests' TensorFlow fork server (the ~6 CPU s
    # import shared with the other generator scripts of this test process).
    proc = run_python([str(Path(__file__).with_name("_make_corpus.py")), str(out)], env=env,
                      timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"_make_corpus.py failed:\n{proc.stderr[-3000:]}")
    _BUILT["dir"] = out
    return out


def real_index_files(corpus: Path) -> list[Path]:
    """``.index`` files written by TensorFlow: the corpus, plus fixtures/ cases if generated."""
    found = sorted(corpus.rglob("*.index"))
    if FIXTURES.is_dir():
        found += sorted(FIXTURES.glob("*/*.index"))[:12]
    return found


def real_meta_files(corpus: Path) -> list[Path]:
    found = sorted(corpus.rglob("*.meta"))
    if FIXTURES.is_dir():
        found += sorted(FIXTURES.glob("*/*.meta"))[:8]
    return found


def copy_case(src: Path, dst: Path) -> Path:
    """Copies a checkpoint directory (so tests can damage it) and returns the copy."""
    shutil.copytree(src, dst)
    return dst


def tree_hashes(path: Path) -> dict[str, str]:
    """sha256 of every file under ``path`` (or of ``path`` itself), to prove inputs untouched."""
    if path.is_file():
        return {str(path): hashlib.sha256(path.read_bytes()).hexdigest()}
    if not path.exists():
        return {}
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


# -- a second, minimal table writer -------------------------------------------------------------
def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _block(items: list[tuple[bytes, bytes]]) -> bytes:
    # No prefix sharing: one restart point at 0 is then a valid (if unusual) block.
    body = b"".join(_varint(0) + _varint(len(k)) + _varint(len(v)) + k + v for k, v in items)
    return body + struct.pack("<II", 0, 1)


def build_table(items: list[tuple[bytes, bytes]]) -> bytes:
    """Returns a LevelDB-style table (one data block) holding ``items`` (sorted by key)."""
    out = bytearray()

    def emit(block: bytes) -> bytes:
        handle = _varint(len(out)) + _varint(len(block))
        out.extend(block + b"\x00" + struct.pack("<I", crc.mask(crc.crc32c(block + b"\x00"))))
        return handle

    data = emit(_block(items))
    meta = emit(_block([]))
    index = emit(_block([(items[-1][0] if items else b"", data)]))
    footer = (meta + index).ljust(40, b"\x00") + struct.pack("<II", _MAGIC & 0xFFFFFFFF,
                                                             _MAGIC >> 32)
    return bytes(out + footer)


def entry_proto(dtype: int = 1, shape: tuple[int, ...] = (), *, offset: int = 0, size: int = 0,
                shard_id: int = 0, crc32c: int | None = None,
                slices: list[list[tuple[int, int]]] | None = None) -> bytes:
    """A serialized BundleEntryProto with whatever (possibly absurd) fields are given."""
    p = BundleEntryProto(dtype=dtype, shard_id=shard_id, offset=offset, size=size)
    for d in shape:
        p.shape.dim.add(size=d)
    if crc32c is not None:
        p.crc32c = crc32c
    for extents in slices or []:
        s = p.slices.add()
        for start, length in extents:
            s.extent.add(start=start, length=length)
    return p.SerializeToString()


def bundle_index(entries: dict[bytes, bytes], num_shards: int = 1) -> bytes:
    """An ``.index`` file: the bundle header plus ``entries`` (key -> BundleEntryProto bytes)."""
    header = BundleHeaderProto(num_shards=num_shards, endianness=0)
    header.version.producer = 1
    return build_table([(b"", header.SerializeToString()), *sorted(entries.items())])


def write_bundle(prefix: Path, tensors: dict[str, np.ndarray]) -> Path:
    """Writes a single-shard V2 checkpoint of numeric/bool/bytes arrays, without TensorFlow.

    Used for dtypes and sizes the TF corpus lacks (bfloat16, complex, large tensors).
    """
    from ckpt_tools.formats import dtypes

    data, entries = bytearray(), {}
    for name, array in tensors.items():
        array = np.asarray(array)
        if array.dtype.kind == "O":
            items = [bytes(x) for x in array.reshape(-1)]
            lengths = b"".join(_varint(len(x)) for x in items)
            running = crc.crc32c(b"".join(struct.pack("<I", len(x)) for x in items))
            length_crc = struct.pack("<I", crc.mask(running))
            raw = lengths + length_crc + b"".join(items)
            checksum = crc.mask(crc.crc32c(b"".join(items), crc.crc32c(length_crc, running)))
            dtype = dtypes.STRING
        else:
            raw = np.ascontiguousarray(array).tobytes()
            checksum, dtype = crc.mask(crc.crc32c(raw)), dtypes.enum_of_numpy(array.dtype)
        entries[name.encode()] = entry_proto(dtype, array.shape, offset=len(data), size=len(raw),
                                             crc32c=checksum)
        data += raw
    prefix.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{prefix}.index").write_bytes(bundle_index(entries))
    Path(f"{prefix}.data-00000-of-00001").write_bytes(bytes(data))
    return prefix


# -- running the CLI ---------------------------------------------------------------------------
def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """Runs ``ckpt ARGV`` in-process; returns ``(exit code, stdout, stderr)``."""
    from ckpt_tools import cli

    capsys.readouterr()
    saved_debug = cli._state["debug"]
    code = 0
    try:
        cli.main(list(argv))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        cli._state["debug"] = saved_debug
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_subprocess(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    """Runs ``python -m ckpt_tools ARGV`` and returns the completed process (text mode)."""
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("CKPT_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "ckpt_tools", *argv], capture_output=True,
                          text=True, env=env, timeout=120, **kwargs)

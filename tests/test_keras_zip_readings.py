"""A Keras file that Keras reads two ways, or whose zip records disagree with each other, is
refused by every command, exit 4, one line naming the file (review-21-attack-r54 F1, F2, F3);
local header sizes, which zipfile (so Keras) never reads, are read past as Keras does
(review-21-attack-r56 F8).

Each hostile file is built from the committed Keras 3 archive (``fixtures/keras_ema/
model.keras``: real Keras, ``SGD(use_ema=True)``, written by ``fixtures/make_keras_fixtures.py``,
which recorded Keras' own averages) and from ``ckpt restore-ema``'s output of it (the averages
as its weights, marked so). Keras picks the reading by the file's name: ``load_model(.keras)``
reads the zip (zipfile finds its end record anywhere in the last 64 KiB), ``load_weights
(.weights.h5)`` the HDF5 (h5py finds the superblock at byte 0 or at 512, 1024, 2048…).
"""

from __future__ import annotations

import hashlib
import io
import struct
import textwrap
import zipfile

import h5py
import numpy as np
import pytest
from _tf_runner import run_python
from helpers import (
    FIXTURES,
    hdf5_then_zip,
    patch_keras_sizes,
    run_cli,
    zip_in_user_block,
)

from ckpt_tools import CorruptCheckpointError, open_checkpoint
from ckpt_tools.keras_ema import keras_ema_values
from ckpt_tools.restored_mark import read_mark

SRC = FIXTURES / "keras_ema" / "model.keras"
WEIGHTS = "model.weights.h5"
BOTH = "is both an HDF5 file"


@pytest.fixture(scope="module")
def marked(tmp_path_factory) -> bytes:
    """restore-ema's ``.keras`` of the fixture: Keras' averages as its weights, marked so."""
    out = tmp_path_factory.mktemp("r54") / "re.keras"
    code, _, err = run_cli(["restore-ema", str(SRC), "--not-swapped", "--out", str(out)])
    assert code == 0, err
    assert read_mark(str(out)) is not None
    return out.read_bytes()


def _hdf5_first(dst, marked):
    hdf5_then_zip(SRC, marked, dst)
    with zipfile.ZipFile(dst) as z, h5py.File(dst, "r") as f, \
            h5py.File(io.BytesIO(z.read(WEIGHTS)), "r") as inside:
        assert "ckpt_tools" in inside.attrs and "ckpt_tools" not in f.attrs  # two readings


def _zip_first(dst, marked):
    zip_in_user_block(SRC, marked, dst)
    with zipfile.ZipFile(dst) as z, h5py.File(dst, "r") as f, \
            h5py.File(io.BytesIO(z.read(WEIGHTS)), "r") as inside:
        assert f.userblock_size == 1 << 16 and "ckpt_tools" in inside.attrs
        assert "ckpt_tools" not in f.attrs


def _short_stored(dst, marked):
    patch_keras_sizes(SRC, dst, WEIGHTS, central_stored=-100)
    with zipfile.ZipFile(dst) as z, pytest.raises(zipfile.BadZipFile, match="CRC-32"):
        z.read(WEIGHTS)  # what Keras' load_model runs into


def _stub(dst, marked):
    dst.write_bytes(b"#!/bin/sh\nexit 0\n" + b"\0" * 100 + SRC.read_bytes())
    with zipfile.ZipFile(dst) as z:  # zipfile (Keras) reads past the stub
        assert z.read(WEIGHTS) == zipfile.ZipFile(SRC).read(WEIGHTS)


@pytest.mark.parametrize("build,name,said", [
    (_hdf5_first, "p.keras", BOTH + " (superblock at byte 0) and a zip archive (3 members)"),
    (_hdf5_first, "p.weights.h5", BOTH + " (superblock at byte 0)"),
    (_zip_first, "p.weights.h5", BOTH + " (superblock at byte 65536) and a zip archive"),
    (_zip_first, "p.keras", BOTH + " (superblock at byte 65536)"),
    (_short_stored, "p.keras", "archive member model.weights.h5 is stored uncompressed but its "
     "zip directory records"),
    (_stub, "p.keras", "holds a zip archive that does not start at byte 0 (bytes before its "
     "first member"),
], ids=["hdf5-then-zip", "hdf5-then-zip-h5", "zip-in-user-block", "zip-in-user-block-keras",
        "stored-size", "stub"])
def test_every_command_refuses_the_file_exit_4(build, name, said, marked, tmp_path):
    """F1: raw weights at byte 0 and restore-ema's marked averages in the zip (or the other
    way round) were exported "as the averages", exit 0. F2: a stored member whose stored size
    is not its size verified ok where Keras refuses. F3: the reason, not "no central
    directory". Every command: exit 4, one error line naming the file, nothing written, the
    input unchanged; the Python API raises CorruptCheckpointError."""
    bad = tmp_path / name
    build(bad, marked)
    before = hashlib.sha256(bad.read_bytes()).hexdigest()
    with open_checkpoint(SRC) as ckpt:
        key = ckpt.keys()[0]
    outs = tmp_path / "out"
    for args in (["list", bad], ["map", bad], ["verify", bad], ["show", bad, key],
                 ["stats", bad], ["diff", "--ema", bad, "--not-swapped"], ["diff", bad, SRC],
                 ["export", bad, "--not-swapped", "--out", outs / "x.npz"],
                 ["export", bad, "--raw", "--out", outs / "r.npz"],
                 ["export", bad, "--use-ema", "--not-swapped", "--out", outs / "u.npz"],
                 ["restore-ema", bad, "--not-swapped", "--out", outs / "m.keras"],
                 ["restore-ema", bad, "--not-swapped", "--use-ema", "--out",
                  outs / "m.weights.h5"]):
        code, out, err = run_cli([str(a) for a in args])
        lines = [line for line in err.splitlines() if line.startswith("error:")]
        assert code == 4 and len(lines) == 1, (args, code, out, err)
        assert f"{bad}: {said}" in lines[0] + out, (args, out, lines)  # verify lists it
        assert not outs.exists() or not any(outs.iterdir()), args  # nothing left behind
    with pytest.raises(CorruptCheckpointError, match=said.split(" (")[0]):
        keras_ema_values(bad, not_swapped=True)
    assert hashlib.sha256(bad.read_bytes()).hexdigest() == before


def test_an_archive_whose_weights_start_where_hdf5_looks_reads_as_before(tmp_path):
    """The fixture's members zipped again with model.weights.h5's bytes starting at a power of
    two (an extra field pads its local header):
    h5py opens the archive itself as an HDF5 file, and finds the same bytes as zipfile's
    member. One reading, so no refusal: the averages Keras recorded, bit for bit."""
    doc_arrays = np.load(FIXTURES / "keras_ema" / "expected.npz")
    truth = doc_arrays["model:ema/hidden/kernel"]
    aligned = tmp_path / "a.keras"
    buf = io.BytesIO()
    with zipfile.ZipFile(SRC) as zin, zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            out = zipfile.ZipInfo(info.filename, info.date_time)
            if info.filename == WEIGHTS:
                start = 1 << (buf.tell() + 34 + len(WEIGHTS)).bit_length()  # HDF5 looks there
                pad = start - (buf.tell() + 30 + len(WEIGHTS))
                out.extra = struct.pack("<HH", 0xCAFE, pad - 4) + b"\0" * (pad - 4)
            zout.writestr(out, zin.read(info))
    aligned.write_bytes(buf.getvalue())
    with zipfile.ZipFile(aligned) as z, h5py.File(aligned, "r") as f:
        assert f.userblock_size == start and z.read(WEIGHTS) == zipfile.ZipFile(SRC).read(WEIGHTS)
    code, out, err = run_cli(["export", str(aligned), "--not-swapped", "--out",
                              str(tmp_path / "a.npz")])
    assert code == 0, err
    with np.load(tmp_path / "a.npz") as npz:
        assert npz["hidden/kernel"].tobytes() == truth.tobytes()
    code, out, err = run_cli(["verify", str(aligned)])
    assert code == 0, (out, err)


def _local_sizes(dst, *, change: int = 0, zero: bool = False, bit3: bool = False) -> None:
    """The fixture archive with model.weights.h5's local header sizes changed by ``change``
    bytes, or zeroed, and flag bit 3 (sizes in a data descriptor) set there if ``bit3``;
    the zip directory, data and CRC-32 as Keras wrote them."""
    if change:
        patch_keras_sizes(SRC, dst, WEIGHTS, local_size=change)
        return
    raw = bytearray(SRC.read_bytes())
    with zipfile.ZipFile(SRC) as z:
        at = z.getinfo(WEIGHTS).header_offset
    if zero:
        struct.pack_into("<II", raw, at + 18, 0, 0)
    if bit3:
        struct.pack_into("<H", raw, at + 6, struct.unpack("<H", raw[at + 6:at + 8])[0] | 0x08)
    dst.write_bytes(bytes(raw))


@pytest.mark.parametrize("local", [{"change": 1}, {"change": -100}, {"zero": True},
                                   {"zero": True, "bit3": True}],
                         ids=["plus-1", "minus-100", "zero", "zero-bit3"])
def test_local_header_sizes_are_read_past_as_keras_does(local, tmp_path):
    """zipfile (so Keras' load_model) takes a member's sizes from the zip directory and never
    reads the local header's (the zip format lets them be 0, with flag bit 3): a .keras whose
    local header gives other sizes loads bit-exact in Keras, and was exit 4 "the archive is
    corrupt" here (review-21-attack-r56 F8). Read as Keras reads it: the averages and raw
    weights Keras recorded at save time, bit for bit, and verify finds nothing wrong."""
    truth = np.load(FIXTURES / "keras_ema" / "expected.npz")
    path = tmp_path / "l.keras"
    _local_sizes(path, **local)
    with zipfile.ZipFile(path) as z, zipfile.ZipFile(SRC) as src:  # what Keras reads
        assert z.read(WEIGHTS) == src.read(WEIGHTS)
    code, out, err = run_cli(["verify", str(path)])
    assert code == 0, (out, err)
    for args, kind in ((["--not-swapped"], "ema"), (["--raw"], "weight")):
        out = tmp_path / f"{kind}.npz"
        code, _, err = run_cli(["export", str(path), *args, "--out", str(out)])
        assert code == 0, err
        with np.load(out) as got:
            assert got.files
            for key in got.files:
                want = truth[f"model:{kind}/{key}"] if f"model:{kind}/{key}" in truth.files \
                    else truth[f"model:weight/{key}"]
                value = got[key]
                if want.dtype == np.uint16:  # bfloat16 bits, exported exactly as float32
                    value = (value.view(np.uint32) >> 16).astype(np.uint16)
                assert value.tobytes() == want.tobytes(), key


def test_the_mark_comes_from_the_hdf5_the_values_come_from(marked, tmp_path, monkeypatch):
    """Were the ambiguity let through (its check patched away here), restore-ema's mark would
    still be read from the HDF5 whose values are read: the raw weights at byte 0 carry none,
    the zip appended after them is not asked (review-21-attack-r54 F1)."""
    from ckpt_tools.formats.keras import h5 as h5_reader
    from ckpt_tools.restored_mark import checkpoint_mark

    monkeypatch.setattr(h5_reader, "check_one_reading", lambda *args: None)
    bad = tmp_path / "p.keras"
    hdf5_then_zip(SRC, marked, bad)
    with open_checkpoint(bad) as ckpt:
        assert ckpt.format == "h5" and checkpoint_mark(ckpt) is None
    marked_file = tmp_path / "re.keras"
    marked_file.write_bytes(marked)
    with open_checkpoint(marked_file) as ckpt:  # restore-ema's own output: read as marked
        assert ckpt.format == "keras" and checkpoint_mark(ckpt) is not None


@pytest.mark.parametrize("block", [512, 4096])
def test_a_weights_file_after_a_user_block_reads_as_keras_does(block, tmp_path):
    """A bare .weights.h5 whose HDF5 starts after a user block (h5py, so Keras' load_weights,
    finds the superblock at any power of two): read, the raw weights Keras recorded at save
    time bit for bit, not "not an HDF5 file" (review-21-attack-r54 F7)."""
    truth = np.load(FIXTURES / "keras_ema" / "expected.npz")["model:weight/hidden/kernel"]
    path = tmp_path / "u.weights.h5"
    with zipfile.ZipFile(SRC) as z, h5py.File(io.BytesIO(z.read(WEIGHTS)), "r") as src, \
            h5py.File(path, "w", userblock_size=block) as f:
        for key, value in src.attrs.items():
            f.attrs[key] = value
        for name in src:
            src.copy(src[name], f, name=name)
    code, out, err = run_cli(["export", str(path), "--raw", "--out", str(tmp_path / "u.npz")])
    assert code == 0, err
    with np.load(tmp_path / "u.npz") as npz:
        assert npz["hidden/kernel"].tobytes() == truth.tobytes()


def test_restore_ema_of_an_hdf5_file_named_keras_writes_what_keras_loads(tmp_path):
    """The fixture archive's model.weights.h5 (an HDF5 file) named .keras: restore-ema wrote an
    HDF5 file named .keras, which Keras' load_model cannot open, and refused the .weights.h5
    name that load_weights reads (review-21-attack-r54 F4). Now the .keras name is refused up
    front (exit 2, naming *.weights.h5, nothing written), the .weights.h5 one and the default
    name in a directory are written: Keras' recorded average bit for bit, the input unchanged."""
    truth = np.load(FIXTURES / "keras_ema" / "expected.npz")["model:ema/hidden/kernel"]
    src = tmp_path / "h.keras"
    with zipfile.ZipFile(SRC) as z:
        src.write_bytes(z.read(WEIGHTS))
    before = hashlib.sha256(src.read_bytes()).hexdigest()
    stated = ["--use-ema", "--not-swapped", "--optimizer", "sgd:momentum"]
    code, out, err = run_cli(["restore-ema", str(src), *stated, "--out",
                              str(tmp_path / "o" / "x.keras")])
    assert code == 2 and "name it *.weights.h5" in err, (out, err)
    assert not (tmp_path / "o").exists()
    for target, written in ((tmp_path / "o" / "x.weights.h5", tmp_path / "o" / "x.weights.h5"),
                            (f"{tmp_path / 'd'}/", tmp_path / "d" / "h.weights.h5")):
        code, out, err = run_cli(["restore-ema", str(src), *stated, "--out", str(target)])
        assert code == 0 and written.is_file() and "load_model" not in out, (out, err)
        with open_checkpoint(written) as ckpt:
            key = next(v.name for v in ckpt.variables() if v.path == "hidden/kernel")
            assert ckpt.tensor(key).tobytes() == truth.tobytes()
    assert hashlib.sha256(src.read_bytes()).hexdigest() == before


def test_real_model_rezipped_at_level_9_is_read(tmp_path):
    """review-22-attack-r61 F3: a real Keras model with a frozen zero-initialised layer (a
    "zero module"), re-zipped by zipfile at level 9: its weights expand ~50x, past the old
    8 MiB + 16x cap (exit 4, "a decompression bomb?") though Keras loads it (its own limit:
    100x and 4 GiB). Every weight is exported as Keras held it at save time, bit for bit."""
    pytest.importorskip("keras")
    script = textwrap.dedent(f"""
        import os, zipfile
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
        os.environ["KERAS_BACKEND"] = "tensorflow"
        import numpy as np, keras
        out = {str(tmp_path)!r}
        keras.utils.set_random_seed(5)
        m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1024, name="fc"),
                              keras.layers.Dense(2560, name="zero", kernel_initializer="zeros",
                                                 trainable=False)])
        m.save(f"{{out}}/m.keras")
        np.savez(f"{{out}}/truth.npz", **{{v.path: np.asarray(v) for v in m.weights}})
        with zipfile.ZipFile(f"{{out}}/m.keras") as src, zipfile.ZipFile(
                f"{{out}}/z9.keras", "w", zipfile.ZIP_DEFLATED, compresslevel=9) as dst:
            for info in src.infolist():
                dst.writestr(info.filename, src.read(info))
        back = keras.saving.load_model(f"{{out}}/z9.keras")  # Keras loads it
        assert all(np.array_equal(a, b) for a, b in zip(back.get_weights(), m.get_weights()))
    """)
    # its own process, forked from the tests' TensorFlow fork server (Keras imported there)
    proc = run_python(["-c", script], timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    z9 = tmp_path / "z9.keras"
    with zipfile.ZipFile(z9) as zf:  # past the old cap: the case itself
        assert zf.getinfo(WEIGHTS).file_size > (8 << 20) + 16 * z9.stat().st_size
    out = tmp_path / "raw.npz"
    code, _, err = run_cli(["export", str(z9), "--raw", "--out", str(out)])
    assert code == 0, err
    with np.load(tmp_path / "truth.npz") as t, np.load(out) as z:
        assert sorted(z.files) == sorted(t.files)
        for name in t.files:
            assert z[name].tobytes() == t[name].tobytes(), name

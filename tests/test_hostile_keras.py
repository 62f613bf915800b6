"""Reads that never hang, blow up or lie (issue 10, section 3): Keras HDF5 files and archives.

HDF5 links and storage that reach outside the file, absurd shapes, decompression bombs and
hostile ``config.json`` files. Each runs the real command line in a forked child
(``_bounded.run_bounded``): exit 4, one ``error:`` line naming the file, no traceback, under
10 s and 300 MB (200 MB for the bombs), input untouched. The files are made with h5py and
zipfile; the valid weights come from the committed Keras fixture.
"""

from __future__ import annotations

import json
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest
from _bounded import assert_refused, run_bounded
from _corpus import FIXTURES, tree_hashes

h5py = pytest.importorskip("h5py")

CORRUPT = 4
KERAS = FIXTURES / "keras_ema" / "model.keras"


def _weights(path: Path, extra=None) -> Path:
    """A Keras 3 style weights file (one dense layer); ``extra(f)`` adds the hostile part."""
    with h5py.File(path, "w") as f:
        group = f.create_group("layers/dense/vars")
        group["0"] = np.ones((4, 8), np.float32)
        group["1"] = np.zeros(8, np.float32)
        f.create_group("optimizer/vars")
        if extra:
            extra(f)
    return path


def _one_chunk_written(f) -> None:
    """A 120 MB compressed dataset of which one 4 MB chunk (a few KB deflated) is stored."""
    ds = f["layers/dense/vars"].create_dataset("2", shape=(3000, 10000), dtype="f4",
                                               chunks=(1000, 1000), compression="gzip")
    ds[:1000, :1000] = np.zeros((1000, 1000), np.float32)


def test_hdf5_links_and_storage_outside_the_file(tmp_path):
    secret = tmp_path / "secret.h5"
    with h5py.File(secret, "w") as f:
        f["data"] = np.arange(8, dtype=np.float32)
    (tmp_path / "raw.bin").write_bytes(b"\0" * 64)

    def vds(f):
        layout = h5py.VirtualLayout(shape=(8,), dtype="f4")
        layout[:] = h5py.VirtualSource(str(secret), "data", shape=(8,))
        f["layers/dense/vars"].create_virtual_dataset("2", layout)

    cases = {
        "external_link": (lambda f: f["layers/dense/vars"].__setitem__(
            "2", h5py.ExternalLink(str(secret), "/data")), "external link"),
        "unused_external_link": (lambda f: f.__setitem__(
            "elsewhere", h5py.ExternalLink(str(secret), "/")), "external link"),
        "soft_link_out": (lambda f: f["layers/dense/vars"].__setitem__(
            "2", h5py.SoftLink("/not/in/this/file")), "not in this file"),
        "soft_link_through_external": (lambda f: (
            f.__setitem__("ext", h5py.ExternalLink(str(secret), "/")),
            f["layers/dense/vars"].__setitem__("2", h5py.SoftLink("/ext/data"))),
            "external link"),
        "external_storage": (lambda f: f["layers/dense/vars"].create_dataset(
            "2", shape=(16,), dtype="f4", external=[(str(tmp_path / "raw.bin"), 0, 64)]),
            "external files"),
        "virtual": (vds, "virtual dataset"),
        "no_storage": (lambda f: f["layers/dense/vars"].create_dataset(
            "2", shape=(10**12, 10**6), dtype="f4", chunks=(1, 1024)), "no stored data"),
        "absurd_chunked": (_one_chunk_written, "claims 120000000 bytes"),
    }
    argvs, expect = [], []
    for name, (extra, words) in cases.items():
        path = _weights(tmp_path / f"{name}.weights.h5", extra)
        for argv in (["list", path], ["show", path, "layers/dense/vars/0"], ["verify", path],
                     ["export", path, "--out", tmp_path / f"{name}.npz"]):
            argvs.append(argv)
            expect.append((f"{name}.weights.h5", words))
    before = tree_hashes(tmp_path)
    for run, says in zip(run_bounded(argvs), expect, strict=True):
        assert_refused(run, CORRUPT, *says)
    assert tree_hashes(tmp_path) == before
    assert not list(tmp_path.glob("*.npz"))


def test_hdf5_dataset_past_the_end_of_the_file(tmp_path):
    path = _weights(tmp_path / "cut.weights.h5", lambda f: f["layers/dense/vars"].create_dataset(
        "2", data=np.ones(1 << 18, np.float32)))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 4096])
    before = tree_hashes(path)
    for run in run_bounded([["list", path], ["show", path, "layers/dense/vars/2"]]):
        assert_refused(run, CORRUPT, "cut.weights.h5")
    assert tree_hashes(path) == before


def _archive(path: Path, members: dict[str, bytes], compress=zipfile.ZIP_STORED) -> Path:
    with zipfile.ZipFile(path, "w", compress) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def _members() -> dict[str, bytes]:
    if not KERAS.is_file():
        pytest.skip("the Keras fixture is not generated")
    with zipfile.ZipFile(KERAS) as zf:
        return {n: zf.read(n) for n in zf.namelist()}


def test_keras_archive_decompression_bombs(tmp_path):
    members = _members()
    zeros = b"\0" * (256 << 20)
    bomb = _archive(tmp_path / "bomb.keras", {**members, "model.weights.h5": zeros},
                    zipfile.ZIP_DEFLATED)
    config_bomb = _archive(tmp_path / "config_bomb.keras",
                           {**members, "config.json": b" " * (256 << 20)}, zipfile.ZIP_DEFLATED)
    del zeros
    # A header that lies: declares 100 bytes for a member that inflates to 40 MB.
    liar = tmp_path / "liar.keras"
    _archive(liar, {"config.json": members["config.json"],
                    "model.weights.h5": b"\0" * (40 << 20)}, zipfile.ZIP_DEFLATED)
    buf = bytearray(liar.read_bytes())
    central = buf.rindex(b"PK\x01\x02")  # the last member's central directory record
    struct.pack_into("<I", buf, central + 24, 100)
    liar.write_bytes(bytes(buf))
    assert bomb.stat().st_size < 2 << 20  # really a bomb: a small archive
    before = tree_hashes(tmp_path)
    runs = run_bounded([["list", bomb], ["show", bomb, "x"], ["list", config_bomb],
                        ["list", liar]])
    for run in runs[:3]:
        assert_refused(run, CORRUPT, ".keras", "decompression bomb", memory_mb=200)
    assert_refused(runs[3], CORRUPT, "liar.keras", memory_mb=200)
    assert tree_hashes(tmp_path) == before


CONFIGS = {
    "malformed": (b'{"class_name": "Sequential", "config": ', "not valid JSON"),
    "not_utf8": (b'{"a": "\xff\xfe"}', "not valid JSON"),
    "array": (b"[1, 2, 3]", "expected an object"),
    "string": (b'"Sequential"', "expected an object"),
    "number": (b"42", "expected an object"),
    "deep_100000": (b"[" * 100_000 + b"]" * 100_000, "nests"),
    "deep_objects": (b'{"a":' * 500 + b"1" + b"}" * 500, "nests deeper"),
    "wrong_shape": (json.dumps({"class_name": "Sequential", "config": [1],
                                "compile_config": [1]}).encode(),
                    "does not describe a Keras model"),
}


@pytest.mark.parametrize("member", ["config.json", "metadata.json"])
def test_hostile_config_json_is_exit_4_naming_the_file(member, tmp_path):
    members = _members()
    argvs, names = [], []
    for name, (text, _) in CONFIGS.items():
        if member == "metadata.json" and name == "wrong_shape":
            continue  # metadata's content is not interpreted
        path = _archive(tmp_path / f"{name}.keras", {**members, member: text})
        argvs += [["list", path], ["map", path]]
        names += [name, name]
    before = tree_hashes(tmp_path)
    for run, name in zip(run_bounded(argvs), names, strict=True):
        says = [f"{name}.keras", CONFIGS[name][1]]
        if name != "wrong_shape":
            says.append(member)
        assert_refused(run, CORRUPT, *says)
    assert tree_hashes(tmp_path) == before


def test_legacy_h5_config_attribute_that_is_not_an_object_is_ignored(tmp_path):
    """A legacy .h5's model_config attribute is advisory: a hostile one is dropped, not 70."""
    path = tmp_path / "legacy.h5"
    with h5py.File(path, "w") as f:
        f.attrs["layer_names"] = [b"dense"]
        g = f.create_group("dense")
        g.attrs["weight_names"] = [b"dense/kernel:0"]
        g.create_dataset("dense/kernel:0", data=np.ones((2, 2), np.float32))
        f.attrs["model_config"] = "[" * 100_000 + "]" * 100_000
        f.attrs["training_config"] = json.dumps([1, 2])
    [run] = run_bounded([["list", path]])
    assert run.code == 0, run.err
    assert "kernel" in run.out


def test_verify_reports_a_keras_archive_without_config_json(tmp_path, capsys):
    """Keras refuses a .keras without config.json: verify says so (exit 4), while the weights
    stay readable for list/export."""
    import zipfile

    from _corpus import run_cli
    from helpers import FIXTURES

    src = FIXTURES / "keras_ema" / "model.keras"
    out = tmp_path / "noconfig.keras"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(out, "w") as zout:
        for item in zin.infolist():
            if item.filename != "config.json":
                zout.writestr(item, zin.read(item.filename))
    code, stdout, err = run_cli(["verify", str(out)], capsys)
    assert code == 4 and "no config.json" in stdout + err, (stdout, err)
    code, stdout, err = run_cli(["verify", str(src)], capsys)
    assert code == 0, err

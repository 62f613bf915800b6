"""Index entries without a CRC32C in the data commands: TensorFlow's BundleReader reads the
absent field as 0 and refuses the tensor ("Checksum does not match"), so ``show``, ``export``,
``average`` and ``restore-ema`` (``--no-verify`` too) refuse it as well: exit 4, one line naming
the index and the tensor, no output, the input untouched. What TensorFlow reads (the other
tensors, the CRC-less full entry of a partitioned variable) still reads."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from _corpus import build_table, tree_hashes
from helpers import FIXTURES, run_cli

from ckpt_tools.formats._protos import BundleEntryProto
from ckpt_tools.formats.slices import decode_key
from ckpt_tools.formats.table import Table

STRIPPED = "out/kernel/ExponentialMovingAverage"


def _strip_crc(src: Path, dest: Path, names: tuple[str, ...]) -> Path:
    """A copy of the checkpoint directory ``src`` whose index entries named ``names`` (the
    tensor's own name, or a slice of it) lose their crc32c field."""
    shutil.copytree(src, dest)
    index = dest / "model.ckpt.index"
    items = []
    for key, value in Table(index.read_bytes(), "x").items():
        value = bytes(value)
        name = decode_key(bytes(key))[0] if key[:1] == b"\x00" else bytes(key).decode()
        if name in names:
            entry = BundleEntryProto.FromString(value)
            if entry.crc32c:
                entry.ClearField("crc32c")
                value = entry.SerializeToString()
        items.append((bytes(key), value))
    index.write_bytes(build_table(items))
    return dest


@pytest.fixture()
def hostile(tmp_path) -> Path:
    return _strip_crc(FIXTURES / "partitioned", tmp_path / "run", (STRIPPED,))


def test_tensorflow_refuses_exactly_the_stripped_tensor(hostile, tf):
    reader = tf.train.load_checkpoint(str(hostile / "model.ckpt"))
    with pytest.raises(Exception, match="Checksum does not match"):
        reader.get_tensor(STRIPPED)
    reader.get_tensor("out/kernel")
    reader.get_tensor("emb")  # its full entry has no CRC (TensorFlow writes none): read


def _refused(code: int, err: str, hostile: Path) -> None:
    assert code == 4, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    assert "model.ckpt.index" in lines[0] and repr(STRIPPED) in lines[0], lines[0]
    assert "no CRC32C" in lines[0], lines[0]


@pytest.mark.parametrize("args", [
    ["show", "{run}", STRIPPED],
    ["export", "{run}", "--out", "{tmp}/x.npz"],
    ["export", "{run}", "--out", "{tmp}/x.safetensors"],
    ["restore-ema", "{run}", "--out", "{tmp}/baked"],
    ["restore-ema", "{run}", "--out", "{tmp}/baked", "--no-verify"],
    ["average", "{run}/model.ckpt", "{run2}/model.ckpt", "--newest", "{run2}/model.ckpt",
     "--out", "{tmp}/avg"],
    ["average", "{run}/model.ckpt", "{run2}/model.ckpt", "--newest", "{run2}/model.ckpt",
     "--ema", "--out", "{tmp}/avg"],
])
def test_data_commands_refuse_an_entry_without_crc(hostile, tmp_path, args):
    run2 = shutil.copytree(FIXTURES / "partitioned", tmp_path / "run2")
    out = tmp_path / "out"
    out.mkdir()
    argv = [a.format(run=hostile, run2=run2, tmp=out) for a in args]
    before = tree_hashes(hostile)
    code, _, err = run_cli(argv)
    _refused(code, err, hostile)
    assert tree_hashes(hostile) == before
    assert not any(out.iterdir()), list(out.iterdir())  # nothing written, no temporaries


def test_other_tensors_and_partitioned_full_entries_still_read(hostile, tmp_path):
    # TensorFlow reads them; so do we (the partitioned 'emb' full entry has no CRC by design).
    for name in ("out/kernel", "emb", "emb/ExponentialMovingAverage"):
        code, out, err = run_cli(["show", str(hostile), name, "--json"])
        assert code == 0, err
    expected = np.load(FIXTURES / "partitioned" / "expected.npz")
    code, _, err = run_cli(["export", str(hostile), "--out", str(tmp_path / "w.npz"),
                            "--raw", "--grep", "emb", "--grep", "out/kernel"])
    assert code == 0, err
    with np.load(tmp_path / "w.npz") as z:
        assert np.array_equal(z["emb"], expected["emb"])


def test_a_stripped_slice_is_refused(tmp_path, tf):
    run = _strip_crc(FIXTURES / "partitioned", tmp_path / "run", ("emb",))
    with pytest.raises(Exception, match="Checksum does not match"):
        tf.train.load_checkpoint(str(run / "model.ckpt")).get_tensor("emb")
    code, _, err = run_cli(["show", str(run), "emb"])
    assert code == 4, err
    assert "'emb'" in err and "no CRC32C" in err

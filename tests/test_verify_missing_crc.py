"""A hostile ``.index`` whose entries carry no CRC32C: TensorFlow's BundleReader reads the absent
field as 0 and refuses the tensor ("Checksum does not match"), so ``ckpt verify`` must report it
(exit 4, naming the tensor), never "verified"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _corpus import build_table, run_subprocess, tree_hashes

from ckpt_tools.formats._protos import BundleEntryProto
from ckpt_tools.formats.table import Table

NAMES = ("w", "s", "e")  # float32 [4], string [2], float32 [0] (no data bytes at all)


@pytest.fixture(scope="module")
def tf_bundle(tmp_path_factory, tf) -> Path:
    """A bundle written by TensorFlow's own SaveV2 (every entry with its CRC32C)."""
    prefix = tmp_path_factory.mktemp("nocrc") / "clean" / "model"
    tf.raw_ops.SaveV2(prefix=str(prefix), tensor_names=list(NAMES), shape_and_slices=[""] * 3,
                      tensors=[tf.constant([1.0, 2.0, 3.0, 4.0]), tf.constant([b"ab", b"c"]),
                               tf.zeros([0])])
    return prefix


def _without_crc(clean: Path, dest: Path, names: tuple[str, ...]) -> Path:
    """A copy of ``clean`` whose index entries for ``names`` have the crc32c field removed."""
    dest.mkdir(parents=True)
    items = []
    for key, value in Table(Path(f"{clean}.index").read_bytes(), "x").items():
        value = bytes(value)
        if key.decode() in names:
            entry = BundleEntryProto.FromString(value)
            assert entry.crc32c  # TensorFlow wrote one
            entry.ClearField("crc32c")
            value = entry.SerializeToString()
        items.append((bytes(key), value))
    prefix = dest / clean.name
    Path(f"{prefix}.index").write_bytes(build_table(items))
    data = Path(f"{clean}.data-00000-of-00001")
    Path(f"{prefix}.data-00000-of-00001").write_bytes(data.read_bytes())
    return prefix


def test_clean_bundle_verifies(tf_bundle):
    proc = run_subprocess(["verify", str(tf_bundle)])
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("name", NAMES)
def test_entry_without_crc_is_reported_as_tensorflow_refuses_it(tf_bundle, tmp_path, tf, name):
    prefix = _without_crc(tf_bundle, tmp_path / "hostile", (name,))
    # The truth: TensorFlow's reader refuses exactly that tensor, reads the others.
    reader = tf.train.load_checkpoint(str(prefix))
    with pytest.raises(Exception, match="Checksum does not match"):
        reader.get_tensor(name)
    for other in set(NAMES) - {name}:
        reader.get_tensor(other)
    before = tree_hashes(prefix.parent)
    proc = run_subprocess(["verify", str(prefix), "--json"])
    assert proc.returncode == 4, proc.stderr
    assert "Traceback" not in proc.stderr
    report = json.loads(proc.stdout)
    assert not report["ok"]
    assert [p["tensor"] for p in report["problems"]] == [name]
    assert "no CRC32C" in report["problems"][0]["message"]
    assert report["problems"][0]["file"].endswith(".data-00000-of-00001")
    text = run_subprocess(["verify", str(prefix)])
    assert text.returncode == 4
    assert f"'{name}'" in text.stdout + text.stderr and "no CRC32C" in text.stdout + text.stderr
    assert tree_hashes(prefix.parent) == before  # the input untouched

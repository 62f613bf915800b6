"""``restore-ema`` on a SavedModel writes a SavedModel that TensorFlow loads with EMA values.

The truth is what the fixture scripts recorded with real TensorFlow at save time
(``fixtures/savedmodel_*/expected.*``); the output is loaded back with TensorFlow's own
SavedModel loaders (``tf.compat.v1.saved_model.load`` for TF1, ``tf.saved_model.load`` for TF2).
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from _corpus import run_cli
from helpers import FIXTURES, expected, expected_values

from ckpt_tools.errors import ExitCode

TF1_SM = FIXTURES / "savedmodel_tf1"
KERAS_SM = FIXTURES / "savedmodel_keras"


def _same_bits(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _tf2_variables(tf, root) -> dict[str, np.ndarray]:
    """name -> value of every variable reachable from a loaded TF2 SavedModel."""
    seen, found, queue = set(), {}, [root]
    while queue:
        obj = queue.pop(0)
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, tf.Variable):
            found[obj.name.removesuffix(":0")] = obj.numpy()
            continue
        children = getattr(obj, "_trackable_children", None)
        if children is not None:
            queue.extend(children().values())
    return found


@pytest.mark.parametrize("path", ["", "saved_model.pb", "variables"])
def test_tf1_saved_model_output_loads_with_ema_values(tf, tmp_path, capsys, path):
    exp, values = expected("savedmodel_tf1"), expected_values("savedmodel_tf1")
    out = tmp_path / "served"
    code, stdout, err = run_cli(["restore-ema", str(TF1_SM / path), "--out", str(out),
                                 "--json"], capsys)
    assert code == 0, err
    doc = json.loads(stdout)
    assert doc["format"] == "saved_model" and doc["output"] == str(out)
    assert sorted(p.name for p in out.iterdir()) == ["saved_model.pb", "variables"]
    assert (out / "saved_model.pb").read_bytes() == (TF1_SM / "saved_model.pb").read_bytes()
    assert sorted(p.name for p in (out / "variables").iterdir()) == [
        "variables.data-00000-of-00001", "variables.index"]
    assert not list(tmp_path.glob(".*"))  # the staging directory was renamed into place
    v1 = tf.compat.v1
    with tf.Graph().as_default(), v1.Session() as sess:
        v1.saved_model.load(sess, exp["tags"], str(out))
        loaded = sess.run({v.op.name: v for v in v1.global_variables()})
        # The graph and its collections came along: the serving signature still works.
        assert v1.get_collection(v1.GraphKeys.MOVING_AVERAGE_VARIABLES)
    assert set(loaded) == {k.removeprefix("loaded:") for k in values if ":" in k}
    for shadow, var in exp["ema_of"].items():
        assert not _same_bits(values["loaded:" + var], values["loaded:" + shadow])
        assert _same_bits(loaded[var], values["loaded:" + shadow]), var  # EMA, not raw
        assert _same_bits(loaded[shadow], values["loaded:" + shadow]), shadow


def test_keras_saved_model_output_loads_with_ema_values(tf, tmp_path, capsys):
    exp, values = expected("savedmodel_keras"), expected_values("savedmodel_keras")
    out = tmp_path / "served"
    code, _, err = run_cli(["restore-ema", str(KERAS_SM), "--out", str(out)], capsys)
    assert code == 0, err
    assert "SavedModel" in err or "SavedModel" in _
    assert (out / "fingerprint.pb").read_bytes() == (KERAS_SM / "fingerprint.pb").read_bytes()
    loaded = _tf2_variables(tf, tf.saved_model.load(str(out)))
    assert sorted(loaded) == exp["loaded_variables"]
    for name, value in loaded.items():
        truth = values.get("ema:" + name, values["loaded:" + name])
        assert _same_bits(value, truth), name
    assert set(exp["ema_of"].values()) <= set(loaded)


def test_saved_model_output_copies_assets(tf, tmp_path, capsys):
    src = tmp_path / "src"
    shutil.copytree(TF1_SM, src)
    (src / "assets").mkdir()
    (src / "assets" / "vocab.txt").write_text("a\nb\n")
    (src / "assets.extra").mkdir()
    (src / "assets.extra" / "tf_serving_warmup_requests").write_bytes(b"\x00\x01")
    out = tmp_path / "out"
    out.mkdir()  # an existing, empty directory is fine
    code, _, err = run_cli(["restore-ema", str(src), "--out", str(out)], capsys)
    assert code == 0, err
    assert (out / "assets" / "vocab.txt").read_text() == "a\nb\n"
    assert (out / "assets.extra" / "tf_serving_warmup_requests").read_bytes() == b"\x00\x01"
    assert (out / "saved_model.pb").is_file()


@pytest.mark.parametrize("option", [["--name", "x"], ["--strip-scope", "W"],
                                    ["--slots", "drop"]])
def test_options_a_saved_model_cannot_honour_are_refused(tmp_path, capsys, option):
    out = tmp_path / "out"
    for dry in ([], ["--dry-run"]):
        code, _, err = run_cli(["restore-ema", str(TF1_SM), "--out", str(out), *option, *dry],
                               capsys)
        assert code == ExitCode.UNSUPPORTED and option[0] in err, err
        assert len(err.strip().splitlines()) == 1 and not out.exists()


def test_saved_model_output_refuses_existing_files_and_the_input(tmp_path, capsys):
    out = tmp_path / "out"
    assert run_cli(["restore-ema", str(TF1_SM), "--out", str(out)], capsys)[0] == 0
    before = (out / "variables" / "variables.index").read_bytes()
    code, _, err = run_cli(["restore-ema", str(TF1_SM), "--out", str(out)], capsys)
    assert code == ExitCode.OUTPUT and "already exists" in err
    code, _, err = run_cli(["restore-ema", str(TF1_SM), "--out", str(out), "--force"], capsys)
    assert code == 0, err
    assert (out / "variables" / "variables.index").read_bytes() == before
    src = tmp_path / "src"
    shutil.copytree(TF1_SM, src)
    (src / "assets").mkdir()  # the assets are inputs too: the output copies them
    (src / "assets" / "vocab.txt").write_text("a\nb\n")
    for target in (src, src / "variables", src / "assets"):
        code, _, err = run_cli(["restore-ema", str(src), "--out", str(target), "--force"],
                               capsys)
        assert code == ExitCode.OUTPUT, err
    assert (src / "variables" / "variables.index").read_bytes() == \
        (TF1_SM / "variables" / "variables.index").read_bytes()
    assert sorted(p.name for p in (src / "assets").iterdir()) == ["vocab.txt"]


def test_dry_run_names_the_saved_model_directory(tmp_path, capsys):
    code, out, err = run_cli(["restore-ema", str(TF1_SM), "--out", str(tmp_path / "o"),
                              "--dry-run", "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["output"] == str(tmp_path / "o") and doc["format"] == "saved_model"
    assert not (tmp_path / "o").exists()

"""Weights a ``.keras`` archive's config.json explains staying raw beside averaged ones (a
frozen layer, ``Normalization``'s non-trainable ``mean``/``variance``) are said in a note, not
a warning, on every export (review-11-user-r10 F12); ``--json`` names them and why, and
the same weights in a bare ``.weights.h5``, which records no config, keep the warning. The
files are made here by Keras 3; the truth is read from the model and the optimizer's
averages at save time."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import assert_npz_holds, run_cli

# The files are saved by train_on_batch() loops, never swapped by SwapEMAWeights: stated
# (--not-swapped) where the EMA copies are used.

WARNED = "have no EMA copy in the optimizer"


@pytest.fixture(scope="module")
def frozen_norm(keras, tmp_path_factory):
    keras.utils.set_random_seed(5)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 4)).astype("float32")
    y = rng.normal(size=(32, 2)).astype("float32")
    norm = keras.layers.Normalization(name="norm")
    norm.adapt(x)
    inp = keras.Input((4,))
    body = keras.layers.Dense(4, name="body")
    body.trainable = False
    out = keras.layers.Dense(2, name="head")(body(norm(inp)))
    model = keras.Model(inp, out)
    opt = keras.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.5)
    model.compile(opt, "mse")
    for _ in range(3):
        model.train_on_batch(x, y)
    d = tmp_path_factory.mktemp("frozen_norm")
    model.save(str(d / "m.keras"))
    model.save_weights(str(d / "m.weights.h5"))
    truth = {v.path: v.numpy() for v in model.weights if v.dtype == "float32"}
    truth.update({v.path: opt._model_variables_moving_average[
        opt._get_variable_index(v)].numpy() for v in model.trainable_variables})
    return d, truth


def test_keras_archive_notes_the_weights_its_config_keeps_raw(frozen_norm, tmp_path):
    d, truth = frozen_norm
    out = tmp_path / "w.npz"
    code, text, err = run_cli(["export", str(d / "m.keras"), "--not-swapped", "--out", str(out),
                               "--json"])
    assert code == 0, err
    flat = " ".join(err.split())
    assert WARNED not in flat and "warning:" not in flat, err
    assert "note: 4 weights have no EMA copy and keep their raw values, as config.json" \
        " explains" in flat, err
    assert "2 in layers it records frozen (trainable: false): body/kernel, body/bias" in flat
    assert "2 created with trainable=False by their layer's class: norm/mean, norm/variance" \
        in flat, err
    doc = json.loads(text)
    assert doc["raw_expected"] == {"norm/mean": "non_trainable", "norm/variance":
                                   "non_trainable", "body/kernel": "frozen",
                                   "body/bias": "frozen"}, doc
    assert sorted(doc["raw"]) == sorted(doc["raw_expected"]) and doc["notes"], doc
    assert sorted(doc["averaged"]) == ["head/bias", "head/kernel"], doc
    assert_npz_holds(out, truth)
    code, _, err = run_cli(["map", str(d / "m.keras"), "--not-swapped"])
    assert code == 0 and WARNED not in err and "as config.json explains" in err, err


def test_a_file_without_config_keeps_the_warning(frozen_norm, tmp_path):
    d, truth = frozen_norm
    out = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(d / "m.weights.h5"), "--not-swapped", "--use-ema",
                            "--out", str(out)])
    assert code == 0, err
    flat = " ".join(err.split())
    assert f"4 weights {WARNED}" in flat and "as config.json explains" not in flat, err
    assert_npz_holds(out, truth)


@pytest.fixture(scope="module")
def eq_frozen(keras, tmp_path_factory):
    """Three Dense(4) layers of equal shapes, ``b`` frozen before compile: the file leaves
    the pairing open (refused), ``--trainable a,c`` decides it; config.json still records
    ``b`` frozen."""
    keras.utils.set_random_seed(6)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(16, 4)).astype("float32")
    y = rng.normal(size=(16, 4)).astype("float32")
    inp = keras.Input((4,))
    a, b, c = (keras.layers.Dense(4, name=n) for n in "abc")
    model = keras.Model(inp, c(b(a(inp))))
    b.trainable = False
    opt = keras.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.5)
    model.compile(opt, "mse")
    for _ in range(3):
        model.train_on_batch(x, y)
    d = tmp_path_factory.mktemp("eq_frozen")
    model.save(str(d / "m.keras"))
    truth = {v.path: v.numpy() for v in model.weights}
    truth.update({v.path: opt._model_variables_moving_average[
        opt._get_variable_index(v)].numpy() for v in model.trainable_variables})
    return d, truth


def test_stated_trainable_keeps_the_config_frozen_note(eq_frozen, tmp_path):
    """review-11-user-r11 F6: ``--trainable`` leaving out the layers config.json records
    frozen gives the same note and ``raw_expected`` as a pairing the file proves."""
    d, truth = eq_frozen
    out = tmp_path / "w.npz"
    code, text, err = run_cli(["export", str(d / "m.keras"), "--not-swapped", "--trainable", "a,c",
                               "--out", str(out), "--json"])
    assert code == 0, err
    flat = " ".join(err.split())
    assert WARNED not in flat and "warning:" not in flat, err
    assert "2 in layers it records frozen (trainable: false): b/kernel, b/bias" in flat, err
    doc = json.loads(text)
    assert doc["raw_expected"] == {"b/kernel": "frozen", "b/bias": "frozen"}, doc
    assert doc["warnings"] == [], doc
    assert_npz_holds(out, truth)


def test_stated_trainable_leaving_out_a_trainable_layer_still_warns(eq_frozen, tmp_path):
    """A weight config.json records trainable that ``--trainable`` leaves out is the
    caller's statement, not the file's record: it keeps the warning."""
    d, _ = eq_frozen
    code, text, err = run_cli(["export", str(d / "m.keras"), "--not-swapped", "--trainable", "a,b",
                               "--out", str(tmp_path / "w.npz"), "--json"])
    assert code == 0, err
    doc = json.loads(text)
    assert doc["raw_expected"] == {}, doc
    assert "2 weights " + WARNED in " ".join(err.split()) and "c/kernel" in err, err

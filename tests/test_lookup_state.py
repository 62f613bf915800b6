"""A Keras 3 ``TextVectorization(output_mode="tf_idf")`` saved in a ``tf.train.Checkpoint``:
its ``idf_weights`` (created ``trainable=False`` beside the layer's adapt state) is lookup
state, not a weight missing its average (review-11-user-r11 F9). Made here by Keras 3; the
truth is the optimizer's averages read at save time."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import assert_npz_holds, run_cli

WARNED = "have no EMA copy"


@pytest.fixture(scope="module")
def tfidf_ckpt(tf, keras, tmp_path_factory):
    keras.utils.set_random_seed(3)
    words = np.array(["a b c", "b c d", "c d e", "d e f"] * 4)
    vec = keras.layers.TextVectorization(max_tokens=8, output_mode="tf_idf", name="tv")
    vec.adapt(words)
    inp = keras.Input((), dtype="string")
    out = keras.layers.Dense(3, name="d2")(keras.layers.Dense(4, name="d1")(vec(inp)))
    model = keras.Model(inp, out)
    opt = keras.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.5)
    model.compile(opt, "mse")
    y = np.random.default_rng(0).normal(size=(16, 3)).astype("float32")
    for _ in range(3):
        model.train_on_batch(tf.constant(words), y)
    d = tmp_path_factory.mktemp("tfidf")
    prefix = tf.train.Checkpoint(model=model, optimizer=opt).write(str(d / "ckpt"))
    model.save(str(d / "m.keras"))  # the same model as a .keras (idf_weights stored by name)
    truth = {v.path: opt._model_variables_moving_average[
        opt._get_variable_index(v)].numpy() for v in model.trainable_variables}
    return prefix, truth


def test_idf_weights_are_lookup_state_not_a_weight_missing_its_average(tfidf_ckpt, tmp_path):
    prefix, truth = tfidf_ckpt
    out = tmp_path / "w.npz"
    code, text, err = run_cli(["export", "--not-swapped", prefix, "--out", str(out), "--json"])
    assert code == 0, err
    assert WARNED not in " ".join(err.split()) and "idf_weights" not in err, err
    assert json.loads(text)["warnings"] == [], text
    assert_npz_holds(out, truth)
    code, text, err = run_cli(["list", prefix, "--json"])
    assert code == 0, err
    idf = [v for v in json.loads(text)["variables"] if "idf_weights" in v["key"]]
    assert len(idf) == 1 and idf[0]["role"] == "other", idf


def test_a_keras_files_named_lookup_state_is_listed_by_its_name(tfidf_ckpt, tmp_path):
    """review-11-user-r12 F11: a .keras stores idf_weights under its name, not an index: it
    is listed as tv/idf_weights, never tv/None, and the averages still export bit for bit."""
    import os

    prefix, truth = tfidf_ckpt
    path = os.path.join(os.path.dirname(prefix), "m.keras")
    code, text, err = run_cli(["list", path, "--json"])
    assert code == 0, err
    shown = {v["path"]: v["role"] for v in json.loads(text)["variables"]}
    assert shown.get("tv/idf_weights") == "other", shown
    assert not [p for p in shown if p.endswith("/None")], shown
    out = tmp_path / "w.npz"
    code, _, err = run_cli(["export", "--not-swapped", path, "--out", str(out)])
    assert code == 0, err
    assert_npz_holds(out, truth)

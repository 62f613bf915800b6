"""``list`` of a Keras 3 file whose custom loop built the optimizer in another order than
fit() does: the kernels' copies contradict fit()'s order by their values (marked '?', export
refused), while the two Dense(8) biases (under 16 elements: never compared) are paired by
fit()'s order alone. ``list`` called those "a proven shadow" and ``--json`` said nothing of
them, though that pairing is here the wrong one (review-32-user-u34 F2). The truth is Keras'
own ``optimizer._model_variables_moving_average`` at save time."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from helpers import run_cli

from ckpt_tools import open_checkpoint


@pytest.fixture(scope="module")
def d2_first(tmp_path_factory):
    """``m.keras``: Dense(8) d1 then d2, the optimizer built d2/kernel, d2/bias, d1/kernel,
    d1/bias; the averages by weight path."""
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    inp = keras.Input((8,))
    model = keras.Model(inp, keras.layers.Dense(8, name="d2")(
        keras.layers.Dense(8, name="d1")(inp)))
    opt = keras.optimizers.SGD(0.1, use_ema=True, ema_momentum=0.5)
    model.compile(opt, "mse")
    by_path = {v.path: v for v in model.trainable_variables}
    order = [by_path[p] for p in ("d2/kernel", "d2/bias", "d1/kernel", "d1/bias")]
    opt.build(order)
    x = np.random.RandomState(0).rand(16, 8).astype("float32")
    for _ in range(5):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x) - x) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, order), order, strict=True))
    truth = {v.path: np.asarray(a) for v, a in zip(
        opt._trainable_variables, opt._model_variables_moving_average, strict=True)}
    out = tmp_path_factory.mktemp("d2first") / "m.keras"
    model.save(out)
    return out, truth


def test_a_bias_paired_by_fit_order_alone_is_not_called_proven(d2_first):
    path, truth = d2_first
    code, out, err = run_cli(["list", str(path), "--json"])
    assert code == 0, err
    doc = json.loads(out)
    rows = {v["path"]: v for v in doc["variables"]}
    d1_bias = rows["d1/bias"]
    # the copy fit()'s order gives d1/bias holds d2/bias's average (the loop built d2 first)
    with open_checkpoint(path) as ckpt:
        held = np.asarray(ckpt.tensor(d1_bias["ema"]))
    assert np.array_equal(held, truth["d2/bias"]) and not np.allclose(held, truth["d1/bias"])
    assert "fit_order" in doc["assumed"], doc["assumed"]
    assert {d1_bias["key"], rows["d2/bias"]["key"]} <= set(doc["fit_order_pairs"]), doc
    code, _, err = run_cli(["list", str(path)])
    text = " ".join(err.split())
    assert code == 0, err
    assert "proven shadow" not in text, text
    assert "2 of 4 weights have a shadow whose pairing assumes fit_order" in text, text

"""A tf_keras ``.keras`` of equal-shaped layers, one frozen before compile: config.json's
save-time flags do not prove which weights the optimizer was built with (a layer unfrozen and
another frozen since), so ``apply_keras_ema`` refuses, naming its own option ``trainable=``
(not the CLI's ``--trainable``), and with ``trainable=`` the averages load bit for bit.
Made here by real tf_keras; the truth is ``opt._model_variables_moving_average``."""

from __future__ import annotations

import pytest
from helpers import run_script

pytest.importorskip("tf_keras")

SCRIPT = r'''
import json
import os
import sys

os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np
import tensorflow as tf
import tf_keras as k

import ckpt_tools

out = sys.argv[1]


def build():
    m = k.Sequential([k.layers.Dense(6, input_shape=(6,), name="a"),
                      k.layers.Dense(6, name="b"), k.layers.Dense(6, name="c")], name="stack")
    m.get_layer("b").trainable = False
    return m


k.utils.set_random_seed(3)
m = build()
opt = k.optimizers.Adam(0.01, use_ema=True, ema_momentum=0.8)
m.compile(opt, "mse")
rs = np.random.RandomState(0)
xs, ys = rs.randn(16, 6).astype("float32"), rs.randn(16, 6).astype("float32")
tv = m.trainable_variables
for _ in range(4):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((m(xs) - ys) ** 2)
    opt.apply_gradients(zip(tape.gradient(loss, tv), tv))
truth = {v.name[:-2]: opt._model_variables_moving_average[
    opt._index_dict[opt._var_key(v)]].numpy() for v in tv}
m.save(f"{out}/m.keras")
said = {}
fresh = build()
try:
    ckpt_tools.apply_keras_ema(fresh, f"{out}/m.keras")
    said["plain"] = "no error"
except ckpt_tools.EmaError as exc:
    said["plain"] = str(exc)
fresh = build()
ckpt_tools.apply_keras_ema(fresh, f"{out}/m.keras", trainable=fresh.trainable_variables)
for v in fresh.trainable_variables:
    truth["api." + v.name[:-2]] = v.numpy()
with open(f"{out}/said.json", "w") as f:
    json.dump(said, f)
np.savez(f"{out}/truth.npz", **truth)
'''


def test_refusal_names_the_apis_trainable_and_it_loads_the_averages(tmp_path):
    import json

    import numpy as np

    truth = run_script(SCRIPT, tmp_path)
    said = json.loads((tmp_path / "said.json").read_text())["plain"]
    assert "trainable=" in said and "--trainable" not in said, said
    names = [k for k in truth if not k.startswith("api.")]
    assert sorted(names) == ["a/bias", "a/kernel", "c/bias", "c/kernel"]
    for name in names:
        assert np.array_equal(truth["api." + name], truth[name]), name

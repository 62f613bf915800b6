"""A Keras 3 subclassed model holding two sublayers named alike (``self.z = Dense(8,
name="fc")``, ``self.a = Dense(8, name="fc")``), ``Adam(use_ema=True)`` built by a custom loop
that listed ``a`` first. The ``.keras`` stores ``z`` as ``layers/dense`` (variables named from
config.json: ``fc/kernel``) and ``a`` under its attribute ``a/vars`` (``fc/0``): ``list`` showed
both as the layer ``fc``, which could not be told apart, and ``--trainable a`` named no weight
(review-12-attack-r18 F7). Each is now named by where the file stores it (``dense/...``,
``a/...``), and ``--trainable a,dense --loop-order`` gives the averages Keras kept (recorded at
save time in a subprocess, ``opt._model_variables_moving_average``) bit for bit."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli, run_script

pytest.importorskip("keras")

SCRIPT = r'''
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
import keras
import numpy as np
import tensorflow as tf

out = sys.argv[1]
keras.utils.set_random_seed(0)


@keras.saving.register_keras_serializable()
class Net(keras.Model):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.z = keras.layers.Dense(8, name="fc")
        self.a = keras.layers.Dense(8, name="fc")

    def call(self, x):
        return self.a(self.z(x))


m = Net()
m(np.zeros((1, 8), "float32"))
opt = keras.optimizers.Adam(1e-2, use_ema=True, ema_momentum=0.9)
m.compile(optimizer=opt, loss="mse")
rs = np.random.RandomState(0)
x, y = rs.randn(32, 8).astype("float32"), rs.randn(32, 8).astype("float32")
tv = m.trainable_variables
loop = tv[2:4] + tv[0:2]  # a first
for _ in range(8):
    with tf.GradientTape() as t:
        loss = tf.reduce_mean((m(x) - y) ** 2)
    opt.apply_gradients(zip(t.gradient(loss, loop), loop))
tag = {id(m.z.kernel): "z.kernel", id(m.z.bias): "z.bias", id(m.a.kernel): "a.kernel",
       id(m.a.bias): "a.bias"}
truth = {tag[id(v)]: avg.numpy() for v, avg in zip(opt._trainable_variables,
                                                    opt._model_variables_moving_average)}
truth.update({"raw." + tag[id(v)]: v.numpy() for v in m.weights})
m.save(out + "/m.keras")
np.savez(out + "/truth.npz", **truth)
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("namesake")
    return out, run_script(SCRIPT, out)


def test_namesakes_are_named_apart_and_stated_by_where_the_file_keeps_them(made, tmp_path):
    out, truth = made
    code, text, err = run_cli(["list", str(out / "m.keras"), "--json"])
    assert code == 0, err
    weights = [v for v in json.loads(text)["variables"] if v["role"] == "weight"]
    paths = {v["key"]: v["path"] for v in weights}
    heads = [p.rsplit("/", 1)[0] for p in paths.values()]
    assert sorted(set(heads)) == ["a", "dense"], paths  # not "fc" twice
    target = tmp_path / "w.npz"
    code, _, err = run_cli(["export", "--not-swapped", str(out / "m.keras"), "--out", str(target),
                            "--trainable", "a,dense", "--loop-order"])
    assert code == 0, err
    with np.load(target) as z:
        got = {k: z[k] for k in z.files}
    by_layer = {"a": "a", "dense": "z"}
    for path in paths.values():
        layer = by_layer[path.rsplit("/", 1)[0]]
        kind = "kernel" if got[path].ndim == 2 else "bias"
        assert np.array_equal(got[path], truth[f"{layer}.{kind}"]), path
        assert not np.array_equal(got[path], truth[f"raw.{layer}.{kind}"]), path

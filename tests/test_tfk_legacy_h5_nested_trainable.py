"""A tf_keras legacy ``.h5`` (``model.save("m.h5")``) of a Functional model over a nested
``Sequential`` ``body`` (a layer of the outer model) and a ``Dense`` ``head``, one of
``body``'s layers frozen, ``Adam(use_ema=True)`` (review-16-attack-r34 F12): ``--trainable
body,head`` said "'body' names no weight of the file" (the file names ``body``'s weights
``b/kernel``, after the inner layer only). A nested model's name now stands for the weights
``model.trainable_variables`` lists for it: its layers the model config records as trainable,
in the file's order. A frozen ``body`` with a layer set trainable again is stored as if that
layer were trained (tf_keras records no flag of a nested model): the EMA copies then refuse
the statement (exit 6). Real tf_keras; truth is the optimizer's
``_model_variables_moving_average`` at save."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli, run_script

pytest.importorskip("tf_keras")

SCRIPT = r'''
import sys
import numpy as np
import tensorflow as tf
import tf_keras as keras

out, case = sys.argv[1], sys.argv[2]


class Counted(keras.layers.Layer):  # a weight and a float state of its own, not trained
    def build(self, shape):
        self.kernel = self.add_weight(name="kernel", shape=(shape[-1], 4))
        self.count = self.add_weight(name="count", shape=(), initializer="zeros",
                                     trainable=False)

    def call(self, x):
        self.count.assign_add(1.0)
        return x @ self.kernel


tf.random.set_seed(1)
layers = [keras.layers.Dense(4, name="a")]
if case == "custom":
    layers.append(Counted(name="cnt"))
if case == "deep":  # a Sequential in the Sequential, with batch norm statistics
    layers.append(keras.Sequential([keras.layers.Dense(4, name="c"),
                                    keras.layers.BatchNormalization(name="bn")], name="sub"))
layers.append(keras.layers.Dense(4, name="b"))
body = keras.Sequential([keras.Input((3,))] + layers, name="body")
inp = keras.Input((3,))
m = keras.Model(inp, keras.layers.Dense(4, name="head")(body(inp)))
if case == "reenabled":  # body frozen, then one of its layers set trainable: b is not trained
    body.trainable = False
    body.get_layer("b").trainable = True
else:
    body.get_layer("a").trainable = False
opt = keras.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.5)
m.compile(opt, "mse")
x = np.random.RandomState(0).randn(32, 3).astype("f4")
y = np.random.RandomState(1).randn(32, 4).astype("f4")
for i in range(8):
    m.train_on_batch(x[i * 4:(i + 1) * 4], y[i * 4:(i + 1) * 4])
m.save(out + "/m.h5")
truth = {"raw:" + v.name[:-2]: v.numpy() for v in m.variables}
truth.update({"avg:" + v.name[:-2]: a.numpy() for v, a in
              zip(m.trainable_variables, opt._model_variables_moving_average)})
truth["order"] = np.array([v.name[:-2] for v in m.trainable_variables])
np.savez(out + "/truth.npz", **truth)
'''


def _made(tmp_path_factory, case):
    out = tmp_path_factory.mktemp(case)
    return out / "m.h5", run_script(SCRIPT, out, case)


@pytest.mark.parametrize("case", ["plain", "deep"])
def test_a_nested_models_name_stands_for_its_trainable_weights(tmp_path_factory, case):
    h5, truth = _made(tmp_path_factory, case)
    order = [str(n) for n in truth["order"]]
    assert order[-2:] == ["head/kernel", "head/bias"] and "a/kernel" not in order
    out = h5.parent / "w.npz"
    code, _, err = run_cli(["export", str(h5), "--strict", "--trainable", "body,head",
                            "--out", str(out)])
    assert code == 0, err
    with np.load(out) as z:
        got = {k.split("/", 1)[1] if k.startswith("head/head/") else k: z[k] for k in z.files}
    for name in (k[4:] for k in truth if k.startswith("raw:")):
        want = truth.get("avg:" + name, truth["raw:" + name])
        assert got[name].tobytes() == want.tobytes(), name
    assert not np.array_equal(truth["avg:b/kernel"], truth["raw:b/kernel"])


def test_a_frozen_nested_model_with_a_layer_set_trainable_again_is_refused(tmp_path_factory):
    h5, truth = _made(tmp_path_factory, "reenabled")
    assert [str(n) for n in truth["order"]] == ["head/kernel", "head/bias"]
    out = h5.parent / "w.npz"
    code, _, err = run_cli(["export", str(h5), "--trainable", "body,head", "--out", str(out)])
    said = " ".join(err.split())
    assert code == 6 and "--trainable names 4 weights, but the file holds 2" in said, said
    assert not out.exists()
    code, _, err = run_cli(["export", str(h5), "--strict", "--trainable", "head",
                            "--out", str(out)])
    assert code == 0, err
    with np.load(out) as z:
        assert z["head/kernel"].tobytes() == truth["avg:head/kernel"].tobytes()


def test_a_custom_layers_own_state_leaves_the_nested_models_weights_open(tmp_path_factory):
    h5, truth = _made(tmp_path_factory, "custom")
    assert "cnt/count" not in [str(n) for n in truth["order"]]
    out = h5.parent / "w.npz"
    code, _, err = run_cli(["export", str(h5), "--trainable", "body,head", "--out", str(out)])
    said = " ".join(err.split())
    assert code == 6 and "--trainable 'body' names a nested model" in said, said
    assert "name its trainable weights instead" in said and not out.exists()
    code, _, err = run_cli(["export", str(h5), "--strict", "--out", str(out), "--trainable",
                            ",".join(str(n) for n in truth["order"])])
    assert code == 0, err

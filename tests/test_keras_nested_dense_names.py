"""Keras 3 ``.keras`` of a custom layer holding a standard ``Dense`` as an attribute (ReZero:
``self.fc = Dense(16)`` beside ``add_weight(name="alpha")``) (review r17 N1).

The archive records the nested layer's default name (``dense_7``, Keras' snake_case class
plus a counter) but not its class, and not the name ``alpha``: the Dense's two variables,
a kernel and a bias as long as its last axis, are named as Keras names them
(``re_zero/dense_7/kernel``, ``…/bias``, compared with ``v.path`` at save time); ``alpha``
keeps its position (``re_zero/0``), as does a sublayer whose shapes do not fit its name.
Made by Keras 3 in a subprocess; the truth is the optimizer's averages at save time.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from helpers import run_cli, run_script

pytest.importorskip("keras")

SCRIPT = r'''
import os, sys
os.environ["KERAS_BACKEND"] = "tensorflow"
import numpy as np, keras
from keras import layers as L

out = sys.argv[1]


@keras.saving.register_keras_serializable("s12d")
class Shift(L.Layer):  # named "dense_9" by its user, holding no kernel
    def build(self, shape):
        self.a = self.add_weight(shape=(1,), initializer="ones", name="a")
        self.b = self.add_weight(shape=(1,), initializer="zeros", name="b")

    def call(self, x):
        return x * self.a + self.b


@keras.saving.register_keras_serializable("s12d")
class ReZero(L.Layer):
    def __init__(self, units, **kw):
        super().__init__(**kw)
        self.units = units
        self.fc = L.Dense(units, activation="tanh")
        self.shift = Shift(name="dense_9")

    def build(self, shape):
        self.fc.build(shape)
        self.shift.build(shape)
        self.alpha = self.add_weight(shape=(), initializer="zeros", name="alpha")

    def call(self, x):
        return self.shift(x + self.alpha * self.fc(x))

    def get_config(self):
        return dict(super().get_config(), units=self.units)


keras.utils.set_random_seed(1)
i = keras.Input((8,))
model = keras.Model(i, L.Dense(1)(ReZero(8)(L.Dense(8)(i))))
opt = keras.optimizers.Adam(0.01, use_ema=True, ema_momentum=0.9)
model.compile(opt, "mse")
x, y = np.random.rand(32, 8).astype("f4"), np.random.rand(32, 1).astype("f4")
model.fit(x, y, batch_size=8, epochs=2, verbose=0, shuffle=False)
np.savez(out + "/truth.npz", **{v.path: a.numpy() for v, a in zip(
    opt._trainable_variables, opt._model_variables_moving_average, strict=True)})
model.save(out + "/rz.keras")
'''


def test_a_nested_dense_is_named_as_keras_names_it(tmp_path):
    truth = run_script(SCRIPT, tmp_path)
    rz = next(p.split("/")[0] for p in truth if p.endswith("/alpha"))
    fc = next(p for p in truth if re.fullmatch(rf"{rz}/dense_\d+/kernel", p))
    assert f"{fc[:-len('kernel')]}bias" in truth
    out = tmp_path / "x.npz"
    code, _, err = run_cli(["export", str(tmp_path / "rz.keras"), "--out", str(out)])
    assert code == 0, err
    shift = next(p.rsplit("/", 1)[0] for p in truth if "/dense_9/" in p)
    # not recorded in the file: the position of alpha (its layer's first variable), and of
    # the variables of a layer whose name says "dense" but whose shapes are no kernel's
    positional = {f"{rz}/alpha": f"{rz}/0", f"{shift}/a": f"{shift}/0",
                  f"{shift}/b": f"{shift}/1"}
    with np.load(out) as z:
        assert sorted(z.files) == sorted(positional.get(p, p) for p in truth), z.files
        for path, value in truth.items():
            assert z[positional.get(path, path)].tobytes() == value.tobytes(), path

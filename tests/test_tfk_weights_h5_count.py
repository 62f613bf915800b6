"""A bare tf_keras ``.weights.h5`` records neither the optimizer's class (its slots per
weight) nor which layers were frozen when it was built, nor weights held where its writer
does not save them (a layer inside a ``tf.Module`` attribute). Under a true ``--use-ema`` the
first variables were read as one average per weight the file holds, whatever the rest: a
layer frozen before compile got another layer's average and a trained one a momentum buffer,
and a model whose optimizer averaged an unsaved layer gave ``zz`` that layer's averages, exit
0 (review-11-attack-r14 F4, F5). Where the count of per-weight variables is not proven, exit
6 naming --trainable and the live model. Made here by tf_keras."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    tfk = pytest.importorskip("tf_keras")
    import tensorflow as tf

    out = tmp_path_factory.mktemp("tfk_count")
    rs = np.random.RandomState(14)
    x, y = rs.randn(32, 4).astype("float32"), rs.randn(32, 4).astype("float32")

    tf.random.set_seed(14)
    inp = tfk.Input((4,))
    frozen = tfk.layers.Dense(4, name="b")
    frozen.trainable = False
    model = tfk.Model(inp, tfk.layers.Dense(4, name="c")(frozen(tfk.layers.Dense(
        4, name="a")(inp))))
    model.compile(tfk.optimizers.SGD(0.05, momentum=0.9, use_ema=True), "mse")
    for _ in range(3):
        model.train_on_batch(x, y)
    model.save_weights(str(out / "frozen.weights.h5"))

    class Holder(tfk.Model):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.mod = tf.Module()
            self.mod.l = tfk.layers.Dense(4, name="inner")
            self.zz = tfk.layers.Dense(4, name="zz")

        def call(self, v):
            return self.zz(self.mod.l(v))

    held = Holder()
    held(tf.zeros((1, 4)))
    held.compile(tfk.optimizers.SGD(0.05, momentum=0.9, use_ema=True), "mse")
    for _ in range(3):
        held.train_on_batch(x, y)
    held.save_weights(str(out / "unsaved.weights.h5"))
    return out


@pytest.mark.parametrize("name", ["frozen.weights.h5", "unsaved.weights.h5"])
def test_an_unproven_count_of_averages_is_refused(made, tmp_path, name):
    stated = ["--use-ema", "--optimizer", "sgd:momentum"]  # the run's optimizer, as it was
    for argv in (["export", str(made / name), *stated, "--out", str(tmp_path / "w.npz")],
                 ["restore-ema", str(made / name), *stated, "--out",
                  str(tmp_path / "r.weights.h5")]):
        code, _, err = run_cli(argv)
        assert code == 6, (argv, err)
        text = " ".join(err.split())
        assert "--trainable" in text and "apply_keras_ema(model, path)" in text, text
    assert not (tmp_path / "w.npz").exists() and not (tmp_path / "r.weights.h5").exists()

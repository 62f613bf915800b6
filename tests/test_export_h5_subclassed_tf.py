"""A subclassed Keras 3 model in a tf.train.Checkpoint records no layer order (no
``_operations``): ``export --out x.h5`` wrote its layers by name, and Keras' ``load_weights``
fills an .h5 by position checking shapes only, so a ``Dense(4, use_bias=False)`` kernel and
an ``Embedding(4, 4)`` table loaded into each other, exit 0 (review-11-user-r11 F12). Layers
holding weights of the same shapes are refused (exit 5) there; ``.npz`` (read by name) holds
the optimizer's averages bit for bit. Made here by Keras 3; truth from the optimizer."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_npz_holds, keras_averages, run_cli


@pytest.fixture(scope="module")
def sub_emb(keras, tmp_path_factory):
    import tensorflow as tf

    class Net(keras.Model):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.zz = keras.layers.Dense(4, use_bias=False, name="zz")
            self.aa = keras.layers.Embedding(4, 4, name="aa")

        def call(self, x):
            return tf.reduce_mean(self.zz(self.aa(x)), axis=1)

    keras.utils.set_random_seed(5)
    model = Net(name="net")
    opt = keras.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.5)
    model.compile(opt, "mse")
    x = np.random.RandomState(0).randint(0, 4, size=(16, 3)).astype("int32")
    y = np.random.RandomState(1).rand(16, 4).astype("float32")
    for _ in range(3):
        model.train_on_batch(x, y)
    prefix = tf.train.Checkpoint(model=model, optimizer=opt).write(
        str(tmp_path_factory.mktemp("subemb") / "ckpt"))
    averages = keras_averages(opt)  # by v.path: net/zz/kernel, net/aa/embeddings
    truth = {"model/zz/_kernel": averages["net/zz/kernel"],
             "model/aa/_embeddings": averages["net/aa/embeddings"]}
    return prefix, truth


@pytest.mark.parametrize("argv", [["export", "--out", "{tmp}/x.h5"],
                                  ["restore-ema", "--format", "h5", "--out", "{tmp}/r.h5"]])
def test_equal_shaped_layers_of_a_subclassed_model_are_refused_for_h5(sub_emb, tmp_path,
                                                                      argv):
    prefix, _ = sub_emb
    command, *rest = argv
    code, _, err = run_cli([command, prefix, *(a.format(tmp=tmp_path) for a in rest),
                            "--not-swapped"])  # a train_on_batch() loop: never swapped
    assert code == 5, err
    assert "same shapes" in err and ".npz" in err, err
    assert not list(tmp_path.glob("*.h5"))


def test_npz_of_it_holds_the_averages(sub_emb, tmp_path):
    prefix, truth = sub_emb
    out = tmp_path / "x.npz"
    code, _, err = run_cli(["export", prefix, "--out", str(out), "--not-swapped"])
    assert code == 0, err
    assert_npz_holds(out, truth)

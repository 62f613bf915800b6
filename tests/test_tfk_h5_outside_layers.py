"""An .h5 of a tf_keras ``.keras``/``.weights.h5`` of a subclassed model with a weight of its
own: the groups were named ``0`` (the model's own weight) and ``lin`` (an attribute, not a
layer name), exit 0; tf_keras' ``load_weights`` fills an .h5 layer by layer in
``model.layers`` order, so positionally it raised a layer-count mismatch and by name it
loaded nothing (review-11-attack-r13 F5). Refused (exit 5) naming .npz/.safetensors, as the
Keras 3 path does; a Sequential's .h5 is still written. Made here by tf_keras."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    tfk = pytest.importorskip("tf_keras")
    import tensorflow as tf

    class M(tfk.Model):
        def __init__(self):
            super().__init__(name="m")
            self.lin = tfk.layers.Dense(4, use_bias=False)

        def build(self, shape):
            self.kernel = self.add_weight(name="scale", shape=(4, 4))
            super().build(shape)

        def call(self, x):
            return self.lin(tf.tanh(x @ self.kernel))

    tf.random.set_seed(0)
    rs = np.random.RandomState(0)
    x, y = rs.rand(16, 4).astype("float32"), rs.rand(16, 4).astype("float32")
    out = tmp_path_factory.mktemp("tfk_own")
    sub = M()
    sub.compile(tfk.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.5), "mse")
    seq = tfk.Sequential([tfk.layers.Dense(4, input_shape=(4,)), tfk.layers.Dense(4)])
    seq.compile(tfk.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.5), "mse")
    for model, name in ((sub, "sub"), (seq, "seq")):
        for _ in range(3):
            model.train_on_batch(x, y)
        model.save(str(out / f"{name}.keras"))
        model.save_weights(str(out / f"{name}.weights.h5"))
    return out


@pytest.mark.parametrize("name,extra", [("sub.keras", []), ("sub.weights.h5", ["--use-ema"])])
def test_h5_of_a_subclassed_tf_keras_model_with_own_weights_is_refused(made, tmp_path, name,
                                                                         extra):
    code, _, err = run_cli(["export", str(made / name), *extra, "--raw", "--out",
                            str(tmp_path / "x.h5")])
    assert code == 5, err
    assert "outside the model's layers" in err and ".npz" in err, err
    assert not (tmp_path / "x.h5").exists()


def test_h5_of_a_tf_keras_sequential_is_written(made, tmp_path):
    code, _, err = run_cli(["export", str(made / "seq.keras"), "--out", str(tmp_path / "x.h5")])
    assert code == 0, err

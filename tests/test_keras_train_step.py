"""A Keras model class that overrides ``train_step`` (applying gradients head before body) builds
its optimizer in another order than ``model.weights``, which a Keras file does not record
(review-11-attack-r9 F3, F4). A ``.keras`` of such a class (config.json names it) pairs only
what shapes prove and takes the order from ``--trainable``; ``apply_keras_ema`` refuses to take
the live model's order for a class overriding ``train_step`` and follows ``trainable=``. Made
here by Keras 3 in ``fit()``, saved mid-training; the truth is the optimizer's averages, each
with the variable it was built with (``optimizer._trainable_variables``)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_npz_holds, run_cli

import ckpt_tools


def _head_first(tf, model, data):
    """A train_step's loss, gradients and variables, the head's before the body's: the
    order the optimizer is then built in, not model.weights'."""
    x, y = data
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((model(x, training=True) - y) ** 2)
    vs = (model.get_layer("head").trainable_variables
          + model.get_layer("body").trainable_variables)
    return loss, tape.gradient(loss, vs), vs


def _refused_then_stated(path, truth: dict, out) -> None:
    """export refuses (exit 6, naming --trainable, nothing written); with the true order
    stated it writes the library's averages bit for bit."""
    code, _, err = run_cli(["export", "--not-swapped", str(path), "--out", str(out)])
    assert code == 6 and "--trainable" in err, err
    assert not out.exists()
    code, _, err = run_cli(["export", "--not-swapped",
                            str(path), "--trainable", "head,body", "--out", str(out)])
    assert code == 0, err
    assert_npz_holds(out, truth)


@pytest.fixture(scope="module")
def fnet(keras, tf, tmp_path_factory):
    @keras.saving.register_keras_serializable("ckpttest")
    class FNet(keras.Model):
        def train_step(self, data):
            loss, grads, vs = _head_first(tf, self, data)
            self.optimizer.apply(grads, vs)
            return {"loss": loss}

    def build():
        i = keras.Input((4,))
        return FNet(i, keras.layers.Dense(4, name="head")(keras.layers.Dense(4, name="body")(i)),
                    name="net")

    keras.utils.set_random_seed(1)
    out = tmp_path_factory.mktemp("fnet")
    model = build()
    model.compile(keras.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.9))
    truth = {}

    class Save(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 1:
                opt = self.model.optimizer
                truth.update({v.path: a.numpy() for v, a in zip(
                    opt._trainable_variables, opt._model_variables_moving_average,
                    strict=True)})
                self.model.save(str(out / "m.keras"))

    rng = np.random.RandomState(0)
    model.fit(rng.randn(32, 4).astype("f4"), rng.randn(32, 4).astype("f4"), epochs=3,
              batch_size=16, verbose=0, callbacks=[Save()])
    return out / "m.keras", build, truth


def test_a_custom_model_class_keras_file_is_refused_then_paired_by_trainable(fnet, tmp_path):
    path, _, truth = fnet
    _refused_then_stated(path, truth, tmp_path / "w.npz")


def test_apply_keras_ema_takes_no_live_order_from_a_class_with_its_own_train_step(fnet):
    path, build, truth = fnet
    with pytest.raises(ckpt_tools.EmaError, match="overrides train_step"):
        ckpt_tools.apply_keras_ema(build(), path, not_swapped=True)
    for stated in (["head", "body"], ["net/head/kernel", "net/head/bias", "net/body/kernel",
                                      "net/body/bias"]):
        model = build()
        ckpt_tools.apply_keras_ema(model, path, trainable=stated, not_swapped=True)
        for v in model.trainable_variables:
            assert v.numpy().tobytes() == truth[v.path].tobytes(), (stated, v.path)


def test_a_tf_keras_model_class_of_its_own_is_refused_then_paired_by_trainable(tf, tmp_path):
    """The same with tf_keras (review-11-attack-r9 F4b)."""
    tfk = pytest.importorskip("tf_keras")

    @tfk.saving.register_keras_serializable("ckpttest_tfk")
    class FNet(tfk.Model):
        def train_step(self, data):
            loss, grads, vs = _head_first(tf, self, data)
            self.optimizer.apply_gradients(zip(grads, vs, strict=True))
            return {"loss": loss}

    tf.random.set_seed(2)
    i = tfk.Input((4,))
    model = FNet(i, tfk.layers.Dense(4, name="head")(tfk.layers.Dense(4, name="body")(i)))
    opt = tfk.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.9)
    model.compile(opt)
    truth = {}

    class Save(tfk.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 1:
                truth.update({v.name.split(":")[0]: opt._model_variables_moving_average[
                    opt._index_dict[opt._var_key(v)]].numpy()
                    for v in self.model.trainable_variables})
                self.model.save(str(tmp_path / "m.keras"))

    rng = np.random.RandomState(0)
    model.fit(rng.randn(32, 4).astype("f4"), rng.randn(32, 4).astype("f4"), epochs=3,
              batch_size=16, verbose=0, callbacks=[Save()])
    _refused_then_stated(tmp_path / "m.keras", truth, tmp_path / "w.npz")


def test_apply_keras_ema_to_a_model_frozen_for_evaluation(keras, tmp_path):
    """model.trainable=False (as set for evaluation): refused saying so, not "build it";
    trainable= states the weights and is followed whatever the live flags
    (review-11-attack-r9 F9)."""

    class ZNet(keras.Model):
        def __init__(self):
            super().__init__()
            self.zeta = keras.layers.Dense(4, name="zeta")
            self.alpha = keras.layers.Dense(4, name="alpha")

        def call(self, x):
            return self.alpha(self.zeta(x))

    def build():
        m = ZNet()
        m(np.zeros((1, 4), "f4"))
        return m

    keras.utils.set_random_seed(3)
    model = build()
    opt = keras.optimizers.SGD(0.05, use_ema=True, ema_momentum=0.5)
    model.compile(opt, "mse")
    rng = np.random.RandomState(1)
    for _ in range(3):
        model.train_on_batch(rng.randn(8, 4).astype("f4"), rng.randn(8, 4).astype("f4"))
    # keyed without the model's own name (z_net, then z_net_1 for the second instance)
    truth = {v.path.split("/", 1)[1]: a.numpy() for v, a in zip(
        opt._trainable_variables, opt._model_variables_moving_average, strict=True)}
    model.save_weights(str(tmp_path / "m.weights.h5"))
    frozen = build()
    frozen.trainable = False
    with pytest.raises(ckpt_tools.EmaError, match="none of the model's 4 weights is trainable"):
        ckpt_tools.apply_keras_ema(frozen, tmp_path / "m.weights.h5", use_ema=True,
                                   not_swapped=True)
    ckpt_tools.apply_keras_ema(frozen, tmp_path / "m.weights.h5", use_ema=True,
                               trainable=[v.path for v in model.trainable_variables],
                                   not_swapped=True)
    for v in frozen.weights:
        assert v.numpy().tobytes() == truth[v.path.split("/", 1)[1]].tobytes(), v.path

"""review-16-user-u18 F1: README's TF2 custom loop (a ``tf.Module`` of named ``tf.Variable``s,
a Keras optimizer, ``tf.train.ExponentialMovingAverage``) whose averages were never given to
the ``tf.train.Checkpoint``: the refusal blamed ``use_ema=False`` only, the Keras cause, while
the file cannot tell which EMA the user meant. Where no Keras model holds the weights (the
object graph shows none: no ``_functional``/``_layers``/``layer-N`` above them) it names both
causes; a Keras model's weights keep the Keras cause alone (test_matrix_keras).

Truth: both checkpoints are written here by TensorFlow / Keras 3 (no average in either, by
construction: the EMA's averages are not given to the Checkpoint, ``use_ema`` is off)."""

from __future__ import annotations

import os

import pytest
from helpers import run_cli

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    tf = pytest.importorskip("tensorflow")
    keras = pytest.importorskip("keras")
    out = tmp_path_factory.mktemp("tf2_keras_opt")

    class MLP(tf.Module):
        def __init__(self):
            super().__init__()
            self.w1 = tf.Variable(tf.random.normal([4, 3], seed=1), name="w1")
            self.b1 = tf.Variable(tf.zeros([3]), name="b1")

        def __call__(self, x):
            return tf.matmul(x, self.w1) + self.b1

    m, opt = MLP(), keras.optimizers.Adam(0.01)
    ema = tf.train.ExponentialMovingAverage(0.9)
    x = tf.random.normal([8, 4], seed=2)
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(m(x) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, m.trainable_variables),
                                m.trainable_variables, strict=True))
        ema.apply(m.trainable_variables)
    step = tf.Variable(3)
    module = str(out / "module")
    tf.train.CheckpointManager(tf.train.Checkpoint(model=m, optimizer=opt, step=step),
                               module, 2).save()

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, name="d")])
    kopt = keras.optimizers.Adam(0.01)
    model.compile(kopt, "mse")
    model.train_on_batch(x.numpy(), x.numpy()[:, :3])
    kmodel = str(out / "keras_model")
    tf.train.CheckpointManager(tf.train.Checkpoint(model=model, optimizer=kopt), kmodel,
                               2).save()
    return module, kmodel


@pytest.mark.parametrize("command", ["export", "map", "restore-ema"])
def test_a_tf_module_with_a_keras_optimizer_names_both_causes(saved, command, tmp_path):
    module, _ = saved
    out = ["--out", str(tmp_path / ("o.npz" if command == "export" else "o"))]
    code, _, err = run_cli([command, module, *([] if command == "map" else out)])
    assert code == 6, err
    assert "ema.average(v)" in err and "tf.train.Checkpoint saves only what it is given" in err
    assert "use_ema=False" in err and "tf.Module" in err, err


def test_a_keras_model_keeps_the_keras_cause_alone(saved, tmp_path):
    _, kmodel = saved
    code, _, err = run_cli(["export", kmodel, "--out", str(tmp_path / "o.npz")])
    assert code == 6 and "use_ema=False" in err, err
    assert "tf.Module" not in err and "ema.average(v)" not in err, err

"""Tiny Keras models fitted by real Keras 3 or tf_keras in a subprocess, with the truth recorded
from the optimizer at save time: the prelude (:data:`KERAS3`, :data:`TF_KERAS`), the model
(:func:`dense_net`) and the fit (:func:`fit_snapped`) that the generator scripts of the Keras
tests shared inline, and a subclassed model's custom loop (:data:`KERAS3_LOOP`).
:func:`run_keras` runs a script's body after its prelude and returns the ``truth`` it filled;
:func:`fit_saved_mid_fit` fits and saves in the test's own process (:func:`fit_saving_mid_fit`
a model of the test's own). Importing this module imports neither Keras nor TensorFlow."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np

_HERE = str(Path(__file__).resolve().parent)

# What every Keras 3 generator script starts with: the TensorFlow backend, its output folder
# ``out`` (argv[1]), seeded Keras and the ``truth`` it fills (saved after the body).
KERAS3 = f"""
import os, sys; os.environ["KERAS_BACKEND"] = "tensorflow"
import numpy as np, keras, tensorflow as tf
sys.path.insert(0, {_HERE!r})
from helpers_keras import dense_net, fit_snapped  # noqa: E402
out = sys.argv[1]; keras.utils.set_random_seed(3)
truth = {{}}
"""

# The same for tf_keras (Keras 2), imported as ``K``.
TF_KERAS = f"""
import os, sys; os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np, tensorflow as tf, tf_keras as K
sys.path.insert(0, {_HERE!r})
from helpers_keras import dense_net, fit_snapped  # noqa: E402
out = sys.argv[1]; K.utils.set_random_seed(3)
truth = {{}}
"""


# What a Keras 3 subclassed model's custom-loop script starts with: its imports, ``out``
# (argv[1]), seed 1, inputs ``x`` (4 x 3) and ``train(net, opt, after, steps)``, which takes
# ``steps`` SGD steps of a squared loss and calls ``after()`` (the EMA's apply) after each.
KERAS3_LOOP = """
import os, sys
import numpy as np
import tensorflow as tf
import keras
out = sys.argv[1]
keras.utils.set_random_seed(1)
x = tf.constant(np.arange(12, dtype="float32").reshape(4, 3) / 10)
def train(net, opt, after, steps):
    for _ in range(steps):
        with tf.GradientTape() as t:
            loss = tf.reduce_mean((net(x) - 1.0) ** 2)
        g = t.gradient(loss, net.trainable_variables)
        opt.apply_gradients(zip(g, net.trainable_variables))
        after()
"""


def run_keras(body: str, out: Path, *args: str, prelude: str = KERAS3) -> dict[str, np.ndarray]:
    """Runs ``body`` after ``prelude`` in a subprocess with ``out`` (and ``args``) as its
    arguments; returns the ``truth`` it filled (saved as ``out/truth.npz`` after the body)."""
    from helpers import run_script

    script = prelude + textwrap.dedent(body) + '\nnp.savez(f"{out}/truth.npz", **truth)\n'
    return run_script(script, out, *args)


def dense_net(keras, *hidden: str, activation: str | None = "tanh"):
    """``keras.Model`` "net": an Input "features" (6), a ``Dense(8, activation)`` named after
    each of ``hidden`` in turn, and a ``Dense(3)`` "head" (``keras`` is Keras 3 or tf_keras)."""
    inp = keras.Input((6,), name="features")
    x = inp
    for name in hidden:
        x = keras.layers.Dense(8, name=name, activation=activation)(x)
    return keras.Model(inp, keras.layers.Dense(3, name="head")(x), name="net")


def fit_snapped(keras, model, snap=None, epochs: int = 2) -> None:
    """Fits the compiled ``model`` for ``epochs`` epochs (batches of 4) to 16 samples of 6
    features and 3 targets drawn from ``np.random.default_rng(5)``, calling ``snap(model)`` at
    the end of the last epoch: before Keras' end-of-fit work (a use_ema optimizer's swap of
    the averages into the weights), where the optimizer still holds what training left."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=(16, 6)).astype("float32")
    y = rng.normal(size=(16, 3)).astype("float32")

    class Snap(keras.callbacks.Callback):
        def on_epoch_end(self, ep, logs=None):
            if ep == epochs - 1 and snap is not None:
                snap(self.model)

    model.fit(x, y, epochs=epochs, batch_size=4, verbose=0, callbacks=[Snap()])


def fit_saved_mid_fit(keras, out: Path, seed: int) -> tuple:
    """A Keras 3 ``Sequential`` named ``sequential`` (not ``sequential_N`` after other tests):
    ``mid`` Dense(5, relu) and ``out`` Dense(3) over 6 inputs, fit 3 epochs (seeded by
    ``seed``) with ``SGD(0.1, momentum=0.9, use_ema=True, ema_momentum=0.9)`` and saved as
    ``out/m.keras`` at the end of epoch 1 (mid-fit: its weights raw, the optimizer's copies
    the averages), in this process.

    Returns:
        ``(model, x, y, truth)``: the data it was fit on and Keras' own averages at save time
        (``optimizer._model_variables_moving_average``) by weight path less the model's name
        (``mid/kernel``).
    """
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(5, activation="relu",
                                                                    name="mid"),
                              keras.layers.Dense(3, name="out")],
                             name="sequential")
    model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9, use_ema=True,
                                                 ema_momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = np.random.RandomState(0).randn(64, 6).astype("float32")
    y = (x[:, 0] > 0).astype("int32")
    saved = fit_saving_mid_fit(keras, model, x, y, out / "m.keras")
    truth = {p.removeprefix(f"{model.name}/"): a for p, a in saved.items()}
    return model, x, y, truth


def fit_saving_mid_fit(keras, model, x, y, path: Path, epochs: int = 3) -> dict[str, np.ndarray]:
    """Fits the compiled use_ema ``model`` to ``x``, ``y`` for ``epochs`` epochs (batches of 16)
    and saves it as ``path`` (a ``.keras``) at the end of epoch 1: mid-fit, its weights raw and
    the optimizer's copies the averages.

    Returns:
        Keras' own averages at save time (``optimizer._model_variables_moving_average``) by the
        weight's ``path`` (``sequential/mid/kernel``).
    """
    truth: dict[str, np.ndarray] = {}

    class Snap(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch != 1:
                return
            opt = self.model.optimizer
            assert opt.use_ema
            self.model.save(str(path))
            for v, a in zip(opt._trainable_variables, opt._model_variables_moving_average,
                            strict=True):
                truth[v.path] = np.array(a.numpy())

    model.fit(x, y, epochs=epochs, batch_size=16, verbose=0, callbacks=[Snap()])
    return truth

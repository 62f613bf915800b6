"""Keras 3 legacy ``.h5`` (``model.save("m.h5")``) under ``mixed_float16``: the
LossScaleOptimizer names the wrapped optimizer's variables under both names
(``loss_scale_optimizer/adam/hidden_kernel_average``). Each copy still names its weight, as
without the wrapper, so the names pair them (review 13 attack-r23 F3: refused, and no
``--trainable`` spelling worked). Truth at save time: the wrapped optimizer's
``_model_variables_moving_average`` zipped with its ``_trainable_variables``.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from typer.testing import CliRunner


def _ckpt(*args):
    from ckpt_tools.cli import app

    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module", params=[None, 2], ids=["plain", "accum"])
def saved(request, tmp_path_factory):
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras

    out = tmp_path_factory.mktemp("k3h5lso")
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        keras.utils.set_random_seed(3)
        inp = keras.Input((6,), name="features")
        x = keras.layers.Dense(8, name="hidden")(inp)
        x = keras.layers.BatchNormalization(name="bn")(x)
        x = keras.layers.Activation("relu")(x)
        m = keras.Model(inp, keras.layers.Dense(3, name="head")(x), name="net")
        m.compile(optimizer=keras.optimizers.Adam(
            0.01, use_ema=True, ema_momentum=0.8,
            gradient_accumulation_steps=request.param), loss="mse")
        rng = np.random.default_rng(5)
        xs = rng.normal(size=(16, 6)).astype("float32")
        ys = rng.normal(size=(16, 3)).astype("float32")
        truth = {}

        class Snap(keras.callbacks.Callback):
            def on_epoch_end(self, ep, logs=None):
                if ep != 1:
                    return
                self.model.save(str(out / "m.h5"))
                inner = self.model.optimizer.inner_optimizer
                for v, a in zip(inner._trainable_variables,
                                inner._model_variables_moving_average, strict=True):
                    truth[v.path] = a.numpy()

        m.fit(xs, ys, epochs=2, batch_size=4, verbose=0, callbacks=[Snap()])
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert len(truth) == 6
    return out, truth


def test_names_pair_the_wrapped_optimizers_copies(saved):
    out, truth = saved
    dst = out / "o.npz"
    if dst.exists():
        dst.unlink()
    r = _ckpt("export", out / "m.h5", "--out", dst, "--not-swapped")  # mid-fit(): unswapped
    assert r.exit_code == 0, r.output
    with np.load(dst) as z:
        for path, want in truth.items():
            assert z[path].tobytes() == want.tobytes(), path


def test_trainable_as_list_shows_it_is_accepted(saved):
    out, truth = saved
    dst = out / "o2.npz"
    if dst.exists():
        dst.unlink()
    names = ",".join(truth)  # hidden/kernel,... : the names `ckpt list` shows
    r = _ckpt("export", out / "m.h5", "--out", dst, "--trainable", names, "--not-swapped")
    assert r.exit_code == 0, r.output
    with np.load(dst) as z:
        for path, want in truth.items():
            assert z[path].tobytes() == want.tobytes(), path

"""``.h5`` export of a model with built-in wrappers (review-16-attack-r32 F14).

``Bidirectional(LSTM)`` and ``TimeDistributed(Dense)`` were refused with "layer
'forward_lstm' is of a class (unknown) outside Keras": the weight file names the wrapped
layers by attribute only, but a ``.keras``'s config.json records their classes (built-ins).
The ``.h5`` is written, and Keras' own ``load_weights`` (by position) fills the model with
the averages; a bare ``.weights.h5``, which records no class, is refused with a true reason.
Truth: the optimizer's ``_model_variables_moving_average`` (and the raw non-trainable
weights) in ``model.weights`` order at save time, mid-``fit()``.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from typer.testing import CliRunner

from ckpt_tools.cli import app

runner = CliRunner()


def _make(keras, kind: str, out):
    keras.utils.set_random_seed(7)
    inp = keras.Input((6,), dtype="int32")
    h = keras.layers.Embedding(20, 5, name="emb")(inp)
    if kind == "bidi":
        h = keras.layers.Bidirectional(keras.layers.LSTM(4), name="bi")(h)
    else:
        h = keras.layers.TimeDistributed(keras.layers.Dense(4), name="td")(h)
        h = keras.layers.GlobalAveragePooling1D()(h)
    m = keras.Model(inp, keras.layers.Dense(3, name="head")(h))
    opt = keras.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.5)
    m.compile(opt, keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = np.random.RandomState(0).randint(0, 20, (32, 6))
    y = np.random.RandomState(1).randint(0, 3, 32)
    want = []

    class Snap(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch != 1:
                return
            ema = {id(v): np.array(a.numpy()) for v, a in
                   zip(opt._trainable_variables, opt._model_variables_moving_average,
                       strict=True)}
            want.extend(ema.get(id(v), np.array(v.numpy())) for v in m.weights)
            self.model.save(str(out / f"{kind}.keras"))
            self.model.save_weights(str(out / f"{kind}.weights.h5"))

    m.fit(x, y, epochs=3, batch_size=8, verbose=0, callbacks=[Snap()])
    return want


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras

    out = tmp_path_factory.mktemp("wrappers")
    return out, {kind: _make(keras, kind, out) for kind in ("bidi", "td")}


@pytest.mark.parametrize("kind", ["bidi", "td"])
def test_h5_of_a_wrapped_layer_loads_the_averages(saved, kind, tmp_path):
    import keras

    out, truth = saved
    dst = tmp_path / f"{kind}.h5"
    r = runner.invoke(app, ["export", str(out / f"{kind}.keras"), "--out", str(dst),
                            "--not-swapped"])
    assert r.exit_code == 0, r.output
    m = keras.models.load_model(str(out / f"{kind}.keras"))
    m.load_weights(str(dst))
    assert len(m.weights) == len(truth[kind])
    for v, want in zip(m.weights, truth[kind], strict=True):
        assert np.array_equal(v.numpy(), want), v.path
    if kind == "bidi":  # forward and backward are equal-shaped: a swap would show
        assert not np.array_equal(truth[kind][1], truth[kind][4])


@pytest.mark.parametrize("kind", ["bidi", "td"])
def test_a_bare_weights_h5_is_refused_with_a_true_reason(saved, kind, tmp_path):
    out, _ = saved
    r = runner.invoke(app, ["export", str(out / f"{kind}.weights.h5"), "--out",
                            str(tmp_path / "x.h5"), "--not-swapped", "--use-ema"])
    assert r.exit_code == 5, r.output
    assert "of a class the file does not record" in r.output
    assert "(unknown)" not in r.output and "(None)" not in r.output

"""``model.save()`` after ``fit()`` of a subclassed model with a frozen layer: which weights
the optimizer was built with is not recorded, so the pairing is refused (exit 6, naming
``--trainable``), but ``fit()`` had copied the averages into the weights: every EMA copy
equals a weight bit for bit, and the refusal says the file's weights may be used as they are
(``--raw``; review-15-user-u17 F9). Saved mid-fit (the copies differ from the weights), the
refusal says nothing of it. Keras 3 makes the files here; the truth is the optimizer's
averages as Keras holds them at each save.
"""

from __future__ import annotations

import numpy as np
from helpers import run_cli
from helpers_keras import run_keras

_SCRIPT = '''
    class Net(keras.Model):
        def __init__(self):
            super().__init__()
            self.a = keras.layers.Dense(16, activation="relu", name="a")
            self.frozen = keras.layers.Dense(16, activation="relu", name="frozen")
            self.c = keras.layers.Dense(2, name="c")
        def call(self, x):
            return self.c(self.frozen(self.a(x)))
    x = np.random.default_rng(0).random((64, 8)).astype("float32")
    y = (x.sum(1) > 4).astype("int32")
    model = Net(); model(x[:1]); model.frozen.trainable = False
    opt = keras.optimizers.Adam(1e-2, use_ema=True, ema_momentum=0.9)
    model.compile(opt, keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    class Mid(keras.callbacks.Callback):
        def on_epoch_end(self, ep, logs=None):
            if ep == 0:
                model.save(f"{out}/mid.keras")
    model.fit(x, y, epochs=2, batch_size=16, verbose=0, callbacks=[Mid()])
    model.save(f"{out}/final.keras")
    truth.update({"ema|" + v.path: a.numpy() for v, a in
                  zip(opt._trainable_variables, opt._model_variables_moving_average)})
    truth.update({"raw|" + v.path: v.numpy() for v in model.weights})
'''


def test_saved_after_fit_refusal_hints_raw(tmp_path):
    out = tmp_path / "k"
    out.mkdir()
    truth = run_keras(_SCRIPT, out)
    code, _, err = run_cli(["export", str(out / "final.keras"), "--out", str(tmp_path / "x.npz")])
    assert code == 6 and "--trainable" in err, err
    assert "every EMA copy equals a weight of the file bit for bit" in err, err  # was silent
    assert "ckpt export --raw" in err, err
    code, _, err = run_cli(["export", str(out / "final.keras"), "--raw",
                            "--out", str(tmp_path / "raw.npz")])
    assert code == 0, err
    with np.load(tmp_path / "raw.npz") as z:  # the raw weights: the optimizer's averages
        # (a subclassed model's file names a layer's weights a/0, a/1: Dense kernel, bias)
        got = {f"{k.split('/')[0]}/{('kernel', 'bias')[int(k.split('/')[1])]}": z[k]
               for k in z.files}
    for key, value in truth.items():
        if key.startswith("ema|"):
            path = key.split("|", 1)[1].rsplit("/", 2)
            path = "/".join(path[-2:])  # (net/)a/kernel -> a/kernel
            assert got[path].tobytes() == value.tobytes(), path
    code, _, err = run_cli(["export", str(out / "mid.keras"), "--out", str(tmp_path / "m.npz")])
    assert code == 6 and "--trainable" in err, err
    assert "every EMA copy equals" not in err, err  # mid-fit: the copies are not the weights

"""``.h5`` outputs from TensorFlow checkpoints load into Keras as the weights they name
(review-11-attack-r6 C5): Keras' ``load_weights`` fills each layer's weights by position, and
a TensorFlow checkpoint lists them by name (beta before gamma), so the writer puts them in the
layer's own order, and refuses where that order (or the layers') is not recorded. Checkpoints
are made here by tf_keras / Keras 3; the truth is the optimizer's averages at save time."""

from __future__ import annotations

import os

import numpy as np
import pytest
from _corpus import run_subprocess
from _tf_runner import run_python

TRAIN_TFK = r"""
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np, tensorflow as tf
import tf_keras as keras
out = sys.argv[1]
def build():
    i = keras.Input((3,))
    if os.environ.get("MODEL") == "equal":  # two layers of one shape, the second first by name
        x = keras.layers.Dense(3, name="z")(i)
        x = keras.layers.BatchNormalization(name="bn")(keras.layers.Dense(3, name="a")(x))
    else:
        x = keras.layers.BatchNormalization(name="bn")(i)
    return keras.Model(i, keras.layers.LayerNormalization(name="ln")(x))
if sys.argv[2] == "train":
    tf.random.set_seed(14); m = build()
    opt = keras.optimizers.Adam(0.1, use_ema=True, ema_momentum=0.5); m.compile(opt, "mse")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(32, 3)).astype("float32")
    Y = rng.normal(size=(32, 3)).astype("float32") * 3 + 1
    for _ in range(4):
        m.train_on_batch(X, Y)
    m.save_weights(out + "/tfw/ckpt")
    avg = {v.name: opt._model_variables_moving_average[opt._index_dict[opt._var_key(v)]].numpy()
           for v in m.trainable_variables}
    np.savez(out + "/truth.npz", **{v.name.replace("/", "__"): avg.get(v.name, v.numpy())
                                    for v in m.weights})
else:
    m = build(); m.load_weights(sys.argv[3])
    np.savez(out + "/loaded.npz", **{v.name.replace("/", "__"): v.numpy() for v in m.weights})
"""


def _python(script: str, *args: str, model: str = "norm") -> None:

    proc = run_python(["-c", script, *args],
                      env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "MODEL": model})
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.parametrize(("command", "model"), [
    (["export", "{ckpt}", "--out", "{out}/e.h5"], "norm"),
    (["restore-ema", "{ckpt}", "--out", "{out}/r", "--format", "h5"], "norm"),
    (["export", "{ckpt}", "--out", "{out}/e.h5"], "equal")])
def test_h5_from_a_tf_keras_checkpoint_loads_gamma_as_gamma(tmp_path, command, model):
    """BatchNormalization and LayerNormalization from a tf_keras TF-format save_weights: the
    .h5 loaded by tf_keras holds each weight's own average (gamma and beta were swapped).
    ``equal``: two Dense layers of one shape (``z`` before ``a``) are written in the order
    ``layer_with_weights-N`` records, model.layers' (review-11-user-r8 10: refused before)."""
    _python(TRAIN_TFK, str(tmp_path), "train", model=model)
    argv = [a.format(ckpt=tmp_path / "tfw", out=tmp_path) for a in command]
    proc = run_subprocess(argv)
    assert proc.returncode == 0, proc.stderr
    written = tmp_path / "e.h5" if command[0] == "export" else next((tmp_path / "r").glob("*.h5"))
    _python(TRAIN_TFK, str(tmp_path), "eval", str(written), model=model)
    truth, loaded = np.load(tmp_path / "truth.npz"), np.load(tmp_path / "loaded.npz")
    assert sorted(truth.files) == sorted(loaded.files)
    for key in truth.files:
        assert loaded[key].tobytes() == truth[key].tobytes(), key


def test_h5_refuses_layers_whose_order_the_checkpoint_does_not_record(tmp_path, tf):
    """Two same-shaped layers of a TF2 checkpoint: Keras 3 loads an .h5's layers by position,
    and the checkpoint keeps them by attribute name (alpha before zeta, whatever the model's
    order): refused (exit 5) naming both, instead of an .h5 that loads them into each other."""

    class Net(tf.Module):
        def __init__(self):
            super().__init__()
            self.zeta = {"kernel": tf.Variable(tf.ones([4, 4])), "bias": tf.Variable(tf.ones([4]))}
            self.alpha = {"kernel": tf.Variable(tf.zeros([4, 4])),
                          "bias": tf.Variable(tf.zeros([4]))}

    tf.train.Checkpoint(model=Net()).save(str(tmp_path / "ck" / "ckpt"))
    proc = run_subprocess(["export", str(tmp_path / "ck"), "--raw", "--out",
                           str(tmp_path / "w.h5")])
    assert proc.returncode == 5, proc.stderr
    assert "'model/alpha' and 'model/zeta'" in proc.stderr and ".safetensors" in proc.stderr
    assert not (tmp_path / "w.h5").exists()
    ok = run_subprocess(["export", str(tmp_path / "ck"), "--raw", "--out",
                         str(tmp_path / "w.npz")])
    assert ok.returncode == 0, ok.stderr

"""A tf_keras SavedModel (``model.save("dir")``) with ``Adam(use_ema=True)``, saved mid-training:
``restore-ema`` writes a SavedModel ``tf_keras.models.load_model`` loads (its
``keras_metadata.pb`` is copied), holding the averages; ``export`` leaves the compiled
metrics' state out of the weights (review-11-attack-r8 M4, m5). Made by tf_keras in a
subprocess; the truth is the optimizer's averages at save time."""

from __future__ import annotations

import os

import numpy as np
import pytest
from _corpus import run_subprocess
from _tf_runner import run_python

pytest.importorskip("tf_keras")

SCRIPT = r"""
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np, tf_keras as K
out, mode = sys.argv[1], sys.argv[2]
if mode == "train":
    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, 4)).astype("float32"); y = rng.normal(size=(16, 4)).astype("float32")
    m = K.Sequential([K.Input((4,)), K.layers.Dense(4, name="a"),
                      K.layers.BatchNormalization(name="bn"), K.layers.Dense(4, name="b")])
    opt = K.optimizers.Adam(0.01, use_ema=True, ema_momentum=0.5)
    m.compile(opt, "mse", metrics=["mae"])
    m.fit(x, y, epochs=1, batch_size=4, verbose=0)
    avg = {id(v): a.numpy() for v, a in zip(m.trainable_variables,
                                            opt._model_variables_moving_average)}
    np.savez(out + "/truth.npz", *[avg.get(id(v), v.numpy()) for v in m.weights])
    m.save(out + "/sm")
else:
    m = K.models.load_model(out + "/sm_ema", compile=False)
    np.savez(out + "/loaded.npz", *[v.numpy() for v in m.weights])
"""


def _run(*args: str) -> None:
    proc = run_python(["-c", SCRIPT, *args], env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_restore_ema_of_a_tf_keras_savedmodel_loads_in_tf_keras(tmp_path):
    _run(str(tmp_path), "train")
    proc = run_subprocess(["restore-ema", str(tmp_path / "sm"), "--out", str(tmp_path / "sm_ema")])
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "sm_ema" / "keras_metadata.pb").exists()
    _run(str(tmp_path), "load")
    truth, loaded = np.load(tmp_path / "truth.npz"), np.load(tmp_path / "loaded.npz")
    assert len(truth.files) == len(loaded.files) == 8
    for key in truth.files:
        assert loaded[key].tobytes() == truth[key].tobytes(), key
    proc = run_subprocess(["export", str(tmp_path / "sm"), "--out", str(tmp_path / "e.npz")])
    assert proc.returncode == 0 and "metrics" not in proc.stderr, proc.stderr
    with np.load(tmp_path / "e.npz") as z:
        assert not [k for k in z.files if "metrics" in k], z.files
        assert len(z.files) == 8

"""review-13-user-u14 F9: wording a new user meets first. A bare ``.weights.h5`` refusal does
not speak of a ``.keras`` config.json the user does not have; optimizers are named by Keras'
class name (``RMSprop``, not its variable-path prefix ``rm_sprop``); ``export`` says its size
is the weights' bytes, not the file's; a usage error comes before any note on which file a
directory led to."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
from helpers import FIXTURES, run_cli


def test_bare_weights_h5_refusal_names_the_class_and_no_config_json():
    code, _, err = run_cli(["export", str(FIXTURES / "keras_ema" / "adam.weights.h5"),
                            "--out", "unused.npz"])
    assert code == 6, err
    flat = " ".join(err.split())
    assert "Adam variables" in flat and "adam variables" not in flat, flat
    assert "config.json" not in flat and "--use-ema or --no-use-ema" in flat, flat
    assert not os.path.exists("unused.npz")


def test_rmsprop_is_named_as_keras_names_its_class(tmp_path):
    pytest.importorskip("tensorflow")
    keras = pytest.importorskip("keras")
    keras.utils.set_random_seed(0)
    try:  # named layers, and Keras' name counters reset after: other tests read auto names
        model = keras.Sequential([keras.Input((4,), name="x"), keras.layers.Dense(3, name="a"),
                                  keras.layers.Dense(2, name="b")], name="m")
        model.compile(keras.optimizers.RMSprop(0.01, momentum=0.9), "mse")
        model.fit(np.ones((4, 4)), np.ones((4, 2)), epochs=1, verbose=0)
        model.save_weights(str(tmp_path / "m.weights.h5"))
        model.save(str(tmp_path / "m.keras"))
    finally:
        keras.backend.clear_session()
    for name in ("m.weights.h5", "m.keras"):
        code, _, err = run_cli(["export", str(tmp_path / name), "--out",
                                str(tmp_path / f"{name}.npz")])
        assert code == 6, err
        assert "RMSprop" in err and "rm_sprop" not in err, err


def test_export_size_is_said_to_be_the_weights(tmp_path):
    out = tmp_path / "w.npz"
    code, stdout, err = run_cli(["export", str(FIXTURES / "linear_v2"), "--out", str(out)])
    assert code == 0, err
    assert "(npz, 8 B of weights)" in stdout, stdout  # W and b, one float32 each
    assert out.stat().st_size > 8


def test_bad_role_is_a_usage_error_before_any_note(tmp_path):
    for name in ("ep01.keras", "ep02.keras"):
        shutil.copy(FIXTURES / "keras_ema" / "adam.keras", tmp_path / name)
    code, _, err = run_cli(["list", str(tmp_path), "--role", "wieght"])
    assert code == 2 and "unknown role 'wieght'" in err, err
    assert "candidate checkpoints" not in err, err
    code, _, err = run_cli(["list", str(tmp_path), "--sort", "sise"])
    assert code == 2 and "candidate checkpoints" not in err, err

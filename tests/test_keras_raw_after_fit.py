"""review-16-user-u18 F3: ``model.save()`` after ``fit()`` of a subclassed Keras 3 model with
two equal-shaped sublayers is refused (the file does not prove the pairing) with a hint that
every EMA copy equals a weight, so ``--raw`` writes the averages; ``--raw`` then warned
"right if ... SwapEMAWeights ...; otherwise drop --raw", sending the user back to the refusal,
and its summary named SwapEMAWeights only. Where every copy equals a distinct weight bit for
bit both now say the after-``fit()`` case.

Truth: the model is trained here by Keras 3 (``Adam(use_ema=True)``, ``fit()``); the averages
are the optimizer's ``_model_variables_moving_average`` when ``fit()`` ended, read before
``model.save()``."""

from __future__ import annotations

import os

import numpy as np
import pytest
from helpers import run_cli

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    keras = pytest.importorskip("keras")
    out = tmp_path_factory.mktemp("k3zeta")
    keras.utils.set_random_seed(0)

    @keras.saving.register_keras_serializable("ckpt_u18_f3")
    class Net(keras.Model):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.zeta = keras.layers.Dense(8)
            self.alpha = keras.layers.Dense(8)
            self.head = keras.layers.Dense(2)

        def call(self, x):
            return self.head(self.alpha(self.zeta(x)))

    model = Net()
    model.compile(keras.optimizers.Adam(0.01, use_ema=True, ema_momentum=0.9), "mse")
    rs = np.random.RandomState(0)
    x, y = rs.rand(64, 8).astype("float32"), rs.rand(64, 2).astype("float32")
    model.fit(x, y, epochs=2, batch_size=16, verbose=0)
    averages = [np.asarray(a.numpy()) for a in model.optimizer._model_variables_moving_average]
    path = out / "final.keras"
    model.save(path)
    return str(path), averages


def test_raw_after_fit_says_the_case_the_refusal_hinted(saved, tmp_path):
    path, averages = saved
    code, _, err = run_cli(["export", path, "--out", str(tmp_path / "e.npz")])
    assert code == 6 and "ckpt export --raw writes them as they are" in err, err
    out = tmp_path / "r.npz"
    code, text, err = run_cli(["export", path, "--raw", "--out", str(out)])
    said = text + err
    assert code == 0, said
    assert "as after fit() ends" in said and "model.save() after fit()" in said, said
    assert "otherwise drop --raw" not in said, said
    assert "the averages if it was saved after fit() ended" in said, said
    with np.load(out) as got:  # the file's weights are the averages, bit for bit
        written = sorted(got[k].tobytes() for k in got.files)
    assert written == sorted(a.tobytes() for a in averages)


def test_python_live_model_refusal_states_no_false_difference(saved):
    """F2: ``apply_keras_ema(load_model(p), p)`` on the same file said "its weights differ from
    their EMA copies" (each equals one bit for bit): the refusal now says the file does not
    pair them, and ``not_swapped=True`` gives the averages exactly."""
    import keras

    from ckpt_tools import UnprovenPairingError, apply_keras_ema

    path, averages = saved
    model = keras.models.load_model(path)
    with pytest.raises(UnprovenPairingError) as refused:
        apply_keras_ema(model, path)
    said = str(refused.value)
    assert "differ" not in said and "not_swapped=True" in said, said
    assert "model.save() after fit()" in said, said
    apply_keras_ema(model, path, not_swapped=True)
    got = [np.asarray(v.numpy()).tobytes() for v in model.trainable_variables]
    assert got == [a.tobytes() for a in averages]

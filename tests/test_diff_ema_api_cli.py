"""``diff_ema()`` gives ``ckpt diff --ema``'s answers and refusals (review-16-attack-r34 F10).

``diff_ema(p, use_ema=True)`` refused for another reason than ``ckpt diff --ema p --use-ema``
(the SwapEMAWeights refusal before the pairing's), and had no ``strict=`` although
``--strict`` exists. The file is Keras 3's own bare ``.weights.h5`` of
``Adam(amsgrad=True, use_ema=True)`` saved mid-``fit()``, two equal-shaped ``Dense`` layers (so
the pairing assumes fit()'s order); the truth is the optimizer's
``_model_variables_moving_average`` beside ``_trainable_variables`` at save time.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
from typer.testing import CliRunner

import ckpt_tools as C
from ckpt_tools.cli import app
from ckpt_tools.errors import CheckpointError

runner = CliRunner()


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras

    out = tmp_path_factory.mktemp("diffapi")
    keras.utils.set_random_seed(3)
    m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4, name="a"),
                          keras.layers.Dense(4, name="b")])
    opt = keras.optimizers.Adam(0.05, amsgrad=True, use_ema=True)
    m.compile(opt, "mse")
    x = np.random.RandomState(0).randn(32, 4).astype("float32")
    truth = {}

    class Snap(keras.callbacks.Callback):  # mid-fit: fit() ends by copying the averages in
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 1:
                self.model.save_weights(str(out / "m.weights.h5"))
                truth.update({v.path: (np.array(v.numpy()), np.array(a.numpy())) for v, a in
                              zip(opt._trainable_variables,
                                  opt._model_variables_moving_average, strict=True)})

    m.fit(x, x[:, ::-1], epochs=3, batch_size=8, verbose=0, callbacks=[Snap()])
    assert all(not np.array_equal(w, a) for w, a in truth.values())
    return out / "m.weights.h5", truth


def _cli(path, *flags):
    return runner.invoke(app, ["diff", "--ema", str(path), "--json", *flags])


def _api(path, **said):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return C.diff_ema(path, **said)


# (API keywords, CLI flags): each pair states the same
CASES = [
    ({"use_ema": True}, ["--use-ema"]),
    ({"use_ema": True, "not_swapped": True}, ["--use-ema", "--not-swapped"]),
    ({"optimizer": "adam:amsgrad"}, ["--optimizer", "adam:amsgrad"]),
    ({"optimizer": "adam:amsgrad", "not_swapped": True, "strict": True},
     ["--optimizer", "adam:amsgrad", "--not-swapped", "--strict"]),
]


@pytest.mark.parametrize("said,flags", CASES, ids=lambda c: "+".join(c) if isinstance(
    c, dict) else None)
def test_api_refuses_as_the_cli_refuses(saved, said, flags):
    path, _ = saved
    r = _cli(path, *flags)
    assert r.exit_code == 6, r.output
    with pytest.raises(CheckpointError) as exc:
        _api(path, **said)
    assert exc.value.exit_code == 6
    assert r.stderr.strip() == f"error: {exc.value}".strip()


def test_api_and_cli_give_the_same_averages(saved):
    path, truth = saved
    said = {"optimizer": "adam:amsgrad", "not_swapped": True, "fit_order": True,
            "strict": True}
    r = _cli(path, "--optimizer", "adam:amsgrad", "--not-swapped", "--fit-order", "--strict")
    assert r.exit_code == 0, r.output
    report = _api(path, **said)
    import json

    cli_pairs = {(t["name"], t["other"]) for t in json.loads(r.stdout)["tensors"]}
    assert cli_pairs == {(t.name, t.other) for t in report.tensors}
    assert len(cli_pairs) == len(truth)
    with C.open_checkpoint(path) as ckpt:
        for t in report.tensors:  # each weight's own recorded average, found by its value
            raw = ckpt.tensor(t.name)
            want = [a for w, a in truth.values() if np.array_equal(w, raw)]
            assert len(want) == 1 and np.array_equal(ckpt.tensor(t.other), want[0]), t.name

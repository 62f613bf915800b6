"""The same Keras 3 Sequential fit exports under two spellings, as README's export section says
(review-13-user-u14 F5): a ``.keras`` names the weights as Keras' own ``variable.path``, under
the model's name that its config.json records (``sequential/dense/kernel``); a bare
``.weights.h5`` records only its layer groups (``dense/kernel``). ``--rename 'sequential/='``
makes the two agree, with the same averages (recorded from the optimizer at save time)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from helpers import keras_averages, run_cli


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    keras = pytest.importorskip("keras")
    d = tmp_path_factory.mktemp("names")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 8)).astype("float32")
    y = (x[:, 0] > 0).astype("int32")
    # Named as Keras names them in a fresh process: the suite builds other models first,
    # which shifts the automatic names (dense_10, ...).
    model = keras.Sequential([keras.Input((8,)),
                              keras.layers.Dense(6, activation="relu", name="dense"),
                              keras.layers.Dense(2, name="dense_1")])
    model.compile(optimizer=keras.optimizers.Adam(1e-2, use_ema=True, ema_momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, epochs=1, batch_size=16, verbose=0)  # ends by finalize_variable_values()
    model.train_on_batch(x[:16], y[:16])  # mid-training again: weights != averages
    model.save(os.fspath(d / "m.keras"))
    model.save_weights(os.fspath(d / "m.weights.h5"))
    truth = keras_averages(model.optimizer)  # paths as Keras names them
    return d, model.name, truth


def test_keras_and_weights_h5_name_the_same_weights_apart(saved, tmp_path):
    d, name, truth = saved
    assert set(truth) == {f"{name}/dense/kernel", f"{name}/dense/bias",
                          f"{name}/dense_1/kernel", f"{name}/dense_1/bias"}, truth
    code, _, err = run_cli(["export", str(d / "m.keras"), "--not-swapped", "--out",
                            str(tmp_path / "k.npz")])
    assert code == 0, err
    code, _, err = run_cli(["export", str(d / "m.weights.h5"), "--use-ema", "--not-swapped",
                            "--out", str(tmp_path / "w.npz")])
    assert code == 0, err
    k, w = np.load(tmp_path / "k.npz"), np.load(tmp_path / "w.npz")
    assert sorted(k) == sorted(truth), list(k)  # the .keras: Keras' own paths
    assert sorted(w) == sorted(p.split("/", 1)[1] for p in truth), list(w)
    for path, value in truth.items():
        assert k[path].tobytes() == value.tobytes() == w[path.split("/", 1)[1]].tobytes()


def test_rename_makes_them_agree(saved, tmp_path):
    d, name, _ = saved
    code, _, err = run_cli(["export", str(d / "m.keras"), "--not-swapped", "--rename", f"{name}/=",
                            "--out", str(tmp_path / "k.npz")])
    assert code == 0, err
    code, _, err = run_cli(["export", str(d / "m.weights.h5"), "--use-ema", "--not-swapped",
                            "--out", str(tmp_path / "w.npz")])
    assert code == 0, err
    k, w = np.load(tmp_path / "k.npz"), np.load(tmp_path / "w.npz")
    assert list(k) == list(w)
    assert all(k[n].tobytes() == w[n].tobytes() for n in k)

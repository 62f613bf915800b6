"""``--trainable`` printed as the help says (``[v.path for v in model.trainable_variables]``) in
a fresh evaluation process names layers by Keras' per-process counters: a model built after
another in training is ``sequential_1`` with ``dense_1..3``, the same code in a fresh process
``sequential`` with ``dense..dense_2``, so the stated ``dense_1`` is another layer of the file
(review-11-attack-r10 F15: each average one layer off, exit 0). Where config.json records the
model's name, such paths are refused; the file's own names give the truth, read from the
optimizer at save time."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import keras_averages, run_cli


def _build(keras):
    layers = keras.layers
    m = keras.Sequential([keras.Input((4,)), layers.Dense(4), layers.Dense(4), layers.Dense(4)])
    m.layers[0].trainable = False
    return m


@pytest.fixture(scope="module")
def shifted(keras, tmp_path_factory):
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    keras.Sequential([keras.Input((4,)), keras.layers.Dense(4)])  # built first in training
    m = _build(keras)
    opt = keras.optimizers.SGD(0.1, use_ema=True, ema_momentum=0.5)
    m.compile(opt, "mse")
    x = np.random.RandomState(0).rand(16, 4).astype("float32")
    m.fit(x, x, verbose=0, epochs=2)
    m.train_on_batch(x, x)
    truth = keras_averages(opt)
    d = tmp_path_factory.mktemp("shift")
    m.save(str(d / "m.keras"))
    keras.backend.clear_session()  # the evaluation process: names counted afresh
    printed = [v.path for v in _build(keras).trainable_variables]
    return d / "m.keras", truth, printed


def test_paths_printed_in_another_process_are_refused(shifted, tmp_path):
    path, _, printed = shifted
    assert printed[0].startswith("sequential/")  # the file's model is sequential_1
    code, _, err = run_cli(["export", str(path), "--trainable", ",".join(printed), "--out",
                            str(tmp_path / "w.npz")])
    assert code == 6, err
    assert "'sequential_1'" in err and "another process" in " ".join(err.split()), err
    assert not (tmp_path / "w.npz").exists()


def test_the_files_own_names_give_the_truth(shifted, tmp_path):
    path, truth, _ = shifted
    out = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(path), "--trainable", ",".join(truth), "--out",
                            str(out)])
    assert code == 0, err
    with np.load(out) as z:
        for key, value in truth.items():
            name = key.split("/", 1)[1]
            got = z[key] if key in z.files else z[name]
            assert got.tobytes() == value.tobytes(), key

"""A Keras 3 model quantized to int8 or int4 (``model.quantize(mode)``) and fine-tuned with
``Adam(use_ema=True)``: its quantized layers create every variable ``trainable=False`` but the
bias, which config.json's dtype policy records, so the EMA copies pair with the biases from
the file alone (they asked for ``--trainable``: review-16-attack-r32 F9) and the frozen
kernels, scales, zeros and ``g_idx`` are noted as the class's, not warned about. Made here by
real Keras; the truth is the optimizer's own ``_model_variables_moving_average`` at save."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli


@pytest.fixture(scope="module", params=["int8", "int4"])
def quantized(request, keras, tmp_path_factory):
    mode = request.param
    keras.utils.set_random_seed(0)
    x = np.random.RandomState(0).randn(32, 8).astype("float32")
    y = np.random.RandomState(1).randint(0, 3, 32)
    inp = keras.Input((8,))
    h = keras.layers.Dense(8, activation="relu", name="hid")(inp)
    m = keras.Model(inp, keras.layers.Dense(3, name="out")(h))
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    m.compile(keras.optimizers.Adam(0.05), loss)
    m.fit(x, y, epochs=1, verbose=0)
    m.quantize(mode)
    m.compile(keras.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.5), loss)
    for i in range(4):  # mid-training, as ModelCheckpoint saves: fit()'s end would copy
        m.train_on_batch(x[i * 8:(i + 1) * 8], y[i * 8:(i + 1) * 8])  # the averages in
    opt = m.optimizer
    averages = {v.path: np.array(a.numpy()) for v, a in zip(
        opt._trainable_variables, opt._model_variables_moving_average, strict=True)}
    weights = {v.path: np.array(v.numpy()) for v in m.weights}
    trainable = {v.path for v in m.trainable_variables}
    out = tmp_path_factory.mktemp(mode) / "q.keras"
    m.save(out)
    return out, averages, weights, trainable


def test_averages_pair_with_the_biases_from_config(quantized, tmp_path):
    path, averages, weights, trainable = quantized
    assert sorted(averages) == sorted(trainable) == ["hid/bias", "out/bias"]
    assert any(not np.array_equal(averages[k], weights[k]) for k in averages)
    npz = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(path), "--out", str(npz), "--not-swapped", "--strict"])
    assert code == 0, err
    assert "warning" not in err and "trainable=False by their layer's class" in err, err
    with np.load(npz) as z:
        assert sorted(z.files) == sorted(weights), z.files
        for name, value in averages.items():
            assert z[name].tobytes() == value.astype(z[name].dtype).tobytes(), name
        for name in set(weights) - set(averages):
            assert np.array_equal(z[name], weights[name].astype(z[name].dtype)), name
    code, stdout, err = run_cli(["list", str(path), "--json", "--not-swapped"])
    assert code == 0, err
    rows = json.loads(stdout)["variables"]
    ema_of = {v.get("ema_of") for v in rows if v["role"] == "ema"}
    by_key = {v["key"]: v["path"] for v in rows}
    assert {by_key.get(k, k) for k in ema_of} == set(averages), rows

"""review-15-user-u17 F11: a Keras 3 ``model.export()`` SavedModel tracks each weight twice
(``_all_variables/N`` and ``variables/N``); each is listed and exported once, under its Keras
path. Made here by real Keras 3; the truth is the model's weights at export time."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli

from ckpt_tools import open_checkpoint
from ckpt_tools.formats._record import replace
from ckpt_tools.saved_aliases import saved_aliases


@pytest.fixture(scope="module")
def exported(keras, tmp_path_factory):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, name="d1"),
                              keras.layers.Dense(2, name="head")])
    model.compile(optimizer=keras.optimizers.Adam(use_ema=True), loss="mse")
    model.fit(np.ones((8, 4)), np.ones((8, 2)), epochs=1, verbose=0)
    out = tmp_path_factory.mktemp("export") / "sm"
    model.export(str(out), verbose=False)
    averages = {v.path: a.numpy() for v, a in zip(
        model.trainable_variables, model.optimizer._model_variables_moving_average,
        strict=True)}
    return out, {w.path: w.numpy() for w in model.weights}, averages


def test_each_weight_is_listed_and_exported_once(exported, tmp_path):
    out, truth, _ = exported
    code, stdout, err = run_cli(["list", str(out), "--role", "weight", "--json"])
    assert code == 0, err
    assert sorted(v["path"] for v in json.loads(stdout)["variables"]) == sorted(truth)
    code, stdout, err = run_cli(["list", str(out), "-q"])
    assert code == 0 and not any(n.startswith("variables/") for n in stdout.split()), stdout
    npz = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(out), "--raw", "--out", str(npz)])
    assert code == 0, err
    with np.load(npz) as z:
        assert sorted(z.files) == sorted(truth), z.files
        for name in z.files:
            assert z[name].tobytes() == truth[name].tobytes(), name
    code, _, err = run_cli(["export", str(out), "--out", str(tmp_path / "x.npz")])
    assert code == 6 and f"any of its {len(truth)} weights" in err, err
    code, stdout, err = run_cli(["stats", str(out), "--json"])
    assert code == 0, err
    keys = [t["key"] for t in json.loads(stdout)["tensors"]]
    assert len(keys) == len(truth) + 1 and not any(k.startswith("variables/") for k in keys)


def test_a_copy_whose_bytes_differ_stays_a_variable(exported):
    out, _, _ = exported
    with open_checkpoint(out) as ckpt:
        entries = dict(ckpt.entries())
        aliases = saved_aliases(ckpt.objects, entries)
        assert len(aliases) == 4 and all(k.startswith("variables/") for k in aliases)
        key = next(iter(aliases))
        entries[key] = replace(entries[key], crc32c=entries[key].crc32c ^ 1)
        assert key not in saved_aliases(ckpt.objects, entries)


def test_the_refusal_says_a_keras_export_after_fit_holds_the_averages(exported, tmp_path):
    """fit() ends by copying the use_ema=True averages into the weights (Keras'
    finalize_variable_values), so a model.export() after fit() holds them: the refusal says so
    in Keras' terms, not only the TF2 serving-export guess (review-16-attack-r32 F11), and
    --raw writes exactly the averages Keras kept."""
    out, _, averages = exported
    code, _, err = run_cli(["export", str(out), "--out", str(tmp_path / "x.npz")])
    assert code == 6 and "Keras model.export() archive" in err and "fit()" in err, err
    npz = tmp_path / "raw.npz"
    code, _, err = run_cli(["export", str(out), "--raw", "--out", str(npz)])
    assert code == 0, err
    with np.load(npz) as z:
        for name, value in averages.items():
            assert z[name].tobytes() == value.tobytes(), name


def test_average_of_exports_averages_what_serving_reads(keras, tf, tmp_path):
    """``ckpt average`` of two ``model.export()`` SavedModels: the serving functions read the
    ``variables/N`` copies, which were copied from the newest export while only the
    ``_all_variables`` keys were averaged, exit 0 (review-17-user-u19 F0). Every copy now
    holds the mean; truth: the model's weights at each export."""
    keras.utils.set_random_seed(0)
    x = np.random.RandomState(0).rand(32, 6).astype("float32")
    y = (x.sum(1) > 3).astype("int32")
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(4, name="fc1"),
                              keras.layers.Dense(2, name="head")])
    model.compile(keras.optimizers.SGD(0.1),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    weights = []
    for i in range(2):
        model.fit(x, y, epochs=1, verbose=0)
        model.export(str(tmp_path / str(i)), verbose=False)
        weights.append({tuple(w.shape): w.numpy().astype(np.float64) for w in model.weights})
    mean = {s: ((weights[0][s] + weights[1][s]) / 2).astype(np.float32) for s in weights[0]}
    out = tmp_path / "avg"
    code, _, err = run_cli(["average", str(tmp_path / "0"), str(tmp_path / "1"),
                            "--newest", str(tmp_path / "1"), "--out", str(out)])
    assert code == 0, err
    loaded = tf.saved_model.load(str(out))
    served = loaded.signatures["serving_default"]
    for v in [*loaded.variables, *loaded._all_variables]:
        assert v.numpy().tobytes() == mean[tuple(v.shape)].tobytes(), v.name
    h = x @ mean[(6, 4)] + mean[(4,)]
    logits = h @ mean[(4, 2)] + mean[(2,)]
    got = next(iter(served(tf.constant(x)).values())).numpy()
    np.testing.assert_allclose(got, logits, rtol=1e-5, atol=1e-5)

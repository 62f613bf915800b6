"""A weight's name is given only where the file proves it (review-12 F16): Keras 3 creates
LayerNormalization/GroupNormalization/BatchNormalization's ``gamma`` only with ``scale`` and
``beta`` only with ``center`` (LayerNormalization's ``rms_scaling``: gamma only), and a
quantized Dense writes its scale where a bias would be when it has none. config.json records
the flags (``.keras``, an unzipped model directory): names follow them; a bare ``.weights.h5``
records none: such a variable keeps its index name (``ln/0``), never another one's. Made here
by Keras 3; the truth is the optimizer's averages with their variables' paths, recorded at
save time."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import keras_averages, run_cli


@pytest.fixture(scope="module")
def norms(keras, tmp_path_factory):
    layers = keras.layers
    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input((8,)), layers.Dense(8, name="d"),
        layers.LayerNormalization(scale=False, name="ln_s"),
        layers.LayerNormalization(center=False, name="ln_c"),
        layers.GroupNormalization(groups=2, scale=False, name="gn_s"),
        layers.GroupNormalization(groups=2, center=False, name="gn_c"),
        layers.BatchNormalization(scale=False, name="bn_s"),
        layers.BatchNormalization(center=False, name="bn_c"),
        layers.LayerNormalization(name="ln"), layers.Dense(3, name="o")], name="seq")
    opt = keras.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.5)
    model.compile(opt, "mse")
    rng = np.random.RandomState(0)
    x, y = rng.rand(16, 8).astype("float32"), rng.rand(16, 3).astype("float32")
    for _ in range(3):
        model.train_on_batch(x, y)
    truth = keras_averages(opt)
    out = tmp_path_factory.mktemp("norms")
    model.save(str(out / "m.keras"))
    model.save(str(out / "unz"), zipped=False)
    model.save_weights(str(out / "m.weights.h5"))
    return out, truth


def _exported(path, tmp_path, *extra: str) -> dict[str, np.ndarray]:
    out = tmp_path / "w.npz"
    code, _, err = run_cli(["export", "--not-swapped",
                            str(path), *extra, "--out", str(out), "--force"])
    assert code == 0, err
    with np.load(out) as z:
        return {k: z[k] for k in z.files}


@pytest.mark.parametrize("name", ["m.keras", "unz"])
def test_names_follow_the_config_flags(norms, tmp_path, name):
    out, truth = norms
    assert {"seq/ln_s/beta", "seq/ln_c/gamma", "seq/gn_s/beta", "seq/gn_c/gamma",
            "seq/bn_s/beta", "seq/bn_c/gamma"} <= set(truth)  # as Keras names them
    got = _exported(out / name, tmp_path)
    for path, avg in truth.items():
        assert got[path].tobytes() == avg.tobytes(), path
    assert not {"seq/ln_s/gamma", "seq/gn_s/gamma", "seq/ln_c/beta", "seq/gn_c/beta"} & set(got)


def test_a_bare_weights_file_names_no_flagged_variable(norms, tmp_path):
    out, truth = norms
    got = _exported(out / "m.weights.h5", tmp_path, "--use-ema")
    by_index = {"ln_s/0": "seq/ln_s/beta", "ln_c/0": "seq/ln_c/gamma",
                "gn_s/0": "seq/gn_s/beta", "gn_c/0": "seq/gn_c/gamma",
                "bn_s/0": "seq/bn_s/beta", "bn_c/0": "seq/bn_c/gamma",
                "ln/gamma": "seq/ln/gamma", "ln/beta": "seq/ln/beta"}  # both: proven by count
    for name, path in by_index.items():
        assert got[name].tobytes() == truth[path].tobytes(), name
    for name in got:
        layer, _, var = name.rpartition("/")
        if layer.startswith(("ln_", "gn_", "bn_")):
            assert var not in ("gamma", "beta"), name


def test_a_quantized_dense_without_bias_names_no_bias(keras, tmp_path):
    layers = keras.layers
    model = keras.Sequential([keras.Input((8,)), layers.Dense(8, use_bias=False, name="nb"),
                              layers.Dense(4, name="wb"),
                              layers.EinsumDense("ab,bc->ac", output_shape=4, name="ein")])
    model.quantize("int8")
    written = {v.path.split("/", 1)[1] for v in model.weights}
    assert "nb/kernel_scale" in written and "nb/bias" not in written
    model.save(str(tmp_path / "q.keras"))
    model.save_weights(str(tmp_path / "q.weights.h5"))
    # a bare .weights.h5 too: the int8 kernel saved first and the count prove the layout
    # (kernel, bias, kernel_scale: odd), review-17-attack-r36 F1
    for name, biased in (("q.keras", {"wb/bias"}), ("q.weights.h5", {"wb/bias"})):
        code, listed, err = run_cli(["list", str(tmp_path / name), "--json"])
        assert code == 0, err
        paths = {v["path"].split("/", 1)[1] if name.endswith(".keras") else v["path"]
                 for v in json.loads(listed)["variables"]}
        assert {p for p in paths if p.endswith("/bias")} == biased, (name, paths)

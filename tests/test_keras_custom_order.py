"""A custom layer whose ``save_own_variables`` stores its variables in another order than it
creates them (keras.io documents the override): ``Affine`` makes ``shift`` then ``scale``
(the optimizer's order) and stores ``vars/0`` = scale, ``vars/1`` = shift. Both are [4]
float32, so the file does not prove which EMA copy belongs to which: every command refuses
(exit 6) naming ``apply_keras_ema`` and ``--trainable`` with the file's own keys, never the
sibling's average with exit 0 (review F9). Made here by Keras 3 and tf_keras; the truth is
the optimizer's ``_model_variables_moving_average``, recorded at save time."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import keras_averages, run_cli, run_script

import ckpt_tools

# file key -> the variable it holds (what Affine.save_own_variables writes)
STORED = {"aff/0": "aff/scale", "aff/1": "aff/shift"}
STATED = "d/kernel,d/bias,ln/gamma,ln/beta,aff/1,aff/0"  # the optimizer's order, file keys


def _model(keras):
    @keras.saving.register_keras_serializable("ckpt_order_test")
    class Affine(keras.layers.Layer):
        def build(self, shape):
            self.shift = self.add_weight(shape=(4,), initializer="zeros", name="shift")
            self.scale = self.add_weight(shape=(4,), initializer="ones", name="scale")

        def call(self, x):
            return x * self.scale + self.shift

        def save_own_variables(self, store):
            store["0"] = self.scale
            store["1"] = self.shift

        def load_own_variables(self, store):
            self.scale.assign(store["0"])
            self.shift.assign(store["1"])

    inp = keras.Input((4,))
    h = keras.layers.LayerNormalization(name="ln")(keras.layers.Dense(4, name="d")(inp))
    return keras.Model(inp, Affine(name="aff")(h))


@pytest.fixture(scope="module")
def made(keras, tmp_path_factory):
    keras.utils.set_random_seed(4)
    model = _model(keras)
    opt = keras.optimizers.SGD(0.05, use_ema=True, ema_momentum=0.5)
    model.compile(opt, "mse")
    rng = np.random.default_rng(1)
    x = rng.normal(size=(16, 4)).astype("float32")
    y = (x * 2 + 3).astype("float32")
    for _ in range(4):
        model.train_on_batch(x, y)
    out = tmp_path_factory.mktemp("custom_order")
    model.save(str(out / "m.keras"))
    model.save_weights(str(out / "m.weights.h5"))
    truth = keras_averages(opt)
    raw = {v.path: v.numpy() for v in model.weights}
    assert not any(np.array_equal(truth[p], raw[p]) for p in truth)
    return out, truth


FILES = [("m.keras", []), ("m.weights.h5", ["--use-ema"])]


@pytest.mark.parametrize(("name", "extra"), FILES)
def test_swapped_storage_order_is_refused(made, name, extra, tmp_path):
    out, _ = made
    for args in (["export", str(out / name), "--out", str(tmp_path / "w.npz")],
                 ["restore-ema", str(out / name), "--out", str(tmp_path / "r")],
                 ["map", str(out / name)]):
        code, _, err = run_cli([*args, *extra])
        assert code == 6, (args, err)
        assert "save_own_variables" in err and "aff/0, aff/1" in err, err
        assert "apply_keras_ema(model, path)" in err and "aff/1,aff/0" in err, err
    assert not (tmp_path / "w.npz").exists() and not (tmp_path / "r").exists()


@pytest.mark.parametrize(("name", "extra"), FILES)
def test_trainable_with_file_keys_pairs_bit_for_bit(made, name, extra, tmp_path):
    out, truth = made
    target = tmp_path / "w.npz"
    code, _, err = run_cli(["export", "--not-swapped", str(out / name), "--trainable", STATED,
                            "--out", str(target), *extra])
    assert code == 0, err
    with np.load(target) as z:
        assert sorted(z.files) == sorted(["d/kernel", "d/bias", "ln/gamma", "ln/beta",
                                          *STORED])
        for key in z.files:
            assert z[key].tobytes() == truth[STORED.get(key, key)].tobytes(), key


@pytest.mark.parametrize(("name", "extra"), FILES)
def test_trainable_by_live_paths_or_layer_is_refused(made, name, extra, tmp_path):
    """``aff/shift`` (a live path, read as a place) or ``aff`` (file order) would rest on
    the storage order the file does not prove."""
    out, _ = made
    for stated in ("d,ln,aff/shift,aff/scale", "d,ln,aff"):
        code, _, err = run_cli(["export", "--not-swapped", str(out / name), "--trainable", stated,
                                "--out", str(tmp_path / "w.npz"), *extra])
        assert code == 6 and "stands for variables of layer aff" in err, err
        assert "aff/0, aff/1" in err, err
    assert not (tmp_path / "w.npz").exists()


@pytest.mark.parametrize(("name", "extra"), FILES)
def test_restore_ema_with_file_keys_loads_the_averages(keras, made, name, extra, tmp_path):
    out, truth = made
    target = tmp_path / ("r" + name[1:])
    code, _, err = run_cli(["restore-ema", "--not-swapped", str(out / name), "--trainable", STATED,
                            "--out", str(target), *extra])
    assert code == 0, err
    model = _model(keras)
    model.load_weights(str(target))
    for v in model.weights:
        assert v.numpy().tobytes() == truth[v.path].tobytes(), v.path


@pytest.mark.parametrize(("name", "use_ema"), [("m.keras", None), ("m.weights.h5", True)])
def test_apply_keras_ema_pairs_by_the_live_model(keras, made, name, use_ema):
    out, truth = made
    model = _model(keras)
    model(np.zeros((1, 4), "float32"))
    ckpt_tools.apply_keras_ema(model, out / name, use_ema=use_ema, not_swapped=True)
    for v in model.weights:
        assert v.numpy().tobytes() == truth[v.path].tobytes(), v.path


TFK = r'''
import sys
import numpy as np
import tf_keras as K

out = sys.argv[1]


@K.utils.register_keras_serializable("ckpt_order_test")
class Affine(K.layers.Layer):
    def build(self, shape):
        self.shift = self.add_weight(shape=(4,), initializer="zeros", name="shift")
        self.scale = self.add_weight(shape=(4,), initializer="ones", name="scale")

    def call(self, x):
        return x * self.scale + self.shift

    def save_own_variables(self, store):
        store["0"] = self.scale.numpy()
        store["1"] = self.shift.numpy()

    def load_own_variables(self, store):
        self.scale.assign(store["0"])
        self.shift.assign(store["1"])


K.utils.set_random_seed(4)
inp = K.Input((4,))
model = K.Model(inp, Affine(name="aff")(K.layers.Dense(4, name="d")(inp)))
opt = K.optimizers.SGD(0.05, use_ema=True, ema_momentum=0.5)
model.compile(opt, "mse")
x = np.random.RandomState(0).randn(16, 4).astype("float32")
for _ in range(4):
    model.train_on_batch(x, x * 2 + 3)
truth = {v.name.split(":")[0]: a.numpy()
         for v, a in zip(model.trainable_variables, opt._model_variables_moving_average)}
model.save(out + "/tfk.keras")
np.savez(out + "/truth.npz", **truth)
'''


def test_tf_keras_archive_is_refused_and_file_keys_pair(tmp_path):
    pytest.importorskip("tf_keras")
    truth = run_script(TFK, tmp_path)
    src, target = str(tmp_path / "tfk.keras"), tmp_path / "w.npz"
    code, _, err = run_cli(["export", "--not-swapped", src, "--out", str(target)])
    assert code == 6 and "save_own_variables" in err and "aff/0, aff/1" in err, err
    assert not target.exists()
    code, _, err = run_cli(["export", "--not-swapped",
                            src, "--trainable", "d/kernel,d/bias,aff/1,aff/0",
                            "--out", str(target)])
    assert code == 0, err
    with np.load(target) as z:
        assert sorted(z.files) == sorted(["d/kernel", "d/bias", *STORED])
        for key in z.files:
            assert z[key].tobytes() == truth[STORED.get(key, key)].tobytes(), key

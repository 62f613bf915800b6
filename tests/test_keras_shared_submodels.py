"""Subclassed Keras 3 models holding nested Sequential/Functional models whose layers are
reachable from two attributes: Keras saves such a layer once, under the attribute that sorts
first, while the optimizer was built in the model's own tracking order, so the file's order
proves nothing where equal-shaped weights could trade places (review a12 F1, F2: encoder and
decoder averages swapped, exit 0). Refused (exit 6) naming ``--trainable``; the true
``--trainable`` is accepted (it was called a contradiction of the ``.keras``), and
``apply_keras_ema`` with the live model gives the averages. A nested model whose layers all
differ in shape is still paired (shapes prove it). Made here by Keras 3 (``fit`` then a few
``train_on_batch`` so the weights are not the averages); the truth is the optimizer's
averages at save time, compared bit for bit."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import keras_averages, run_cli


def _train_and_save(keras, model, d):
    x = np.random.RandomState(0).rand(16, 4).astype("float32")
    y = np.random.RandomState(1).rand(16, 4).astype("float32")
    model(x[:2])
    opt = keras.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.5)
    model.compile(opt, "mse")
    model.fit(x, y, epochs=1, verbose=0)
    for _ in range(3):  # fit() ends by copying the averages into the weights
        model.train_on_batch(x, y)
    model.save(str(d / "m.keras"))
    model.save_weights(str(d / "m.weights.h5"))
    return keras_averages(opt), [v.path for v in model.trainable_variables]


@pytest.fixture(scope="module")
def classes(keras):
    layers = keras.layers

    @keras.saving.register_keras_serializable("ckpttest_s10h")
    class AE(keras.Model):
        """decoder, encoder assigned first; ``ae`` (sorted first) holds both."""

        def __init__(self, **kw):
            super().__init__(**kw)
            self.decoder = keras.Sequential([keras.Input((4,)), layers.Dense(4, name="dec_fc")],
                                            name="decoder")
            self.encoder = keras.Sequential([keras.Input((4,)), layers.Dense(4, name="enc_fc")],
                                            name="encoder")
            self.ae = keras.Sequential([self.encoder, self.decoder], name="ae")

        def call(self, x):
            return self.ae(x)

    @keras.saving.register_keras_serializable("ckpttest_s10h")
    class Outer(keras.Model):
        """Two Functional sub-models sharing a layer: stored under ``aa`` (sorted first),
        trained with ``zz`` (assigned first)."""

        def __init__(self, **kw):
            super().__init__(**kw)
            shared = layers.Dense(4, name="shared")
            i1 = keras.Input((4,))
            self.zz = keras.Model(i1, layers.Dense(4, name="d1")(shared(i1)), name="zz")
            i2 = keras.Input((4,))
            self.aa = keras.Model(i2, layers.Dense(5, name="d2")(shared(i2)), name="aa")
            self.mix = layers.Dense(4, name="mix")

        def call(self, x):
            return self.mix(keras.ops.concatenate([self.zz(x), self.aa(x)], -1))

    @keras.saving.register_keras_serializable("ckpttest_s10h")
    class Distinct(keras.Model):
        """A nested Sequential whose layers all differ in shape: shapes prove the order."""

        def __init__(self, **kw):
            super().__init__(**kw)
            self.body = keras.Sequential([keras.Input((4,)), layers.Dense(3, name="b1"),
                                          layers.Dense(2, name="b2")], name="body")
            self.head = layers.Dense(4, name="head")

        def call(self, x):
            return self.head(self.body(x))

    return {"ae": AE, "outer": Outer, "distinct": Distinct}


@pytest.fixture(scope="module")
def made(keras, classes, tmp_path_factory):
    out = {}
    for name, cls in classes.items():
        keras.utils.set_random_seed(0)
        d = tmp_path_factory.mktemp(name)
        truth, order = _train_and_save(keras, cls(name=name), d)
        out[name] = (d, truth, order)
    # the setups of the findings: the file's order is not the optimizer's
    assert out["ae"][2][0] == "decoder/dec_fc/kernel"
    assert out["outer"][2][:3] == ["shared/kernel", "shared/bias", "d1/kernel"]
    return out


def _matches(exported: dict, truth: dict) -> None:
    """Every exported weight (``ae/decoder/dec_fc/kernel``) is the truth of the one live path
    (``decoder/dec_fc/kernel``, ``outer/mix/kernel``) it ends with, bit for bit."""
    assert len(exported) == len(truth)
    for name, value in exported.items():
        # a Dense held as an attribute: the file names its variables by index only
        name = name[:-2] + {"0": "/kernel", "1": "/bias"}.get(name[-1], name[-2:]) \
            if name[-2:] in ("/0", "/1") else name
        want = [p for p in truth if ("/" + name).endswith("/" + p)
                or ("/" + p).endswith("/" + name)]
        assert len(want) == 1, (name, want)
        assert value.tobytes() == truth[want[0]].tobytes(), name


def _stated(order: list[str]) -> str:
    return ",".join(p.split("/", 1)[1] if p.startswith("outer/") else p for p in order)


NESTED = {"ae": "ae", "outer": "zz, aa"}  # as the file records their names
SWAPPED = [("ae", "m.keras", []), ("ae", "m.weights.h5", ["--use-ema"]),
           ("outer", "m.keras", []), ("outer", "m.weights.h5", ["--use-ema"])]


@pytest.mark.parametrize("case,file,extra", SWAPPED)
def test_nested_order_is_refused_naming_trainable(made, tmp_path, case, file, extra):
    d, _, _ = made[case]
    out = tmp_path / "x.npz"
    code, _, err = run_cli(["export", "--not-swapped", str(d / file), "--out", str(out), *extra])
    assert code == 6 and "--trainable" in err and not out.exists(), err
    assert "order fit() builds" not in err, err  # not the fit-order reading: refused
    nested = "models" if "," in NESTED[case] else "model"  # its count's noun (u32 F1)
    assert f"nested {nested} {NESTED[case]}" in " ".join(err.split()), err
    # the names --trainable takes here: the file's keys, not Keras' per-process paths (r31 F7)
    assert "each by its key as 'ckpt list --json' shows it" in " ".join(err.split()), err
    code, text, err = run_cli(["list", str(d / file), "--json", *extra])
    doc = json.loads(text)
    assert "proven by their shapes" not in doc["ema_evidence"]["detail"], doc["ema_evidence"]
    assert doc["ema_unproven"]["option"] == "--trainable", doc["ema_unproven"]


def test_restore_ema_of_the_shared_layer_is_refused(made, tmp_path):
    d, _, _ = made["outer"]
    code, _, err = run_cli(["restore-ema", "--not-swapped", str(d / "m.keras"), "--out",
                            str(tmp_path / "r.keras")])
    assert code == 6 and "--trainable" in err, err


@pytest.mark.parametrize("case,file,extra", SWAPPED)
def test_true_trainable_is_accepted(made, tmp_path, case, file, extra):
    d, truth, order = made[case]
    out = tmp_path / "x.npz"
    code, _, err = run_cli(["export", "--not-swapped", str(d / file), "--trainable", _stated(order),
                            "--out", str(out), *extra])
    assert code == 0, err
    with np.load(out) as z:
        _matches({k: z[k] for k in z.files}, truth)


@pytest.mark.parametrize("case,file,kw", [("ae", "m.keras", {}),
                                          ("ae", "m.weights.h5", {"use_ema": True}),
                                          ("outer", "m.keras", {}),
                                          ("outer", "m.weights.h5", {"use_ema": True})])
def test_apply_keras_ema_with_the_live_model(keras, classes, made, case, file, kw):
    from ckpt_tools import apply_keras_ema

    d, truth, _ = made[case]
    model = classes[case](name=case)
    model(np.zeros((2, 4), "float32"))
    apply_keras_ema(model, str(d / file), **kw, not_swapped=True)
    for v in model.trainable_variables:
        assert v.numpy().tobytes() == truth[v.path].tobytes(), v.path


@pytest.mark.parametrize("file,extra", [("m.keras", []), ("m.weights.h5", ["--use-ema"])])
def test_nested_layers_of_distinct_shapes_are_still_paired(made, tmp_path, file, extra):
    d, truth, _ = made["distinct"]
    out = tmp_path / "x.npz"
    code, _, err = run_cli(["export", "--not-swapped", str(d / file), "--out", str(out), *extra])
    assert code == 0, err
    with np.load(out) as z:
        _matches({k: z[k] for k in z.files}, truth)

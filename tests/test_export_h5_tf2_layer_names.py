"""An .h5 exported from a TF2 checkpoint of a Keras 3 model names each layer group after the
layer, as Keras writes it: a Sequential's groups were named after the model (``sequential``,
``sequential_2``: the first segment of ``sequential/a/kernel``), and Keras 3's and tf_keras'
``load_weights(by_name=True)`` loaded nothing, exit 0 (review-22-user-u24 F7). A layer whose
name the checkpoint does not record (a nested Functional model built before the model holding
it) is refused (exit 5). Models built and trained here by Keras 3 in a custom loop with
``tf.train.ExponentialMovingAverage``; truth is ``ema.average(v)`` at save time."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from helpers import run_cli


def _models(m):
    """case -> the model, built by ``m`` (Keras 3, or tf_keras for its twin)."""
    dense = m.layers.Dense

    def sequential():
        return m.Sequential([m.Input((4,)), dense(4, name="a"), dense(4, name="b")],
                            name="seq")

    def nested():  # a Sequential in a Sequential, built in the outer one's name scope
        # (shapes unequal: which of equal-shaped layers are frozen is not recorded)
        inner = m.Sequential([dense(3, name="d1"), dense(4, name="d2")], name="enc")
        return m.Sequential([m.Input((4,)), inner, dense(4, name="head")], name="outer")

    def functional():  # a Functional model holding a Sequential built with its Input
        enc = m.Sequential([m.Input((4,)), dense(4, name="d1")], name="enc")
        inp = m.Input((4,))
        return m.Model(inp, dense(4, name="head")(enc(inp)))

    return {"sequential": sequential, "nested": nested, "functional": functional}


def _nested_functional(keras):
    """A nested Functional model, its layers built before it: ``d/kernel``, no ``enc``."""
    i1 = keras.Input((4,))
    enc = keras.Model(i1, keras.layers.Dense(4, name="d")(i1), name="enc")
    inp = keras.Input((4,))
    return keras.Model(inp, keras.layers.Dense(4, name="head")(enc(inp)))


def _train_and_save(keras, tf, model, path) -> dict[str, np.ndarray]:
    """Three steps of a custom loop, EMA over each weight, ``Checkpoint(model, ema=[...])``;
    returns ``v.path`` -> ``ema.average(v)`` for ``model.weights``, in order."""
    rng = np.random.default_rng(0)
    x, y = (rng.normal(size=(16, 4)).astype("float32") for _ in "xy")
    opt, ema = keras.optimizers.SGD(0.1), tf.train.ExponentialMovingAverage(0.5)
    tv = model.trainable_variables
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x) - y) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, tv), tv, strict=True))
        ema.apply([v.value for v in tv])
    tf.train.Checkpoint(model=model, ema=[ema.average(v.value) for v in tv]).write(str(path))
    return {v.path: ema.average(v.value).numpy() for v in model.weights}


@pytest.fixture(scope="module")
def saved(keras, tf, tmp_path_factory):
    out = tmp_path_factory.mktemp("h5names")
    got = {}
    for case, build in _models(keras).items():
        keras.utils.set_random_seed(3)
        model = build()
        truth = _train_and_save(keras, tf, model, out / case / "ckpt")
        model.save(out / f"{case}.keras.h5")  # Keras' own .h5: the group names it writes
        with h5py.File(out / f"{case}.keras.h5") as f:
            own = [n for n in f["model_weights"].attrs["layer_names"]
                   if len(f["model_weights"][n].attrs["weight_names"])]
        got[case] = (out / case, truth, own)
    keras.utils.set_random_seed(3)
    truth = _train_and_save(keras, tf, _nested_functional(keras), out / "nested_fn" / "ckpt")
    got["nested_fn"] = (out / "nested_fn", truth, None)
    return got


@pytest.mark.parametrize("argv", [["export", "--out", "{tmp}/x.h5"],
                                  ["restore-ema", "--format", "h5", "--out", "{tmp}/x.h5"]],
                         ids=["export", "restore-ema"])
@pytest.mark.parametrize("case", ["sequential", "nested", "functional"])
def test_h5_groups_are_the_layers_names_and_load_by_name(saved, keras, tmp_path, case, argv):
    """The groups are the ones Keras' own .h5 holds; Keras 3 and tf_keras load the file by
    position and by name (``by_name=True``) as the averages, bit for bit."""
    import tf_keras

    ck, truth, own = saved[case]
    command, *rest = argv
    code, _, err = run_cli([command, str(ck), *(a.format(tmp=tmp_path) for a in rest)])
    assert code == 0, err
    h5 = tmp_path / "x.h5"
    with h5py.File(h5) as f:
        assert list(f.attrs["layer_names"]) == own
    for lib in (keras, tf_keras):
        for by_name in (False, True):
            lib.utils.set_random_seed(11)  # other values than those saved
            model = _models(lib)[case]()
            model.load_weights(str(h5), **({"by_name": True} if by_name else {}))
            loaded = [v.numpy() for v in model.weights]
            for i, (a, b) in enumerate(zip(loaded, truth.values(), strict=True)):
                assert a.tobytes() == b.tobytes(), (lib.__name__, by_name, i)


def test_h5_of_a_layer_the_checkpoint_does_not_name_is_refused(saved, tmp_path):
    """A nested Functional model's layers were built before it (``d/kernel``): its name
    (``enc``) is not recorded, and a group named otherwise loads nothing by name. Refused in
    one line naming the file and .npz; the .npz holds the averages."""
    ck, truth, _ = saved["nested_fn"]
    code, _, err = run_cli(["export", str(ck), "--out", str(tmp_path / "x.h5")])
    assert code == 5, err
    line = err.strip()
    assert "\n" not in line and str(ck) in line and "not recorded" in line, err
    assert ".npz" in line and not (tmp_path / "x.h5").exists()
    code, _, err = run_cli(["export", str(ck), "--out", str(tmp_path / "x.npz")])
    assert code == 0, err
    with np.load(tmp_path / "x.npz") as z:
        for path, value in truth.items():  # d/kernel, head/kernel: as ckpt names them
            assert z[path].tobytes() == value.tobytes(), path

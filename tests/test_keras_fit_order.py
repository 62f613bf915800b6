"""The policy for a Keras file's EMA copies of equal-shaped weights (kept by position): pair
them in fit()'s build order (``model.trainable_variables``) by default, flagged as assumed,
because that is Keras' own reading of the file; ``--fit-order`` (Python ``fit_order=True``)
states it. Made here by Keras 3; the truth is what the optimizer held at save time
(``zip(_trainable_variables, _model_variables_moving_average)``) or what Keras itself gives
(``load_model`` + ``finalize_variable_values``), compared bit for bit."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from helpers import assert_npz_holds, keras_averages, run_cli

LOOP = "b,a,head"  # the order the custom loop's first apply_gradients() listed the layers in


def _model(keras):
    inp = keras.Input((4,))
    h = keras.layers.Dense(4, name="a")(inp)
    h = keras.layers.Dense(4, name="b")(h)
    return keras.Model(inp, keras.layers.Dense(2, name="head")(h))


@pytest.fixture(scope="module")
def looped(keras, tmp_path_factory):
    """a -> b -> head, Adam(use_ema=True) built and stepped by a custom loop listing b's
    variables before a's; saved as ``.keras``. Returns (path, truth)."""
    import tensorflow as tf

    keras.utils.set_random_seed(11)
    model = _model(keras)
    opt = keras.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.5)
    model.compile(opt, "mse")
    listed = [w for name in ("b", "a", "head")
              for w in model.get_layer(name).trainable_variables]
    x = tf.random.normal([8, 4], seed=3)
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(x) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, listed), listed, strict=True))
    assert [v.path for v in opt._trainable_variables][:2] == ["b/kernel", "b/bias"]
    path = tmp_path_factory.mktemp("fo_loop") / "m.keras"
    model.save(str(path))
    return path, keras_averages(opt)


@pytest.fixture(scope="module")
def fitted(keras, tmp_path_factory):
    """The same model trained by fit() and saved after it (fit() ends by assigning each
    average to its weight: nothing is swapped either way). Returns (path, truth)."""
    keras.utils.set_random_seed(12)
    model = _model(keras)
    opt = keras.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.5)
    model.compile(opt, "mse")
    x = np.random.rand(16, 4).astype("f4")
    model.fit(x, np.random.rand(16, 2).astype("f4"), epochs=2, batch_size=8, verbose=0)
    path = tmp_path_factory.mktemp("fo_fit") / "m.keras"
    model.save(str(path))
    return path, keras_averages(opt)


@pytest.fixture(scope="module")
def midfit(keras, tmp_path_factory):
    """The same model trained by fit() and saved by ModelCheckpoint after its first epoch of
    two: the weights are raw, so their values do not show the order (model.save() after fit()
    does: tests/test_keras_assumed_everywhere.py). Returns (path, the averages it holds)."""
    d = tmp_path_factory.mktemp("fo_mid")
    keras.utils.set_random_seed(12)
    model = _model(keras)
    opt = keras.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.5)
    model.compile(opt, "mse")
    truth: dict = {}

    class Saved(keras.callbacks.Callback):  # runs after ModelCheckpoint: the file's state
        def on_epoch_end(self, epoch, logs=None):
            truth.setdefault(epoch, keras_averages(opt))

    x = np.random.rand(16, 4).astype("f4")
    model.fit(x, np.random.rand(16, 2).astype("f4"), epochs=2, batch_size=8, verbose=0,
              callbacks=[keras.callbacks.ModelCheckpoint(str(d / "e{epoch}.keras")), Saved()])
    return d / "e1.keras", truth[0]


def test_keras_reads_a_loop_file_in_fit_order(keras, looped, tmp_path):
    """The policy's premise: keras.models.load_model builds the optimizer from
    model.trainable_variables and loads the copies by position, so finalize_variable_values
    hands each weight the copy fit()'s order gives it, which is what --fit-order exports
    (both differ from the truth of this loop); the default refuses it on values, --strict on
    the assumption, and the loop's order stated gives the truth."""
    path, truth = looped
    m2 = keras.models.load_model(str(path))
    m2.optimizer.finalize_variable_values(m2.trainable_variables)
    kerass = {v.path: v.numpy() for v in m2.trainable_variables}
    assert kerass["a/kernel"].tobytes() != truth["a/kernel"].tobytes()
    out = tmp_path / "fit.npz"
    code, text, err = run_cli(["export", str(path), "--out", str(out), "--fit-order",
                               "--json", "--not-swapped"])  # a custom loop: never swapped
    assert code == 0, err
    assert_npz_holds(out, kerass)
    doc = json.loads(text)
    assert doc.get("stated_fit_order") is True and "fit_order" not in doc.get("assumed", [])
    assert "your statements: --fit-order, --not-swapped" in " ".join(err.split()), err
    code, _, err = run_cli(["export", str(path), "--out", str(tmp_path / "d.npz"),
                            "--not-swapped"])
    assert code == 6 and "--fit-order" in err and "--loop-order" in err, err  # r17 F3
    code, _, err = run_cli(["export", str(path), "--out", str(tmp_path / "s.npz"),
                            "--strict"])
    assert code == 6 and len(err.strip().splitlines()) == 1, err
    out = tmp_path / "loop.npz"
    code, _, err = run_cli(["export", str(path), "--out", str(out), "--trainable", LOOP,
                            "--loop-order", "--not-swapped"])
    assert code == 0, err
    assert_npz_holds(out, truth)


def test_fit_order_states_what_strict_refuses(midfit, tmp_path):
    """A fit() file with equal shapes saved mid-training: the order is assumed (its note
    names a group that could trade copies); --strict refuses it, --strict --fit-order gives
    the averages (--not-swapped states the other assumption, ModelCheckpoint's file)."""
    path, truth = midfit
    out = tmp_path / "w.npz"
    code, text, err = run_cli(["export", str(path), "--out", str(out), "--json",
                               "--not-swapped"])
    assert code == 0, err
    doc = json.loads(text)
    assert doc["assumed"] == ["fit_order"], text
    note = next(n for n in doc["notes"] if "fit() builds the optimizer" in n)
    # the [4] biases are too small for their copies' values to be compared: said (u23 F4),
    # and named first, since nothing checked them (review-32-user-u34 F1)
    assert note.startswith("a/bias and b/bias ([4] float32) could trade EMA copies unchecked "
                           "(under 16 elements), and 1 more group of weights: "), note
    assert "--fit-order" in note and len(note) < 600, note
    code, _, err = run_cli(["export", str(path), "--out", str(out), "--strict", "--force",
                            "--not-swapped"])
    assert code == 6 and "fit_order" in err and "trained by fit(): --fit-order" in err, err
    code, text, err = run_cli(["export", str(path), "--out", str(out), "--strict",
                               "--fit-order", "--not-swapped", "--force", "--json"])
    assert code == 0, err
    assert "assumed" not in json.loads(text), text
    assert_npz_holds(out, truth)
    for args in (["map", str(path), "--strict", "--fit-order"],
                 ["list", str(path), "--strict", "--fit-order"],
                 ["stats", str(path), "--strict", "--fit-order"]):
        code, _, err = run_cli([*args, "--not-swapped"])
        assert code == 0, (args, err)


def test_stats_and_show_take_strict(midfit, looped):
    """stats and show report EMA copies' drift from the weight paired with them: --strict
    refuses an assumed pairing there too, and --fit-order / --not-swapped state it."""
    path, _ = midfit
    code, _, err = run_cli(["stats", str(path), "--strict"])
    assert code == 6 and "fit_order" in err, err
    # a's kernel copy (only the assumed order names it, marked '?': u15 F6, u32 F6)
    rows = json.loads(run_cli(["list", str(path), "--json", "--not-swapped"])[1])["variables"]
    path_of = {v["key"]: v["path"] or v["key"] for v in rows}
    copy = next(v["key"] for v in rows if v["role"] == "ema"
                and path_of[v["ema_of"]].endswith("a/kernel"))
    code, _, err = run_cli(["show", str(path), copy, "--strict"])
    assert code == 6 and "fit_order" in err and len(err.strip().splitlines()) == 1, err
    code, text, err = run_cli(["show", str(path), copy, "--strict",
                               "--fit-order", "--not-swapped", "--json"])
    assert code == 0, err
    assert json.loads(text)["tensors"][0]["drift"] is not None, text
    path, _ = looped
    code, _, err = run_cli(["stats", str(path), "--trainable", LOOP, "--loop-order",
                            "--strict"])
    assert code == 6 and "not_swapped" in err and "fit_order" not in err, err
    code, _, err = run_cli(["stats", str(path), "--trainable", LOOP, "--loop-order",
                            "--strict", "--not-swapped"])
    assert code == 0, err


def test_fit_order_with_another_statement_is_a_usage_error(fitted, tmp_path):
    path, _ = fitted
    for extra in (["--loop-order"], ["--trainable", "a,b,head"],
                  ["--trainable", "a,b,head", "--loop-order"]):
        code, _, err = run_cli(["export", str(path), "--out", str(tmp_path / "w.npz"),
                                "--fit-order", *extra])
        assert code == 2 and "--fit-order" in err, (extra, err)


def test_python_fit_order(keras, fitted, looped):
    from ckpt_tools import AssumptionWarning, OptionError, apply_keras_ema, keras_ema_values

    path, truth = fitted
    with warnings.catch_warnings():
        warnings.simplefilter("error", AssumptionWarning)
        values = keras_ema_values(str(path), fit_order=True, strict=True)
        model = keras.models.load_model(str(path))
        apply_keras_ema(model, str(path), fit_order=True, strict=True)
    assert len(values) == len(truth)
    for v in model.trainable_variables:
        assert v.numpy().tobytes() == truth[v.path].tobytes(), v.path
    with pytest.raises(OptionError, match="fit_order"):
        apply_keras_ema(model, str(path), fit_order=True, trainable=model.trainable_variables)
    path, _ = looped  # the values refute fit()'s order, but a statement wins
    m2 = keras.models.load_model(str(path))
    m2.optimizer.finalize_variable_values(m2.trainable_variables)
    model = keras.models.load_model(str(path))
    apply_keras_ema(model, str(path), fit_order=True, not_swapped=True)  # a loop: unswapped
    for v, w in zip(model.trainable_variables, m2.trainable_variables, strict=True):
        assert v.numpy().tobytes() == w.numpy().tobytes(), v.path


def test_fit_order_on_a_tensorflow_checkpoint_is_refused(tmp_path):
    code, _, err = run_cli(["export", "fixtures/linear_v2", "--out", str(tmp_path / "x.npz"),
                            "--fit-order"])
    assert code == 2 and "--fit-order" in err and "--apply-order tracked" in err, err
    assert len(err.strip().splitlines()) == 1, err


def test_python_fit_order_on_a_tensorflow_checkpoint_is_refused(tf):
    """Never ignored: apply_ema(..., fit_order=True) on a TensorFlow checkpoint names what
    states fit()'s order there."""
    from ckpt_tools import OptionError, apply_ema

    with pytest.raises(OptionError, match="trainable=model.trainable_variables"):
        apply_ema([tf.Variable(np.zeros((2, 2), "f4"), name="W")], "fixtures/linear_v2",
                  fit_order=True)

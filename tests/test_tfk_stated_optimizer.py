"""A bare tf_keras (Keras 2) ``.weights.h5`` records no optimizer name at all (the h5
attributes are empty), only ``iteration`` and the optimizer's variables by position. A
Lookahead-Adam subclass (slow weights created before ``super().build()``, ``use_ema=True``,
saved mid-fit) gave its slow weights as the averages with exit 0 under every true statement
and ``--strict``. Now a tf_keras bare file read with EMA copies needs ``--optimizer
CLASS[:OPTIONS]``, whose tf_keras layout the file must follow exactly (count and shapes); else
exit 6 naming ``--optimizer``. Made here by tf_keras, truth recorded at save time."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli

_NAMES = ["dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias"]  # as the file names
_TRAINABLE = "dense,dense_1"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    tfk = pytest.importorskip("tf_keras")
    import tensorflow as tf

    out = tmp_path_factory.mktemp("tfk_stated_optimizer")

    def lookahead(base):
        class Look(base):
            def build(self, var_list):
                if getattr(self, "_built", False):
                    return
                self.slow = [self.add_variable_from_reference(v, "slow", initial_value=v)
                             for v in var_list]
                super().build(var_list)

            def update_step(self, g, v):
                super().update_step(g, v)
                s = self.slow[self._index_dict[self._var_key(v)]]
                sync = tf.cast(tf.equal((self.iterations + 1) % 5, 0), v.dtype)
                new_s = s + sync * 0.5 * (v - s)
                s.assign(new_s)
                v.assign(sync * new_s + (1 - sync) * v)
        return Look

    rs = np.random.RandomState(5)
    x, y = rs.randn(64, 6).astype("float32"), rs.randn(64, 3).astype("float32")
    cases = {"look_adam": lambda: lookahead(tfk.optimizers.Adam)(0.02, use_ema=True),
             "look_sgd": lambda: lookahead(tfk.optimizers.SGD)(0.05, use_ema=True),
             "adam": lambda: tfk.optimizers.Adam(0.02, use_ema=True, ema_momentum=0.5)}
    for name, make in cases.items():
        tfk.utils.set_random_seed(3)
        inp = tfk.Input((6,), name="features")
        h = tfk.layers.Dense(8, name="hidden", activation="tanh")(inp)
        model = tfk.Model(inp, tfk.layers.Dense(3, name="head")(h), name="net")
        opt = make()
        model.compile(opt, "mse")

        class Snap(tfk.callbacks.Callback):
            def on_epoch_end(self, epoch, logs=None, name=name, model=model, opt=opt):
                if epoch != 1:
                    return
                ema = [a.numpy() for a in opt._model_variables_moving_average]
                raw = [v.numpy() for v in model.trainable_variables]
                np.savez(out / f"{name}_truth.npz", **{f"ema{i}": a for i, a in enumerate(ema)},
                         **{f"raw{i}": a for i, a in enumerate(raw)})
                model.save_weights(str(out / f"{name}.weights.h5"))

        model.fit(x, y, epochs=3, batch_size=8, verbose=0, callbacks=[Snap()])
    return out


def _export(files, name, *args):
    out = files / f"{name}-{abs(hash(args))}.npz"
    if out.exists():
        out.unlink()
    code, stdout, err = run_cli(["export", str(files / f"{name}.weights.h5"), *args,
                                 "--out", str(out)])
    return code, stdout, " ".join(err.split()), out


def _exact(files, name, out):
    with np.load(out) as got, np.load(files / f"{name}_truth.npz") as t:
        for i, key in enumerate(_NAMES):
            assert got[key].tobytes() == t[f"ema{i}"].tobytes(), key
            assert got[key].tobytes() != t[f"raw{i}"].tobytes(), key


def test_lookahead_adam_refused_with_every_true_statement(files):
    """The lead's repro: exit 0 with the slow weights as averages on 1dfc19d."""
    base = ("--use-ema", "--not-swapped", "--trainable", _TRAINABLE, "--strict")
    code, _, err, out = _export(files, "look_adam", *base)
    assert code == 6 and not out.exists(), err
    assert "--optimizer CLASS[:OPTIONS]" in err, err
    for stated in ("adam", "adam:amsgrad"):  # adam is true of its class; neither fits
        code, _, err, out = _export(files, "look_adam", *base, "--optimizer", stated)
        assert code == 6 and not out.exists(), (stated, err)
        assert f"--optimizer {stated} was stated" in err and "the file has 17" in err, err
    code, _, err = run_cli(["restore-ema", str(files / "look_adam.weights.h5"), *base,
                            "--out", str(files / "r.weights.h5")])
    assert code == 6 and not (files / "r.weights.h5").exists(), err


def test_lookahead_sgd_count_of_adam_refused_by_shapes(files):
    """A Lookahead-SGD's 1+3N variables are Adam with use_ema's 1+N+2N: the stated Adam's
    layout (m, v of each weight in turn) does not follow their shapes."""
    code, _, err, out = _export(files, "look_sgd", "--use-ema", "--not-swapped")
    assert code == 6 and not out.exists(), err
    assert "--optimizer" in err, err
    code, _, err, out = _export(files, "look_sgd", "--use-ema", "--not-swapped",
                                "--optimizer", "adam")
    assert code == 6 and not out.exists(), err
    assert "--optimizer adam was stated" in err and "shapes do not follow" in err, err


def test_plain_adam_needs_the_statement(files):
    for args in (("--use-ema",), ("--use-ema", "--not-swapped", "--strict"), ()):
        code, _, err, out = _export(files, "adam", *args)
        assert code == 6 and not out.exists(), (args, err)
        assert "--optimizer CLASS[:OPTIONS]" in err, (args, err)
    code, stdout, err = run_cli(["list", str(files / "adam.weights.h5"), "--use-ema"])
    assert code == 0, err
    assert "pass --optimizer to decide" in " ".join((stdout + err).split()), stdout + err


def test_plain_adam_exact_with_optimizer_adam(files):
    code, _, err, out = _export(files, "adam", "--use-ema", "--optimizer", "adam",
                                "--not-swapped", "--fit-order", "--strict")
    assert code == 0, err
    assert "--optimizer adam" in err, err
    _exact(files, "adam", out)
    code, _, err, out = _export(files, "adam", "--optimizer", "adam", "--not-swapped")
    assert code == 0, err  # use_ema read off the stated class' layout
    _exact(files, "adam", out)
    code, stdout, err = run_cli(["list", "--json", str(files / "adam.weights.h5"),
                                 "--optimizer", "adam", "--not-swapped", "--fit-order"])
    assert code == 0, err
    assert json.loads(stdout).get("stated_optimizer") == "adam", stdout[:2000]


def test_wrong_count_for_the_stated_class(files):
    for stated in ("sgd", "lion"):
        code, _, err, out = _export(files, "adam", "--use-ema", "--optimizer", stated)
        assert code == 6 and not out.exists(), (stated, err)
        assert "gives 9 optimizer variables" in err and "the file has 13" in err, err
    # 3 slots each: the count fits 3 of the 4 weights (one frozen when it was built?)
    code, _, err, out = _export(files, "adam", "--use-ema", "--optimizer",
                                "rmsprop:momentum,centered")
    assert code == 6 and not out.exists() and "--trainable" in err, err
    code, _, err, _ = _export(files, "adam", "--use-ema", "--optimizer", "lamb")
    assert code == 2 and "not a tf_keras built-in" in err, err
    code, _, err, _ = _export(files, "adam", "--use-ema", "--optimizer",
                              "adam:gradient_accumulation")
    assert code == 2 and "no gradient accumulation" in err, err


def test_python_apply_keras_ema_needs_the_statement(files):
    tfk = pytest.importorskip("tf_keras")
    from ckpt_tools import UnprovenPairingError, apply_keras_ema

    def fresh():
        inp = tfk.Input((6,), name="features")
        h = tfk.layers.Dense(8, name="hidden", activation="tanh")(inp)
        return tfk.Model(inp, tfk.layers.Dense(3, name="head")(h), name="net")

    path = str(files / "adam.weights.h5")
    with pytest.raises(UnprovenPairingError, match="--optimizer") as err:
        apply_keras_ema(fresh(), path, use_ema=True, not_swapped=True)
    assert err.value.option == "--optimizer"
    model = fresh()
    apply_keras_ema(model, path, use_ema=True, not_swapped=True, optimizer="adam")
    with np.load(files / "adam_truth.npz") as t:
        for i, v in enumerate(model.trainable_variables):
            assert v.numpy().tobytes() == t[f"ema{i}"].tobytes(), v.name

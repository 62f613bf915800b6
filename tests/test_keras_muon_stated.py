"""Muon in a bare Keras 3 ``.weights.h5``: read only where ``--optimizer muon`` states it.

Muon is a built-in whose slots ckpt does not model (one or two per weight, by rank); its
averages come first. A bare file records the optimizer only by its name, so a Lookahead
subclass of Muon named ``"muon"`` (slow weights created before ``super().build()``) has its
slow weights where Muon's averages sit, nearer the weights than them: values may only refuse,
never prove (review-15-attack-r30 F1). Stated, the built-in Muon under another name pairs (F3).
A stated class whose count fits but whose shapes do not follow its build order says so (F5).

Keras 3 generates the files here; truth recorded from the optimizer at save time
(``_model_variables_moving_average``).
"""

from __future__ import annotations

import os
import textwrap

import numpy as np
import pytest
from _tf_runner import run_python
from helpers import run_cli

_GEN = textwrap.dedent('''
    import os, sys; os.environ["KERAS_BACKEND"] = "tensorflow"
    import numpy as np, keras
    out = sys.argv[1]

    def look(base):  # Lookahead: slow weights first, synced every 5
      class Look(base):
        def build(self, var_list):
            if self.built: return
            self.slow = self.add_optimizer_variables(var_list, "slow")
            super().build(var_list)
            for s, v in zip(self.slow, var_list): self.assign(s, v)
        def update_step(self, g, v, lr):
            super().update_step(g, v, lr)
            s = self.slow[self._get_variable_index(v)]
            sync = keras.ops.cast(keras.ops.equal((self.iterations + 1) % 5, 0), v.dtype)
            new = s + 0.5 * (v - s)
            self.assign(s, sync * new + (1 - sync) * s)
            self.assign(v, sync * new + (1 - sync) * v)
      return Look

    def run(case, opt):
        keras.utils.set_random_seed(3)
        inp = keras.Input((6,), name="features")
        x = keras.layers.Dense(8, name="hidden", activation="tanh")(inp)
        x = keras.layers.Dense(8, name="mid", activation="tanh")(x)
        m = keras.Model(inp, keras.layers.Dense(3, name="head")(x), name="net")
        m.compile(opt, "mse")
        rng = np.random.default_rng(5); X = rng.normal(size=(20, 6)).astype("float32")
        Y = rng.normal(size=(20, 3)).astype("float32")

        class Snap(keras.callbacks.Callback):  # 10 steps: a sync step (slow = raw weights)
            def on_epoch_end(self, ep, logs=None):
                if ep != 1: return
                o = self.model.optimizer
                np.savez(f"{out}/{case}_truth.npz", **{v.path: a.numpy() for v, a in
                         zip(o._trainable_variables, o._model_variables_moving_average)})
                self.model.save_weights(f"{out}/{case}.weights.h5")
        m.fit(X, Y, epochs=2, batch_size=4, verbose=0, callbacks=[Snap()])

    run("look_adam", look(keras.optimizers.Adam)(0.01, use_ema=True, ema_momentum=0.99,
                                                  name="adam"))
    if not hasattr(keras.optimizers, "Muon"):
        sys.exit(0)
    run("look_muon", look(keras.optimizers.Muon)(0.02, use_ema=True, ema_momentum=0.99,
                                                 name="muon"))
    run("g_opt", keras.optimizers.Muon(0.02, use_ema=True, ema_momentum=0.8, name="g_opt"))
''')

_STATED = ["--use-ema", "--not-swapped", "--trainable", "hidden,mid,head"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    out = tmp_path_factory.mktemp("muon_stated")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", KERAS_BACKEND="tensorflow")
    proc = run_python(["-c", _GEN, str(out)], timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def test_stated_count_fits_but_order_does_not(files):
    """F5: a Lookahead Adam named "adam" stated as adam:amsgrad: same count (1+1+4N), other
    shapes order: the refusal says the order, not a count the file visibly has."""
    code, err, out = _export(files, "look_adam", "--use-ema", "--not-swapped", "--optimizer",
                             "adam:amsgrad")
    assert code == 6 and not out.exists(), err
    assert "as many as the file has" in err and "build order" in err, err
    assert "no set of them" not in err, err


def _export(files, case, *args):
    out = files / f"{case}-{abs(hash(args))}.npz"
    if out.exists():
        out.unlink()
    code, _, err = run_cli(["export", str(files / f"{case}.weights.h5"), *args,
                            "--out", str(out)])
    return code, err, out


def _model():
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras

    inp = keras.Input((6,), name="features")
    x = keras.layers.Dense(8, name="hidden", activation="tanh")(inp)
    x = keras.layers.Dense(8, name="mid", activation="tanh")(x)
    return keras.Model(inp, keras.layers.Dense(3, name="head")(x), name="net")


def _muon(files):
    if not (files / "g_opt.weights.h5").exists():
        pytest.skip("this Keras has no keras.optimizers.Muon")


def test_lookahead_muon_named_muon_refused_naming_the_statement(files):
    """F1: every true statement, --strict too: refused (exit 6) naming --optimizer muon."""
    _muon(files)
    code, err, out = _export(files, "look_muon", *_STATED, "--strict")
    assert code == 6 and not out.exists(), err
    assert "--optimizer muon" in err and "Lookahead" in err, err


def test_lookahead_muon_python_refused(files):
    from ckpt_tools import UnprovenPairingError, apply_keras_ema

    _muon(files)
    m = _model()
    with pytest.raises(UnprovenPairingError) as exc:
        apply_keras_ema(m, str(files / "look_muon.weights.h5"), use_ema=True,
                        not_swapped=True, trainable=m.trainable_variables)
    assert exc.value.option == "--optimizer" and 'optimizer="muon"' in str(exc.value)


def test_builtin_muon_under_another_name_pairs_when_stated(files):
    """F3: Muon(name="g_opt"): --optimizer muon is a valid statement, and with --trainable it
    gives Keras' own averages bit for bit (CLI and Python)."""
    _muon(files)
    code, err, out = _export(files, "g_opt", *_STATED, "--optimizer", "muon")
    assert code == 0, err
    with np.load(files / "g_opt_truth.npz") as t, np.load(out) as z:
        assert sorted(z.files) == sorted(t.files)
        for k in t.files:
            assert z[k].tobytes() == t[k].tobytes(), k
    from ckpt_tools import apply_keras_ema

    m = _model()
    apply_keras_ema(m, str(files / "g_opt.weights.h5"), use_ema=True, not_swapped=True,
                    trainable=m.trainable_variables, optimizer="muon")
    with np.load(files / "g_opt_truth.npz") as t:
        for v in m.trainable_variables:
            assert v.numpy().tobytes() == t[v.path].tobytes(), v.path

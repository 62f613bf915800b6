"""A Keras 3 ``use_ema`` optimizer built but never stepped (iteration 0 in the file): its EMA
copies are Keras' initial zeros, not averages. ``.keras``, bare ``.weights.h5``, legacy ``.h5``
and ``tf.train.Checkpoint`` are refused (exit 6, naming --raw), never exported as zero kernels
with exit 0 (review-15-attack-r30 F2c). One step later the same flow pairs.

Keras 3 generates the files here; truth recorded from the optimizer at save time.
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
    import numpy as np, keras, tensorflow as tf
    out = sys.argv[1]
    for case, steps in (("step0", 0), ("step1", 1)):
        keras.utils.set_random_seed(3)
        inp = keras.Input((6,)); x = keras.layers.Dense(8, name="hidden", activation="tanh")(inp)
        m = keras.Model(inp, keras.layers.Dense(3, name="head")(x), name="net")
        m.compile(keras.optimizers.Adam(0.01, use_ema=True), "mse")
        m.optimizer.build(m.trainable_variables)  # a resume flow: built before the first step
        if steps:
            rng = np.random.default_rng(5)
            m.train_on_batch(rng.normal(size=(4, 6)).astype("float32"),
                             rng.normal(size=(4, 3)).astype("float32"))
        o = m.optimizer
        assert int(o.iterations.numpy()) == steps
        np.savez(f"{out}/{case}_truth.npz", **{v.path: a.numpy() for v, a in
                 zip(o._trainable_variables, o._model_variables_moving_average)})
        m.save(f"{out}/{case}.keras"); m.save_weights(f"{out}/{case}.weights.h5")
        m.save(f"{out}/{case}.h5")
        tf.train.Checkpoint(model=m, optimizer=o).write(f"{out}/{case}_tc/ckpt")
''')


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    out = tmp_path_factory.mktemp("unstepped")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", KERAS_BACKEND="tensorflow")
    proc = run_python(["-c", _GEN, str(out)], timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


_FILES = [("{}.keras", []), ("{}.weights.h5", ["--use-ema"]), ("{}.h5", []),
          ("{}_tc", [])]


@pytest.mark.parametrize(("name", "extra"), _FILES)
def test_iteration_zero_refused(files, name, extra, tmp_path):
    out = tmp_path / "x.npz"
    code, _, err = run_cli(["export", str(files / name.format("step0")), "--not-swapped",
                            *extra, "--out", str(out)])
    assert code == 6 and not out.exists(), err
    assert "has taken no step" in err and "--raw" in err, err


@pytest.mark.parametrize(("name", "extra"), _FILES[:2])
def test_one_step_later_pairs(files, name, extra, tmp_path):
    out = tmp_path / "x.npz"
    code, _, err = run_cli(["export", str(files / name.format("step1")), "--not-swapped",
                            *extra, "--out", str(out)])
    assert code == 0, err
    with np.load(files / "step1_truth.npz") as t, np.load(out) as z:
        for k in t.files:
            assert z[k.removeprefix("net/")].tobytes() == t[k].tobytes(), k


def test_python_refused(files):
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras

    from ckpt_tools import EmaError, apply_keras_ema

    inp = keras.Input((6,))
    x = keras.layers.Dense(8, name="hidden", activation="tanh")(inp)
    m = keras.Model(inp, keras.layers.Dense(3, name="head")(x), name="net")
    with pytest.raises(EmaError, match="has taken no step"):
        apply_keras_ema(m, str(files / "step0.keras"), not_swapped=True)


_TFK = textwrap.dedent('''
    import os, sys; os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import numpy as np, tf_keras as K
    out = sys.argv[1]
    for case, moved in (("same", False), ("moved", True)):
        K.utils.set_random_seed(3)
        inp = K.Input((6,)); x = K.layers.Dense(8, name="hidden", activation="tanh")(inp)
        m = K.Model(inp, K.layers.Dense(3, name="head")(x), name="net")
        m.compile(K.optimizers.Adam(0.01, use_ema=True), "mse")
        m.optimizer.build(m.trainable_variables)  # copies created as the weights are now
        if moved:  # weights changed after the build (a resume flow loading a checkpoint)
            for v in m.trainable_variables: v.assign(v + 1.0)
        o = m.optimizer
        assert int(o.iterations.numpy()) == 0
        np.savez(f"{out}/{case}_truth.npz", **{v.name.split(":")[0]: v.numpy()
                                               for v in m.trainable_variables})
        m.save(f"{out}/{case}.keras")
''')


def test_tf_keras_iteration_zero(tmp_path):
    """tf_keras creates each copy as its weight (initial_value=var): at iteration 0 copies
    that still equal their weights export as those weights; copies the weights moved away
    from after the build are refused like Keras 3's."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = run_python(["-c", _TFK, str(tmp_path)], timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "x.npz"
    code, _, err = run_cli(["export", str(tmp_path / "moved.keras"), "--out", str(out)])
    assert code == 6 and not out.exists() and "has taken no step" in err, err
    code, _, err = run_cli(["export", str(tmp_path / "same.keras"), "--out", str(out)])
    assert code == 0, err
    with np.load(tmp_path / "same_truth.npz") as t, np.load(out) as z:
        assert sorted(z.files) == sorted(t.files)
        for k in t.files:
            assert z[k].tobytes() == t[k].tobytes(), k

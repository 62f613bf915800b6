"""Two Keras 3 optimizers with use_ema=True (two training phases on one model) in one
``tf.train.Checkpoint``: the refusal speaks of Keras optimizers and their attributes, not of
ExponentialMovingAverage objects and TF2's _N suffixes; ``--ema-name`` picks one bit for bit
(review-15-attack-r30 F6). Keras 3 generates the checkpoint; truth recorded at save time.
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
    out = sys.argv[1]; keras.utils.set_random_seed(3)
    inp = keras.Input((6,)); x = keras.layers.Dense(8, name="hidden", activation="tanh")(inp)
    m = keras.Model(inp, keras.layers.Dense(3, name="head")(x), name="net")
    A = keras.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.6, name="warm")
    B = keras.optimizers.SGD(0.1, use_ema=True, ema_momentum=0.5, name="fine")
    rng = np.random.default_rng(5)
    for opt in (A, B):
        for step in range(6):
            xb = tf.constant(rng.normal(size=(4, 6)).astype("float32"))
            with tf.GradientTape() as t:
                loss = tf.reduce_mean((m(xb) - 0.5) ** 2)
            opt.apply_gradients(zip(t.gradient(loss, m.trainable_variables),
                                    m.trainable_variables))
    np.savez(f"{out}/truth.npz", **{v.path.removeprefix("net/"): a.numpy() for v, a in
             zip(B._trainable_variables, B._model_variables_moving_average)})
    tf.train.Checkpoint(model=m, warm=A, fine=B).write(f"{out}/tc/ckpt")
    tf.train.Checkpoint(model=m, opts=[A, B]).write(f"{out}/one/ckpt")
''')


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """The folder the generator wrote (tc: one attribute per optimizer; one: both in a list)."""
    out = tmp_path_factory.mktemp("two_phase")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", KERAS_BACKEND="tensorflow")
    proc = run_python(["-c", _GEN, str(out)], timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def test_two_keras_optimizers_refusal_speaks_keras(made, tmp_path):
    out = tmp_path / "x.npz"
    code, _, err = run_cli(["export", str(made / "tc"), "--not-swapped", "--out", str(out)])
    assert code == 6 and not out.exists(), err
    assert "2 Keras optimizers with use_ema=True (fine, warm)" in err, err
    assert "ExponentialMovingAverage" not in err and "_N suffixes" not in err, err
    assert "--ema-name fine or --ema-name warm" in err, err
    code, _, err = run_cli(["export", str(made / "tc"), "--not-swapped", "--ema-name",
                            "fine", "--out", str(out)])
    assert code == 0, err
    with np.load(made / "truth.npz") as t, np.load(out) as z:
        for k in t.files:
            assert z[k].tobytes() == t[k].tobytes(), k


def test_two_keras_optimizers_under_one_attribute_are_not_called_ema_objects(made, tmp_path):
    """review-32-attack-r123 M3: ``opts=[warm, fine]`` was refused with the
    ExponentialMovingAverage words ("two EMA objects of one name ... a GAN's discriminator
    left unsaved"); the copies record two optimizers' names, and no --ema-name decides."""
    out = tmp_path / "x.npz"
    for extra in ([], ["--ema-name", "opts"]):
        code, _, err = run_cli(["export", str(made / "one"), "--not-swapped", *extra,
                                "--out", str(out)])
        assert code == 6 and not out.exists(), err
        err = " ".join(err.split())
        assert "2 Keras optimizers with use_ema=True (recorded as fine, warm)" in err, err
        assert "under one attribute of the tf.train.Checkpoint (opts)" in err, err
        assert "no --ema-name decides" in err, err
        assert "EMA objects" not in err and "discriminator" not in err, err

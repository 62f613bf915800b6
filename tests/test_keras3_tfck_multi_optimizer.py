"""A Keras 3 ``MultiOptimizer`` saved with ``tf.train.Checkpoint(model=, optimizer=)``: the
checkpoint holds none of its inner optimizers' variables (the object graph records an empty
``_inner_optimizers``), so no average is there to pair; the refusal said "likely cause: the
optimizer had use_ema=False", which is false: both inner optimizers ran with use_ema=True
(review-14-attack-r27 F7). Keras 3 generates the file here; what the optimizers held is
recorded at save time.
"""

from __future__ import annotations

import json
import os
import textwrap

import numpy as np
import pytest
from _tf_runner import run_python
from helpers import assert_npz_holds, run_cli

_GEN = textwrap.dedent('''
    import os, sys, json; os.environ["KERAS_BACKEND"] = "tensorflow"
    import numpy as np, keras, tensorflow as tf
    out = sys.argv[1]; keras.utils.set_random_seed(3)
    K = keras.optimizers
    om = K.OptimizerMap(K.SGD(0.05, momentum=0.9, use_ema=True, ema_momentum=0.5),
                        {"mid/.*": K.Adam(0.05, use_ema=True, ema_momentum=0.5)})
    opt = K.MultiOptimizer(om)
    inp = keras.Input((6,), name="features"); x = inp
    for n in ("hidden", "mid", "last"): x = keras.layers.Dense(6, name=n, activation="tanh")(x)
    m = keras.Model(inp, keras.layers.Dense(3, name="head")(x), name="net")
    m.compile(opt, "mse")
    rng = np.random.default_rng(5)
    X = rng.normal(size=(16, 6)).astype("float32"); Y = rng.normal(size=(16, 3)).astype("float32")
    class Snap(keras.callbacks.Callback):  # mid-fit: before fit()'s finalize overwrites
        def on_epoch_end(self, ep, logs=None):
            if ep: return
            json.dump({"inner_use_ema": [bool(o.use_ema and len(o._model_variables_moving_average))
                                         for o in opt.optimizers]}, open(f"{out}/truth.json", "w"))
            np.savez(f"{out}/truth.npz", **{v.path: a.numpy() for o in opt.optimizers
                     for v, a in zip(o._trainable_variables, o._model_variables_moving_average)})
            tf.train.Checkpoint(model=m, optimizer=opt).write(f"{out}/tf/ckpt")
            tf.train.Checkpoint(model=m, optimizer=opt, inner=list(opt.optimizers)).write(
                f"{out}/inner/ckpt")
    m.fit(X, Y, epochs=2, batch_size=4, verbose=0, callbacks=[Snap()])
''')


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("multi_tfck")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", KERAS_BACKEND="tensorflow")
    proc = run_python(["-c", _GEN, str(out)], timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, json.loads((out / "truth.json").read_text())


def test_refusal_says_the_inner_optimizers_are_not_saved(made, tmp_path):
    out, truth = made
    assert truth["inner_use_ema"] == [True, True]  # both kept averages when saved
    code, _, err = run_cli(["export", str(out / "tf" / "ckpt"), "--out", str(tmp_path / "x.npz")])
    assert code == 6, err
    assert "MultiOptimizer" in err and "_inner_optimizers" in err, err
    assert "use_ema=False" not in err, err
    assert "inner=list(optimizer.optimizers)" in err, err


def test_inner_optimizers_saved_beside_it_pair_exactly(made, tmp_path):
    """The remedy the refusal names: with the inner optimizers saved, each one's recorded
    lists pair its copies (values: the library's averages at save time)."""
    out, _ = made
    dest = tmp_path / "x.npz"
    code, _, err = run_cli(["export", str(out / "inner" / "ckpt"), "--not-swapped",
                            "--out", str(dest)])
    assert code == 0, err
    with np.load(out / "truth.npz") as z:
        truth = {k: z[k] for k in z.files}
    assert len(truth) == 8  # hidden, mid, last, head: kernel and bias
    assert_npz_holds(dest, truth)

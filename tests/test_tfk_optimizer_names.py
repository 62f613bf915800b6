"""A tf_keras ``Adam(use_ema=True)`` in a custom loop, saved in a ``tf.train.Checkpoint`` under
any attribute name (``opt=``, the DCGAN tutorial's ``generator_optimizer=``): the optimizer is
known by what it tracks (``_iterations`` beside its ``_variables``), so its ``average``
variables pair with the model's weights as under ``optimizer=``, bit for bit with
``optimizer._model_variables_moving_average`` recorded at save time. Made here by tf_keras."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from helpers import run_cli

pytest.importorskip("tf_keras")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    out = tmp_path_factory.mktemp("tfk_opt_names")
    script = textwrap.dedent(f"""
        import os
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
        import numpy as np, tensorflow as tf, tf_keras as k
        out = {str(out)!r}
        for attr in ("opt", "generator_optimizer"):
            k.utils.set_random_seed(3)
            m = k.Sequential([k.layers.Dense(4, activation="tanh", input_shape=(3,)),
                              k.layers.Dense(2)])
            opt = k.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.5)
            x = tf.random.normal([8, 3])
            for _ in range(4):
                with tf.GradientTape() as t:
                    loss = tf.reduce_mean(m(x) ** 2)
                grads = t.gradient(loss, m.trainable_variables)
                opt.apply_gradients(zip(grads, m.trainable_variables))
            tf.train.Checkpoint(model=m, **{{attr: opt}}).write(f"{{out}}/{{attr}}/ckpt")
            np.savez(f"{{out}}/{{attr}}/truth.npz",
                     **{{f"raw{{i}}": v.numpy() for i, v in enumerate(m.trainable_variables)}},
                     **{{f"ema{{i}}": a.numpy()
                        for i, a in enumerate(opt._model_variables_moving_average)}})
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


@pytest.mark.parametrize("attr", ["opt", "generator_optimizer"])
def test_optimizer_under_any_attribute_pairs_its_averages(saved, attr, tmp_path):
    d = saved / attr
    raw, ema = tmp_path / "raw.npz", tmp_path / "ema.npz"
    for out, extra in ((raw, ["--raw"]), (ema, [])):
        code, _, err = run_cli(["export", str(d), "--out", str(out), *extra])
        assert code == 0, err
    with np.load(d / "truth.npz") as t, np.load(raw) as r, np.load(ema) as e:
        n = len(t.files) // 2
        assert len(e.files) == n
        for name in e.files:  # which weight each one is: its raw value says (random init)
            (i,) = [i for i in range(n) if t[f"raw{i}"].tobytes() == r[name].tobytes()]
            assert e[name].tobytes() == t[f"ema{i}"].tobytes(), name

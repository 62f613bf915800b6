"""A tf_keras ``.keras`` of ``Adafactor(use_ema=True)``: config.json names the class, whose slots
per weight ckpt does not model (factored by rank), so the copies are refused unpaired; the
refusal must not say the file records no optimizer class right after naming it
(review-14-attack-r26 F3), and the --trainable it names pairs Keras' averages bit for bit.
Truth recorded from the optimizer at save time.
"""

from __future__ import annotations

import os
import textwrap

import numpy as np
import pytest
from _tf_runner import run_python
from helpers import run_cli

_SCRIPT = textwrap.dedent('''
    import sys
    import numpy as np, tf_keras as K
    out = sys.argv[1]; K.utils.set_random_seed(3)
    inp = K.Input((6,), name="features")
    x = K.layers.Dense(8, name="hidden")(inp)
    x = K.layers.Dense(8, name="mid", activation="relu")(x)
    m = K.Model(inp, K.layers.Dense(3, name="head")(x), name="net")
    o = K.optimizers.Adafactor(0.05, use_ema=True, ema_momentum=0.8)
    m.compile(o, "mse")
    rng = np.random.default_rng(5)
    X = rng.normal(size=(16, 6)).astype("float32"); Y = rng.normal(size=(16, 3)).astype("float32")
    m.fit(X, Y, epochs=2, batch_size=4, verbose=0)
    np.savez(f"{out}/truth.npz", **{v.name.split(":")[0]:
             o._model_variables_moving_average[o._index_dict[o._var_key(v)]].numpy()
             for v in m.trainable_variables})
    m.save(f"{out}/m.keras")
''')


def test_tf_keras_adafactor_keras_refusal_names_the_class_it_records(tmp_path):
    pytest.importorskip("tf_keras")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = run_python(["-c", _SCRIPT, str(tmp_path)], timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    path = tmp_path / "m.keras"
    code, _, err = run_cli(["export", str(path), "--out", str(tmp_path / "a.npz")])
    assert code == 6, err
    assert "Adafactor (config.json)" in err, err
    assert "records neither the optimizer's class" not in err, err
    out = tmp_path / "b.npz"
    code, _, err = run_cli(["export", str(path), "--trainable", "hidden,mid,head", "--out",
                            str(out)])
    assert code == 0, err
    with np.load(tmp_path / "truth.npz") as t, np.load(out) as z:
        for k in t.files:
            assert z[k].tobytes() == t[k].tobytes(), k

"""A tf_keras (Keras 2) ``.keras`` archive and ``--trainable`` names printed in another process:
tf_keras numbers default layer names per process as Keras 3 does, so a notebook that made a
stray Dense first saved ``dense_1..3`` where a fresh process names the same layers
``dense..dense_2``, and the fresh process's ``dense_1/kernel:0, dense_2/kernel:0`` (the trained
second and third layers) selected the file's first and second: each average one layer off,
exit 0. Refused as for Keras 3 files; the file's keys give the averages tf_keras' optimizer
kept (``optimizer._model_variables_moving_average``, recorded at save time in a subprocess by
the real tf_keras), bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli, run_script

pytest.importorskip("tf_keras")

SCRIPT = r'''
import sys
import numpy as np
import tf_keras

out = sys.argv[1]
layers = tf_keras.layers


def build():
    m = tf_keras.Sequential([tf_keras.Input((4,)), layers.Dense(4), layers.Dense(4),
                             layers.Dense(4)])
    m.layers[0].trainable = False
    return m


tf_keras.utils.set_random_seed(0)
layers.Dense(4)  # a stray layer the training notebook made first
model = build()
opt = tf_keras.optimizers.SGD(0.1, use_ema=True, ema_momentum=0.5)
model.compile(opt, "mse")
x = np.random.RandomState(0).rand(16, 4).astype("float32")
model.fit(x, x, epochs=2, verbose=0)
average = {id(v): a for v, a in zip(model.trainable_variables,
                                    opt._model_variables_moving_average, strict=True)}
arrays = {f"w{i}": (average[id(v)] if id(v) in average else v).numpy()
          for i, v in enumerate(model.weights)}
model.save(out + "/m.keras")
tf_keras.backend.clear_session()  # the evaluation process: names counted afresh
printed = [v.name for v in build().trainable_variables]
open(out + "/printed.txt", "w").write(",".join(printed))
np.savez(out + "/truth.npz", **arrays)
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tfk_shift")
    return out, run_script(SCRIPT, out)


def test_names_printed_in_another_process_are_refused_keys_give_the_truth(made, tmp_path):
    out, truth = made
    printed = (out / "printed.txt").read_text()
    assert printed.startswith("dense_1/kernel:0,"), printed
    target = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(out / "m.keras"), "--trainable", printed, "--out",
                            str(target)])
    assert code == 6 and "dense_1, dense_2, dense_3" in err, err
    assert len(err.strip().splitlines()) == 1 and not target.exists(), err
    keys = [f"layers/dense_{i}/vars/{j}" for i in (1, 2) for j in (0, 1)]
    code, _, err = run_cli(["export", str(out / "m.keras"), "--trainable", ",".join(keys),
                            "--out", str(target)])
    assert code == 0, err
    with np.load(target) as z:
        got = [z[k] for k in z.files]
    assert [g.tobytes() for g in got] == [truth[f"w{i}"].tobytes() for i in range(6)]

"""``ckpt average`` copies step-dependent optimizer state from the newest checkpoint, never
averaging it: the learning rate (TF1 variable ``learning_rate``, Keras 3 / tf_keras
``optimizer/_learning_rate``), step counters (``global_step``, ``iterations``,
``save_counter``) and Adam's ``beta1_power``/``beta2_power``; the weights and slots are the
NumPy mean. Truth: TensorFlow's own reads of real TF1 Adam, Keras 3 and tf_keras runs
(``fixtures/make_average_optimizer.py``), and TensorFlow's read of the output."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli, run_generator

SAVES = 3
# Keys that are training state moving with the step: copied from the newest input.
STATE = {
    "tf1_adam": {"learning_rate", "global_step", "beta1_power", "beta2_power"},
    "keras3": {"optimizer/_learning_rate/.ATTRIBUTES/VARIABLE_VALUE",
               "optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE",
               "save_counter/.ATTRIBUTES/VARIABLE_VALUE"},
}
STATE["tfk"] = STATE["keras3"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("avg_opt")
    return out, run_generator("make_average_optimizer.py", out)


@pytest.mark.parametrize("run", sorted(STATE))
def test_optimizer_state_comes_from_the_newest(runs, tmp_path, tf, run):
    out, truth = runs
    keys = sorted(k.split(":", 2)[2] for k in truth if k.startswith(f"{run}:0:")
                  and not k.endswith(":lr"))
    lrs = [float(truth[f"{run}:{i}:lr"]) for i in range(SAVES)]
    assert len(set(lrs)) == SAVES  # the learning rate really moved between the saves
    assert STATE[run] <= set(keys)
    code, stdout, err = run_cli(["average", str(out / run), "--last", str(SAVES),
                                 "--out", str(tmp_path / "avg"), "--json"])
    assert code == 0, err
    result = json.loads(stdout)
    reader = tf.train.load_checkpoint(result["output"])
    averaged = 0
    for key in keys:
        values = [truth[f"{run}:{i}:{key}"] for i in range(SAVES)]
        got = reader.get_tensor(key)
        newest = values[-1]
        if key in STATE[run] or newest.dtype.kind != "f":
            assert np.array_equal(got, newest), (key, got, newest)
            assert key in result["copied"], key
        else:
            mean = np.mean(np.stack(values).astype(np.float64), axis=0).astype(newest.dtype)
            assert np.array_equal(got, mean), (key, got, mean)
            assert key in result["averaged"], key
            averaged += 1
    assert averaged >= 2  # weights (and slots) really were averaged
    lr_key = next(k for k in STATE[run] if "learning_rate" in k)
    assert float(reader.get_tensor(lr_key)) == pytest.approx(lrs[-1])

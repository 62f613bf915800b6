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


# Trained weights named like optimizer state (issue 16 review r3): averaged, never copied.
NAMED_WEIGHTS = {
    "tf1_named": {"layer/W", "layer/learning_rate", "gru/decay", "ode/step"},
    "keras3_named": {f"model/{n}/.ATTRIBUTES/VARIABLE_VALUE" for n in ("kernel", "lr", "decay")},
}
NAMED_STATE = {
    "tf1_named": {"global_step"},
    "keras3_named": STATE["keras3"],
}


@pytest.mark.parametrize("run", sorted(NAMED_WEIGHTS))
def test_weights_named_like_optimizer_state_are_averaged(runs, tmp_path, tf, run):
    out, truth = runs
    code, stdout, err = run_cli(["average", str(out / run), "--last", str(SAVES),
                                 "--out", str(tmp_path / "avg"), "--json"])
    assert code == 0, err
    result = json.loads(stdout)
    reader = tf.train.load_checkpoint(result["output"])
    for key in NAMED_WEIGHTS[run]:
        values = [truth[f"{run}:{i}:{key}"] for i in range(SAVES)]
        assert not np.array_equal(values[0], values[-1]), key  # training moved it
        mean = np.mean(np.stack(values).astype(np.float64), axis=0).astype(values[-1].dtype)
        assert np.array_equal(reader.get_tensor(key), mean), key
        assert key in result["averaged"], key
    for key in NAMED_STATE[run]:
        assert np.array_equal(reader.get_tensor(key), truth[f"{run}:{SAVES - 1}:{key}"]), key
        assert key in result["copied"], key
    # every other float (Adam's slots of those weights) is averaged too
    floats = {k.split(":", 2)[2] for k, v in truth.items() if k.startswith(f"{run}:0:")
              and not k.endswith(":lr") and v.dtype.kind == "f"}
    state = {"optimizer/_learning_rate/.ATTRIBUTES/VARIABLE_VALUE"}
    assert floats - state == set(result["averaged"])
    assert len(floats - state - NAMED_WEIGHTS[run]) == (6 if run == "keras3_named" else 0)


def test_list_calls_trainable_variables_named_like_state_weights(runs):
    """The .meta's trainable_variables decide over the name: role weight, and counted as
    weights in the EMA line."""
    out, _ = runs
    code, stdout, err = run_cli(["list", str(out / "tf1_named"), "--json"])
    assert code == 0, err
    roles = {v["name"]: v["role"] for v in json.loads(stdout)["variables"]}
    assert {k: roles[k] for k in NAMED_WEIGHTS["tf1_named"]} == dict.fromkeys(
        NAMED_WEIGHTS["tf1_named"], "weight")
    assert roles["global_step"] == "step"


def test_keras3_optimizer_iterations_order_written_checkpoints(tmp_path, tf):
    """review-24-user-u26 F2: ``tf.train.Checkpoint(model=, optimizer=).write()`` records no
    ``save_counter``; the Keras optimizer's ``_iterations`` (recorded in every input) tells
    the newest, whatever order the inputs are given in, and is copied from it (truth: the
    optimizer's iterations and learning rate at save time, read back by TensorFlow)."""
    keras = pytest.importorskip("keras")
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    opt = keras.optimizers.SGD(0.1)
    x = tf.ones([4, 3])
    truth = []
    for i, steps in enumerate((2, 3)):
        for _ in range(steps):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(model(x) ** 2)
            opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                    model.trainable_variables, strict=True))
        tf.train.Checkpoint(model=model, optimizer=opt).write(str(tmp_path / f"ck-{i}"))
        truth.append(int(opt.iterations.numpy()))
    code, stdout, err = run_cli(["average", str(tmp_path / "ck-1"), str(tmp_path / "ck-0"),
                                 "--out", str(tmp_path / "avg"), "--json"])
    assert code == 0, err
    key = "optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE"
    result = json.loads(stdout)
    assert key in result["copied"], result
    assert tf.train.load_checkpoint(result["output"]).get_tensor(key) == truth[1] == 5

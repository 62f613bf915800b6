"""``ckpt average`` of TF1 ``AdamOptimizer`` checkpoints saved without a ``.meta``
(``Saver.save(..., write_meta_graph=False)``): ``beta1_power``/``beta2_power`` (beta^t,
step-dependent) are copied from the newest input like ``global_step``, proven by the layout
the optimizer writes (both powers beside ``<var>/Adam`` and ``<var>/Adam_1`` slots); a lone
scalar of that name, with no Adam slots, is a weight and averaged. Values come from the live
TensorFlow session at save time."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli

SAVES = 3


def _run(tf, run, make_train, extra_vars=None):
    v1 = tf.compat.v1
    values = {}
    with tf.Graph().as_default():
        step = v1.train.get_or_create_global_step()
        w = v1.get_variable("layer/W", initializer=tf.constant([[1.0, 2.0], [3.0, -4.0]]))
        extra = extra_vars() if extra_vars else []
        loss = tf.reduce_sum(w * w) + sum(tf.reduce_sum(e * e) for e in extra)
        train = make_train(v1, loss, step)
        saver = v1.train.Saver(max_to_keep=SAVES)
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            names = {v.op.name: v for v in v1.global_variables()}
            for _ in range(SAVES):
                sess.run(train)
                saver.save(sess, str(run / "model.ckpt"), global_step=step,
                           write_meta_graph=False)
                values[int(sess.run(step))] = {k: sess.run(v) for k, v in names.items()}
    assert not list(run.glob("*.meta"))
    return values


def _average(run, out):
    code, stdout, err = run_cli(["average", str(run), "--last", str(SAVES), "--out", str(out),
                                 "--json"])
    assert code == 0, err
    return json.loads(stdout)


def test_adam_beta_powers_are_copied_from_the_newest(tmp_path, tf):
    run = tmp_path / "run"
    values = _run(tf, run, lambda v1, loss, step: v1.train.AdamOptimizer(0.1).minimize(
        loss, global_step=step))
    assert {"beta1_power", "beta2_power", "layer/W/Adam", "layer/W/Adam_1"} <= set(values[1])
    result = _average(run, tmp_path / "avg")
    assert {"beta1_power", "beta2_power", "global_step"} <= set(result["copied"])
    reader = tf.train.load_checkpoint(result["output"])
    for key in ("beta1_power", "beta2_power"):
        assert reader.get_tensor(key) == values[SAVES][key]  # 0.9**3, not a mean of powers
    mean = np.mean([values[s]["layer/W"] for s in values], axis=0, dtype=np.float64)
    assert np.array_equal(reader.get_tensor("layer/W"), mean.astype(np.float32))


def test_a_lone_beta1_power_weight_is_averaged(tmp_path, tf):
    """Names alone prove nothing: a trained scalar called beta1_power in a graph with no Adam
    slots (plain gradient descent) is a weight."""
    run = tmp_path / "run"

    def extra():
        v1 = tf.compat.v1
        return [v1.get_variable("beta1_power", initializer=tf.constant(0.5)),
                v1.get_variable("beta2_power", initializer=tf.constant(0.25))]

    values = _run(tf, run, lambda v1, loss, step: v1.train.GradientDescentOptimizer(
        0.1).minimize(loss, global_step=step), extra)
    result = _average(run, tmp_path / "avg")
    assert "beta1_power" not in result["copied"], result["copied"]
    reader = tf.train.load_checkpoint(result["output"])
    mean = np.mean([values[s]["beta1_power"] for s in values], dtype=np.float64)
    assert reader.get_tensor("beta1_power") == np.float32(mean)
    assert pytest.approx(float(mean)) != float(values[SAVES]["beta1_power"])

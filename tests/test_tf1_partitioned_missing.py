"""TF1 with its ``.meta``: a partitioned variable missing its average is one variable
(review-18-attack-r39 F7, MINOR). ``w0`` in two parts (``fixed_size_partitioner(2)``) with a
partitioned ``w0/ExponentialMovingAverage`` kept by ``assign_moving_average(part, grad)`` per
part (a gradient's moment, no EMA of ``w0``), beside a real EMA over ``w1``: the refusal read
"2 variable(s) have no average stored: w0, w0", each part counted as the whole variable.

Made by real TensorFlow in a subprocess; truth read at save time.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

import ckpt_tools

SCRIPT = r'''
from tensorflow.python.training import moving_averages

P = tf1.fixed_size_partitioner(2)
w0 = tf1.get_variable("w0", initializer=tf.ones([4, 2]), partitioner=P)
w1 = tf1.get_variable("w1", initializer=tf.zeros([2]))
mom = tf1.get_variable("w0/ExponentialMovingAverage", initializer=tf.zeros([4, 2]),
                       partitioner=P, trainable=False)
w0p, momp = list(w0), list(mom)
loss = tf.reduce_sum(tf.square(tf.concat(w0p, 0) - 3.0)) + tf.reduce_sum(tf.square(w1 - 2.0))
gs = tf.gradients(loss, w0p)
train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
ema = tf1.train.ExponentialMovingAverage(0.5)
with tf.control_dependencies([train]):
    upd = tf.group(*[moving_averages.assign_moving_average(m, g, 0.9, zero_debias=False)
                     for m, g in zip(momp, gs)], ema.apply([w1]))
s = tf1.Session()
s.run(tf1.global_variables_initializer())
for _ in range(3):
    s.run(upd)
assert ema.average(w0p[0]) is None
truth.update({"raw:w0": s.run(tf.concat(w0p, 0)), "raw:w1": s.run(w1),
              "ema:w1": s.run(ema.average(w1))})
tf1.train.Saver().save(s, f"{out}/model.ckpt")
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1_partitioned_missing")
    return out, run_tf1_script(SCRIPT, out)


def test_a_partitioned_variable_missing_its_average_is_counted_once(made, tmp_path):
    out, truth = made
    dest = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(out), "--strict", "--out", str(dest)])
    assert code == 6 and not dest.exists(), err
    assert "1 variable has no average stored: w0;" in err and "w0, w0" not in err, err
    assert ckpt_tools.ema_map(str(out)).missing == ("w0",)
    code, _, err = run_cli(["export", str(out), "--allow-missing", "--out", str(dest)])
    assert code == 0, err
    with np.load(dest) as z:  # w0 raw (its parts joined), w1 its EMA's
        assert z["w0"].tobytes() == truth["raw:w0"].tobytes()
        assert z["w1"].tobytes() == truth["ema:w1"].tobytes()

"""TF1 with its ``.meta``: update ops run in a control-flow-v1 ``tf.while_loop``'s body
(``tf1.disable_control_flow_v2()``): the loop's ops read the variables through the ``Enter``
(``RefEnter`` for ref variables) that passes them into its frame, as a v1 ``tf.cond``'s branch
reads them through ``Switch`` (review-18-attack-r39 F1, F5).

- A gradient's first moment kept by ``assign_moving_average(mom, grad)`` under
  ``w0/ExponentialMovingAverage`` in the body (or in a ``tf.function`` called in the body) was
  exported as ``w0``'s average, exit 0 ``--strict`` (CRITICAL): it is refused.
- ``ema.apply()`` of ``ExponentialMovingAverage(name='Momentum')`` beside
  ``MomentumOptimizer(name='Momentum')`` run in the body was refused every way, blaming "function
  bodies not read": its ``AssignMovingAvg`` ops now prove ``w/Momentum_1`` the average.

Made by real TensorFlow in a subprocess; truth ``sess.run`` at save time.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

SCRIPT = r'''
from tensorflow.python.training import moving_averages

case = sys.argv[2]
tf1.disable_control_flow_v2()
if case.endswith("_ref"):
    tf1.disable_resource_variables()
w0 = tf1.get_variable("w0", initializer=tf.ones([3, 2]))
w1 = tf1.get_variable("w1", initializer=tf.zeros([3, 2]))
loss = tf.reduce_sum(tf.square(w0 - 3.0)) + tf.reduce_sum(tf.square(w1 - 2.0))
if case.startswith("momentum"):
    opt = tf1.train.MomentumOptimizer(0.1, 0.9, name="Momentum")
    train = opt.minimize(loss)
    ema = tf1.train.ExponentialMovingAverage(0.5, name="Momentum")

    def update():
        return ema.apply([w0, w1])
    beside = []
else:
    g0 = tf.gradients(loss, [w0])[0]
    train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
    ema = tf1.train.ExponentialMovingAverage(0.5)
    with tf1.variable_scope("w0"):
        mom = tf1.get_variable("ExponentialMovingAverage", initializer=tf.zeros([3, 2]),
                               trainable=False)

    def update():
        return moving_averages.assign_moving_average(mom, g0, 0.9, zero_debias=False)
    beside = [ema.apply([w1])]
if case.startswith("moment_fn"):
    fn = tf.function(lambda: (update(), tf.constant(1))[1])
else:
    def fn():
        with tf.control_dependencies([update()]):
            return tf.constant(1)
with tf.control_dependencies([train]):
    loop = tf.while_loop(lambda i: i < 1, lambda i: [i + fn()], [tf.constant(0)])
    step = tf.group(loop, *beside)
saver = tf1.train.Saver()
with trained(tf, step) as s:
    for v in (w0, w1):
        if ema.average(v) is not None:
            truth[f"ema:{v.op.name}"] = s.run(ema.average(v))
    for v in tf1.global_variables():
        truth[f"raw:{v.op.name}"] = s.run(v)
    saver.save(s, f"{out}/model.ckpt")
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    cache = {}

    def make(case):
        if case not in cache:
            out = tmp_path_factory.mktemp(case)
            cache[case] = out, run_tf1_script(SCRIPT, out, case)
        return cache[case]
    return make


@pytest.mark.parametrize("case", ["moment", "moment_ref", "moment_fn"])
@pytest.mark.parametrize("statement", [[], ["--ema-name", "ExponentialMovingAverage"]])
def test_a_moment_kept_in_the_loop_is_no_average(made, tmp_path, case, statement):
    out, truth = made(case)
    assert "ema:w0" not in truth
    assert not np.array_equal(truth["raw:w0/ExponentialMovingAverage"], truth["raw:w0"])
    code, _, err = run_cli(["export", str(out), "--strict", *statement,
                            "--out", str(tmp_path / "x.npz")])
    assert code == 6, err
    assert "w0/ExponentialMovingAverage is no average of w0" in err
    assert "gradients" in err, err  # the averaged tensor, named outside the loop's Enter


@pytest.mark.parametrize("case", ["momentum", "momentum_ref"])
@pytest.mark.parametrize("statement", [[], ["--ema-name", "Momentum"]])
def test_apply_in_the_loop_proves_the_average(made, tmp_path, case, statement):
    out, truth = made(case)
    assert not np.array_equal(truth["ema:w0"], truth["raw:w0/Momentum"])
    dest = tmp_path / "x.npz"
    code, _, err = run_cli(["export", str(out), "--strict", *statement, "--out", str(dest)])
    assert code == 0, err
    with np.load(dest) as got:
        for n in ("w0", "w1"):
            assert got[n].tobytes() == truth[f"ema:{n}"].tobytes(), n

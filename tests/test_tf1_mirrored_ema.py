"""TF1 with its ``.meta``: ``ema.apply()`` under ``tf.distribute.MirroredStrategy`` in a graph
(multi-GPU TF1 code) is ``apply()``'s update, proven as in a plain graph
(review-18-attack-r39 F9, MAJOR; a regression of 293a9f0's writer rule).

The strategy's ``extended.update`` runs each shadow's update once per device, under
``ExponentialMovingAverage/AssignMovingAvg/update_<N>/AssignSubVariableOp``, not a bare
``AssignMovingAvg`` op: the writer rule read it as a hand writer, every average was refused and
only ``--raw`` was offered. The same proof holds there: the value subtracted is ``shadow - W``
times ``1 - <scope>/decay``.

Made by real TensorFlow in a subprocess (one CPU device, and two logical CPU devices so each
shadow has a ``replica_1`` copy); truth ``sess.run(ema.average(v))`` at save time.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

import ckpt_tools

SCRIPT = r'''
devices = int(sys.argv[2])
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration()] * devices)
with tf.Graph().as_default():
    st = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(devices)])
    with st.scope():
        w0 = tf1.get_variable("w0", initializer=tf.ones([3, 2]))
        w1 = tf1.get_variable("w1", initializer=tf.zeros([2]))
        opt = tf1.train.GradientDescentOptimizer(0.1)
        ema = tf1.train.ExponentialMovingAverage(0.5)

    def step():
        loss = tf.reduce_sum(tf.square(w0 - 3.0)) + tf.reduce_sum(tf.square(w1 - 2.0))
        return opt.minimize(loss)

    with st.scope():
        train = st.extended.call_for_each_replica(step)
        with tf.control_dependencies(st.experimental_local_results(train)):
            upd = ema.apply([w0, w1])
    s = tf1.Session()
    s.run(tf1.global_variables_initializer())
    for _ in range(3):
        s.run(upd)
    names = [o.name for o in s.graph.get_operations()]
    assert "ExponentialMovingAverage/AssignMovingAvg/update_0/AssignSubVariableOp" in names
    for v in (w0, w1):
        truth[f"ema:{v.op.name}"] = s.run(ema.average(v))
        truth[f"raw:{v.op.name}"] = s.run(v)
    tf1.train.Saver().save(s, f"{out}/model.ckpt")
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1_mirrored")
    return out, {n: run_tf1_script(SCRIPT, out / str(n), str(n)) for n in (1, 2)}


@pytest.mark.parametrize("devices", [1, 2])
def test_apply_under_mirrored_strategy_is_proven(made, tmp_path, devices):
    out, truths = made
    run, truth, dest = out / str(devices), truths[devices], tmp_path / "w.npz"
    assert truth["ema:w0"].tobytes() != truth["raw:w0"].tobytes()
    for stated in ([], ["--ema-name", "ExponentialMovingAverage"]):
        code, _, err = run_cli(["export", str(run), "--strict", *stated, "--out", str(dest)])
        assert code == 0, (stated, err)
        with np.load(dest) as z:
            for var in ("w0", "w1"):
                assert z[var].tobytes() == truth[f"ema:{var}"].tobytes(), (stated, var)
        dest.unlink()
    m = ckpt_tools.ema_map(str(run))
    assert m.source == "meta" and not m.missing, m
    assert dict(m.pairs)["w0/ExponentialMovingAverage"] == "w0", m

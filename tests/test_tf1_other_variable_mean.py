"""TF1 with its ``.meta``: ``w0/ExponentialMovingAverage`` kept by a hand-written
``assign_moving_average(m, w0/accum, 0.9)`` (a momentum slot in EMA form over the gradient
accumulator ``w0/accum``), beside a real default EMA over ``w1``, in the graph, in a
control-flow-v2 ``tf.cond`` and with a text-format ``.meta``: with no ``--ema-name`` it was
exported as ``w0``'s average, exit 0 under ``--strict`` (a stated name was refused); TF's
``ema.average(w0)`` is ``None``. Now refused (exit 6) naming the variable averaged into it.

Made by real TensorFlow in a subprocess; truth read at save time.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

SCRIPT = r'''
from tensorflow.python.training import moving_averages

case = sys.argv[2]
w0 = tf1.get_variable("w0", initializer=tf.ones([3, 2]))
w1 = tf1.get_variable("w1", initializer=tf.zeros([2]))
step = tf1.assign_add(w0, tf.ones([3, 2]) * 0.7), tf1.assign_add(w1, tf.ones([2]) * 1.3)
ema = tf1.train.ExponentialMovingAverage(0.9)
with tf1.variable_scope("w0"):
    mom = tf1.get_variable(ema.name, initializer=tf.zeros([3, 2]), trainable=False)
    acc = tf1.get_variable("accum", initializer=tf.zeros([3, 2]), trainable=False)
with tf.control_dependencies(step):
    a_upd = tf1.assign_add(acc, tf.ones([3, 2]) * 0.3)
with tf.control_dependencies([a_upd]):
    mk = lambda: moving_averages.assign_moving_average(mom, acc, 0.9, zero_debias=False)
    u = tf.cond(tf1.placeholder_with_default(True, []), mk, lambda: tf.identity(mom)) \
        if case == "cond" else mk()
    upd = tf.group(ema.apply([w1]), u)
s = tf1.Session()
s.run(tf1.global_variables_initializer())
for _ in range(3):
    s.run(upd)
assert ema.average(w0) is None
truth.update({f"raw:{v.op.name}": s.run(v) for v in tf1.global_variables()})
truth["ema:w1"] = s.run(ema.average(w1))
saver = tf1.train.Saver()
saver.save(s, f"{out}/model.ckpt", write_meta_graph=case != "text")
if case == "text":
    saver.export_meta_graph(f"{out}/model.ckpt.meta", as_text=True)
'''
CASES = ("plain", "cond", "text")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1_other_mean")
    return out, {c: run_tf1_script(SCRIPT, out / c, c) for c in CASES}


@pytest.mark.parametrize("case", CASES)
def test_a_running_mean_of_another_variable_is_no_average(made, tmp_path, case):
    out, truths = made
    run, dest = out / case, tmp_path / "w.npz"
    for command in (["export", "--strict", "--out", str(dest)], ["map"]):
        code, _, err = run_cli([command[0], str(run), *command[1:]])
        assert code == 6 and not dest.exists(), err
        assert "w0/ExponentialMovingAverage is no average of w0" in err, err
        assert "averages w0/accum into it" in err and "--raw" in err, err
    code, _, err = run_cli(["export", str(run), "--raw", "--out", str(dest)])
    assert code == 0, err
    with np.load(dest) as z:
        assert z["w0"].tobytes() == truths[case]["raw:w0"].tobytes()

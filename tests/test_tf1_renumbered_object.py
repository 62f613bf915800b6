"""TF1 with its ``.meta``: objects ``ema``, ``ema/fast`` over ``w0``, ``w1`` and ``fast`` over
``ema.average(w0)``, ``fast`` applied first: TF names ``fast``'s average ``w0/ema/fast`` and
object ``ema/fast``'s average of ``w0`` ``w0/ema/fast_1`` (review-17-attack-r36 F11, MAJOR).
The true ``--ema-name ema/fast`` was refused "no EMA object named ema/fast averaged w0" with no
way out; the update ops show object ``ema/fast`` writing ``w0/ema/fast_1`` from ``w0``.

Made by real TensorFlow in a subprocess; truth ``sess.run(o.average(v))`` at save time.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

SCRIPT = r'''
E = tf1.train.ExponentialMovingAverage
w0 = tf1.get_variable("w0", initializer=tf.ones([3, 2]))
w1 = tf1.get_variable("w1", initializer=tf.zeros([2]))
step = tf1.assign_add(w0, tf.ones([3, 2]) * 0.7), tf1.assign_add(w1, tf.ones([2]) * 1.3)
slow = E(0.9, name="ema"); ef = E(0.5, name="ema/fast"); fast = E(0.3, name="fast")
where = sys.argv[2]
if where != "plain":
    tf1.disable_control_flow_v2()


def applies():
    with tf.control_dependencies(step):
        u1 = slow.apply([w0, w1])
    with tf.control_dependencies([u1]):
        b = fast.apply([slow.average(w0)])
        a = ef.apply([w0, w1])
        return tf.group(a, b)


def branch():
    with tf.control_dependencies([applies()]):
        return tf.constant(1)


if where == "plain":
    upd = applies()
elif where == "cond_v1":  # the applies' scopes: cond/ema, cond/fast, cond/ema/fast
    upd = tf.cond(tf1.placeholder_with_default(True, []), branch, lambda: tf.constant(0))
else:  # while_v1: while/ema, ...
    upd = tf.while_loop(lambda i: i < 1, lambda i: [i + branch()], [tf.constant(0)])
saver = tf1.train.Saver()
with trained(tf, upd) as s:
    assert ef.average(w0).op.name == "w0/ema/fast_1"
    for v in (w0, w1):
        truth[f"ema/fast:{v.op.name}"] = s.run(ef.average(v))
    truth["fast_of_ema:w0"] = s.run(fast.average(slow.average(w0)))
    saver.save(s, f"{out}/model.ckpt")
'''


@pytest.mark.parametrize("where", ["plain", "cond_v1", "while_v1"])
def test_renumbered_average_of_the_stated_object_is_taken(tmp_path, where):
    """In a control-flow-v1 cond or while the apply() scopes are cond/ema/fast, while/...:
    the object named ema/fast all the same (review-18-attack-r39 F3)."""
    truth = run_tf1_script(SCRIPT, tmp_path / "run", where)
    assert not np.array_equal(truth["ema/fast:w0"], truth["fast_of_ema:w0"])
    dest = tmp_path / "x.npz"
    code, _, err = run_cli(["export", str(tmp_path / "run"), "--strict", "--ema-name",
                            "ema/fast", "--allow-missing", "--out", str(dest)])
    assert code == 0, err
    with np.load(dest) as got:
        for n in ("w0", "w1"):
            assert got[n].tobytes() == truth[f"ema/fast:{n}"].tobytes(), n

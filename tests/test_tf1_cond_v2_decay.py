"""TF1: one EMA object (0.5, ``name='fast'``) applied to ``w``, ``b`` and again to ``c``
inside a control-flow-v2 ``tf.cond`` (TF2's default under ``disable_eager_execution``;
review-28-attack-r103 F3). The second apply()'s decay is a ``Const`` (``fast/decay``) in the
branch function, which was not decoded: refused, saying the .meta gives it as no constant.
The branch's constants are now read: exit 0, bit for bit, as with a v1 cond. Two objects
(0.5 and 0.9), the second's apply() in the v2 cond, stay refused, now naming both decays.
Truth is ``sess.run(ema.average(v))`` at save time (real TensorFlow)."""

from __future__ import annotations

import pytest
from helpers import assert_npz_holds, run_cli, run_script

SCRIPT = r"""
import os, sys
import numpy as np
import tensorflow as tf
tf1 = tf.compat.v1
tf1.disable_eager_execution()
tf1.enable_control_flow_v2()
root = sys.argv[1]
truth = {}
for case in ("one", "two"):
    with tf.Graph().as_default():
        w, b, c = (tf1.get_variable(n, initializer=tf.constant(v), use_resource=True)
                   for n, v in (("w", [1., 2., 3.]), ("b", [0.5]), ("c", [7., 8.])))
        step = tf1.train.get_or_create_global_step()
        upd = [tf1.assign_add(v, tf.ones_like(v) * 1.25) for v in (w, b, c)]
        e1 = tf1.train.ExponentialMovingAverage(0.5, name="fast")
        e2 = e1 if case == "one" else tf1.train.ExponentialMovingAverage(0.9, name="fast")
        with tf.control_dependencies(upd):
            a1 = e1.apply([w, b])
            a2 = tf1.cond(step >= 0, lambda: tf.group(e2.apply([c])), tf.no_op)
        train = tf.group(a1, a2, tf1.assign_add(step, 1))
        saver = tf1.train.Saver()
        with tf1.Session() as s:
            s.run(tf1.global_variables_initializer())
            for _ in range(3):
                s.run(train)
            truth.update({f"{case}:w": s.run(e1.average(w)), f"{case}:b": s.run(e1.average(b)),
                          f"{case}:c": s.run(e2.average(c))})
            saver.save(s, os.path.join(root, case, "model.ckpt"), global_step=1)
np.savez(os.path.join(root, "truth.npz"), **truth)
"""


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    pytest.importorskip("tensorflow")
    out = tmp_path_factory.mktemp("condv2decay")
    return out, run_script(SCRIPT, out)


@pytest.mark.parametrize("args", [[], ["--ema-name", "fast"]])
def test_one_object_applied_in_a_v2_cond_exports(made, args, tmp_path):
    out, truth = made
    code, _o, err = run_cli(["export", str(out / "one"), "-o", str(tmp_path / "x.npz"), *args])
    assert code == 0, err
    assert_npz_holds(tmp_path / "x.npz", {v: truth[f"one:{v}"] for v in "wbc"})


def test_two_objects_one_in_a_v2_cond_stay_refused(made, tmp_path):
    out, _truth = made
    code, _o, err = run_cli(["export", str(out / "two"), "-o", str(tmp_path / "x.npz"),
                             "--ema-name", "fast"])
    assert code == 6, err
    line = " ".join(err.split())
    assert "(decay 0.5) writes b/fast, w/fast" in line, line
    assert "(decay 0.9) writes c/fast" in line and "no constant" not in line, line
    assert not (tmp_path / "x.npz").exists()

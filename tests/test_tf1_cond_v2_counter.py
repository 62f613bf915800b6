"""TF1 (control flow v2): an ``ExponentialMovingAverage`` with ``num_updates``, or given a
decay variable, applied to ``w``, ``b`` plainly and again to ``c`` inside a v2 ``tf.cond``
branch (review-28-attack-r104 F2; note s28g). The branch function reads the counter (or the
decay variable) through its argument, which the graph's ``If`` passes the variable's handle
as: the counter was left unread there and ONE object was refused as "a decay the .meta does
not show", with only partial exports offered. The argument is now read as the graph's node
passed in, so one object's calls show one counter (exit 0, bit for bit), while two objects
with different counters (``g_step``, ``d_step``) or decay variables stay refused, one of
them in the cond or both. Truth is ``sess.run(ema.average(v))`` at save time (real
TensorFlow)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import error_line, run_cli, same_bits
from helpers_tf1 import E, run_tf1_script

BODY = r"""
tf1.enable_control_flow_v2()
for case in ("one", "two", "both_in", "var_one", "var_two"):
    with tf.Graph().as_default():
        w, b, c = (tf1.get_variable(n, initializer=tf.constant(v), use_resource=True)
                   for n, v in (("w", [1., 2., 3.]), ("b", [0.5]), ("c", [7., 8.])))
        g_step = tf1.get_variable("g_step", initializer=tf.constant(0, tf.int64),
                                  trainable=False, use_resource=True)
        d_step = tf1.get_variable("d_step", initializer=tf.constant(10**6, tf.int64),
                                  trainable=False, use_resource=True)
        dv = [tf1.get_variable(f"decay{i}", initializer=0.9, trainable=False,
                               use_resource=True) for i in (1, 2)]
        if case.startswith("var"):
            e1 = tf1.train.ExponentialMovingAverage(dv[0])
            e2 = e1 if case == "var_one" else tf1.train.ExponentialMovingAverage(dv[1])
        else:
            e1 = tf1.train.ExponentialMovingAverage(0.999, num_updates=g_step)
            e2 = e1 if case == "one" else tf1.train.ExponentialMovingAverage(
                0.999, num_updates=d_step)
        bump = [tf1.assign_add(v, tf.ones_like(v) * 1.25) for v in (w, b, c)]
        with tf.control_dependencies(bump):
            if case == "both_in":
                ops = [tf1.cond(g_step >= 0, lambda: tf.group(e1.apply([w, b]),
                                                              e2.apply([c])), tf.no_op)]
            else:
                ops = [e1.apply([w, b]),
                       tf1.cond(g_step >= 0, lambda: tf.group(e2.apply([c])), tf.no_op)]
        with tf.control_dependencies(ops):
            step = tf.group(tf1.assign_add(g_step, 1), tf1.assign_add(d_step, 1))
        saver = tf1.train.Saver()
        with trained(tf, step) as s:
            truth.update({f"{case}:{v.op.name}": s.run(e.average(v))
                          for e, v in ((e1, w), (e1, b), (e2, c))})
            saver.save(s, os.path.join(out, case, "model.ckpt"))
"""


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    pytest.importorskip("tensorflow")
    out = tmp_path_factory.mktemp("condv2counter")
    return out, run_tf1_script(BODY, out)


@pytest.mark.parametrize("case,args", [("one", []), ("one", ["--ema-name", E]),
                                       ("var_one", ["--ema-name", E])])
def test_one_object_applied_again_in_a_v2_cond_exports(made, case, args, tmp_path):
    out, truth = made
    code, _o, err = run_cli(["export", str(out / case), "-o", str(tmp_path / "x.npz"), *args])
    assert code == 0, err
    with np.load(tmp_path / "x.npz") as z:  # beside the counters' and decays' own values
        assert all(same_bits(z[v], truth[f"{case}:{v}"]) for v in "wbc")


@pytest.mark.parametrize("case,shown", [
    ("two", ("with n = variable 'g_step') writes b/", "with n = variable 'd_step') writes c/")),
    ("both_in", ("with n = variable 'g_step') writes b/", "with n = variable 'd_step') writes c/")),
    ("var_two", ("(decay variable 'decay1') writes b/", "(decay variable 'decay2') writes c/"))])
@pytest.mark.parametrize("args", [[], ["--ema-name", E]])
def test_two_objects_of_other_counters_or_decays_stay_refused(made, case, shown, args,
                                                              tmp_path):
    out, _truth = made
    code, _o, err = run_cli(["export", str(out / case), "-o", str(tmp_path / "x.npz"), *args])
    assert code == 6, err
    line = error_line(err)
    assert all(s in line for s in shown), line
    assert "does not show" not in line, line
    assert not (tmp_path / "x.npz").exists()

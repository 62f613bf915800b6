"""TF1: one EMA object (0.5, ``name='fast'``) applied to ``w``, ``b`` and again to ``c``
inside a control-flow-v2 ``tf.cond`` (TF2's default under ``disable_eager_execution``;
review-28-attack-r103 F3). The second apply()'s decay is a ``Const`` (``fast/decay``) in the
branch function, which was not decoded: refused, saying the .meta gives it as no constant.
The branch's constants are now read: exit 0, bit for bit, as with a v1 cond. Two objects
(0.5 and 0.9), the second's apply() in the v2 cond, stay refused, now naming both decays.
Truth is ``sess.run(ema.average(v))`` at save time (real TensorFlow)."""

from __future__ import annotations

import pytest
from helpers import assert_npz_holds, run_cli
from helpers_tf1 import run_tf1_script

SCRIPT = r"""
tf1.enable_control_flow_v2()
for case in ("one", "two"):
    with tf.Graph().as_default():
        (w, b, c), step, upd = nudged_wbc(tf, use_resource=True)
        e1 = tf1.train.ExponentialMovingAverage(0.5, name="fast")
        e2 = e1 if case == "one" else tf1.train.ExponentialMovingAverage(0.9, name="fast")
        with tf.control_dependencies(upd):
            a1 = e1.apply([w, b])
            a2 = tf1.cond(step >= 0, lambda: tf.group(e2.apply([c])), tf.no_op)
        train = tf.group(a1, a2, tf1.assign_add(step, 1))
        with saved_trained(tf, train, os.path.join(out, case, "model.ckpt")) as (s, _):
            truth.update({f"{case}:w": s.run(e1.average(w)), f"{case}:b": s.run(e1.average(b)),
                          f"{case}:c": s.run(e2.average(c))})
"""


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    pytest.importorskip("tensorflow")
    out = tmp_path_factory.mktemp("condv2decay")
    return out, run_tf1_script(SCRIPT, out)


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

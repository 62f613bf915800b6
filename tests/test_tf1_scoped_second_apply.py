"""TF1: one ``ExponentialMovingAverage(0.5, name='fast')`` applied to ``w``, ``b`` and again
to ``c`` under ``variable_scope('s')``, which names ``c``'s average ``s/c/fast`` (note s28b).
The default export took it (one decay), but ``--ema-name fast`` refused it: "s/c/fast is not
named <var>/fast, so another object's". The key is the one ``apply()`` scope ``s/fast`` gives
``c``, whose average the graph shows it to be, and no ``_N`` twin: which object wrote it is
now the decays' question under ``--ema-name`` too, as for the default export (exit 0, bit for
bit). A second object of another decay (0.9) so applied, or one that averages ``w`` again
under the scope (``s/w/fast`` beside ``w/fast``), stays refused. Truth is
``sess.run(ema.average(v))`` at save time (real TensorFlow)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import error_line, run_cli, same_bits
from helpers_tf1 import run_tf1_script

BODY = r"""
EMA = tf1.train.ExponentialMovingAverage
for case in ("one", "two", "again_w"):
    with tf.Graph().as_default():
        w, b, c = (tf1.get_variable(n, initializer=tf.constant(v))
                   for n, v in (("w", [1., 2., 3.]), ("b", [0.5]), ("c", [7., 8.])))
        step = tf1.train.get_or_create_global_step()
        e1 = EMA(0.5, name="fast")
        e2 = e1 if case == "one" else EMA(0.9 if case == "two" else 0.5, name="fast")
        with tf.control_dependencies([tf1.assign_add(v, tf.ones_like(v) * 1.25)
                                      for v in (w, b, c)]):
            a1 = e1.apply([w, b])
            with tf1.variable_scope("s"):
                a2 = e2.apply([w, c] if case == "again_w" else [c])
        train = tf.group(a1, a2, tf1.assign_add(step, 1))
        saver = tf1.train.Saver()
        with trained(tf, train) as s:
            truth.update({f"{case}:{v.op.name}": s.run(e.average(v))
                          for e, v in ((e1, w), (e1, b), (e2, c))})
            saver.save(s, os.path.join(out, case, "model.ckpt"))
"""


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    pytest.importorskip("tensorflow")
    out = tmp_path_factory.mktemp("scopedapply")
    return out, run_tf1_script(BODY, out)


@pytest.mark.parametrize("args", [[], ["--ema-name", "fast"]])
def test_one_object_applied_again_under_a_variable_scope_exports(made, args, tmp_path):
    out, truth = made
    code, _o, err = run_cli(["export", str(out / "one"), "-o", str(tmp_path / "x.npz"), *args])
    assert code == 0, err
    with np.load(tmp_path / "x.npz") as z:
        assert sorted(z.files) == ["b", "c", "w"]
        assert all(same_bits(z[v], truth[f"one:{v}"]) for v in "wbc")


@pytest.mark.parametrize("case,shown", [
    ("two", ("(decay 0.5) writes b/fast, w/fast", "(decay 0.9) writes s/c/fast")),
    ("again_w", ("w has s/w/fast, w/fast", "two EMA objects of one name"))])
def test_a_second_object_under_the_scope_stays_refused(made, case, shown, tmp_path):
    out, _truth = made
    code, _o, err = run_cli(["export", str(out / case), "-o", str(tmp_path / "x.npz"),
                             "--ema-name", "fast"])
    assert code == 6, err
    line = error_line(err)
    assert all(s in line for s in shown), line
    assert not (tmp_path / "x.npz").exists()

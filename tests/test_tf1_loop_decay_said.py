"""TF1: ``ExponentialMovingAverage(0.5, num_updates=..., name='fast')`` applied in a
control-flow-v2 ``tf.while_loop`` body (note s29f: a loop's function arguments are each
iteration's values, so the decay or counter it is passed names no node of the graph and its
decay is not read; :class:`~ckpt_tools.formats.graph_def.Branch` ``loop``). Both stay refused
(exit 6), the refusal now saying why the decay is not read instead of "a decay the .meta does
not show":

- ``twice``: ONE object, integer ``g_step``, applied in the loop body to ``w``, ``b``, ``c`` and
  again outside it to ``w``: the two ``apply()`` calls are not shown one object's, by default
  and under ``--ema-name fast``; ``--ema-name fast --exclude 'w'`` exports the loop's averages.
- ``float``: ONE object, ``num_updates=tf.cast(g_step, tf.float32)``, applied once in the loop
  body: its decay is not read as ``apply()``'s, so the name is not proven; ``--ema-name fast``
  states it.

Truth is ``sess.run(ema.average(v))`` at save time (real TensorFlow), bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import error_line, run_cli, same_bits
from helpers_tf1 import run_tf1_script

BODY = r"""
EMA = tf1.train.ExponentialMovingAverage
for case in ("twice", "float"):
    with tf.Graph().as_default():
        w, b, c = (tf1.get_variable(n, initializer=tf.constant(v))
                   for n, v in (("w", [1., 2., 3.]), ("b", [0.5]), ("c", [7., 8.])))
        g = tf1.get_variable("g_step", initializer=tf.constant(0, tf.int64), trainable=False)
        e = EMA(0.5, num_updates=g if case == "twice" else tf.cast(g, tf.float32), name="fast")

        def body(i):
            with tf.control_dependencies([e.apply([w, b, c])]):
                return i + 1

        with tf.control_dependencies([tf1.assign_add(v, tf.ones_like(v) * 1.25)
                                      for v in (w, b, c)]):
            applied = list(tf.while_loop(lambda i: i < 1, body, [tf.constant(0)]))
        if case == "twice":
            with tf.control_dependencies(applied):
                applied = [e.apply([w])]
        with tf.control_dependencies(applied):
            step = tf.group(tf1.assign_add(g, 1))
        saver = tf1.train.Saver()
        with trained(tf, step) as s:
            truth.update({f"{case}:{v.op.name}": s.run(e.average(v)) for v in (w, b, c)})
            truth.update({f"{case}:raw:{v.op.name}": s.run(v) for v in (w, b, c)})
            os.makedirs(os.path.join(out, case), exist_ok=True)
            saver.save(s, os.path.join(out, case, "model.ckpt"))
"""

LOOPED = ("a decay in a tf.while_loop body, whose arguments are each iteration's values, "
          "so the decay or num_updates counter passed in names no node of the graph")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    pytest.importorskip("tensorflow")
    out = tmp_path_factory.mktemp("loopdecay")
    return out, run_tf1_script(BODY, out)


def _holds(path, truth: dict, case: str, names: str) -> None:
    with np.load(path) as z:
        assert all(same_bits(z[v], truth[f"{case}:{v}"]) for v in names), z.files
        assert not any(same_bits(z[v], truth[f"{case}:raw:{v}"]) for v in names)
        assert not set(names) ^ (set(z.files) & set("wbc")), z.files


def test_one_object_in_a_loop_and_outside_stays_refused_saying_why(made, tmp_path):
    out, truth = made
    for stated in ([], ["--ema-name", "fast"]):
        code, _o, err = run_cli(["export", str(out / "twice"), "-o", str(tmp_path / "x.npz"),
                                 *stated])
        line = error_line(err)
        assert code == 6 and f"({LOOPED}) writes" in line, err
        assert "a decay the .meta does not show" not in line, line
        assert "--ema-name fast --exclude 'w'" in line, line
        assert not (tmp_path / "x.npz").exists()
    code, _o, err = run_cli(["export", str(out / "twice"), "-o", str(tmp_path / "l.npz"),
                             "--ema-name", "fast", "--exclude", "w"])
    assert code == 0, err
    _holds(tmp_path / "l.npz", truth, "twice", "bc")


def test_a_float_counter_in_a_loop_stays_refused_saying_why(made, tmp_path):
    out, truth = made
    code, _o, err = run_cli(["export", str(out / "float"), "-o", str(tmp_path / "d.npz")])
    line = error_line(err)
    assert code == 6 and "the .meta shows the updates of 'fast in while_body" in line, err
    assert f"reading {LOOPED}:" in line and "pass --ema-name fast" in line, line
    assert not (tmp_path / "d.npz").exists()
    code, _o, err = run_cli(["export", str(out / "float"), "-o", str(tmp_path / "x.npz"),
                             "--ema-name", "fast"])
    assert code == 0, err
    _holds(tmp_path / "x.npz", truth, "float", "wbc")

"""TF1: ``ExponentialMovingAverage(0.5, num_updates=n, name='fast')`` with a float32 counter
(``tf.cast(g_step, tf.float32)``, a float variable), applied to ``w``, ``b`` and again to
``c`` (note s28b: the counter's identity was not compared). ``apply()`` casts ``num_updates``
to float32 as ``<scope>/num_updates``; a float32 counter is not cast, so each ``apply()``'s
decay was read as its own scope's ``Minimum`` node: ONE object was refused under
``--ema-name fast`` as two. The decay is now read as ``min(0.5, (1 + n) / (10 + n))`` naming
the counter node ``n``: one object exports (bit for bit), two objects given different float
counters stay refused (exit 6) naming both counters, with the ``--ema-name fast --exclude``
offers that export each object's averages. The default export asked for ``--ema-name``
(no ``<scope>/num_updates``), saying ``apply()`` builds "any decay with num_updates" itself
(note s29f): it now takes TF's own ``min(decay, (1 + n) / (10 + n))`` over one named counter
as ``apply()``'s, as it takes an integer counter's (ONE object applied once or twice, by
default too), and refuses two objects' counters and a hand-written ``min(0.5, (1 + n) /
(20 + n))`` in ``apply()``'s idiom (exit 6, saying the decay read). Truth is
``sess.run(ema.average(v))`` (or the hand-kept mean) at save time (real TensorFlow)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import error_line, run_cli, same_bits
from helpers_tf1 import run_tf1_script

BODY = r"""
from tensorflow.python.training import moving_averages
EMA = tf1.train.ExponentialMovingAverage
for case in ("two_cast", "one_cast", "one_var", "hand", "once"):
    with tf.Graph().as_default():
        w, b, c = (tf1.get_variable(n, initializer=tf.constant(v))
                   for n, v in (("w", [1., 2., 3.]), ("b", [0.5]), ("c", [7., 8.])))
        g = tf1.get_variable("g_step", initializer=tf.constant(0, tf.int64), trainable=False)
        d = tf1.get_variable("d_step", initializer=tf.constant(5000, tf.int64), trainable=False)
        f = tf1.get_variable("f_step", initializer=tf.constant(3.0), trainable=False)
        if case == "two_cast":
            e1 = EMA(0.5, num_updates=tf.cast(g, tf.float32), name="fast")
            e2 = EMA(0.5, num_updates=tf.cast(d, tf.float32), name="fast")
        else:
            e1 = e2 = EMA(0.5, num_updates=tf.cast(g, tf.float32) if case == "one_cast" else f,
                          name="fast")
        # a running mean written by hand in apply()'s idiom (name scope, grouped NoOp,
        # moving_average_variables) whose decay is min(0.5, (1 + n) / (20 + n)): not TF's
        slow = {v: tf1.get_variable(v.op.name + "/fast", trainable=False,
                                    initializer=tf.identity(v.initial_value))
                for v in (w, b, c)} if case == "hand" else {}
        with tf.control_dependencies([tf1.assign_add(v, tf.ones_like(v) * 1.25)
                                      for v in (w, b, c)]):
            if case == "hand":
                n = tf.cast(g, tf.float32)
                with tf.name_scope("fast") as scope:
                    dec = tf.minimum(0.5, (1.0 + n) / (20.0 + n))
                    ups = [moving_averages.assign_moving_average(a, v, dec, zero_debias=False)
                           for v, a in slow.items()]
                    for v in slow:
                        tf1.add_to_collection(tf1.GraphKeys.MOVING_AVERAGE_VARIABLES, v)
                    applied = [tf.group(*ups, name=scope)]
            elif case == "once":  # ONE apply() of ONE object
                applied = [e1.apply([w, b, c])]
            else:
                applied = [e1.apply([w, b]), e2.apply([c])]
        with tf.control_dependencies(applied):
            step = tf.group(*[tf1.assign_add(v, tf.ones_like(v)) for v in (g, d, f)])
        saver = tf1.train.Saver()
        with trained(tf, step) as s:
            truth.update({f"{case}:{v.op.name}": s.run(slow[v] if slow else e.average(v))
                          for e, v in ((e1, w), (e1, b), (e2, c))})
            truth.update({f"{case}:raw:{v.op.name}": s.run(v) for v in (w, b, c)})
            saver.save(s, os.path.join(out, case, "model.ckpt"))
"""


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    pytest.importorskip("tensorflow")
    out = tmp_path_factory.mktemp("floatcounter")
    return out, run_tf1_script(BODY, out)


def _holds(path, truth: dict, case: str, names: str) -> None:
    with np.load(path) as z:  # beside the counters' own raw values
        assert all(same_bits(z[v], truth[f"{case}:{v}"]) for v in names)
        assert not set(names) ^ (set(z.files) & set("wbc")), z.files


@pytest.mark.parametrize("case", ["once", "one_cast", "one_var"])
def test_one_object_of_a_float_counter_exports(made, case, tmp_path):
    """By default too, as with an integer counter (s29f: the default export asked for
    ``--ema-name``, the graph's ``min(0.5, (1 + n) / (10 + n))`` read whole unproven)."""
    out, truth = made
    for i, stated in enumerate(([], ["--ema-name", "fast"])):
        code, _o, err = run_cli(["export", str(out / case), "-o", str(tmp_path / f"{i}.npz"),
                                 *stated])
        assert code == 0, err
        _holds(tmp_path / f"{i}.npz", truth, case, "wbc")
        assert not same_bits(truth[f"{case}:w"], truth[f"{case}:raw:w"])


def test_two_objects_of_two_float_counters_stay_refused(made, tmp_path):
    out, truth = made
    for stated in (["--ema-name", "fast"], []):
        code, _o, err = run_cli(["export", str(out / "two_cast"), "-o",
                                 str(tmp_path / "x.npz"), *stated])
        assert code == 6, err
        line = error_line(err)
        assert "(decay min(0.5, (1 + n) / (10 + n)) with n = tensor 'Cast') writes b/fast" \
            in line, line
        assert "with n = tensor 'Cast_1') writes c/fast" in line, line
        assert "--ema-name fast --exclude 'c'" in line, line
        assert not (tmp_path / "x.npz").exists()
    code, _o, err = run_cli(["export", str(out / "two_cast"), "-o", str(tmp_path / "g.npz"),
                             "--ema-name", "fast", "--exclude", "c"])
    assert code == 0, err
    _holds(tmp_path / "g.npz", truth, "two_cast", "wb")


def test_a_hand_written_minimum_of_a_float_counter_says_what_it_reads(made, tmp_path):
    """``min(0.5, (1 + n) / (20 + n))`` built by hand in a scope ``fast`` in apply()'s idiom:
    not TF's formula. Refused by default, saying the decay read; ``--ema-name fast`` states
    it (the hand-kept means, bit for bit)."""
    out, truth = made
    assert not same_bits(truth["hand:w"], truth["hand:raw:w"])
    code, _o, err = run_cli(["export", str(out / "hand"), "-o", str(tmp_path / "d.npz")])
    line = error_line(err)
    assert code == 6 and "reading decay tensor 'fast/Minimum':" in line, err
    assert ("or a float32 counter, which it does not cast, as TF's own min(decay, (1 + n) / "
            "(10 + n)) over one counter node n the graph names)") in line, line
    assert "pass --ema-name fast" in line, line
    assert not (tmp_path / "d.npz").exists()
    code, _o, err = run_cli(["export", str(out / "hand"), "-o", str(tmp_path / "x.npz"),
                             "--ema-name", "fast"])
    assert code == 0, err
    _holds(tmp_path / "x.npz", truth, "hand", "wbc")

"""TF1: two EMA objects of one name and one decay constant whose ``num_updates`` come from
different counters (review-28-attack-r103 F1): a GAN's ``EMA(0.999, num_updates=g_step)`` over
``w``, ``b`` and ``EMA(0.999, num_updates=d_step)`` over ``c`` (both default-named), or
``num_updates=tf.constant(10**6)`` beside ``global_step``. Their effective decays
``min(d, (1 + n) / (10 + n))`` differ, yet the decay text held only ``d``: export, map,
restore-ema and ``average --ema --bake`` took the mix, exit 0. The decay now names the counter
its ``<scope>/num_updates`` reads; different counters are refused (exit 6) with the
``--exclude`` offers that export each object's averages (bit for bit). One object applied per
tower name scope (one counter) and one given a Python number as ``num_updates`` applied twice
still export, bit for bit. Truth is ``sess.run(ema.average(v))`` at save time."""

from __future__ import annotations

import pytest
from helpers import assert_npz_holds, run_cli
from helpers_tf1 import run_tf1_script

SCRIPT = r"""
EMA = tf1.train.ExponentialMovingAverage
for case in ("gan", "const", "towers", "pyint"):
    with tf.Graph().as_default():
        (w, b, c), step, upd = nudged_wbc(tf)
        g = tf1.get_variable("g_step", initializer=tf.constant(0, tf.int64), trainable=False)
        d = tf1.get_variable("d_step", initializer=tf.constant(5000, tf.int64), trainable=False)
        if case == "gan":
            e1, e2 = EMA(0.999, num_updates=g), EMA(0.999, num_updates=d)
        elif case == "const":
            e1 = EMA(0.9, num_updates=step, name="fast")
            e2 = EMA(0.9, num_updates=tf.constant(10**6, tf.int64), name="fast")
        elif case == "towers":
            e1 = e2 = EMA(0.99, num_updates=step, name="fast")
        else:
            e1 = e2 = EMA(0.9, num_updates=5, name="fast")
        with tf.control_dependencies(upd):
            if case == "towers":
                with tf.name_scope("tower_0"):
                    a1 = e1.apply([w, b])
                with tf.name_scope("tower_1"):
                    a2 = e2.apply([c])
            else:
                a1, a2 = e1.apply([w, b]), e2.apply([c])
        train = tf.group(a1, a2, tf1.assign_add(step, 1), tf1.assign_add(g, 1),
                         tf1.assign_add(d, 1))
        prefix = os.path.join(out, case, "model.ckpt")
        with saved_trained(tf, train, prefix) as (s, saver):
            truth.update({f"{case}:w": s.run(e1.average(w)), f"{case}:b": s.run(e1.average(b)),
                          f"{case}:c": s.run(e2.average(c))})
            if case == "gan":
                s.run(train)
                saver.save(s, prefix, global_step=2)
"""


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    pytest.importorskip("tensorflow")
    out = tmp_path_factory.mktemp("numupdcounters")
    return out, run_tf1_script(SCRIPT, out)


@pytest.mark.parametrize("case,said", [
    ("gan", ["with n = variable 'g_step'", "with n = variable 'd_step'"]),
    ("const", ["with n = 1000000", "with n = variable 'global_step'"])])
def test_one_decay_from_two_counters_is_refused(made, case, said, tmp_path):
    out, _truth = made
    ckpt = str(out / case / "model.ckpt-1")
    for args in (["export", ckpt, "-o", str(tmp_path / "x.npz")], ["map", ckpt, "--json"],
                 ["restore-ema", ckpt, "-o", str(tmp_path / "re")]):
        code, _o, err = run_cli(args)
        assert code == 6, (args, err)
        line = " ".join(err.split())
        assert "not proven one EMA object's" in line, line
        assert all(s in line for s in said), line
    assert not (tmp_path / "x.npz").exists()
    if case == "gan":
        code, _o, err = run_cli(["average", str(out / case), "--last", "2", "--ema", "--bake",
                                 "-o", str(tmp_path / "av")])
        assert code == 6, err


def test_each_counters_object_is_offered(made, tmp_path):
    out, truth = made
    ckpt = str(out / "gan" / "model.ckpt-1")
    code, _o, err = run_cli(["export", ckpt, "-o", str(tmp_path / "g.npz"), "--exclude", "c"])
    assert code == 0, err
    assert_npz_holds(tmp_path / "g.npz", {"w": truth["gan:w"], "b": truth["gan:b"]})
    code, _o, err = run_cli(["export", ckpt, "-o", str(tmp_path / "d.npz"),
                             "--exclude", "b", "--exclude", "w"])
    assert code == 0, err
    assert_npz_holds(tmp_path / "d.npz", {"c": truth["gan:c"]})


@pytest.mark.parametrize("case", ["towers", "pyint"])
def test_one_object_one_counter_exports(made, case, tmp_path):
    out, truth = made
    code, _o, err = run_cli(["export", str(out / case), "-o", str(tmp_path / "x.npz")] + (
        ["--ema-name", "fast"]))
    assert code == 0, err
    assert_npz_holds(tmp_path / "x.npz", {v: truth[f"{case}:{v}"] for v in "wbc"})

"""Two default-named TF1 ``ExponentialMovingAverage`` objects over different variables
(review-11-attack-r16 F1): ``e1.apply([w])``, ``e2.apply([w, v])`` name e2's averages
``w/ExponentialMovingAverage_1`` and ``v/ExponentialMovingAverage`` (TF1 numbers per variable),
so by the keys e2 could not be selected at all. The ``.meta``'s update ops prove each average's
object (its ``AssignMovingAvg`` ops' name scope, ``ExponentialMovingAverage_1`` for e2):
``--ema-name ExponentialMovingAverage_1`` takes e2's averages of every variable, bit for bit;
e1, which averaged only ``w``, stays refused, and so does either name without the graph (there
the slow EMA's BN statistic was exported raw, exit 0). A fast and a slow EMA, the slow one also
over a BN statistic, alike. Truth: ``ema.average(v)`` (name and
value), recorded by TensorFlow at save time in a subprocess."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import copies_without_meta, run_cli, run_script

SCRIPT = r'''
import os
import sys

import numpy as np
import tensorflow as tf

tf1 = tf.compat.v1
tf1.disable_eager_execution()
out = sys.argv[1]
NAMES = {"partial": ("w", "v"), "fast_slow_bn": ("fc/w", "bn/moving_mean"),
         "taken_scope": ("w", "v")}
truth = {}
for case in ("partial", "fast_slow_bn", "taken_scope"):
    with tf.Graph().as_default():
        if case == "taken_scope":  # an op holds the name: e1's scope is ..._1, e2's ..._2
            tf.constant(0.0, name="ExponentialMovingAverage")
        w = tf1.get_variable(NAMES[case][0], [3, 2])
        v = tf1.get_variable(NAMES[case][1], [2], trainable=case == "partial",
                             initializer=tf1.zeros_initializer())
        step = tf.group(w.assign_add(tf.ones([3, 2])), v.assign_add(2 * tf.ones([2])))
        e1 = tf1.train.ExponentialMovingAverage(0.5)
        e2 = tf1.train.ExponentialMovingAverage(0.9)
        with tf.control_dependencies([step]):
            if case == "taken_scope":  # e1 over both, e2 over w (w/ExponentialMovingAverage_1)
                update = tf.group(e1.apply([w, v]), e2.apply([w]))
            else:
                update = tf.group(e1.apply([w]), e2.apply([w, v]))
        saver = tf1.train.Saver()
        with tf1.Session() as s:
            s.run(tf1.global_variables_initializer())
            for _ in range(3):
                s.run(update)
            os.makedirs(f"{out}/{case}")
            saver.save(s, f"{out}/{case}/model.ckpt")
            for var in (w, v) if case != "taken_scope" else ():
                truth[f"{case}:{var.op.name}"] = s.run(e2.average(var).read_value())
                truth[f"{case}:name:{var.op.name}"] = np.array(e2.average(var).op.name)
np.savez(f"{out}/truth.npz", **truth)
'''

CASES = ("partial", "fast_slow_bn")
NAMES = {"partial": ("w", "v"), "fast_slow_bn": ("fc/w", "bn/moving_mean")}
E2 = "ExponentialMovingAverage_1"


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1_scopes")
    truth = run_script(SCRIPT, out)
    copies_without_meta(out, CASES)
    return out, truth


@pytest.mark.parametrize("case", CASES)
def test_the_second_objects_averages_by_its_update_scope(made, tmp_path, case):
    out, truth = made
    code, stdout, err = run_cli(["map", str(out / case), "--ema-name", E2, "--non-averaged",
                                 "drop", "--json"])
    assert code == 0, err
    assert json.loads(stdout) == {str(truth[f"{case}:name:{v}"]): v for v in NAMES[case]}
    target = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(out / case), "--ema-name", E2, "--out", str(target)])
    assert code == 0, err
    with np.load(target) as z:
        for var in NAMES[case]:
            assert z[var].tobytes() == truth[f"{case}:{var}"].tobytes(), var


@pytest.mark.parametrize("case,where,name", [
    *[(c, "", "ExponentialMovingAverage") for c in CASES],
    *[(c, "_nometa", n) for c in CASES for n in ("ExponentialMovingAverage", E2)]])
def test_what_the_graph_does_not_prove_stays_refused(made, tmp_path, case, where, name):
    out, _ = made
    target = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(out / f"{case}{where}"), "--ema-name", name, "--out",
                            str(target)])
    assert code == 6 and not target.exists(), err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


@pytest.mark.parametrize("case", CASES)
def test_the_refusal_offers_the_object_the_graph_proves(made, case):
    out, _ = made
    for where, offered in (("", True), ("_nometa", False)):
        code, _, err = run_cli(["map", str(out / f"{case}{where}")])
        assert code == 6, err
        assert (f"--ema-name {E2} decides" in " ".join(err.split())) == offered, err


@pytest.mark.parametrize("name", ["ExponentialMovingAverage_1", "ExponentialMovingAverage_2"])
def test_a_scope_whose_name_another_objects_averages_carry_is_not_taken(made, tmp_path, name):
    """An op held the name ``ExponentialMovingAverage``: e1 (over w, v) got the scope
    ``ExponentialMovingAverage_1`` while e2's average of w is ``w/ExponentialMovingAverage_1``:
    ``--ema-name ExponentialMovingAverage_1`` names both, and e2 averaged only w."""
    out, _ = made
    target = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(out / "taken_scope"), "--ema-name", name, "--out",
                            str(target)])
    assert code == 6 and not target.exists(), err
    if name.endswith("_1"):  # nor offered by the refusal
        code, _, err = run_cli(["map", str(out / "taken_scope")])
        assert code == 6 and "takes the averages of the EMA object" not in err, err

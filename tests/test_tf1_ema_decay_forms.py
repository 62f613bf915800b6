"""TF1 with its ``.meta``: an ``ExponentialMovingAverage(name="ema")`` whose name the graph
proves only where its updates are ``apply()``'s own, decay included (04028b7: a Lookahead's
``assign_moving_average`` in ``apply()``'s idiom differs only there). Forms of the decay
``apply()`` builds itself from what it is given (review-15-attack-r31 F10): a tensor or a
schedule with ``num_updates`` (``<scope>/Minimum(decay, <scope>/truediv)``), a resource
variable (read as ``<scope>/ReadVariableOp``); and ``apply()`` run in a control-flow-v1
``tf.cond``, its ops in the main graph behind ``Switch`` ops (r31 F7), resource and ref
variables. A decay tensor without ``num_updates`` (passed through as it is, like a Lookahead's)
and ``apply()`` in a control-flow-v2 cond (ops in function bodies) stay refused, with messages
that say so; two objects both named "ema" are offered with what ``--ema-name ema`` picks.

Truth: ``sess.run(ema.average(v))`` and ``sess.run(v)`` at save time, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

SCRIPT = r'''
case = sys.argv[2]
if case.startswith("cond_v1"):
    tf1.disable_control_flow_v2()
with tf.Graph().as_default():
    gs = tf1.train.get_or_create_global_step()
    ref = case.endswith("_ref")
    W = tf1.get_variable("fc/W", [3, 2], use_resource=not ref)
    b = tf1.get_variable("fc/b", [2], initializer=tf1.zeros_initializer(), use_resource=not ref)
    x = tf.constant(np.arange(6, dtype="float32").reshape(2, 3))
    loss = tf.reduce_mean((tf.matmul(x, W) + b - 1.0) ** 2)
    train = tf1.train.GradientDescentOptimizer(0.05).minimize(loss, global_step=gs)
    sched = tf.minimum(0.5, tf.cast(gs + 1, tf.float32) / 10.0)
    decay = {"sched_numup": sched, "sched": sched, "const_numup": tf.constant(0.7),
             "var": tf1.get_variable("ema_decay", [], trainable=False,
                                     initializer=tf1.constant_initializer(0.5))
             }.get(case, 0.5)
    ema = tf1.train.ExponentialMovingAverage(decay, name="ema",
                                             num_updates=gs if "numup" in case else None)
    emas = [ema, tf1.train.ExponentialMovingAverage(0.9, name="ema")] if case == "two" else [ema]
    with tf.control_dependencies([train]):
        if case.startswith("cond"):
            step = tf.cond(gs > 1, lambda: tf.group(ema.apply([W, b])), tf.no_op)
        else:
            step = tf.group(*[e.apply([W, b]) for e in emas])
    saver = tf1.train.Saver()
    with trained(tf, step, 4) as s:
        saver.save(s, f"{out}/model.ckpt", global_step=gs)
        for v in (W, b):
            truth[f"raw:{v.op.name}"] = s.run(v)
            for i, e in enumerate(emas):
                truth[f"ema{i or ''}:{v.op.name}"] = s.run(e.average(v))
'''

PROVEN = ["sched_numup", "const_numup", "var", "cond_v1", "cond_v1_ref"]
CASES = [*PROVEN, "sched", "cond_v2", "two"]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1_ema_decay_forms")
    return {c: (out / c, run_tf1_script(SCRIPT, out / c, c)) for c in CASES}


def _export(run, tmp_path, *args):
    out = tmp_path / "x.npz"
    out.unlink(missing_ok=True)
    code, _, err = run_cli(["export", str(run), "--strict", "--out", str(out), *args])
    return code, err, out


@pytest.mark.parametrize("case", PROVEN)
def test_apply_own_decay_forms_are_proven(made, tmp_path, case):
    run, truth = made[case]
    code, err, out = _export(run, tmp_path)
    assert code == 0, err
    with np.load(out) as got:
        for n in ("fc/W", "fc/b"):
            assert got[n].tobytes() == truth[f"ema:{n}"].tobytes(), n
            assert got[n].tobytes() != truth[f"raw:{n}"].tobytes(), n


def test_decay_tensor_without_num_updates_says_why(made, tmp_path):
    run, truth = made["sched"]
    code, err, out = _export(run, tmp_path)
    assert code == 6 and not out.exists(), err
    assert "decay is not one apply() builds itself" in err, err
    assert "Lookahead" in err and "--ema-name ema" in err, err
    code, err, out = _export(run, tmp_path, "--ema-name", "ema")  # the statement: exact
    assert code == 0, err
    with np.load(out) as got:
        for n in ("fc/W", "fc/b"):
            assert got[n].tobytes() == truth[f"ema:{n}"].tobytes(), n


def test_apply_in_a_cond_v2_says_its_ops_are_not_read(made, tmp_path):
    run, truth = made["cond_v2"]
    code, err, out = _export(run, tmp_path)
    assert code == 6 and not out.exists(), err
    assert "nothing this tool reads says 'ema'" in err, err
    assert "inside a tf.cond" in err and "--ema-name ema" in err, err
    code, err, out = _export(run, tmp_path, "--ema-name", "ema")
    assert code == 0, err
    with np.load(out) as got:
        assert got["fc/W"].tobytes() == truth["ema:fc/W"].tobytes()


def test_two_objects_named_ema_say_which_one_ema_picks(made, tmp_path):
    run, truth = made["two"]
    code, err, out = _export(run, tmp_path)
    assert code == 6 and not out.exists(), err
    assert "if you gave two objects the name 'ema'" in err, err
    assert "--ema-name ema takes the first one's" in err, err
    for name, key in (("ema", "ema"), ("ema_1", "ema1")):
        code, err, out = _export(run, tmp_path, "--ema-name", name)
        assert code == 0, err
        with np.load(out) as got:
            for n in ("fc/W", "fc/b"):
                assert got[n].tobytes() == truth[f"{key}:{n}"].tobytes(), (name, n)

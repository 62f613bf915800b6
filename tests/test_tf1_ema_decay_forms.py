"""TF1 with its ``.meta``: an ``ExponentialMovingAverage(name="ema")`` whose name the graph
proves only where its updates are ``apply()``'s own, decay included (04028b7: a Lookahead's
``assign_moving_average`` in ``apply()``'s idiom differs only there). Forms of the decay
``apply()`` builds itself from what it is given (review-15-attack-r31 F10): a tensor or a
schedule with ``num_updates`` (``<scope>/Minimum(decay, <scope>/truediv)``); and ``apply()``
run in a control-flow-v1 ``tf.cond``, its ops in the main graph behind ``Switch`` ops (r31 F7),
resource and ref variables. A decay tensor without ``num_updates`` (passed through as it is,
like a Lookahead's), a resource variable as decay (read once in the scope as
``<scope>/ReadVariableOp``, exactly as a hand-written Lookahead reads its changing decay:
review-16-attack-r33 F2, whose Lookahead is built here too) stay refused, with messages that
say so; ``apply()`` in a control-flow-v2 cond is read from the cond's branch function
(review-17-attack-r36 F10); two objects both named "ema" are offered with what
``--ema-name ema`` picks.

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

# review-16-attack-r33 F2: a Lookahead in apply()'s idiom (name scope, grouped NoOp,
# moving_average_variables) whose decay variable (0.5 on sync steps, 1 otherwise) is read once
# in its scope: lookahead/ReadVariableOp, as apply() reads a decay variable
LOOKAHEAD = r'''
from tensorflow.python.training import moving_averages
with tf.Graph().as_default():
    x = tf.constant(np.random.RandomState(0).randn(8, 4).astype("f4"))
    w = tf1.get_variable("w", initializer=tf.ones([4, 3]), use_resource=True)
    b = tf1.get_variable("b", initializer=tf.zeros([3]), use_resource=True)
    loss = tf.reduce_mean((tf.matmul(x, w) + b - 1.0) ** 2)
    step = tf1.train.get_or_create_global_step()
    train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
    alpha = tf1.get_variable("la_decay", initializer=1.0, use_resource=True, trainable=False)
    slow = {v: tf1.get_variable(v.op.name + "/lookahead", initializer=tf.identity(v.initial_value),
                                use_resource=True, trainable=False) for v in (w, b)}
    with tf.name_scope("lookahead") as scope:
        d = alpha.value()
        ups = []
        for v, s in slow.items():
            ups.append(moving_averages.assign_moving_average(s, v, d, zero_debias=False))
            tf1.add_to_collection(tf1.GraphKeys.MOVING_AVERAGE_VARIABLES, v)
        sync = tf.group(*ups, name=scope)
    with tf.control_dependencies([sync]):
        copy_back = tf.group(*[v.assign(s) for v, s in slow.items()])
    saver = tf1.train.Saver()
    with trained(tf, tf.no_op(), 0) as sess:
        for i in range(1, 7):
            sess.run(train)
            if i % 3 == 0:
                alpha.load(0.5, sess)
                sess.run(copy_back)
        sess.run(train)
        for v, s in slow.items():
            truth[f"raw:{v.op.name}"] = sess.run(v)
            truth[f"slow:{v.op.name}"] = sess.run(s)
        saver.save(sess, f"{out}/model.ckpt")
'''

PROVEN = ["sched_numup", "const_numup", "cond_v1", "cond_v1_ref"]
CASES = [*PROVEN, "sched", "var", "cond_v2", "two"]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1_ema_decay_forms")
    runs = {c: (out / c, run_tf1_script(SCRIPT, out / c, c)) for c in CASES}
    runs["lookahead"] = (out / "lookahead", run_tf1_script(LOOKAHEAD, out / "lookahead"))
    return runs


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


@pytest.mark.parametrize("case", ["sched", "var"])
def test_decay_tensor_or_variable_without_num_updates_says_why(made, tmp_path, case):
    run, truth = made[case]
    code, err, out = _export(run, tmp_path)
    assert code == 6 and not out.exists(), err
    assert "decay is not one apply() builds itself" in err, err
    assert "Lookahead" in err and "--ema-name ema" in err, err
    code, err, out = _export(run, tmp_path, "--ema-name", "ema")  # the statement: exact
    assert code == 0, err
    with np.load(out) as got:
        for n in ("fc/W", "fc/b"):
            assert got[n].tobytes() == truth[f"ema:{n}"].tobytes(), n


def test_apply_in_a_cond_v2_is_read_from_its_branch_function(made, tmp_path):
    """``ema.apply()`` in a control-flow-v2 ``tf.cond``: its ops (decay included) live in the
    branch function, read as the graph's (review-17-attack-r36 F10): proven with no name."""
    run, truth = made["cond_v2"]
    for stated in ([], ["--ema-name", "ema"]):
        code, err, out = _export(run, tmp_path, *stated)
        assert code == 0, err
        with np.load(out) as got:
            for n in ("fc/W", "fc/b"):
                assert got[n].tobytes() == truth[f"ema:{n}"].tobytes(), n
                assert got[n].tobytes() != truth[f"raw:{n}"].tobytes(), n


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


def test_lookahead_reading_its_decay_variable_in_its_scope_is_refused(made, tmp_path):
    """review-16-attack-r33 F2: ff11aa4 proved this Lookahead an EMA (export --strict wrote
    its slow weights, exit 0); the refusal names --ema-name lookahead as the statement."""
    run, truth = made["lookahead"]
    assert truth["slow:w"].tobytes() != truth["raw:w"].tobytes()
    code, err, out = _export(run, tmp_path)
    assert code == 6 and not out.exists(), err
    assert "decay is not one apply() builds itself" in err, err
    assert "--ema-name lookahead" in err, err
    for cmd in (["map", str(run), "--strict"], ["restore-ema", str(run), "--strict",
                                                "--out", str(tmp_path / "r")]):
        code, _, err = run_cli(cmd)
        assert code == 6 and "--ema-name lookahead" in err, (cmd, err)

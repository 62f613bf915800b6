"""TF1 with its ``.meta``: update ops run inside a control-flow-v2 ``tf.cond`` (the default
under ``disable_eager_execution()``) live in the branch functions of the graph's library, not in
its nodes (review-17-attack-r36 F10, CRITICAL).

``w0/ExponentialMovingAverage`` kept by ``assign_moving_average(mom, w0/accum)`` in such a cond
(a momentum slot in EMA form, beside a default-named EMA over ``w1`` only): the guard that
refuses it outside a cond (review-14-attack-r28 F3) did not see the op, and
``--ema-name ExponentialMovingAverage`` (the refusal's own suggestion) exported the slot as
``w0``, exit 0 under ``--strict``. Two EMA objects ``ema`` and ``ema/fast`` applied in a v2 cond:
``--ema-name fast`` is decided by their update ops as under control flow v1.

And (review-17-attack-r36 F7, CRITICAL) a first moment of ``w0``'s gradient kept by
``assign_moving_average(m, grad)`` as ``w0/ExponentialMovingAverage`` beside a default EMA over
``w1`` only was exported as ``w0``'s average with no statement, exit 0 under ``--strict``:
``ema.average(w0)`` is ``None``, and the update op shows the gradient averaged into it.

Made by real TensorFlow in a subprocess; truth ``sess.run(ema.average(v))`` and every variable's
value at save time.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

import ckpt_tools
from ckpt_tools.errors import EmaError

SCRIPT = r'''
from tensorflow.python.training import moving_averages

case = sys.argv[2]
E = tf1.train.ExponentialMovingAverage
w0 = tf1.get_variable("w0", initializer=tf.ones([3, 2]))
w1 = tf1.get_variable("w1", initializer=tf.zeros([2]))
step = tf1.assign_add(w0, tf.ones([3, 2]) * 0.7), tf1.assign_add(w1, tf.ones([2]) * 1.3)
flag = tf1.placeholder_with_default(True, [])
if case == "accum":
    slow = E(0.9)
    with tf1.variable_scope("w0"):
        acc = tf1.get_variable("accum", initializer=tf.zeros([3, 2]), trainable=False)
        mom = tf1.get_variable(slow.name, initializer=tf.zeros([3, 2]), trainable=False)
    with tf.control_dependencies(step):
        a_upd = tf1.assign_add(acc, tf.ones([3, 2]) * 0.3)
    with tf.control_dependencies([a_upd]):
        u = tf.cond(flag, lambda: moving_averages.assign_moving_average(
            mom, acc, 0.9, zero_debias=False), lambda: tf.identity(mom))
        upd = tf.group(slow.apply([w1]), u)
    objs = {"ema": slow}
elif case in ("grad", "grad_ema"):  # w0/<name>: a moment of w0's gradient, no cond
    slow = E(0.9) if case == "grad" else E(0.9, name="ema")
    loss = tf.reduce_sum(tf.square(w0)) + tf.reduce_sum(tf.square(w1))
    g0 = tf.gradients(loss, [w0])[0]
    with tf1.variable_scope("w0"):
        mom = tf1.get_variable(slow.name, initializer=tf.zeros([3, 2]), trainable=False)
    with tf.control_dependencies(step):
        upd = tf.group(slow.apply([w1]),
                       moving_averages.assign_moving_average(mom, g0, 0.9, zero_debias=False))
    objs = {"ema": slow}
else:  # two objects applied in a v2 cond
    objs = {"ema": E(0.9, name="ema"), "ema/fast": E(0.5, name="ema/fast")}

    def branch():
        with tf.control_dependencies(step):
            return tf.group(*[o.apply([w0, w1]) for o in objs.values()])
    upd = tf.cond(flag, branch, lambda: tf.no_op())
saver = tf1.train.Saver()
with trained(tf, upd) as s:
    for name, o in objs.items():
        for v in (w0, w1):
            if o.average(v) is not None:
                truth[f"{name}:{v.op.name}"] = s.run(o.average(v))
    for v in tf1.global_variables():
        truth[f"raw:{v.op.name}"] = s.run(v)
    saver.save(s, f"{out}/model.ckpt")
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1_cond_v2")
    return out, {c: run_tf1_script(SCRIPT, out / c, c)
                 for c in ("accum", "objects", "grad", "grad_ema")}


def test_slot_kept_in_ema_form_in_a_v2_cond_is_refused(made, tmp_path):
    out, truths = made
    truth = truths["accum"]
    assert "ema:w0" not in truth and "ema:w1" in truth  # TF: no average of w0
    assert not np.array_equal(truth["raw:w0/ExponentialMovingAverage"], truth["raw:w0"])
    run = out / "accum"
    dest = tmp_path / "x.npz"
    for extra in (["--ema-name", "ExponentialMovingAverage"],
                  ["--ema-name", "ExponentialMovingAverage", "--allow-missing"]):
        code, _, err = run_cli(["export", str(run), "--strict", *extra, "--out", str(dest)])
        assert code == 6, (extra, err)
        assert "w0/accum" in err and "no average of w0" in err, err
        assert not dest.exists()
    code, _, err = run_cli(["restore-ema", str(run), "--ema-name", "ExponentialMovingAverage",
                            "--out", str(tmp_path / "re")])
    assert code == 6, err
    assert not (tmp_path / "re").exists()


@pytest.mark.parametrize("name,obj", [("fast", "ema/fast"), ("ema/fast", "ema/fast"),
                                      ("ema", "ema")])
def test_objects_applied_in_a_v2_cond_are_told_apart(made, tmp_path, name, obj):
    out, truths = made
    truth = truths["objects"]
    dest = tmp_path / "x.npz"
    code, _, err = run_cli(["export", str(out / "objects"), "--strict", "--ema-name", name,
                            "--out", str(dest)])
    assert code == 0, err
    with np.load(dest) as got:
        assert sorted(got.files) == ["w0", "w1"]
        for n in ("w0", "w1"):
            assert got[n].tobytes() == truth[f"{obj}:{n}"].tobytes(), (name, n)
            assert got[n].tobytes() != truth[f"raw:{n}"].tobytes(), (name, n)


@pytest.mark.parametrize("case,stated", [
    ("grad", []), ("grad", ["--ema-name", "ExponentialMovingAverage"]),
    ("grad_ema", ["--ema-name", "ema"])])
def test_gradient_moment_named_like_an_average_is_no_average(made, tmp_path, case, stated):
    out, truths = made
    truth = truths[case]
    key = "w0/" + ("ema" if case == "grad_ema" else "ExponentialMovingAverage")
    assert "ema:w0" not in truth and "ema:w1" in truth  # TF: ema.average(w0) is None
    assert not np.array_equal(truth[f"raw:{key}"], truth["raw:w0"])
    run, dest = out / case, tmp_path / "x.npz"
    code, _, err = run_cli(["export", str(run), "--strict", *stated, "--out", str(dest)])
    assert code == 6, err
    assert f"{key} is no average of w0" in err and "--allow-missing" in err, err
    assert not dest.exists()
    code, text, err = run_cli(["map", str(run), *stated])
    assert code == 6, (text, err)
    code, text, err = run_cli(["list", str(run), "--json"])  # no average of w0 (r38 F9)
    row = next(v for v in json.loads(text)["variables"] if v["key"] == key)
    assert row["role"] != "ema" and not row["ema_of"], row
    code, _, err = run_cli(["export", str(run), "--strict", *stated, "--allow-missing",
                            "--out", str(dest)])
    assert code == 0, err
    with np.load(dest) as got:
        assert got["w0"].tobytes() == truth["raw:w0"].tobytes()
        assert got["w1"].tobytes() == truth["ema:w1"].tobytes()


def test_gradient_moment_refusal_of_the_graph_helpers_says_what_it_is(made, tf):
    """``ema_saver``/``restore_ema`` in the graph imported from the ``.meta`` refuse ``w0``
    saying its ``w0/ExponentialMovingAverage`` is no average of it (it read "... is
    w0/ExponentialMovingAverage's average": review-17-attack-r38's MINOR), and
    ``allow_missing=True`` restores ``w0`` raw, ``w1`` its average."""
    out, truths = made
    truth, prefix = truths["grad"], str(out / "grad" / "model.ckpt")
    v1 = tf.compat.v1
    said = ("w0 (no shadow of its own; w0/ExponentialMovingAverage is no average of w0: it "
            "restores as a variable of its own)")
    with tf.Graph().as_default():
        v1.train.import_meta_graph(prefix + ".meta")
        with pytest.raises(EmaError) as refused:
            ckpt_tools.ema_saver(checkpoint=prefix)
        assert said in str(refused.value) and "allow_missing=True" in str(refused.value)
        with v1.Session() as sess:
            with pytest.raises(EmaError) as refused:
                ckpt_tools.restore_ema(sess, prefix)
            assert said in str(refused.value)
            ckpt_tools.restore_ema(sess, prefix, allow_missing=True)
            got = {v.op.name: sess.run(v) for v in v1.global_variables()}
    assert got["w0"].tobytes() == truth["raw:w0"].tobytes()
    assert got["w1"].tobytes() == truth["ema:w1"].tobytes()

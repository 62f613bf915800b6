"""TF1 with its ``.meta``: a key is ``W``'s average only where the graph's update op proves it
(review-17-attack-r38 F9, CRITICAL).

A gradient's moment (or a running mean of another variable) kept by a plain
``tf1.assign(m, 0.9 * m + 0.1 * src)`` as ``w0/ExponentialMovingAverage`` beside a default EMA
over ``w1`` only was exported as ``w0``'s average, exit 0 under ``--strict``: only
``assign_moving_average``'s ``AssignMovingAvg`` was recognised, and every other writer passed.
Now the ``.meta``'s graph records every op writing each variable (its initializer and the
Saver's restore left out); a shadow any op but ``ema.apply()``'s ``AssignMovingAvg`` from ``W``
writes is no proven average of ``W``: ``W`` is missing its average (``--allow-missing`` writes
it raw), whoever wrote it (a hand assign, ``assign_add``, in a ``tf.cond`` or a
``tf.while_loop``, control flow v2 or v1).
``ema.apply()`` itself (ref and resource variables, in a ``tf.cond``, in a v1
``tf.while_loop``) still pairs, and a ``.meta`` whose graph writes nothing (an eval graph)
keeps the name's reading.

Made by real TensorFlow in a subprocess; truth ``sess.run(ema.average(v))`` and every
variable's value at save time.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

import ckpt_tools

SCRIPT = r'''
case = sys.argv[2]
if "v1" in case:  # control flow v1: Switch/Enter ops in the graph, no functions
    tf1.disable_control_flow_v2()
E = tf1.train.ExponentialMovingAverage
res = not case.startswith("ref")
w0 = tf1.get_variable("w0", initializer=tf.ones([3, 2]), use_resource=res)
w1 = tf1.get_variable("w1", initializer=tf.zeros([2]), use_resource=res)
# an eval graph writes no weight (review-19-attack-r45 F4: a graph training w0 is refused)
step = () if case == "eval" else (tf1.assign_add(w0, tf.ones([3, 2]) * 0.7),
                                  tf1.assign_add(w1, tf.ones([2]) * 1.3))
ema = E(0.9)
flag = tf1.placeholder_with_default(True, [])
if case.endswith("apply"):  # ema.apply() of both: proven
    with tf.control_dependencies(step):
        if case.startswith("cond"):
            upd = tf.cond(flag, lambda: ema.apply([w0, w1]), lambda: tf.no_op())
        elif case.startswith("while"):
            def body(i):
                with tf.control_dependencies([ema.apply([w0, w1])]):
                    return [i + 1]
            upd = tf.while_loop(lambda i: i < 1, body, [tf.constant(0)])
        else:
            upd = ema.apply([w0, w1])
elif case == "eval":  # an eval graph: the variables, nothing writing them
    with tf1.variable_scope("w0"):
        tf1.get_variable(ema.name, initializer=tf.ones([3, 2]) * 3, trainable=False)
    with tf1.variable_scope("w1"):
        tf1.get_variable(ema.name, initializer=tf.ones([2]) * 5, trainable=False)
    upd = tf.no_op()
else:
    with tf1.variable_scope("w0"):
        m = tf1.get_variable(ema.name, initializer=tf.zeros([3, 2]), trainable=False)
        acc = tf1.get_variable("accum", initializer=tf.zeros([3, 2]), trainable=False) \
            if case == "acc" else None
    loss = tf.reduce_sum(tf.square(w0)) + tf.reduce_sum(tf.square(w1))
    g0 = tf.gradients(loss, [w0])[0]
    src = {"acc": acc, "self": w0}.get(case.split("_")[0], g0)
    with tf.control_dependencies(step):
        a_upd = tf1.assign_add(acc, tf.ones([3, 2]) * 0.3) if acc is not None else tf.no_op()
    with tf.control_dependencies([a_upd]):
        if case.endswith("add"):
            mk = lambda: tf1.assign_add(m, 0.1 * src)
        else:
            mk = lambda: tf1.assign(m, 0.9 * m + 0.1 * src)
        if case.startswith("cond"):
            u = tf.cond(flag, mk, lambda: tf.identity(m))
        elif case.startswith("while"):
            def body(i):
                with tf.control_dependencies([mk()]):
                    return [i + 1]
            u = tf.while_loop(lambda i: i < 1, body, [tf.constant(0)])
        else:
            u = mk()
        upd = u if case.endswith("alone") else tf.group(ema.apply([w1]), u)
saver = tf1.train.Saver()
with tf1.Session() as s:
    s.run(tf1.variables_initializer([w0, w1]))  # a ref shadow's initializer reads them
    s.run(tf1.global_variables_initializer())
    for _ in range(3):
        s.run(upd)
    for v in (w0, w1):
        if ema.average(v) is not None:
            truth[f"ema:{v.op.name}"] = s.run(ema.average(v))
    for v in tf1.global_variables():
        truth[f"raw:{v.op.name}"] = s.run(v)
    saver.save(s, f"{out}/model.ckpt")
'''

E = "ExponentialMovingAverage"
WRITTEN = ("grad", "acc", "self", "grad_add", "cond_grad", "while_grad", "while_v1_grad")
PROVEN = ("apply", "ref_apply", "cond_apply", "while_v1_apply")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1_hand_written")
    return out, {c: run_tf1_script(SCRIPT, out / c, c)
                 for c in (*WRITTEN, *PROVEN, "eval", "self_alone")}


@pytest.mark.parametrize("case", WRITTEN)
def test_a_shadow_written_by_hand_is_no_average(made, tmp_path, case):
    out, truths = made
    truth, run, dest = truths[case], out / case, tmp_path / "x.npz"
    key = "w0/ExponentialMovingAverage"
    assert "ema:w0" not in truth and "ema:w1" in truth  # TF: ema.average(w0) is None
    assert truth[f"raw:{key}"].tobytes() != truth["raw:w0"].tobytes()
    for stated in ([], ["--ema-name", "ExponentialMovingAverage"]):
        if case == "acc" and not stated:
            continue  # w0/accum beside it: the name is asked for first
        code, _, err = run_cli(["export", str(run), "--strict", *stated, "--out", str(dest)])
        assert code == 6, (stated, err)
        assert f"{key} is no proven average of w0" in err and "not ema.apply()'s update" in err
        assert "--allow-missing" in err and "--no-meta" not in err, err
        assert not dest.exists()
        code, text, err = run_cli(["map", str(run), *stated])
        assert code == 6, (text, err)
        code, _, err = run_cli(["restore-ema", str(run), *stated, "--out", str(tmp_path / "r")])
        assert code == 6, err
        code, _, err = run_cli(["export", str(run), "--strict", *stated, "--allow-missing",
                                "--out", str(dest)])
        assert code == 0, err
        with np.load(dest) as got:
            assert got["w0"].tobytes() == truth["raw:w0"].tobytes()
            assert got["w1"].tobytes() == truth["ema:w1"].tobytes()
        dest.unlink()
    _list_shows_no_average(run, key)
    m = ckpt_tools.ema_map(str(run), ema_name="ExponentialMovingAverage")
    assert m.missing == ("w0",) and m.mapping.get(key) != "w0", m


def test_no_weight_with_a_proven_average_names_raw(made, tmp_path):
    """A hand-written running mean of ``w0`` and no EMA at all: ``--allow-missing`` has no
    average to keep beside the raw weights, so the refusal names ``--raw``, which is true."""
    out, truths = made
    truth, run, dest = truths["self_alone"], out / "self_alone", tmp_path / "x.npz"
    assert not any(k.startswith("ema:") for k in truth)
    code, _, err = run_cli(["export", str(run), "--strict", "--out", str(dest)])
    assert code == 6, err
    assert "no proven average of w0" in err and "--raw" in err and "--no-meta" not in err, err
    code, _, err = run_cli(["export", str(run), "--raw", "--out", str(dest)])
    assert code == 0, err
    with np.load(dest) as got:
        assert got["w0"].tobytes() == truth["raw:w0"].tobytes()


def _list_shows_no_average(run, key):
    """``ckpt list`` shows ``key`` as no average (r36: "list still shows F7's key as W's
    average")."""
    code, text, err = run_cli(["list", str(run), "--json"])
    assert code == 0, err
    row = next(v for v in json.loads(text)["variables"] if v["key"] == key)
    assert row["role"] != "ema" and not row["ema_of"], row


@pytest.mark.parametrize("case", [*PROVEN, "eval"])
def test_ema_apply_and_an_unwritten_shadow_still_pair(made, tmp_path, case):
    out, truths = made
    truth, dest = truths[case], tmp_path / "x.npz"
    code, _, err = run_cli(["export", str(out / case), "--strict", "--out", str(dest)])
    assert code == 0, err
    code, text, err = run_cli(["list", str(out / case), "--json"])
    rows = {v["key"]: v for v in json.loads(text)["variables"]}
    assert rows["w0/ExponentialMovingAverage"]["ema_of"] == "w0", rows
    with np.load(dest) as got:
        for n in ("w0", "w1"):
            want = truth.get(f"ema:{n}", truth[f"raw:{n}/ExponentialMovingAverage"])
            assert got[n].tobytes() == want.tobytes(), n
            assert got[n].tobytes() != truth[f"raw:{n}"].tobytes(), n


@pytest.mark.parametrize("source", ["itself", "w0"])
def test_a_broadcast_of_the_shadow_itself_still_pairs(made, tmp_path, tf, source):
    """Horovod's ``broadcast_global_variables()`` assigns every global variable, the averages
    too, its own value broadcast from rank 0: ``AssignVariableOp(v, HorovodBroadcast(v))``; that
    write is no new value of the shadow. Horovod is not installed here: the ``.meta`` of the real
    ``ema.apply()`` graph gets the nodes it adds (as it builds them); the values are TF's. A
    broadcast of ``w0`` written into ``w0``'s shadow is a hand write like any other."""
    from tensorflow.core.protobuf import meta_graph_pb2

    out, truths = made
    truth, run, dest = truths["apply"], tmp_path / "hvd", tmp_path / "x.npz"
    shutil.copytree(out / "apply", run)
    path = run / "model.ckpt.meta"
    meta = meta_graph_pb2.MetaGraphDef()
    meta.ParseFromString(path.read_bytes())
    for i, v in enumerate(["w0", "w1", f"w0/{E}", f"w1/{E}"]):
        read = meta.graph_def.node.add(name=f"HorovodBroadcast_read_{i}", op="ReadVariableOp",
                                       input=[v if source == "itself" else "w0"])
        sent = meta.graph_def.node.add(name=f"HorovodBroadcast_{i}", op="HorovodBroadcast",
                                       input=[read.name])
        meta.graph_def.node.add(name=f"AssignVariableOp_hvd_{i}", op="AssignVariableOp",
                                input=[v, sent.name])
    path.write_bytes(meta.SerializeToString())
    code, _, err = run_cli(["export", str(run), "--strict", "--out", str(dest)])
    if source == "w0":
        assert code == 6 and f"w0/{E} is no proven average of w0" in err, err
        return
    assert code == 0, err
    with np.load(dest) as got:
        for n in ("w0", "w1"):
            assert got[n].tobytes() == truth[f"ema:{n}"].tobytes(), n

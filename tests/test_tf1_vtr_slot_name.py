"""``--ema-name Momentum`` on a ``Saver(ema.variables_to_restore())`` checkpoint of a
``MomentumOptimizer`` graph exported the momentum slot ``W/Momentum`` as W's EMA, exit 0,
though the ``.meta``'s update op (``ApplyMomentum``) proves it the optimizer's slot
(review-12-attack-r20 F9): the slot check skipped weights the checkpoint does not store.
Made here by TensorFlow (a subprocess), truth read from the session at save time."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli, run_script

SCRIPT = r'''
import os
import sys

import numpy as np
import tensorflow as tf

tf1 = tf.compat.v1
tf1.disable_eager_execution()
out = sys.argv[1]
truth = {}
for case in ("dflt_vtr", "mom_vtr", "mom_avgonly"):
    with tf.Graph().as_default():
        gs = tf1.train.get_or_create_global_step()
        W = tf1.get_variable("W", [3, 2])
        V = tf1.get_variable("V", [3, 2])
        vs = [W, V]
        loss = tf.reduce_sum(W ** 2) + tf.reduce_sum((V - 1) ** 2)
        ema = tf1.train.ExponentialMovingAverage(
            0.5, name="Momentum" if case.startswith("mom") else "ExponentialMovingAverage")
        opt = tf1.train.MomentumOptimizer(0.1, 0.9)
        train = opt.minimize(loss, global_step=gs)
        with tf.control_dependencies([train]):
            step = ema.apply(vs)
        if case.endswith("vtr"):
            saver = tf1.train.Saver(ema.variables_to_restore())
        else:
            saver = tf1.train.Saver({ema.average_name(v): ema.average(v) for v in vs})
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            for _ in range(4):
                sess.run(step)
            for v in vs:
                truth[f"{case}:avg:{v.op.name}"] = sess.run(ema.average(v).read_value())
                truth[f"{case}:shadow:{v.op.name}"] = np.array(ema.average(v).op.name)
                truth[f"{case}:slot:{v.op.name}"] = np.array(opt.get_slot(v, "momentum").op.name)
            os.makedirs(os.path.join(out, case))
            saver.save(sess, os.path.join(out, case, "model.ckpt"))
# a learning-rate and a momentum (Adam: epsilon) VARIABLE and a gradient accumulator fed to
# an Apply* op as lr / momentum / grad: read inputs, no slots (review-23-attack-r69 F3).
# Adam's beta1 is no variable here: beta1_power's initial value would read it uninitialized.
OPTS = {
    "lr_mom": lambda lr, mo: tf1.train.MomentumOptimizer(lr, mo),
    "lr_adam": lambda lr, mo: tf1.train.AdamOptimizer(lr, epsilon=mo),
    "lr_crms": lambda lr, mo: tf1.train.RMSPropOptimizer(lr, momentum=mo, centered=True),
}
for case, make in OPTS.items():
    with tf.Graph().as_default():
        gs = tf1.train.get_or_create_global_step()
        W = tf1.get_variable("W", [3, 2])
        lr = tf1.get_variable("lr", initializer=0.1, trainable=False)
        mo = tf1.get_variable("mo", initializer=0.9, trainable=False)
        acc = tf1.get_variable("acc", [3, 2], initializer=tf1.zeros_initializer(),
                               trainable=False)
        loss = tf.reduce_sum((W - 1.0) ** 2)
        ema = tf1.train.ExponentialMovingAverage(0.5)
        opt = make(lr, mo)
        add = acc.assign_add(tf.gradients(loss, [W])[0])
        with tf.control_dependencies([add]):
            train = opt.apply_gradients([(acc.read_value(), W)], global_step=gs)
        with tf.control_dependencies([train]):
            step = ema.apply([W])
        decay = [tf1.assign(lr, lr * 0.5), tf1.assign(mo, mo * 0.9)]
        saver = tf1.train.Saver(ema.variables_to_restore(), max_to_keep=5)
        os.makedirs(os.path.join(out, case))
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            for i in range(2):
                sess.run(step)
                sess.run(decay)
                truth[f"{case}:{i}:lr"] = sess.run(lr)
                saver.save(sess, os.path.join(out, case, "model.ckpt"), global_step=i + 1)
            truth[f"{case}:slots"] = np.array(
                [opt.get_slot(W, n).op.name for n in opt.get_slot_names()])
            truth[f"{case}:raw:W"] = sess.run(W)
# W's average read by another Apply op as V's gradient (only read: W's average all the same),
# and its hostile twin, written as V's momentum buffer by a raw ResourceApplyMomentum (an
# optimizer's slot position: no proven average)
for case in ("shadow_as_grad", "shadow_as_accum"):
    with tf.Graph().as_default():
        W = tf1.get_variable("W", [3, 2])
        V = tf1.get_variable("V", [3, 2])
        ema = tf1.train.ExponentialMovingAverage(0.5)
        loss = tf.reduce_sum((W - 1.0) ** 2)
        train = tf1.train.MomentumOptimizer(0.1, 0.9).minimize(loss, var_list=[W])
        with tf.control_dependencies([train]):
            step = ema.apply([W, V])
        avg = ema.average(W)
        if case == "shadow_as_grad":
            other = tf1.train.GradientDescentOptimizer(0.01).apply_gradients(
                [(avg.read_value(), V)])
        else:
            other = tf.raw_ops.ResourceApplyMomentum(
                var=V.handle, accum=avg.handle, lr=0.01, grad=tf.ones([3, 2]), momentum=0.5)
        saver = tf1.train.Saver()
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            for _ in range(3):
                sess.run(step)
                sess.run(other)
            for v in (W, V):
                truth[f"{case}:avg:{v.op.name}"] = sess.run(ema.average(v).read_value())
            os.makedirs(os.path.join(out, case))
            saver.save(sess, os.path.join(out, case, "model.ckpt"))
np.savez(os.path.join(out, "truth.npz"), **truth)
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1_vtr_slot")
    return out, run_script(SCRIPT, out)


@pytest.mark.parametrize("case", ["dflt_vtr", "mom_vtr"])
@pytest.mark.parametrize("args", [["map"], ["export", "--out", "OUT/x.npz"],
                                  ["export", "--strict", "--out", "OUT/x.npz"]],
                         ids=["map", "export", "strict"])
def test_slot_named_ema_on_a_vtr_checkpoint_is_refused(made, tmp_path, case, args):
    out, truth = made
    assert str(truth[f"{case}:slot:W"]) == "W/Momentum"  # what --ema-name Momentum names
    args = [a.replace("OUT", str(tmp_path)) for a in args]
    code, _, err = run_cli([args[0], str(out / case), "--ema-name", "Momentum", *args[1:]])
    assert code == 6, err
    assert "optimizer's slot" in err, err
    assert not list(tmp_path.iterdir())


def test_python_slot_named_ema_on_a_vtr_checkpoint_is_refused(made):
    import ckpt_tools

    out, _ = made
    with pytest.raises(ckpt_tools.EmaError, match="optimizer's slot"):
        ckpt_tools.ema_map(str(out / "dflt_vtr"), ema_name="Momentum")


def test_averages_only_saver_of_a_slot_named_ema_still_exports(made, tmp_path):
    """Held: the averages alone, under their own name (W/Momentum_1), are the averages."""
    out, truth = made
    name = str(truth["mom_avgonly:shadow:W"]).rpartition("/")[2]
    code, _, err = run_cli(["export", str(out / "mom_avgonly"), "--ema-name", name,
                            "--out", str(tmp_path / "x.npz")])
    assert code == 0, err
    with np.load(tmp_path / "x.npz") as got:
        for v in ("W", "V"):
            assert got[v].tobytes() == truth[f"mom_avgonly:avg:{v}"].tobytes(), v


LR_CASES = ["lr_mom", "lr_adam", "lr_crms"]


@pytest.mark.parametrize("case", LR_CASES)
def test_learning_rate_variable_is_no_slot(made, case):
    """Only an Apply op's slot inputs are its slots: the lr and momentum variables and the
    gradient accumulator it reads are not (the accumulator, of W's shape, was listed as W's
    optimizer_slot); the slots TF made (``opt.get_slot``) are W's (review-23-attack-r69 F3)."""
    out, truth = made
    code, stdout, err = run_cli(["list", str(out / case), "--json"])
    assert code == 0, err
    got = {v["name"]: v for v in json.loads(stdout)["variables"]}
    slots = {str(s) for s in truth[f"{case}:slots"]}
    assert len(slots) == {"lr_mom": 1, "lr_adam": 2, "lr_crms": 3}[case]
    for key in slots:
        assert (got[key]["role"], got[key]["slot_of"]) == ("optimizer_slot", "W"), got[key]
    for key in ("lr", "mo", "acc"):
        assert got[key]["role"] != "optimizer_slot" and not got[key]["slot_of"], got[key]


@pytest.mark.parametrize("case", LR_CASES)
def test_average_takes_the_newest_learning_rate_variable(made, tmp_path, tf, case):
    out, truth = made
    code, stdout, err = run_cli(["average", str(out / case), "--last", "2",
                                 "--out", str(tmp_path / "avg"), "--json"])
    assert code == 0, err
    result = json.loads(stdout)
    assert "lr" in result["copied"], result
    reader = tf.train.load_checkpoint(result["output"])
    assert reader.get_tensor("lr").tobytes() == truth[f"{case}:1:lr"].tobytes()
    assert truth[f"{case}:0:lr"] != truth[f"{case}:1:lr"]


@pytest.mark.parametrize("case", LR_CASES)
def test_raw_export_beside_read_inputs(made, tmp_path, case):
    """export --raw --keys-are-raw of the training vtr Saver (the statement that its keys hold
    the raw weights, which --raw now asks for) writes W's raw value (stored under its
    average's name) and none of the variables the Apply op reads as a weight."""
    out, truth = made
    code, _, err = run_cli(["export", str(out / case), "--raw", "--keys-are-raw", "--out",
                            str(tmp_path / "x.npz")])
    assert code == 0, err
    with np.load(tmp_path / "x.npz") as got:
        assert got["W"].tobytes() == truth[f"{case}:raw:W"].tobytes()
        assert not {"lr", "mo", "acc"} & set(got.files), got.files


def test_slot_inputs_are_tf_op_definitions(tf):
    """SLOT_INPUTS against TF's registered op definitions: the slots of each Apply* op are
    its ref/resource inputs after ``var``, at the same positions for every variant."""
    import re

    from tensorflow.python.framework import op_def_registry

    from ckpt_tools.formats.meta_update_ops import SLOT_INPUTS

    seen = set()
    for name in dir(tf.raw_ops):
        kind = re.fullmatch(r"(?:Resource)?(?:Sparse)?(Apply[A-Z]\w*)", name)
        if kind is None:
            continue
        args = op_def_registry.get(name).input_arg
        taken = tuple(i for i, a in enumerate(args) if i and (a.is_ref or a.type == 20))
        assert args[0].name == "var" and SLOT_INPUTS[kind[1]] == taken, name
        seen.add(kind[1])
    assert seen == set(SLOT_INPUTS)


def test_shadow_an_apply_op_only_reads_is_the_average(made, tmp_path):
    """W's average fed to another optimizer's Apply op as V's gradient is read, not written:
    it is W's average (refused before, naming the op as its writer; review-23-attack-r69
    F3). Its twin, the same shadow written as V's momentum buffer, is still refused."""
    out, truth = made
    code, _, err = run_cli(["export", str(out / "shadow_as_grad"), "--out",
                            str(tmp_path / "x.npz")])
    assert code == 0, err
    with np.load(tmp_path / "x.npz") as got:
        assert sorted(got.files) == ["V", "W"]
        for v in ("W", "V"):
            assert got[v].tobytes() == truth[f"shadow_as_grad:avg:{v}"].tobytes(), v
    code, _, err = run_cli(["export", str(out / "shadow_as_accum"), "--out",
                            str(tmp_path / "y.npz")])
    assert code == 6, err
    assert "ResourceApplyMomentum" in err, err
    assert not (tmp_path / "y.npz").exists()

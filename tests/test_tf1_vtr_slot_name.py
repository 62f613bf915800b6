"""``--ema-name Momentum`` on a ``Saver(ema.variables_to_restore())`` checkpoint of a
``MomentumOptimizer`` graph exported the momentum slot ``W/Momentum`` as W's EMA, exit 0,
though the ``.meta``'s update op (``ApplyMomentum``) proves it the optimizer's slot
(review-12-attack-r20 F9): the slot check skipped weights the checkpoint does not store.
Made here by TensorFlow (a subprocess), truth read from the session at save time."""

from __future__ import annotations

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

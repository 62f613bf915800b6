"""TF1 with its ``.meta``: a name is an EMA's only on positive evidence, ``ema.apply()``'s
``AssignMovingAvg`` update ops writing the tensors stored under it (review-14-attack-r27 F2).

The ``Saver`` built before ``ema.apply()`` leaves the averages out of the checkpoint; what
remains under ``W/<name>`` is the optimizer's slot (a hand-written optimizer's ``assign``-updated
``W/MyMomentum``, or ``MomentumOptimizer(name="SGDM")``'s ``W/SGDM``). ``ema.apply(...)`` puts
every weight into ``moving_average_variables`` all the same, which made the slot's name look
like the EMA's: ``export``/``restore-ema`` exit 0 (also ``--strict``) with momentum buffers as
averages, where the EMA's (or the optimizer's) update ops run inside a ``tf.cond`` (control flow
v2: their ops live in function bodies). And a ``--ema-name ema`` refusal must not offer
``--ema-name ema,SGDM`` for a name nothing proves an EMA's (F8). Made by real TensorFlow in a
subprocess; truth ``ema.average(v)`` and every variable's value at save time.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

SCRIPT = r'''
opt_kind, where, saver_at, ema_name, over = sys.argv[2:7]


class MyMomentum(tf1.train.Optimizer):  # slots updated by assign: no Apply* op
    def __init__(self):
        super().__init__(False, "MyMomentum")

    def _create_slots(self, var_list):
        for v in var_list:
            self._zeros_slot(v, "momentum", self._name)

    def _resource_apply_dense(self, grad, var):
        m = self.get_slot(var, "momentum")
        m_t = m.assign(0.9 * m + grad)
        with tf.control_dependencies([m_t]):
            return var.assign_sub(0.1 * m_t).op

    _apply_dense = _resource_apply_dense


def in_cond(make):  # the update every step, inside a tf.cond (gradient accumulation style)
    def run():
        with tf.control_dependencies([make()]):
            return tf.constant(1)
    return tf.cond(tf.equal(gs % 1, 0), run, lambda: tf.constant(0)).op


with tf.Graph().as_default():
    gs = tf1.train.get_or_create_global_step()
    x = tf.random.normal([8, 3], seed=1)
    w = tf1.get_variable("W", [3, 4])
    b = tf1.get_variable("b", [4], initializer=tf1.ones_initializer())
    v = tf1.get_variable("V", [4, 2])
    loss = tf.reduce_mean((tf.matmul(tf.nn.relu(tf.matmul(x, w) + b), v) - 2.0) ** 2)
    opt = MyMomentum() if opt_kind == "my" else tf1.train.MomentumOptimizer(0.1, 0.9, name="SGDM")
    grads = opt.compute_gradients(loss)
    apply = lambda: opt.apply_gradients(grads, global_step=gs)  # noqa: E731
    train = in_cond(apply) if where in ("opt", "both") else apply()
    if saver_at == "early":
        saver = tf1.train.Saver()
    ema = tf1.train.ExponentialMovingAverage(0.5, **({} if ema_name == "default" else
                                                     {"name": ema_name}))
    averaged = [w, b, v] if over == "all" else [v]
    with tf.control_dependencies([train]):
        step = in_cond(lambda: ema.apply(averaged)) if where in ("ema", "both") else \
            ema.apply(averaged)
    if saver_at == "late":
        saver = tf1.train.Saver()
    with trained(tf, step, 4) as s:
        for t in averaged:
            truth["avg:" + t.op.name] = s.run(ema.average(t))
        for t in tf1.global_variables():
            truth["raw:" + t.op.name] = s.run(t)
        saver.save(s, f"{out}/model.ckpt", global_step=gs)
'''

# (optimizer, update ops inside tf.cond, Saver built, EMA name, averaged)
CASES = {
    "assign_early": ("my", "none", "early", "default", "all"),  # the r27 F2 report
    "sgdm_cond_early": ("sgdm", "opt", "early", "default", "all"),  # the r27 F2 tf.cond report
    "assign_ema_cond_early": ("my", "ema", "early", "default", "all"),
    "sgdm_both_cond_early": ("sgdm", "both", "early", "default", "all"),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def early(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(request.param)
    return out, run_tf1_script(SCRIPT, out, *CASES[request.param])


def _slot_name(truth) -> str:
    return "MyMomentum" if "raw:W/MyMomentum" in truth else "SGDM"


def test_momentum_buffers_are_never_exported_as_averages(early, tmp_path):
    out, truth = early
    for extra in ([], ["--strict"]):
        code, _, err = run_cli(["export", str(out), *extra, "--out", str(tmp_path / "x.npz")])
        assert code == 6, err
        assert not (tmp_path / "x.npz").exists()
        # either the .meta's update ops prove the averages were not saved (--raw), or nothing
        # proves the slot's name an EMA's (--ema-name)
        assert "--raw" in err or f"--ema-name {_slot_name(truth)}" in err, err
    code, _, err = run_cli(["restore-ema", str(out), "--out", str(tmp_path / "re")])
    assert code == 6, err


def test_the_raw_weights_export_exactly(early, tmp_path):
    out, truth = early
    code, _, err = run_cli(["export", str(out), "--raw", "--out", str(tmp_path / "r.npz")])
    assert code == 0, err
    with np.load(tmp_path / "r.npz") as z:
        for k in ("W", "b", "V"):
            assert z[k].tobytes() == truth["raw:" + k].tobytes(), k


def test_list_claims_no_shadow(early):
    out, _ = early
    code, text, err = run_cli(["list", str(out)])
    assert code == 0, err
    assert "weights have a shadow" not in text, text


def test_a_named_ema_applied_in_a_cond_is_proven_by_its_branch_ops(tmp_path):
    """An EMA named ``ema`` applied inside a ``tf.cond`` (control flow v2), its averages
    saved: its update ops live in the cond's branch function, which the update-op reading
    follows (review-17-attack-r36 F10), so the averages are exact stated or not."""
    truth = run_tf1_script(SCRIPT, tmp_path, "sgdm", "ema", "late", "ema", "all")
    for stated in ([], ["--ema-name", "ema"]):
        dest = tmp_path / f"x{len(stated)}.npz"
        code, _, err = run_cli(["export", str(tmp_path), *stated, "--strict",
                                "--out", str(dest)])
        assert code == 0, err
        with np.load(dest) as z:
            for k in ("W", "b", "V"):
                assert z[k].tobytes() == truth["avg:" + k].tobytes(), k
                assert z[k].tobytes() != truth["raw:" + k].tobytes(), k


@pytest.mark.parametrize("where", ["none", "opt"])
def test_head_ema_refusal_offers_no_unproven_name(where, tmp_path):
    """``ExponentialMovingAverage(name="ema")`` over the head only beside
    ``MomentumOptimizer(name="SGDM")``: ``--ema-name ema`` lacks W and b, whose ``W/SGDM`` is
    the momentum buffer; the refusal must not offer ``--ema-name ema,SGDM`` as taking another
    EMA's averages (F8), and ``--allow-missing`` is exact."""
    truth = run_tf1_script(SCRIPT, tmp_path, "sgdm", where, "late", "ema", "head")
    code, _, err = run_cli(["export", str(tmp_path), "--ema-name", "ema",
                            "--out", str(tmp_path / "x.npz")])
    assert code == 6, err
    assert "takes both objects' averages" not in err, err
    assert "--allow-missing" in err, err
    code, _, err = run_cli(["export", str(tmp_path), "--ema-name", "ema", "--allow-missing",
                            "--out", str(tmp_path / "y.npz")])
    assert code == 0, err
    with np.load(tmp_path / "y.npz") as z:
        assert z["V"].tobytes() == truth["avg:V"].tobytes()
        for k in ("W", "b"):
            assert z[k].tobytes() == truth["raw:" + k].tobytes(), k

"""A TF1 run with NO ExponentialMovingAverage, a tf_slim-style batch norm (its moving_mean and
moving_variance in ``moving_average_variables``, updated by ``assign_moving_average``) and a
one-slot optimizer given a name of its own (``MomentumOptimizer(name="SGDM")``, MLPerf's
``"LARSOptimizer"``), saved with its ``.meta``: the collection was taken as proof that ``SGDM``
is an EMA's name, so ``list`` said "4 of 4 weights have a shadow" and ``export
--allow-missing`` / ``restore-ema --allow-missing`` / ``restore_ema(..., allow_missing=True)``
wrote the momentum buffers as the weights, exit 0 (review-14-attack-r25 F0). The collection
lists the variables averaged (here the batch-norm statistics, not the weights), and the
``.meta``'s update ops show ``W/SGDM`` an input of the optimizer's ``ApplyMomentum``: these
are slots, and no averages are stored (exit 6, ``--raw``). tf_slim does not import in this
venv, so its batch norm's collections are built as it builds them. Resource and ref
variables; made by real TensorFlow in a subprocess, truth read at save time."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

SCRIPT = r'''
from tensorflow.python.training import moving_averages
optname, ref = sys.argv[2], sys.argv[3] == "ref"
if ref:
    tf1.disable_resource_variables()
GK = tf1.GraphKeys
with tf.Graph().as_default():
    gs = tf1.train.get_or_create_global_step()
    x = tf.random.normal([8, 3], seed=1)
    trainable = [GK.GLOBAL_VARIABLES, GK.TRAINABLE_VARIABLES, GK.MODEL_VARIABLES]
    stats = [GK.GLOBAL_VARIABLES, GK.MODEL_VARIABLES, GK.MOVING_AVERAGE_VARIABLES]
    with tf1.variable_scope("fc1"):
        w = tf1.get_variable("weights", [3, 4], collections=trainable)
        h = tf.matmul(x, w)
        with tf1.variable_scope("BatchNorm"):
            beta = tf1.get_variable("beta", [4], initializer=tf1.zeros_initializer(),
                                    collections=trainable)
            mm = tf1.get_variable("moving_mean", [4], initializer=tf1.zeros_initializer(),
                                  trainable=False, collections=stats)
            mv = tf1.get_variable("moving_variance", [4], initializer=tf1.ones_initializer(),
                                  trainable=False, collections=stats)
            mean, var = tf.nn.moments(h, [0])
            ups = [moving_averages.assign_moving_average(mm, mean, 0.9, zero_debias=False),
                   moving_averages.assign_moving_average(mv, var, 0.9, zero_debias=False)]
            h = tf.nn.batch_normalization(h, mean, var, beta, None, 1e-3)
    with tf1.variable_scope("logits"):
        w2 = tf1.get_variable("weights", [4, 3])
        b2 = tf1.get_variable("biases", [3], initializer=tf1.zeros_initializer())
    loss = tf.reduce_mean((tf.matmul(tf.nn.relu(h), w2) + b2) ** 2)
    with tf.control_dependencies(ups):
        if sys.argv[3] == "assign":  # a hand-written momentum: no Apply op shows the slots
            tv = tf1.trainable_variables()
            ops = [gs.assign_add(1)]
            for v, g in zip(tv, tf.gradients(loss, tv)):
                m = tf1.get_variable(f"{v.op.name}/{optname}", v.shape, trainable=False,
                                     initializer=tf1.zeros_initializer())
                ops += [m.assign(0.9 * m + g), v.assign_sub(0.1 * (0.9 * m + g))]
            train = tf.group(*ops)
        else:
            opt = tf1.train.MomentumOptimizer(0.1, 0.9, name=optname)
            train = opt.minimize(loss, global_step=gs)
    with trained(tf, train) as s:
        for v in tf1.global_variables():
            truth[v.op.name] = s.run(v)
        tf1.train.Saver().save(s, f"{out}/model.ckpt", global_step=gs)
'''

WEIGHTS = ("fc1/weights", "fc1/BatchNorm/beta", "logits/weights", "logits/biases")


@pytest.fixture(scope="module", params=[("SGDM", "resource"), ("LARSOptimizer", "ref")],
                ids=["SGDM", "LARSOptimizer_ref"])
def made(request, tmp_path_factory):
    name, kind = request.param
    out = tmp_path_factory.mktemp(f"slim_bn_{name}")
    return out, name, run_tf1_script(SCRIPT, out, name, kind)


def test_list_reads_the_momentum_buffers_as_slots(made):
    out, name, _ = made
    code, text, err = run_cli(["list", str(out), "--json"])
    assert code == 0, err
    rows = {v["name"]: v for v in json.loads(text)["variables"]}
    for w in WEIGHTS:
        assert rows[f"{w}/{name}"]["role"] == "optimizer_slot", rows[f"{w}/{name}"]
        assert rows[w]["ema"] is None, rows[w]


@pytest.mark.parametrize("extra", [[], ["--allow-missing"], ["--allow-missing", "--strict"]],
                         ids=["plain", "allow_missing", "strict"])
def test_export_and_restore_ema_refuse_with_raw_the_way_out(made, tmp_path, extra):
    out, _, _ = made
    for args in (["export", str(out), "--out", str(tmp_path / "x.npz")],
                 ["restore-ema", str(out), "--out", str(tmp_path / "re")]):
        code, _, err = run_cli(args + extra)
        assert code == 6, (args, err)
        assert "--raw" in err, err
    assert not (tmp_path / "x.npz").exists() and not (tmp_path / "re").exists()
    code, _, err = run_cli(["diff", str(out), "--ema"])
    assert code == 6, err


def test_raw_exports_the_weights_themselves(made, tmp_path):
    out, _, truth = made
    code, _, err = run_cli(["export", str(out), "--raw", "--out", str(tmp_path / "x.npz")])
    assert code == 0, err
    with np.load(tmp_path / "x.npz") as z:
        for w in WEIGHTS:
            assert z[w].tobytes() == truth[w].tobytes(), w


def test_restore_ema_in_the_imported_graph_refuses(made, tf):
    import ckpt_tools

    out, _, _ = made
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        prefix = str(next(out.glob("model.ckpt-*.meta")))[:-len(".meta")]
        tf.compat.v1.train.import_meta_graph(prefix + ".meta")
        with pytest.raises(ckpt_tools.EmaError):
            ckpt_tools.restore_ema(sess, str(out), allow_missing=True)


def test_a_hand_written_momentum_beside_batch_norm_is_not_proven_an_average(tmp_path):
    """No Apply op shows the slots, and the collection lists the batch-norm statistics only:
    never the collection's; the graph's plain assigns writing them prove them no average
    (review-17-attack-r38 F9), stated or not."""
    run_tf1_script(SCRIPT, tmp_path, "SGDM", "assign")
    for extra in ([], ["--allow-missing"], ["--ema-name", "SGDM"]):
        code, _, err = run_cli(["export", str(tmp_path), "--out", str(tmp_path / "x.npz"),
                                *extra])
        assert code == 6, err
        assert "/SGDM is no proven average of fc1/" in err and "--raw" in err, err
    assert not (tmp_path / "x.npz").exists()

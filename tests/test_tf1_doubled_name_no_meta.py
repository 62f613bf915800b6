"""TF1 without the ``.meta``: a frozen ``w0``, a trainable ``w0/<N>`` (its delta) and an EMA named
``<N>`` over the trainables, which writes ``w0/<N>/<N>`` and ``w1/<N>`` (review-17-attack-r38 F3,
F6, CRITICAL). The keys also fit ``w0/<N>`` as ``w0``'s average and ``w0/<N>/<N>`` as the same
EMA's average of it; read without the ``.meta`` (none written, or ``--no-meta``) the true
``--ema-name fast`` (and, for TF's default name, a plain export) wrote the delta's raw values as
``w0`` and dropped the delta, exit 0 ``--strict``; ``ema_saver`` in a hand-built eval graph
holding the live ``w0/fast`` restored them into ``w0``. Refused (exit 6) naming the ``.meta``;
with it the answer stays exact.

Made by real TensorFlow in a subprocess; truth ``sess.run`` at save time.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import E, run_tf1_script

import ckpt_tools
from ckpt_tools.errors import UnprovenPairingError

SCRIPT = r'''
name = sys.argv[2]
with tf.Graph().as_default():
    w0 = tf1.get_variable("w0", initializer=tf.ones([3, 2]), trainable=False)
    with tf1.variable_scope("w0"):
        d = tf1.get_variable(name, initializer=tf.zeros([3, 2]))  # the trained delta
    w1 = tf1.get_variable("w1", initializer=tf.zeros([2]))
    loss = tf.reduce_sum(tf.square(w0 + d - 3.0)) + tf.reduce_sum(tf.square(w1 - 2.0))
    train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
    ema = tf1.train.ExponentialMovingAverage(0.5, name=name)
    with tf.control_dependencies([train]):
        upd = ema.apply(tf1.trainable_variables())
    with trained(tf, upd) as s:
        for v in tf1.global_variables():
            truth["raw:" + v.op.name] = s.run(v)
        for v in tf1.trainable_variables():
            truth["ema:" + v.op.name] = s.run(ema.average(v))
        assert ema.average(w0) is None
        saver = tf1.train.Saver()
        saver.save(s, f"{out}/meta/model.ckpt")
        saver.save(s, f"{out}/nm/model.ckpt", write_meta_graph=False)
'''


@pytest.fixture(scope="module", params=["fast", E])
def made(request, tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1_doubled_no_meta")
    truth = run_tf1_script(SCRIPT, out, request.param)
    truth = {k.replace("|", "/"): v for k, v in truth.items()}
    assert not (out / "nm" / "model.ckpt.meta").exists()
    return out, request.param, truth


def _export(ckpt, dest, *args):
    return run_cli(["export", str(ckpt), "--strict", *args, "--out", str(dest)])


@pytest.mark.parametrize("stated", [True, False])
def test_without_the_meta_export_is_refused(made, tmp_path, stated):
    out, name, truth = made
    assert not np.array_equal(truth[f"raw:w0/{name}"], truth["raw:w0"])
    args = ["--ema-name", name] if stated else []
    if not stated and name != E:
        return  # no statement: 'fast' is not detected (refused as before, pass --ema-name)
    dest = tmp_path / "x.npz"
    code, _, err = _export(out / "nm" / "model.ckpt", dest, *args)
    assert code == 6, err
    assert f"w0/{name}/{name}" in err and ".meta" in err, err
    assert not dest.exists()
    code, _, err = _export(out / "meta" / "model.ckpt", dest, *args, "--no-meta")
    assert code == 6, err
    assert "drop --no-meta" in err, err
    assert not dest.exists()
    code, _, err = run_cli(["restore-ema", str(out / "nm" / "model.ckpt"), *args,
                            "--out", str(tmp_path / "re")])
    assert code == 6, err
    assert not (tmp_path / "re").exists()


def test_with_the_meta_export_is_exact(made, tmp_path):
    out, name, truth = made
    dest = tmp_path / "x.npz"
    code, _, err = _export(out / "meta" / "model.ckpt", dest, "--ema-name", name)
    assert code == 0, err
    with np.load(dest) as got:
        assert got["w0"].tobytes() == truth["raw:w0"].tobytes()
        assert got[f"w0/{name}"].tobytes() == truth[f"ema:w0/{name}"].tobytes()
        assert got["w1"].tobytes() == truth["ema:w1"].tobytes()


def _hand_built(tf, name, scope):
    v1 = tf.compat.v1
    with v1.variable_scope(scope or v1.get_variable_scope()):
        v1.get_variable("w0", shape=[3, 2], trainable=False)
        with v1.variable_scope("w0"):
            v1.get_variable(name, shape=[3, 2])  # the model's delta, live in the graph
        v1.get_variable("w1", shape=[2])


@pytest.mark.parametrize("scope", [None, "eval"])
def test_ema_saver_in_a_hand_built_graph(made, tf, scope):
    out, name, truth = made
    v1 = tf.compat.v1
    kw = {"add_scope": f"{scope}/"} if scope else {}
    pre = f"{scope}/" if scope else ""
    with tf.Graph().as_default():
        _hand_built(tf, name, scope)
        with pytest.raises(UnprovenPairingError, match=rf"w0/{name}/{name}.*\.meta"):
            ckpt_tools.ema_saver(checkpoint=str(out / "nm" / "model.ckpt"),
                                 ema_name=name, **kw)
    with tf.Graph().as_default():
        _hand_built(tf, name, scope)
        prefix = str(out / "meta" / "model.ckpt")
        saver = ckpt_tools.ema_saver(checkpoint=prefix, ema_name=name, **kw)
        by_name = {v.op.name: v for v in v1.global_variables()}
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            saver.restore(sess, prefix)
            for graph, want in ((f"{pre}w0", "raw:w0"), (f"{pre}w0/{name}", f"ema:w0/{name}"),
                                (f"{pre}w1", "ema:w1")):
                assert sess.run(by_name[graph]).tobytes() == truth[want].tobytes(), graph


def test_raw_the_refusal_offers_keeps_the_delta(made, tmp_path):
    """The refusal names --raw; under its second reading w0/<N> is a trained model weight, so
    --raw writes it as stored with the "may be model weights or averages" warning instead of
    dropping it, exit 0 (review-17-attack-r38 F10)."""
    out, name, truth = made
    dest = tmp_path / "raw.npz"
    code, _, err = _export(out / "nm" / "model.ckpt", dest, "--raw")
    assert code == 0, err
    assert f"w0/{name}" in err and "may be model weights or averages" in " ".join(err.split())
    with np.load(dest) as z:
        got = {k: z[k] for k in z.files}
    for key in ("w0", f"w0/{name}", "w1"):
        assert got[key].tobytes() == truth[f"raw:{key}"].tobytes(), key

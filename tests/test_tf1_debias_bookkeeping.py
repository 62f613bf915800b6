"""TF1 with its ``.meta``: a moving mean kept by ``assign_moving_average(..., zero_debias=True)``
inside ``variable_scope("bn")`` (tf_slim's ``batch_norm(zero_debias_moving_mean=True)``) stores
its bookkeeping as ``bn/bn/moving_mean/biased`` and ``bn/bn/moving_mean/local_step``: the
scope doubles the name, so no stored ``bn/bn/moving_mean`` sits above them. ``local_step`` (a
float scalar outside ``trainable_variables``) was read as a frozen model weight: listed as a
weight and written into every export, ``--ema`` and ``--raw`` (review-14-attack-r28 F6). Both are
the average's state, never a weight.

Truth: ``sess.run(ema.average(v))`` and ``sess.run(v)`` at save time (:func:`tf1_ema_run`)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import tf1_ema_run

VARS = ("W", "V", "b")
STATE = ("bn/bn/moving_mean/biased", "bn/bn/moving_mean/local_step")


@pytest.fixture(scope="module")
def made(tmp_path_factory, tf):
    out = tmp_path_factory.mktemp("tf1_debias") / "run"
    return out, tf1_ema_run(tf, out, lambda e, vs, gs: None, debiased=True)[1]


def test_debias_state_is_no_weight(made, tmp_path):
    run, truth = made
    code, text, err = run_cli(["list", str(run), "--json"])
    assert code == 0, err
    rows = {v["key"]: v for v in json.loads(text)["variables"]}
    for k in STATE:
        assert rows[k]["role"] == "other", rows[k]
    for extra, kind in (([], "ema"), (["--raw"], "raw")):
        dest = tmp_path / f"{kind}.npz"
        code, _, err = run_cli(["export", str(run), *extra, "--out", str(dest)])
        assert code == 0, err
        with np.load(dest) as got:
            assert sorted(got.files) == sorted([*VARS, "bn/moving_mean"]), got.files
            for n in VARS:
                assert got[n].tobytes() == truth[f"{kind}:{n}"].tobytes(), (kind, n)
            assert got["bn/moving_mean"].tobytes() == truth["raw:bn/moving_mean"].tobytes()


def test_debias_state_without_meta_is_no_weight(made, tmp_path):
    """The same checkpoint copied without its .meta (as a downloaded one often is): the
    helpers were weights with no EMA shadow, export refused blaming frozen variables, and
    --allow-missing wrote them as model weights (review-25-user-u27 F2). Read by TF's layout
    (<scope>/<scope>/moving_mean/biased beside a scalar local_step of the stored
    <scope>/moving_mean's dtype): role other, as the .meta says, and left out."""
    import shutil

    run, truth = made
    ckpt = max(run.glob("model.ckpt-*.index")).with_suffix("")
    bare = tmp_path / "bare"
    bare.mkdir()
    for f in run.glob(ckpt.name + ".*"):
        if f.suffix != ".meta":
            shutil.copy(f, bare / f.name)
    code, text, err = run_cli(["list", str(bare / ckpt.name), "--json"])
    assert code == 0, err
    rows = {v["key"]: v for v in json.loads(text)["variables"]}
    for k in STATE:
        assert rows[k]["role"] == "other", rows[k]
    dest = tmp_path / "ema.npz"
    code, _, err = run_cli(["export", str(bare / ckpt.name), "--out", str(dest)])
    assert code == 0, err
    with np.load(dest) as got:
        assert sorted(got.files) == sorted([*VARS, "bn/moving_mean"]), got.files
        for n in VARS:
            assert got[n].tobytes() == truth[f"ema:{n}"].tobytes(), n
        assert got["bn/moving_mean"].tobytes() == truth["raw:bn/moving_mean"].tobytes()


def test_weights_named_like_the_helpers_stay_weights(tf, tmp_path):
    """Trainable variables s/s/w/biased and s/s/w/local_step beside s/w, each averaged, saved
    without a .meta: they have TF's helper layout, but their stored shadows show trained
    weights; 6cc4fce read them as helpers (role other) and ``export --raw`` dropped them,
    exit 0 (review-25-attack-r85 F1). Truth: ``sess.run`` at save time."""
    tf1 = tf.compat.v1
    keys = ("s/w", "s/s/w/biased", "s/s/w/local_step")
    with tf.Graph().as_default():
        with tf1.variable_scope("s"):
            w = tf1.get_variable("w", [3], initializer=tf1.constant_initializer(0.5))
            with tf1.variable_scope("s/w"):
                bi = tf1.get_variable("biased", [3], initializer=tf1.constant_initializer(0.25))
                ls = tf1.get_variable("local_step", [], initializer=tf1.constant_initializer(2.0))
        loss = tf.reduce_sum(tf.square(w + bi * ls - 1.0))
        step = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
        ema = tf1.train.ExponentialMovingAverage(0.5)
        with tf.control_dependencies([step]):
            train = ema.apply([w, bi, ls])
        saver = tf1.train.Saver()
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            for _ in range(3):
                sess.run(train)
            raw = dict(zip(keys, sess.run([w, bi, ls]), strict=True))
            path = saver.save(sess, str(tmp_path / "model.ckpt"), write_meta_graph=False)
    code, text, err = run_cli(["list", path, "--json"])
    assert code == 0, err
    rows = {v["key"]: v for v in json.loads(text)["variables"]}
    assert all(rows[k]["role"] == "weight" for k in keys), [rows[k] for k in keys]
    dest = tmp_path / "raw.npz"
    code, _, err = run_cli(["export", path, "--raw", "--out", str(dest)])
    assert code == 0, err
    with np.load(dest) as got:
        assert sorted(got.files) == sorted(keys), got.files
        for k in keys:
            assert got[k].tobytes() == np.asarray(raw[k]).tobytes(), k

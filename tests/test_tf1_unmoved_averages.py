"""A serving/evaluation re-save whose EMA shadows were never restored (review-25-user-u27 F5,
MAJOR): a fresh graph runs ``ema.apply()``, initializes every variable, restores only the
model's weights from the training checkpoint and saves every variable (``Saver()``), so each
shadow holds its variable's initial value. The export gave those initial values as the EMA
weights, exit 0, with no word. The file shows it where the initial value is one constant (a
bias's zeros, a scale's ones): such an average holds one value in every element while its
weight does not. The export now warns (stderr and ``--json``'s ``unmoved_averages``); the
training checkpoint itself exports unwarned.

Made by real TensorFlow in a subprocess; truth ``sess.run`` at save time.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import E, run_tf1_script

SCRIPT = r'''
def build():
    with tf1.variable_scope("dense"):
        w = tf1.get_variable("kernel", [4, 3],
                             initializer=tf1.glorot_uniform_initializer(seed=1))
        b = tf1.get_variable("bias", [3], initializer=tf1.zeros_initializer())
    g = tf1.get_variable("bn/gamma", [3], initializer=tf1.ones_initializer())
    loss = tf.reduce_sum(tf.square(tf.matmul(tf.ones([2, 4]), w) * g + b - 1.0))
    step = tf1.train.GradientDescentOptimizer(0.05).minimize(loss)
    ema = tf1.train.ExponentialMovingAverage(0.9)
    with tf.control_dependencies([step]):
        update = ema.apply([w, b, g])
    return [w, b, g], update, ema


with tf.Graph().as_default():
    variables, update, ema = build()
    with trained(tf, update, steps=5) as s:
        tf1.train.Saver().save(s, f"{out}/train/model.ckpt")
with tf.Graph().as_default():  # the re-save: shadows initialized, never restored
    variables, update, ema = build()
    with tf1.Session() as s:
        s.run(tf1.global_variables_initializer())
        tf1.train.Saver(variables).restore(s, f"{out}/train/model.ckpt")
        for v in variables:
            truth["raw:" + v.op.name] = s.run(v)
            truth["ema:" + v.op.name] = s.run(ema.average(v))
        tf1.train.Saver().save(s, f"{out}/serve/model.ckpt")
# r89 F2: real training, decay 0.9999, 20 steps: a batch norm's scale average moves from 1 in
# lockstep (one value in every element, not 1)
with tf.Graph().as_default():
    tf1.set_random_seed(1)
    x = tf.constant(np.random.RandomState(0).randn(8, 4).astype("float32"))
    k = tf1.get_variable("dense/kernel", shape=[4, 3],
                         initializer=tf1.glorot_uniform_initializer())
    h = tf.matmul(x, k) + tf1.get_variable("dense/bias", initializer=tf.zeros([3]))
    g = tf1.get_variable("bn/gamma", initializer=tf.ones([3]))
    be = tf1.get_variable("bn/beta", initializer=tf.zeros([3]))
    m, v = tf.nn.moments(h, [0])
    h = tf.nn.batch_normalization(h, m, v, be, g, 1e-3)
    loss = tf.reduce_mean(tf.square(h - 1.0))
    train = tf1.train.GradientDescentOptimizer(0.01).minimize(loss)
    ema = tf1.train.ExponentialMovingAverage(0.9999)
    with tf.control_dependencies([train]):
        up = ema.apply(tf1.trainable_variables())
    with tf1.Session() as s:
        s.run(tf1.global_variables_initializer())
        for _ in range(20):
            s.run(up)
        for v in tf1.trainable_variables():
            truth["lockstep:raw:" + v.op.name] = s.run(v)
            truth["lockstep:ema:" + v.op.name] = s.run(ema.average(v))
        tf1.train.Saver().save(s, f"{out}/lockstep/model.ckpt")
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1_unmoved_averages")
    truth = run_tf1_script(SCRIPT, out)
    assert not truth["ema:dense/bias"].any()  # the initial zeros
    moved = truth["lockstep:ema:bn/gamma"]  # one value, moved from 1 (r89 F2)
    assert (moved == moved[0]).all() and moved[0] != 1.0, moved
    return out, truth


@pytest.mark.parametrize("use_meta", [[], ["--no-meta"]])
def test_an_export_of_never_updated_averages_warns(made, tmp_path, use_meta):
    """The averages are exported as stored (nothing proves them unmoved: a decay so close to
    1 that each step's change rounds away leaves the same file), with a warning naming the
    ones holding one value where their weights do not, and --json's unmoved_averages."""
    out, truth = made
    path = str(out / "serve" / "model.ckpt")
    code, stdout, err = run_cli(["export", path, "--out", str(tmp_path / "x.npz"), "--json",
                                 *use_meta])
    assert code == 0, err
    doc = json.loads(stdout)
    assert doc["unmoved_averages"] == {"dense/bias": f"dense/bias/{E}",
                                       "bn/gamma": f"bn/gamma/{E}"}, doc
    assert any("initial values" in w for w in doc["warnings"]), doc["warnings"]
    said = " ".join(err.split())
    assert "initial values" in said and "dense/bias" in said and "bn/gamma" in said, said
    with np.load(tmp_path / "x.npz") as got:
        for name in ("dense/kernel", "dense/bias", "bn/gamma"):
            assert got[name].tobytes() == truth["ema:" + name].tobytes(), name


def test_a_trained_checkpoint_and_raw_export_unwarned(made, tmp_path):
    """The training checkpoint's averages moved: no warning, no unmoved_averages; --raw of
    the re-save writes no average, so no unmoved_averages either, and it no longer tells to
    drop --raw for averages the default export calls never updated (r89 F4): it names them,
    and says the raw weights are the ones to use if so."""
    out, _ = made
    code, stdout, err = run_cli(["export", str(out / "train" / "model.ckpt"), "--out",
                                 str(tmp_path / "t.npz"), "--json"])
    assert code == 0, err
    doc = json.loads(stdout)
    assert "unmoved_averages" not in doc and "initial values" not in err, doc
    code, stdout, err = run_cli(["export", str(out / "serve" / "model.ckpt"), "--raw",
                                 "--out", str(tmp_path / "r.npz"), "--json"])
    assert code == 0, err
    assert "unmoved_averages" not in json.loads(stdout) and "initial values" not in err, err
    said = " ".join(err.split())
    assert "usually evaluate better" not in said and "(drop --raw to export them)" not in said
    assert "bn/gamma" in said and "dense/bias" in said and "never updated" in said, said
    code, stdout, err = run_cli(["export", str(out / "train" / "model.ckpt"), "--raw",
                                 "--out", str(tmp_path / "t2.npz")])
    assert code == 0 and "usually evaluate better" in " ".join(err.split()), err


def test_one_moved_value_is_no_initial_value(made, tmp_path):
    """r89 F2: real training (decay 0.9999, 20 steps) moves bn/gamma's average from 1 to one
    value in every element, not 1: it was updated, so no "initial values" warning and no
    unmoved_averages; the averages are exported bit for bit."""
    out, truth = made
    code, stdout, err = run_cli(["export", str(out / "lockstep" / "model.ckpt"), "--out",
                                 str(tmp_path / "l.npz"), "--json"])
    assert code == 0, err
    doc = json.loads(stdout)
    assert "unmoved_averages" not in doc and "initial values" not in err, doc
    with np.load(tmp_path / "l.npz") as got:
        for name in ("dense/kernel", "dense/bias", "bn/gamma", "bn/beta"):
            assert got[name].tobytes() == truth["lockstep:ema:" + name].tobytes(), name

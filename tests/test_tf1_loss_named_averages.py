"""A TF1 checkpoint of the averages alone, without its ``.meta``, where a trained variable's
name contains "loss" (a multi-task ``multitask/loss_log_var``; review-13-attack-r22 F3): its
average was read as a loss tensor's by the name alone, and ``export --averages-only`` left it
out, exit 0, no word. The stated ``--averages-only`` now reads it as its variable's average too
and says so in the note; a zero-debiased loss tensor's average (``/biased``, ``/local_step``
beside it: TF zero-debiases tensors only) stays a loss average. Made by real TensorFlow (a
subprocess); truth ``ema.average(v)`` at save time."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

SCRIPT = r'''
with tf.Graph().as_default():
    gs = tf1.train.get_or_create_global_step()
    w = tf1.get_variable("fc/w", [3, 3])
    lv = tf1.get_variable("multitask/loss_log_var", [2])
    loss = tf.identity(tf.reduce_sum(tf.square(tf.matmul(tf.ones([2, 3]), w)))
                       * tf.reduce_sum(tf.exp(-lv)) + tf.reduce_sum(lv), name="total_loss")
    train = tf1.train.GradientDescentOptimizer(0.05).minimize(loss, global_step=gs)
    ema = tf1.train.ExponentialMovingAverage(0.5, num_updates=gs)
    lema = tf1.train.ExponentialMovingAverage(0.9, zero_debias=True)
    with tf.control_dependencies([train]):
        step = tf.group(ema.apply([w, lv]), lema.apply([loss]))
    with trained(tf, step) as s:
        averages = {ema.average_name(v): ema.average(v) for v in (w, lv)}
        tensor = lema.average(loss)  # and its zero-debias state
        state = [v for v in tf1.global_variables() if v.op.name.startswith(tensor.op.name)]
        os.makedirs(f"{out}/run")
        tf1.train.Saver({**averages, **{v.op.name: v for v in state}}).save(
            s, f"{out}/run/model.ckpt", global_step=gs, write_meta_graph=False)
        for v in (w, lv):
            truth[v.op.name] = s.run(ema.average(v))
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1_loss_named")
    return out, run_tf1_script(SCRIPT, out)


def test_averages_only_exports_the_loss_named_variable(made, tmp_path):
    out, truth = made
    dest = tmp_path / "x.npz"
    code, stdout, err = run_cli(["export", str(out / "run"), "--averages-only", "--out",
                                 str(dest), "--json"])
    assert code == 0, err
    with np.load(dest) as z:
        got = {k: z[k] for k in z.files}
    assert sorted(got) == ["fc/w", "multitask/loss_log_var"]  # not the loss tensor's
    for k, v in truth.items():
        assert np.array_equal(got[k], v), k
    doc = json.loads(stdout)
    assert "multitask/loss_log_var/ExponentialMovingAverage" in \
        doc["stated_averages_only"]["pairs"]
    assert any("named after a loss" in n and "--exclude" in n for n in doc["notes"])


def test_without_the_statement_refused(made, tmp_path):
    out, _ = made
    code, _, err = run_cli(["export", str(out / "run"), "--out", str(tmp_path / "y.npz")])
    assert code == 6 and "--averages-only" in err, err
    assert not (tmp_path / "y.npz").exists()


def test_list_shows_the_loss_tensors_average_as_one(made):
    out, _ = made
    code, stdout, err = run_cli(["list", str(out / "run"), "--averages-only", "--json"])
    assert code == 0, err
    roles = {v["name"]: v["role"] for v in json.loads(stdout)["variables"]}
    assert roles["multitask/loss_log_var/ExponentialMovingAverage"] == "ema"
    assert roles["total_loss/ExponentialMovingAverage"] == "loss_average"

"""A ``tf.Module`` of unnamed variables with a non-trainable running statistic shaped like its
bias: ``ema.apply(m.trainable_variables)`` averaged the bias only, but the checkpoint does not
record trainability, so the statistic stays a candidate even under ``--apply-order trainable``.
The refusal says why and names the live-module call that decides; that call gives the truth
(``ema.average(v)`` read at save time) bit for bit (review-11-user-r9 F8)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

import ckpt_tools
from ckpt_tools.cli import app


def _norm(tf):
    class Norm(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(tf.random.normal([4, 4]) * 0.3)
            self.b = tf.Variable(tf.zeros([4]))
            self.a_mean = tf.Variable(tf.zeros([4]), trainable=False)  # running statistic

        def __call__(self, x):
            h = x @ self.w + self.b
            self.a_mean.assign(0.9 * self.a_mean + 0.1 * tf.reduce_mean(h, 0))
            return tf.nn.relu(h - self.a_mean)

    return Norm()


@pytest.fixture(scope="module")
def running_state(tf, tmp_path_factory):
    tf.random.set_seed(11)
    m = _norm(tf)
    ema = tf.train.ExponentialMovingAverage(0.8)
    x, y = tf.random.normal([16, 4]), tf.random.normal([16, 4])
    for _ in range(4):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((m(x) - y) ** 2)
        for v, g in zip(m.trainable_variables, tape.gradient(loss, m.trainable_variables),
                        strict=True):
            v.assign_sub(0.1 * g)
        ema.apply(m.trainable_variables)
    truth = {"w": ema.average(m.w).numpy(), "b": ema.average(m.b).numpy(),
             "a_mean": m.a_mean.numpy()}
    directory = tmp_path_factory.mktemp("running_state")
    prefix = tf.train.Checkpoint(model=m, ema=[ema.average(v) for v in
                                               m.trainable_variables]).write(
        str(directory / "ckpt"))
    return prefix, truth


def test_stated_order_refusal_names_the_live_module(running_state, tmp_path):
    prefix, _ = running_state
    result = CliRunner().invoke(app, ["export", prefix, "--apply-order", "trainable", "--out",
                                      str(tmp_path / "w.npz")])
    assert result.exit_code == 6, result.output
    text = " ".join(result.output.split())
    assert "does not record which variables are trainable" in text, text
    assert "apply_ema(module, path, apply_order='trainable')" in text, text
    assert not (tmp_path / "w.npz").exists()


def test_the_live_module_decides(tf, running_state):
    prefix, truth = running_state
    m = _norm(tf)
    ckpt_tools.apply_ema(m, prefix, apply_order="trainable")
    assert m.w.numpy().tobytes() == truth["w"].tobytes()
    assert m.b.numpy().tobytes() == truth["b"].tobytes()
    assert m.a_mean.numpy().tobytes() == truth["a_mean"].tobytes()  # raw: never averaged

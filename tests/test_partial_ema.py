"""A weight left out of ``ema.apply()`` while others were averaged: never exported or restored
raw with exit 0. TF's own ``variables_to_restore()`` looks for its average and fails; every
command refuses (exit 6) naming ``--allow-missing``, with or without the ``.meta``, and
``apply_ema`` raises unless ``allow_missing=True``. A variable the live object proves
non-trainable restores raw, as ``variables_to_restore()`` maps it. Checkpoints are made here
by real TensorFlow; values compared with ``ema.average(v)`` read at save time."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from helpers import train_ema
from typer.testing import CliRunner

import ckpt_tools
from ckpt_tools import EmaError
from ckpt_tools.cli import app

runner = CliRunner()


class _Net:
    @staticmethod
    def make(tf):
        class Net(tf.Module):
            def __init__(self):
                super().__init__()
                self.body = tf.Variable(tf.random.normal([3, 3]))
                self.head = tf.Variable(tf.random.normal([3]), name="head")

        return Net()


@pytest.fixture(scope="module")
def tf2_subset(tf, tmp_path_factory):
    m = _Net.make(tf)
    ema = tf.train.ExponentialMovingAverage(0.5)
    train_ema(tf, [m.body, m.head], ema, averaged=[m.body])  # the head trained, left out
    d = tmp_path_factory.mktemp("tf2_subset")
    tf.train.Checkpoint(model=m, ema=[ema.average(m.body)]).write(str(d / "ckpt"))
    return d, ema.average(m.body).numpy(), m.head.numpy()


@pytest.fixture(scope="module")
def tf1_subset(tmp_path_factory):
    d = tmp_path_factory.mktemp("tf1_subset")
    script = textwrap.dedent(f"""
        import os
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
        import tensorflow as tf
        tf1 = tf.compat.v1
        tf1.disable_eager_execution()
        W = tf1.get_variable("W", [3, 3]); b = tf1.get_variable("b", [3])
        x = tf1.random_normal([4, 3])
        loss = tf1.reduce_sum(tf1.tanh(tf1.matmul(x, W) + b) ** 2)
        step = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
        ema = tf1.train.ExponentialMovingAverage(0.5)
        with tf1.control_dependencies([step]):
            train = ema.apply([W])
        with tf1.Session() as s:
            s.run(tf1.global_variables_initializer())
            for _ in range(3):
                s.run(train)
            tf1.train.Saver().save(s, {str(d / "model.ckpt")!r})
    """)
    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True,
                   timeout=300)
    return d


@pytest.mark.parametrize("command", ["export", "restore-ema"])
def test_tf2_weight_left_out_is_refused_naming_allow_missing(tf2_subset, command, tmp_path):
    d, _, _ = tf2_subset
    out = tmp_path / ("w.npz" if command == "export" else "baked")
    for quiet in ([], ["--quiet"]):
        result = runner.invoke(app, [command, str(d), "--out", str(out), *quiet])
        assert result.exit_code == 6, result.output
        assert "--allow-missing" in result.stderr and "model/head" in result.stderr
        assert "ema.average(v)" in result.stderr and "<name>/" not in result.stderr
        assert not out.exists()
    result = runner.invoke(app, [command, str(d), "--out", str(out), "--allow-missing"])
    assert result.exit_code == 0, result.output


def test_tf2_export_with_allow_missing_says_what_is_raw(tf2_subset, tmp_path):
    d, body_avg, head_raw = tf2_subset
    out = tmp_path / "w.npz"
    result = runner.invoke(app, ["export", str(d), "--out", str(out), "--allow-missing",
                                 "--json"])
    assert result.exit_code == 0, result.output
    import json

    doc = json.loads(result.stdout)
    assert doc["raw"] == ["model/head"] and doc["averaged"] == ["model/body"], doc
    with np.load(out) as z:
        assert z["model/body"].tobytes() == body_avg.tobytes()
        assert z["model/head"].tobytes() == head_raw.tobytes()


def test_apply_ema_raises_unless_allow_missing(tf, tf2_subset):
    d, body_avg, head_raw = tf2_subset
    live = _Net.make(tf)
    before = live.head.numpy().copy()
    with pytest.raises(EmaError, match="allow_missing=True"):
        ckpt_tools.apply_ema(live, d)
    assert live.head.numpy().tobytes() == before.tobytes()
    ckpt_tools.apply_ema(live, d, allow_missing=True)
    assert live.body.numpy().tobytes() == body_avg.tobytes()
    assert live.head.numpy().tobytes() == head_raw.tobytes()


@pytest.mark.parametrize("meta", [[], ["--no-meta"]])
def test_tf1_weight_left_out_is_refused_with_or_without_the_meta(tf1_subset, meta, tmp_path):
    out = tmp_path / "w.npz"
    result = runner.invoke(app, ["export", str(tf1_subset), "--out", str(out), *meta])
    assert result.exit_code == 6, result.output
    assert "--allow-missing" in result.stderr and "b" in result.stderr, result.stderr
    assert not out.exists()


def test_averages_saved_without_their_model_are_refused_saying_so(tf, tmp_path):
    """``tf.train.Checkpoint(ema=[...])`` saved apart from the model: the averages are listed
    as averages (not loss averages), and map, export and restore-ema refuse (exit 6) saying
    the variables they average are not stored, instead of "no weights" (exit 7)."""
    m = _Net.make(tf)
    ema = tf.train.ExponentialMovingAverage(0.5)
    ema.apply([m.body, m.head])
    d = tmp_path / "emaonly"
    tf.train.Checkpoint(ema=[ema.average(m.body), ema.average(m.head)]).write(str(d / "ckpt"))
    listed = runner.invoke(app, ["list", str(d), "--role", "ema", "-q"])
    assert listed.exit_code == 0 and len(listed.stdout.splitlines()) == 2, listed.output
    for args in (["map", str(d)], ["export", str(d), "--out", str(tmp_path / "w.npz")],
                 ["restore-ema", str(d), "--out", str(tmp_path / "baked")]):
        result = runner.invoke(app, args)
        assert result.exit_code == 6, (args, result.output)
        assert "does not store" in result.stderr and "tf.train.Checkpoint(model=" in \
            result.stderr, result.stderr
    assert not (tmp_path / "w.npz").exists() and not (tmp_path / "baked").exists()

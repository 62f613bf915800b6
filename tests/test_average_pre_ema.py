"""``average`` over a run whose first checkpoint predates its EMA (review-16-attack-r32 F12).

A TF1 run whose step-2 checkpoint was saved by ``Saver([w, b, global_step])`` (before the
averages were kept) and steps 4, 6 by ``Saver()``: averaging all three was refused as
"checkpoints of different models". It is refused (exit 6, nothing written) saying the input
holds none of the averages and to leave it out; without it, ``--ema --bake`` writes the mean
of the averages ``sess.run(ema.average(v))`` gave at steps 4 and 6.
"""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from ckpt_tools.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tf = pytest.importorskip("tensorflow")
    v1 = tf.compat.v1
    out = tmp_path_factory.mktemp("pre_ema")
    truth = {}
    with tf.Graph().as_default():
        gs = v1.train.get_or_create_global_step()
        x = tf.constant(np.random.RandomState(0).randn(8, 4).astype("float32"))
        y = tf.constant(np.random.RandomState(1).randint(0, 3, 8))
        w = v1.get_variable("dense/kernel", [4, 3])
        b = v1.get_variable("dense/bias", [3], initializer=v1.zeros_initializer())
        loss = tf.reduce_mean(v1.nn.sparse_softmax_cross_entropy_with_logits(
            labels=y, logits=tf.matmul(x, w) + b))
        ema = v1.train.ExponentialMovingAverage(0.5)
        step = v1.train.GradientDescentOptimizer(0.5).minimize(loss, global_step=gs)
        with tf.control_dependencies([step]):
            train = ema.apply([w, b])
        full, early = v1.train.Saver(max_to_keep=9), v1.train.Saver([w, b, gs], max_to_keep=9)
        with v1.Session() as s:
            s.run(v1.global_variables_initializer())
            for i in range(1, 7):
                s.run(train)
                if i % 2 == 0:
                    (early if i == 2 else full).save(s, str(out / "model.ckpt"), global_step=i)
                    truth[i] = {v.op.name: s.run(ema.average(v)) for v in (w, b)}
    return out, truth


@pytest.mark.parametrize("order", [(2, 4, 6), (6, 4, 2)])
@pytest.mark.parametrize("flags", [["--ema", "--bake"], []], ids=["bake", "plain"])
def test_a_checkpoint_saved_before_the_averages_is_named_as_such(run, tmp_path, order, flags):
    out, _ = run
    r = runner.invoke(app, ["average", *(str(out / f"model.ckpt-{i}") for i in order),
                            *flags, "--out", str(tmp_path / "avg")])
    assert r.exit_code == 6, r.output
    assert "model.ckpt-2: holds none of the 2 EMA averages" in r.output, r.output
    assert "leave it out" in r.output and "different models" not in r.output
    assert not (tmp_path / "avg").exists()


def test_without_it_the_averages_are_averaged(run, tmp_path):
    tf = pytest.importorskip("tensorflow")
    out, truth = run
    r = runner.invoke(app, ["average", str(out / "model.ckpt-4"), str(out / "model.ckpt-6"),
                            "--ema", "--bake", "--out", str(tmp_path / "avg")])
    assert r.exit_code == 0, r.output
    prefix = tf.train.latest_checkpoint(str(tmp_path / "avg"))
    for name in ("dense/kernel", "dense/bias"):
        want = (truth[4][name].astype(np.float64) + truth[6][name]) / 2
        assert np.allclose(tf.train.load_variable(prefix, name), want, rtol=1e-6, atol=0), name

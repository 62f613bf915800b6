"""TF2: a model variable named ``<w>/<N>`` (a delta kept as ``m.delta``, created as ``N`` under
``name_scope("kernel")``) beside a frozen ``<w>``, and an EMA named ``N`` whose average of that
variable, ``<w>/<N>/<N>``, is stored (review-17-attack-r38 F2, F4, F5). The true ``--ema-name N``
(F4: TF's default name, no statement at all) wrote the delta's RAW values into the frozen kernel
and dropped the delta, exit 0 under ``--strict``. ``<w>/<N>`` can be ``<w>``'s average only under
an EMA named ``N``, which then averaged it too: with its own average stored and one model holding
both, it is the model's variable. Checkpoints are made here by real TensorFlow; truth is
``ema.average(v)`` at save time."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from ckpt_tools.cli import app

runner = CliRunner()


def _export(d, out, *args):
    return runner.invoke(app, ["export", str(d), "--strict", "--force", "--out", str(out),
                               *args])


def _said(result) -> str:
    return " ".join(result.output.split())


def _check(out, want):
    with np.load(out) as z:
        assert sorted(z.files) == sorted(want)
        for k, v in want.items():
            assert z[k].tobytes() == v.tobytes(), k


def _dense(tf, name, frozen=True):
    class Dense(tf.Module):
        def __init__(self):
            super().__init__(name="dense")
            with self.name_scope:
                self.kernel = tf.Variable(tf.random.stateless_normal([4, 3], [1, 2]),
                                          name="kernel", trainable=not frozen)
                with tf.name_scope("kernel"):
                    self.delta = tf.Variable(tf.zeros([4, 3]), name=name)
                self.bias = tf.Variable(tf.zeros([3]), name="bias")

    return Dense


def _train(tf, m, ema):
    x = tf.random.stateless_normal([6, 4], [5, 5])
    tv = list(m.trainable_variables)
    for _ in range(4):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum((x @ (m.kernel + m.delta) + m.bias - 1.0) ** 2)
        for v, g in zip(tv, tape.gradient(loss, tv), strict=True):
            v.assign_sub(0.01 * g)
        ema.apply(tv)
    return tv


def _save(tf, m, avgs, d, on_model):
    if on_model:
        m.ema = avgs
        tf.train.Checkpoint(model=m).write(str(d / "ckpt"))
    else:
        tf.train.Checkpoint(model=m, ema=avgs).write(str(d / "ckpt"))


@pytest.mark.parametrize("on_model", [False, True])
def test_named_ema_over_a_delta_named_like_it(tf, tmp_path, on_model):
    m = _dense(tf, "s17kfast")()
    ema = tf.train.ExponentialMovingAverage(0.5, name="s17kfast")
    tv = _train(tf, m, ema)
    assert m.delta.name == "dense/kernel/s17kfast:0"
    # (``_1`` where an earlier test of this process took the name)
    assert ema.average(m.delta).name.startswith("dense/kernel/s17kfast/s17kfast")
    d, out = tmp_path / "ck", tmp_path / "x.npz"
    _save(tf, m, [ema.average(v) for v in tv], d, on_model)
    truth = {"model/bias": ema.average(m.bias).numpy(),
             "model/delta": ema.average(m.delta).numpy(), "model/kernel": m.kernel.numpy()}
    # the true statement: the frozen kernel has no average; the delta is no average of it
    result = _export(d, out, "--ema-name", "s17kfast")
    assert result.exit_code == 6, result.output
    assert "no average" in _said(result) and "model/kernel" in _said(result)
    result = _export(d, out, "--ema-name", "s17kfast", "--allow-missing")
    assert result.exit_code == 0, result.output
    _check(out, truth)

    # the Python API with the live module (the kernel frozen there): the same values
    import ckpt_tools

    live = _dense(tf, "s17kfast")()
    ckpt_tools.apply_ema(live, str(d / "ckpt"), ema_name="s17kfast", strict=True)
    assert live.kernel.numpy().tobytes() == truth["model/kernel"].tobytes()
    assert live.delta.numpy().tobytes() == truth["model/delta"].tobytes()


@pytest.mark.parametrize("on_model", [False, True])
def test_default_ema_over_a_delta_named_like_it(tf, tmp_path, on_model):
    m = _dense(tf, "ExponentialMovingAverage")()
    ema = tf.train.ExponentialMovingAverage(0.5)
    tv = _train(tf, m, ema)
    assert ema.average(m.delta).name.startswith(
        "dense/kernel/ExponentialMovingAverage/ExponentialMovingAverage")
    d, out = tmp_path / "ck", tmp_path / "x.npz"
    _save(tf, m, [ema.average(v) for v in tv], d, on_model)
    truth = {"model/bias": ema.average(m.bias).numpy(),
             "model/delta": ema.average(m.delta).numpy(), "model/kernel": m.kernel.numpy()}
    for said in ((), ("--ema-name", "ExponentialMovingAverage")):
        result = _export(d, out, *said)
        assert result.exit_code == 6, result.output
        assert "no average" in _said(result) and "model/kernel" in _said(result)
        result = _export(d, out, *said, "--allow-missing")
        assert result.exit_code == 0, result.output
        _check(out, truth)


def test_named_ema_over_a_delta_named_like_it_kernel_trained(tf, tmp_path):
    m = _dense(tf, "s17kfast", frozen=False)()
    ema = tf.train.ExponentialMovingAverage(0.5, name="s17kfast")
    tv = _train(tf, m, ema)
    # the kernel's average and the delta share the name dense/kernel/s17kfast
    assert ema.average(m.kernel).name == m.delta.name
    d, out = tmp_path / "ck", tmp_path / "x.npz"
    _save(tf, m, [ema.average(v) for v in tv], d, False)
    truth = {"model/bias": ema.average(m.bias).numpy(),
             "model/delta": ema.average(m.delta).numpy(),
             "model/kernel": ema.average(m.kernel).numpy()}
    result = _export(d, out, "--ema-name", "s17kfast")
    assert result.exit_code == 0, result.output
    _check(out, truth)

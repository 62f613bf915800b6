"""Two unnamed weights of one shape in a tf.Module and its sub-module, their averages saved as
a list: the refusal offered ``--apply-order trainable`` and ``--apply-order tracked``, and each,
run, was refused as leaving two orders (review-33-attack-r129 M3). It offers neither now and
names the Python route that works, the live module's own order, checked here bit for bit
against ``ema.average(v)``."""

from __future__ import annotations

import numpy as np
from typer.testing import CliRunner

from ckpt_tools import apply_ema
from ckpt_tools.cli import app

runner = CliRunner()


def _module(tf):
    """``m.w`` and ``m.sub.w``, both named ``Variable``, of one shape."""
    m = tf.Module()
    m.w = tf.Variable(tf.fill([3], 1.0))
    m.sub = tf.Module()
    m.sub.w = tf.Variable(tf.fill([3], 100.0))
    return m


def test_no_apply_order_offered_where_each_is_refused(tf, tmp_path):
    m = _module(tf)
    ema = tf.train.ExponentialMovingAverage(0.5)
    for i in range(3):
        for v in (m.w, m.sub.w):
            v.assign(v * 0.7 + 0.2 * (i + 1))
        ema.apply(list(m.trainable_variables))  # [sub.w, w]: the module's own order
    truth = {"w": ema.average(m.w).numpy(), "sub": ema.average(m.sub.w).numpy()}
    assert truth["w"].tobytes() != truth["sub"].tobytes()
    path = str(tmp_path / "ck" / "ckpt")
    tf.train.Checkpoint(model=m, ema=[ema.average(v) for v in m.trainable_variables]).write(path)
    out = tmp_path / "e.npz"
    result = runner.invoke(app, ["export", path, "--out", str(out)])
    said = " ".join(result.output.split())
    assert result.exit_code == 6 and not out.exists(), said
    assert "pass --apply-order" not in said, said
    assert "neither --apply-order trainable nor --apply-order tracked pairs them" in said, said
    assert "apply_ema(module, path, apply_order='trainable')" in said, said
    for order in ("trainable", "tracked"):  # what it offered before: each refused
        result = runner.invoke(app, ["export", path, "--apply-order", order, "--out", str(out)])
        assert result.exit_code == 6 and not out.exists(), (order, result.output)
    live = _module(tf)  # the route it names: the live module's own trainable_variables
    apply_ema(tf.train.Checkpoint(model=live), path, apply_order="trainable")
    assert live.w.numpy().tobytes() == truth["w"].tobytes()
    assert live.sub.w.numpy().tobytes() == truth["sub"].tobytes()
    assert np.any(live.w.numpy() != live.sub.w.numpy())

"""TF2: a stored ``<a>/<b>/<x>`` whose ``<a>/<b>`` is a weight of the model reads two ways:
``<a>/<b>``'s average under an EMA named ``x``, or ``<a>``'s under one named ``<b>/<x>``
(review-17-attack-r37 F1, F3). The true ``--ema-name fast`` was refused, and the refusals'
own ways out wrote the delta's (the sub-module kernel's) average into the frozen kernel (the
weight ``block/w``), exit 0 under ``--strict``. A stated name now picks the reading it names;
the refusals name both, each with its own condition. Checkpoints are made here by real
TensorFlow; truth is ``ema.average(v)`` at save time."""

from __future__ import annotations

import numpy as np
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


def test_named_ema_over_a_delta_of_a_frozen_kernel(tf, tmp_path):
    class Dense(tf.Module):
        def __init__(self):
            super().__init__(name="dense")
            with self.name_scope:
                self.kernel = tf.Variable(tf.random.stateless_normal([4, 3], [1, 2]),
                                          name="kernel", trainable=False)
                with tf.name_scope("kernel"):
                    self.delta = tf.Variable(tf.zeros([4, 3]), name="delta")
                self.bias = tf.Variable(tf.zeros([3]), name="bias")

    m = Dense()
    ema = tf.train.ExponentialMovingAverage(0.5, name="s17gfast")
    x = tf.random.stateless_normal([6, 4], [5, 5])
    for _ in range(4):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum((x @ (m.kernel + m.delta) + m.bias - 1.0) ** 2)
        for v, g in zip(m.trainable_variables,
                        tape.gradient(loss, m.trainable_variables), strict=True):
            v.assign_sub(0.01 * g)
        ema.apply(m.trainable_variables)
    assert ema.average(m.delta).name == "dense/kernel/delta/s17gfast:0"
    d, out = tmp_path / "ck", tmp_path / "x.npz"
    tf.train.Checkpoint(model=m, ema=[ema.average(v) for v in m.trainable_variables]).write(
        str(d / "ckpt"))
    truth = {"model/bias": ema.average(m.bias).numpy(),
             "model/delta": ema.average(m.delta).numpy(), "model/kernel": m.kernel.numpy()}
    result = _export(d, out)
    assert result.exit_code == 6, result.output
    said = _said(result)
    assert "model/delta's average under an EMA named 's17gfast'" in said, said
    assert "model/kernel's under one named 'delta/s17gfast'" in said, said
    # each reading offered as it is accepted: the frozen kernel has no average of s17gfast
    # (review-22-attack-r66 F4: --ema-name s17gfast alone was offered, and refused)
    assert "--ema-name s17gfast --allow-missing only if 's17gfast' is the name you gave" in \
        said, said
    assert "--ema-name delta/s17gfast --allow-missing only if 'delta/s17gfast' is" in said, said
    # the true statement: the frozen kernel has no average, nothing else is missing
    result = _export(d, out, "--ema-name", "s17gfast")
    assert result.exit_code == 6, result.output
    assert "no average" in _said(result) and "model/kernel" in _said(result)
    assert "model/delta," not in _said(result), _said(result)
    result = _export(d, out, "--ema-name", "s17gfast", "--allow-missing")
    assert result.exit_code == 0, result.output
    _check(out, truth)
    # the other reading stated: the kernel's average is under 'delta/s17gfast', not 'fast'
    result = _export(d, out, "--ema-name", "delta/s17gfast")
    assert result.exit_code == 6, result.output
    assert "average under 'delta/s17gfast'" in _said(result), _said(result)
    # both readings stated at once, or only the attribute: refused, never the delta's
    # average written into the kernel
    for name in ("s17gfast,delta/s17gfast", "ema"):
        result = _export(d, out, "--ema-name", name, "--allow-missing")
        assert result.exit_code == 6, (name, result.output)
        assert "--ema-name delta/s17gfast only if 'delta/s17gfast' is" in _said(result), name
        assert ("names both" if "," in name else "tells neither") in _said(result), name


def test_named_ema_over_a_sub_module_named_like_a_weight(tf, tmp_path):
    class Proj(tf.Module):
        def __init__(self):
            super().__init__(name="w")
            with self.name_scope:
                self.kernel = tf.Variable(tf.random.stateless_normal([3, 3], [2, 2]),
                                          name="kernel")

    class Block(tf.Module):
        def __init__(self):
            super().__init__(name="block")
            with self.name_scope:
                self.w = tf.Variable(tf.random.stateless_normal([3, 3], [1, 1]), name="w")
                self.proj = Proj()

    m = tf.Module()
    m.blocks = [Block()]
    blk = m.blocks[0]
    ema = tf.train.ExponentialMovingAverage(0.5, name="s17gf3")
    x = tf.random.stateless_normal([4, 3], [5, 5])
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum((x @ blk.w @ blk.proj.kernel - 1.0) ** 2)
        gw, gk = tape.gradient(loss, [blk.w, blk.proj.kernel])
        blk.w.assign_sub(0.01 * gw)
        blk.proj.kernel.assign_sub(0.01 * gk)
        ema.apply([blk.proj.kernel])  # the head only
    assert ema.average(blk.proj.kernel).name == "block/w/kernel/s17gf3:0"
    d, out = tmp_path / "ck", tmp_path / "x.npz"
    tf.train.Checkpoint(model=m, ema=[ema.average(blk.proj.kernel)]).write(str(d / "ckpt"))
    truth = {"model/blocks/0/w": blk.w.numpy(),
             "model/blocks/0/proj/kernel": ema.average(blk.proj.kernel).numpy()}
    result = _export(d, out)
    assert result.exit_code == 6, result.output
    assert "--ema-name s17gf3 --allow-missing only if 's17gf3' is the name you gave" in \
        _said(result)
    result = _export(d, out, "--ema-name", "s17gf3")
    assert result.exit_code == 6, result.output  # block/w has none: --allow-missing
    assert "none of its averages is kept" not in _said(result), _said(result)
    result = _export(d, out, "--ema-name", "s17gf3", "--allow-missing")
    assert result.exit_code == 0, result.output
    _check(out, truth)
    result = _export(d, out, "--ema-name", "ema", "--allow-missing")
    assert result.exit_code == 6, result.output
    assert "reads two ways" in _said(result), _said(result)

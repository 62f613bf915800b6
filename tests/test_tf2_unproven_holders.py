"""TF2: per-weight state named ``<v>/accum/grad`` saved apart (``accum=[...]``) beside a
default-named EMA's averages (``ema=[...]``) (review-16-attack-r33 F8). The refusal said "the
checkpoint holds several ExponentialMovingAverage objects", listed ``accum/grad`` among the
"EMA names found" and offered ``--ema-name accum`` as a peer answer, which exported the
gradient accumulators as the model's weights (exit 0, ``--strict``). A TF2 checkpoint records
no EMA's name: ``accum`` is offered only as the caller's statement. Checkpoints are made here
by real TensorFlow; truth is ``ema.average(v)`` at save time."""

from __future__ import annotations

import numpy as np
from typer.testing import CliRunner

from ckpt_tools.cli import app

runner = CliRunner()


def test_accumulators_beside_a_default_ema_are_no_ema_object(tf, tmp_path):
    m = tf.Module()
    m.w0 = tf.Variable(tf.random.stateless_normal([3, 2], [1, 2]), name="w0")
    m.w1 = tf.Variable(tf.zeros([2]), name="w1")
    tv = [m.w0, m.w1]
    acc = [tf.Variable(tf.zeros_like(v), trainable=False, name=v.name[:-2] + "/accum/grad")
           for v in tv]
    ema = tf.train.ExponentialMovingAverage(0.5)
    x = tf.random.stateless_normal([8, 3], [3, 4])
    for s in range(1, 6):
        with tf.GradientTape() as t:
            loss = tf.reduce_mean((x @ m.w0 + m.w1 - 1.0) ** 2)
        for a, g in zip(acc, t.gradient(loss, tv), strict=True):
            a.assign_add(g)
        if s % 2 == 0:
            for v, a in zip(tv, acc, strict=True):
                v.assign_sub(0.1 * a)
                a.assign(tf.zeros_like(a))
            ema.apply(tv)
    assert acc[0].name.startswith("w0/accum/grad"), acc[0].name
    d, out = tmp_path / "ck", tmp_path / "x.npz"
    tf.train.Checkpoint(model=m, ema=[ema.average(v) for v in tv], accum=acc).write(
        str(d / "ckpt"))
    truth = {"model/w0": ema.average(m.w0).numpy(), "model/w1": ema.average(m.w1).numpy()}
    result = runner.invoke(app, ["export", str(d), "--strict", "--out", str(out)])
    assert result.exit_code == 6, result.output
    said = " ".join(result.stderr.split())
    assert "several ExponentialMovingAverage" not in said, said
    assert "EMA names found" not in said, said
    assert "--ema-name ema to use" in said, said
    assert "--ema-name accum only if 'accum/grad' is the name you gave" in said, said
    assert not out.exists()
    result = runner.invoke(app, ["export", str(d), "--strict", "--out", str(out),
                                 "--ema-name", "ema"])
    assert result.exit_code == 0, result.output
    with np.load(out) as z:
        assert sorted(z.files) == sorted(truth)
        for k, v in truth.items():
            assert z[k].tobytes() == v.tobytes(), k


def test_objects_named_ema_and_ema_slash_fast(tf, tmp_path):
    """EMA objects named "ema" and "ema/fast" (here "r33ema", "r33ema/fast") over the same
    variables (review-16-attack-r33 F6): w0/ema/fast sits under the stored w0/ema, and was
    listed and exported as a model weight (--raw wrote the fast averages as weights, exit 0).
    Both are averages of w0: refused naming both objects, each --ema-name gives its own."""
    m = tf.Module()
    m.w0 = tf.Variable(tf.random.stateless_normal([3, 2], [1, 2]), name="w0")
    m.w1 = tf.Variable(tf.zeros([2]), name="w1")
    # names of their own: TF's process-wide _N counter would rename other tests' "ema/fast"
    slow = tf.train.ExponentialMovingAverage(0.9, name="r33ema")
    fast = tf.train.ExponentialMovingAverage(0.5, name="r33ema/fast")
    for s in range(1, 5):
        for v in (m.w0, m.w1):
            v.assign_add(tf.ones_like(v) * s)
        slow.apply([m.w0, m.w1])
        fast.apply([m.w0, m.w1])
    assert fast.average(m.w0).name == "w0/r33ema/fast:0"
    d, out = tmp_path / "ck", tmp_path / "x.npz"
    tf.train.Checkpoint(model=m, slow=[slow.average(v) for v in (m.w0, m.w1)],
                        fast=[fast.average(v) for v in (m.w0, m.w1)]).write(str(d / "ckpt"))
    raw = {"model/w0": m.w0.numpy(), "model/w1": m.w1.numpy()}
    truth = {name: {"model/w0": e.average(m.w0).numpy(), "model/w1": e.average(m.w1).numpy()}
             for name, e in (("r33ema", slow), ("r33ema/fast", fast))}

    def export(*args):
        return runner.invoke(app, ["export", str(d), "--strict", "--out", str(out),
                                   "--force", *args])

    result = export()
    assert result.exit_code == 6, result.output
    said = " ".join(result.stderr.split())
    assert "--ema-name fast" in said and "--ema-name slow" in said, said
    assert "'r33ema/fast'" in said and "'r33ema'" in said, said
    for args, want in ((["--raw"], raw), (["--ema-name", "r33ema"], truth["r33ema"]),
                       (["--ema-name", "r33ema/fast"], truth["r33ema/fast"]),
                       (["--ema-name", "slow"], truth["r33ema"]),
                       (["--ema-name", "fast"], truth["r33ema/fast"])):
        result = export(*args)
        assert result.exit_code == 0, (args, result.output)
        with np.load(out) as z:
            assert sorted(z.files) == sorted(want), args
            for k, v in want.items():
                assert z[k].tobytes() == v.tobytes(), (args, k)

"""TF2: an ``ExponentialMovingAverage`` named with a slash (``name="ema/fast"``, as TF1 users
name several objects) records ``w0``'s average as ``w0/ema/fast``. Its last part alone sits
under no stored variable, so the averages were listed and exported as model weights ("no
averages are stored", every ``--ema-name`` refused, ``--raw`` wrote them as weights:
review-15-attack-r31 F8). They are averages of ``w0``; ``--ema-name ema/fast`` states the
name (nothing else proves it an EMA's), and two such objects are told apart by the one named.
Checkpoints are made here by real TensorFlow; truth is ``ema.average(v)`` at save time."""

from __future__ import annotations

import json

import numpy as np
from typer.testing import CliRunner

from ckpt_tools import UnprovenPairingError, export_weights
from ckpt_tools.cli import app

runner = CliRunner()


def _trained(tf, names, named_vars=True):
    class M(tf.Module):
        def __init__(self):
            super().__init__()
            kw = ({"name": "w0"}, {"name": "w1"}) if named_vars else ({}, {})
            self.w0 = tf.Variable(tf.random.stateless_normal([6, 4], [1, 2]), **kw[0])
            self.w1 = tf.Variable(tf.zeros([4]), **kw[1])

    m = M()
    x = tf.random.stateless_normal([8, 6], [3, 4])
    tv = list(m.trainable_variables)
    emas = [tf.train.ExponentialMovingAverage(d, name=n)
            for d, n in zip((0.5, 0.9), names, strict=False)]
    for _ in range(5):
        with tf.GradientTape() as t:
            loss = tf.reduce_mean((x @ m.w0 + m.w1 - 1.0) ** 2)
        for v, g in zip(tv, t.gradient(loss, tv), strict=True):
            v.assign_sub(0.1 * g)
        for e in emas:
            e.apply(tv)
    raw = {f"model/{k}": getattr(m, k).numpy() for k in ("w0", "w1")}
    truth = [{f"model/{k}": e.average(getattr(m, k)).numpy() for k in ("w0", "w1")}
             for e in emas]
    return m, emas, raw, truth


def _export(d, out, *args):
    return runner.invoke(app, ["export", str(d), "--strict", "--out", str(out), "--force",
                               *args])


def _same(out, want):
    with np.load(out) as z:
        assert sorted(z.files) == sorted(want)
        for k, v in want.items():
            assert z[k].tobytes() == v.tobytes(), k


def test_one_object_named_with_a_slash(tf, tmp_path):
    m, (ema,), raw, (truth,) = _trained(tf, ["ema/fast"])
    assert ema.average(m.w0).name == "w0/ema/fast:0"
    d, out = tmp_path / "ck", tmp_path / "x.npz"
    tf.train.Checkpoint(model=m, ema=[ema.average(v) for v in (m.w0, m.w1)]).write(
        str(d / "ckpt"))
    listed = runner.invoke(app, ["list", "--json", str(d)])
    assert listed.exit_code == 0, listed.output
    roles = {v["path"]: v["role"] for v in json.loads(listed.output)["variables"]
             if v["path"]}
    assert roles == {"ema/0": "ema", "ema/1": "ema", "model/w0": "weight",
                     "model/w1": "weight"}, roles
    # unstated: nothing proves 'ema/fast' an EMA's name; the refusal names the statement
    result = _export(d, out)
    assert result.exit_code == 6, result.output
    assert "--ema-name ema/fast" in " ".join(result.output.split()), result.output
    assert not out.exists()
    result = _export(d, out, "--ema-name", "ema/fast")
    assert result.exit_code == 0, result.output
    _same(out, truth)
    # --raw: the model's two weights, never the averages as extra weights
    result = _export(d, out, "--raw")
    assert result.exit_code == 0, result.output
    _same(out, raw)
    out.unlink()
    export_weights(str(d), str(out), ema_name="ema/fast", strict=True)
    _same(out, truth)


def test_two_objects_named_with_a_slash(tf, tmp_path):
    """``ema/fast`` and ``ema/slow`` saved apart (``x=[...]``, ``y=[...]``) and together
    (``ema=[...]``, unnamed variables: ``Variable/ema/fast``, ``Variable/ema/fast_1``)."""
    for named, apart in ((True, True), (False, False)):
        m, (fast, slow), _raw, (t_fast, t_slow) = _trained(tf, ["ema/fast", "ema/slow"],
                                                             named)
        tv = (m.w0, m.w1)
        d, out = tmp_path / f"ck{named}", tmp_path / f"x{named}.npz"
        kept = {"x": [fast.average(v) for v in tv], "y": [slow.average(v) for v in tv]} \
            if apart else {"ema": [fast.average(v) for v in tv] + [slow.average(v) for v in tv]}
        tf.train.Checkpoint(model=m, **kept).write(str(d / "ckpt"))
        result = _export(d, out)
        assert result.exit_code == 6, result.output
        said = " ".join(result.output.split())
        assert "ema/fast" in said and "ema/slow" in said, said
        assert not out.exists()
        for name, want in (("ema/fast", t_fast), ("ema/slow", t_slow)):
            result = _export(d, out, "--ema-name", name)
            assert result.exit_code == 0, (named, name, result.output)
            _same(out, want)
        try:
            export_weights(str(d), str(out), strict=True)
        except UnprovenPairingError as e:
            assert e.option == "--ema-name"
        else:
            raise AssertionError("export_weights picked one of two EMA objects")


def test_default_name_under_an_unsaved_variable_is_not_a_slashed_name(tf, tmp_path):
    """``blk/w/ExponentialMovingAverage`` of a variable ``blk/w`` left unsaved, beside a saved
    ``blk`` of its shape: TF's default name under ``w``, never ``blk``'s average named
    ``w/ExponentialMovingAverage``; ``blk`` keeps its own."""
    blk = tf.Variable(tf.ones([3]), name="blk")
    w = tf.Variable(tf.ones([3]) * 2, name="blk/w")
    ema = tf.train.ExponentialMovingAverage(0.5)
    for _ in range(3):
        blk.assign_add(tf.ones([3]))
        w.assign_add(tf.ones([3]))
        ema.apply([blk, w])
    assert ema.average(w).name == "blk/w/ExponentialMovingAverage:0"
    m = tf.Module()
    m.blk = blk
    d, out = tmp_path / "ck", tmp_path / "x.npz"
    tf.train.Checkpoint(model=m, ema=[ema.average(blk), ema.average(w)]).write(
        str(d / "ckpt"))
    result = _export(d, out)
    assert result.exit_code == 0, result.output
    _same(out, {"model/blk": ema.average(blk).numpy()})

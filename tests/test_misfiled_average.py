"""A TF1 Saver whose dict files one variable's average under another's average name
({"b": b, "c": c, "c/ExponentialMovingAverage": ema.average(b)}): the refusal says what the save
op shows and names --allow-missing, which gives b's average and c raw, bit for bit; it suggests
no option value the CLI rejects (review-13-attack-r24 F0b). Made by real TensorFlow, truth read
at save time."""

from __future__ import annotations

import numpy as np
from helpers import same_bits
from typer.testing import CliRunner

from ckpt_tools.cli import app

runner = CliRunner()


def _misfiled(tf, tmp_path):
    v1 = tf.compat.v1
    with tf.Graph().as_default():
        b = v1.get_variable("b", [3], initializer=v1.zeros_initializer())
        c = v1.get_variable("c", [3], initializer=v1.ones_initializer())
        ema = v1.train.ExponentialMovingAverage(0.5)
        update = ema.apply([b, c])
        step = tf.group(v1.assign_add(b, tf.ones([3]) * 2.0), v1.assign_add(c, tf.ones([3])))
        saver = v1.train.Saver({"b": b, "c": c, ema.average_name(c): ema.average(b)})
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            for _ in range(3):
                sess.run(step)
                sess.run(update)
            truth = {"b": sess.run(ema.average(b)), "c": sess.run(c),
                     "raw_b": sess.run(b), "avg_c": sess.run(ema.average(c))}
            prefix = saver.save(sess, str(tmp_path / "model.ckpt"))
    return prefix, truth


def test_a_misfiled_average_is_refused_truly_and_allow_missing_gives_the_right_values(
        tf, tmp_path):
    prefix, truth = _misfiled(tf, tmp_path)
    for argv in (["export", prefix, "--out", str(tmp_path / "x.npz")],
                 ["restore-ema", prefix, "--out", str(tmp_path / "r")]):
        result = runner.invoke(app, argv)
        assert result.exit_code == 6, result.output
        out = " ".join(result.output.split())
        assert "'c/ExponentialMovingAverage' from b/ExponentialMovingAverage" in out, out
        assert "--allow-missing" in out, out
        for false in ("variable_scope", "another EMA object", "--ema-name"):
            assert false not in out, (false, out)
    out = tmp_path / "w.npz"
    result = runner.invoke(app, ["export", prefix, "--out", str(out), "--allow-missing"])
    assert result.exit_code == 0, result.output
    with np.load(out) as npz:
        assert same_bits(npz["b"], truth["b"]) and same_bits(npz["c"], truth["c"])
        assert not np.array_equal(npz["b"], truth["raw_b"])
        assert not np.array_equal(npz["c"], truth["avg_c"])

"""`export --raw` of a training-time Saver(ema.variables_to_restore()) checkpoint: the save op
proves its keys W/ExponentialMovingAverage, b/ExponentialMovingAverage hold W and b raw, so
--raw writes them as W and b, bit for bit (it said "no weights to export", exit 7:
review-13-attack-r24 F4). Made by real TensorFlow, truth read at save time."""

from __future__ import annotations

import numpy as np
from helpers import same_bits
from typer.testing import CliRunner

from ckpt_tools.cli import app

runner = CliRunner()


def test_raw_export_of_a_training_variables_to_restore_saver(tf, tmp_path):
    v1 = tf.compat.v1
    with tf.Graph().as_default():
        w = v1.get_variable("W", [2, 3], initializer=v1.zeros_initializer())
        b = v1.get_variable("b", [3], initializer=v1.ones_initializer())
        ema = v1.train.ExponentialMovingAverage(0.5)
        update = ema.apply([w, b])
        step = tf.group(v1.assign_add(w, tf.ones([2, 3]) * 2.0), v1.assign_add(b, tf.ones([3])))
        saver = v1.train.Saver(ema.variables_to_restore())
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            for _ in range(3):
                sess.run(step)
                sess.run(update)
            truth = {"W": sess.run(w), "b": sess.run(b)}
            avg = {"W": sess.run(ema.average(w)), "b": sess.run(ema.average(b))}
            prefix = saver.save(sess, str(tmp_path / "model.ckpt"))
    assert "W" not in tf.train.load_checkpoint(prefix).get_variable_to_shape_map()
    result = runner.invoke(app, ["export", prefix, "--out", str(tmp_path / "a.npz")])
    assert result.exit_code == 6, result.output  # no average stored: refused, --raw named
    assert "--raw" in result.output, result.output
    out = tmp_path / "w.npz"
    result = runner.invoke(app, ["export", prefix, "--out", str(out), "--raw"])
    assert result.exit_code == 0, result.output
    assert "variables_to_restore" in result.output, result.output
    with np.load(out) as npz:
        assert sorted(npz.files) == ["W", "b"]
        for k in ("W", "b"):
            assert same_bits(npz[k], truth[k]) and not np.array_equal(npz[k], avg[k])

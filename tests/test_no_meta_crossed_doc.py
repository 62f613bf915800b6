"""--no-meta on a crossed Saver ({"b/ExponentialMovingAverage": ema.average(c), ...}) gives
another variable's average, which only the .meta's save op shows: the help says so, not only
"raw weights as averages" (review-13-attack-r24 F6). Made by real TensorFlow."""

from __future__ import annotations

import numpy as np
from helpers import same_bits
from typer.testing import CliRunner

from ckpt_tools.cli import app

runner = CliRunner()


def test_no_meta_help_names_the_crossed_keys_risk_that_export_shows(tf, tmp_path):
    v1 = tf.compat.v1
    with tf.Graph().as_default():
        b = v1.get_variable("b", [3], initializer=v1.zeros_initializer())
        c = v1.get_variable("c", [3], initializer=v1.ones_initializer())
        ema = v1.train.ExponentialMovingAverage(0.5)
        update = ema.apply([b, c])
        step = tf.group(v1.assign_add(b, tf.ones([3]) * 2.0), v1.assign_add(c, tf.ones([3])))
        saver = v1.train.Saver({"b": b, "c": c, ema.average_name(b): ema.average(c),
                                ema.average_name(c): ema.average(b)})
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            for _ in range(3):
                sess.run(step)
                sess.run(update)
            avg_c = sess.run(ema.average(c))
            prefix = saver.save(sess, str(tmp_path / "model.ckpt"))
    out = tmp_path / "w.npz"
    result = runner.invoke(app, ["export", prefix, "--out", str(out), "--no-meta"])
    assert result.exit_code == 0, result.output
    with np.load(out) as npz:
        assert same_bits(npz["b"], avg_c)  # the documented risk: c's average as b's
    help_text = " ".join(runner.invoke(app, ["export", "--help"], terminal_width=400)
                         .output.split())
    assert "another variable's average" in help_text, help_text

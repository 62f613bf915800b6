"""`diff --ema` on a swapping Saver's checkpoint ({v.op.name: ema.average(v),
ema.average_name(v): v}): the keys W, b hold the averages it compares, so they are not listed
as weights without a shadow (review-13-attack-r24 F7). Made by real TensorFlow."""

from __future__ import annotations

import json

import numpy as np
from typer.testing import CliRunner

from ckpt_tools.cli import app

runner = CliRunner()


def test_diff_ema_of_a_swapping_saver_lists_no_weight_without_a_shadow(tf, tmp_path):
    v1 = tf.compat.v1
    with tf.Graph().as_default():
        w = v1.get_variable("W", [2, 3], initializer=v1.zeros_initializer())
        b = v1.get_variable("b", [3], initializer=v1.ones_initializer())
        ema = v1.train.ExponentialMovingAverage(0.5)
        update = ema.apply([w, b])
        step = tf.group(v1.assign_add(w, tf.ones([2, 3]) * 2.0), v1.assign_add(b, tf.ones([3])))
        saver = v1.train.Saver({**{v.op.name: ema.average(v) for v in (w, b)},
                                **{ema.average_name(v): v for v in (w, b)}})
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            for _ in range(3):
                sess.run(step)
                sess.run(update)
            delta = float(np.max(np.abs(sess.run(w) - sess.run(ema.average(w)))))
            prefix = saver.save(sess, str(tmp_path / "model.ckpt"))
    result = runner.invoke(app, ["diff", prefix, "--ema", "--json"])
    assert result.exit_code in (0, 1), result.output
    report = json.loads(result.output)
    assert report["only_a"] == [] and report["only_b"] == [], report
    assert len(report["tensors"]) == 2, report
    result = runner.invoke(app, ["diff", prefix, "--ema"])
    assert "0 weights without a shadow" in result.output, result.output
    assert "no shadow" not in result.output, result.output
    assert delta > 0

"""TF1 EMA of an EMA (``ema2.apply([ema.average(W)])``, review-14-attack-r25 F4c): with the
``.meta``, ``W/ExponentialMovingAverage`` is in ``moving_average_variables`` and has its own
average, yet it is ``W``'s average: ``list`` shows it as one (role ``ema`` of ``W``), counts
only ``W`` and ``b`` as weights, and export writes the first-level averages. Built by real
TensorFlow (graph mode); truth is ``sess.run(ema.average(v))`` at save time."""

from __future__ import annotations

import json

import numpy as np
from typer.testing import CliRunner

from ckpt_tools.cli import app

runner = CliRunner()


def _double(tf, d):
    v1 = tf.compat.v1
    with tf.Graph().as_default():
        w = v1.get_variable("W", [3, 3], initializer=v1.zeros_initializer())
        b = v1.get_variable("b", [3], initializer=v1.ones_initializer())
        ema = v1.train.ExponentialMovingAverage(0.5)
        ema2 = v1.train.ExponentialMovingAverage(0.8)
        first = ema.apply([w, b])
        with tf.control_dependencies([first]):
            second = ema2.apply([ema.average(w), ema.average(b)])
        step = tf.group(v1.assign_add(w, tf.ones([3, 3]) * 2.0), v1.assign_add(b, tf.ones([3])))
        saver = v1.train.Saver()
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            for _ in range(3):
                sess.run(step)
                sess.run(second)
            assert ema2.average(ema.average(w)).op.name == \
                "W/ExponentialMovingAverage/ExponentialMovingAverage"
            avg = {v.op.name: sess.run(ema.average(v)) for v in (w, b)}
            saver.save(sess, str(d / "model.ckpt"))
    return avg


def test_an_averaged_average_is_listed_as_its_weights_average(tf, tmp_path):
    d = tmp_path / "ck"
    avg = _double(tf, d)
    listed = runner.invoke(app, ["list", str(d), "--json"])
    assert listed.exit_code == 0, listed.output
    rows = {r["name"]: r for r in json.loads(listed.stdout)["variables"]}
    for n in ("W", "b"):
        assert rows[n]["role"] == "weight" and rows[n]["ema"] == f"{n}/ExponentialMovingAverage"
        first = rows[f"{n}/ExponentialMovingAverage"]
        assert first["role"] == "ema" and first["ema_of"] == n, first
    text = runner.invoke(app, ["list", str(d)])
    assert "EMA: 2 of 2 weights have a shadow" in text.output, text.output
    out = tmp_path / "x.npz"
    result = runner.invoke(app, ["export", str(d), "--out", str(out)])
    assert result.exit_code == 0, result.output
    with np.load(out) as z:
        assert sorted(z.files) == ["W", "b"]
        for n in ("W", "b"):
            assert z[n].tobytes() == avg[n].tobytes(), n

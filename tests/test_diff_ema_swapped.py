"""`diff --ema` on a swapping Saver's checkpoint ({v.op.name: ema.average(v),
ema.average_name(v): v}): the keys W, b hold the averages it compares, so they are not listed
as weights without a shadow (review-13-attack-r24 F7). Made by real TensorFlow."""

from __future__ import annotations

import json

import numpy as np
from helpers_tf1_saver import swapping_keys, tf1_two_var_ema
from typer.testing import CliRunner

from ckpt_tools.cli import app

runner = CliRunner()


def test_diff_ema_of_a_swapping_saver_lists_no_weight_without_a_shadow(tf, tmp_path):
    prefix, raw, avg = tf1_two_var_ema(tf, tmp_path / "model.ckpt", swapping_keys)
    delta = float(np.max(np.abs(raw["W"] - avg["W"])))
    result = runner.invoke(app, ["diff", prefix, "--ema", "--json"])
    assert result.exit_code in (0, 1), result.output
    report = json.loads(result.output)
    assert report["only_a"] == [] and report["only_b"] == [], report
    assert len(report["tensors"]) == 2, report
    result = runner.invoke(app, ["diff", prefix, "--ema"])
    assert "0 weights without a shadow" in result.output, result.output
    assert "no shadow" not in result.output, result.output
    assert delta > 0

"""--no-meta on a crossed Saver ({"b/ExponentialMovingAverage": ema.average(c), ...}) gives
another variable's average, which only the .meta's save op shows: the help says so, not only
"raw weights as averages" (review-13-attack-r24 F6). Beside its own .meta, which shows the
crossing, --no-meta is refused (review-30-attack-r110 F6); the copy without it (the documented
risk) still pairs by names. Made by real TensorFlow."""

from __future__ import annotations

import os

import numpy as np
from helpers import same_bits
from helpers_tf1_saver import tf1_two_var_ema
from typer.testing import CliRunner

from ckpt_tools.cli import app

runner = CliRunner()


def test_no_meta_help_names_the_crossed_keys_risk_that_export_shows(tf, tmp_path):
    prefix, _, avg = tf1_two_var_ema(
        tf, tmp_path / "model.ckpt",
        lambda ema, vs: {"b": vs[0], "c": vs[1], ema.average_name(vs[0]): ema.average(vs[1]),
                         ema.average_name(vs[1]): ema.average(vs[0])},
        names=("b", "c"), shapes=([3], [3]))
    avg_c = avg["c"]
    out = tmp_path / "w.npz"
    result = runner.invoke(app, ["export", prefix, "--out", str(out), "--no-meta"])
    said = " ".join(result.output.split())
    assert result.exit_code == 6 and not out.exists(), result.output
    assert "its own graph model.ckpt.meta" in said and "wrote b/ExponentialMovingAverage " \
        "from c/ExponentialMovingAverage" in said and "drop --no-meta" in said, said
    os.remove(prefix + ".meta")  # the copy without it: nothing shows the crossing
    result = runner.invoke(app, ["export", prefix, "--out", str(out), "--no-meta"])
    assert result.exit_code == 0, result.output
    with np.load(out) as npz:
        assert same_bits(npz["b"], avg_c)  # the documented risk: c's average as b's
    help_text = " ".join(runner.invoke(app, ["export", "--help"], terminal_width=400)
                         .output.split())
    assert "another variable's average" in help_text, help_text

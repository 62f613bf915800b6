"""A TF1 Saver whose dict files one variable's average under another's average name
({"b": b, "c": c, "c/ExponentialMovingAverage": ema.average(b)}): the refusal says what the save
op shows and names --allow-missing, which gives b's average and c raw, bit for bit; it suggests
no option value the CLI rejects (review-13-attack-r24 F0b). Made by real TensorFlow, truth read
at save time."""

from __future__ import annotations

import numpy as np
from helpers import same_bits
from helpers_tf1_saver import tf1_two_var_ema
from typer.testing import CliRunner

from ckpt_tools.cli import app

runner = CliRunner()


def _misfiled(tf, tmp_path):
    prefix, raw, avg = tf1_two_var_ema(
        tf, tmp_path / "model.ckpt",
        lambda ema, vs: {"b": vs[0], "c": vs[1], ema.average_name(vs[1]): ema.average(vs[0])},
        names=("b", "c"), shapes=([3], [3]))
    truth = {"b": avg["b"], "c": raw["c"], "raw_b": raw["b"], "avg_c": avg["c"]}
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

"""`export --raw` of a training-time Saver(ema.variables_to_restore()) checkpoint: the save op
proves its keys W/ExponentialMovingAverage, b/ExponentialMovingAverage hold W and b raw, so
--raw --keys-are-raw writes them as W and b, bit for bit (it said "no weights to export", exit 7:
review-13-attack-r24 F4). Made by real TensorFlow, truth read at save time."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import FIXTURES, run_cli, same_bits
from helpers_tf1_saver import tf1_two_var_ema
from typer.testing import CliRunner

from ckpt_tools.cli import app

runner = CliRunner()


def test_raw_export_of_a_training_variables_to_restore_saver(tf, tmp_path):
    prefix, truth, avg = tf1_two_var_ema(tf, tmp_path / "model.ckpt",
                                         lambda ema, vs: ema.variables_to_restore())
    assert "W" not in tf.train.load_checkpoint(prefix).get_variable_to_shape_map()
    result = runner.invoke(app, ["export", prefix, "--out", str(tmp_path / "a.npz")])
    assert result.exit_code == 6, result.output  # no average stored: refused, --raw named
    assert "--raw" in result.output, result.output
    out = tmp_path / "w.npz"
    # an evaluation graph re-saving the averages with that Saver writes the same keys: --raw
    # rests on the statement that they hold the raw weights (review-23-attack-r70 F1, F2)
    result = runner.invoke(app, ["export", prefix, "--out", str(out), "--raw"])
    assert result.exit_code == 6 and "--keys-are-raw" in result.output, result.output
    assert not out.exists()
    result = runner.invoke(app, ["export", prefix, "--out", str(out), "--raw", "--keys-are-raw"])
    assert result.exit_code == 0, result.output
    assert "variables_to_restore" in result.output, result.output
    with np.load(out) as npz:
        assert sorted(npz.files) == ["W", "b"]
        for k in ("W", "b"):
            assert same_bits(npz[k], truth[k]) and not np.array_equal(npz[k], avg[k])


@pytest.mark.parametrize("where", ["linear_v1", "missing"])
def test_keys_are_raw_without_raw_is_a_usage_error_before_any_read(tmp_path, where):
    """review-25-attack-r81 F6: --keys-are-raw without --raw is decided by the options alone:
    exit 2, one error line and nothing before it, before the checkpoint (or a sibling .meta)
    is read; a path that does not exist said exit 3 first."""
    path = FIXTURES / "linear_v1" if where == "linear_v1" else tmp_path / "none" / "model.ckpt-3"
    out = tmp_path / "n.npz"
    code, _, err = run_cli(["export", str(path), "--out", str(out), "--keys-are-raw"])
    assert code == 2 and not out.exists(), err
    assert err.startswith("error:") and err.count("error:") == 1, err
    assert "only ema=False (--raw) exports" in err and "--averages-only" in err, err


@pytest.mark.parametrize("saver", ["vtr", "averages_alone"])
def test_cli_name_filters_match_the_names_export_writes(tf, tmp_path, saver):
    """review-25-attack-r84 F5: a training Saver(ema.variables_to_restore())'s key
    W/ExponentialMovingAverage is written by --raw --keys-are-raw as W, and the API's filters
    match W (9aaa02d), but the CLI's --include W / --grep W / --regex '^W$' selected nothing,
    exit 3; a Saver of the averages alone, whose W/ExponentialMovingAverage the default export
    writes as W, likewise. Each name selects (or --exclude leaves out) that one key, bit for
    bit, the key's own name too (an average's key leaves out the weight read from it:
    review-26-attack-r92 F3)."""
    keys = (lambda ema, vs: ema.variables_to_restore()) if saver == "vtr" else (
        lambda ema, vs: {ema.average_name(v): ema.average(v) for v in vs})
    prefix, raw, avg = tf1_two_var_ema(tf, tmp_path / "model.ckpt", keys)
    truth = raw if saver == "vtr" else avg
    mode = ["--raw", "--keys-are-raw"] if saver == "vtr" else []
    for i, (args, kept) in enumerate([
            (["--include", "W"], "W"), (["--grep", "W"], "W"), (["--regex", "^W$"], "W"),
            (["--include", "W/ExponentialMovingAverage"], "W"), (["--exclude", "W"], "b"),
            (["--exclude", "W/ExponentialMovingAverage"], "b")]):
        out = tmp_path / f"w{i}.npz"
        code, _, err = run_cli(["export", prefix, "--out", str(out), *mode, *args])
        assert code == 0, (args, err)
        with np.load(out) as npz:
            assert npz.files == [kept], (args, npz.files)
            assert same_bits(npz[kept], truth[kept]), args
    code, _, err = run_cli(["export", prefix, "--out", str(tmp_path / "n.npz"), *mode,
                            "--include", "V"])
    assert code == 3 and "select no variable" in err, err


def test_list_grep_matches_the_names_list_shows(tf, tmp_path):
    """review-25-attack-r81 F7: ``list`` shows a training vtr Saver's keys by their own names
    (W/ExponentialMovingAverage, marked 'raw value'), and --grep matches those names, in the
    table and in the names-only (-q) listing alike: a glob naming the key selects its row
    alone; W, a name list does not show, selects none (exit 3, the hint naming *W*)."""
    prefix, _, _ = tf1_two_var_ema(tf, tmp_path / "model.ckpt",
                                   lambda ema, vs: ema.variables_to_restore())
    for quiet in ([], ["-q"]):
        code, out, err = run_cli(["list", prefix, "--grep", "W/ExponentialMovingAverage",
                                  *quiet])
        assert code == 0, err
        rows = [line.split("\t")[0] for line in out.splitlines() if "Exponential" in line]
        assert rows == ["W/ExponentialMovingAverage"], out
        code, _, err = run_cli(["list", prefix, "--grep", "W", *quiet])
        assert code == 3 and "'*W*'" in err, err

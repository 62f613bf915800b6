"""review-26-attack-r92 F3: one rule for the name filters of ``export`` and ``map``: a glob
selects an output where it matches the output's exported name or the key its value is read
from. A Saver of the averages alone's ``--exclude W/ExponentialMovingAverage`` (or ``'W/*'``)
wrote W from that very key, exit 0, while ``--exclude '*/ExponentialMovingAverage'`` was
refused "select no variable": the CLI's check matched the key, the export only the name.
Made by real TensorFlow (tf.compat.v1 graph mode), truth read at save time."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli, same_bits
from helpers_tf1_saver import tf1_two_var_ema

from ckpt_tools import ema_map


def _averages_alone(ema, vs):
    return {ema.average_name(v): ema.average(v) for v in vs}


@pytest.mark.parametrize("saver", ["averages_alone", "plain"])
def test_exclude_of_an_average_key_leaves_its_weight_out(tf, tmp_path, saver):
    """Each form of --exclude naming W's average key leaves W out (never written, neither
    from the key nor raw); b is its average, bit for bit. Excluding every average's key
    leaves nothing: exit 3, as --include W with W's key excluded."""
    prefix, raw, avg = tf1_two_var_ema(tf, tmp_path / "model.ckpt",
                                       _averages_alone if saver == "averages_alone" else None)
    for i, glob in enumerate(["W/ExponentialMovingAverage", "W/*", "W/Exp*"]):
        out = tmp_path / f"o{i}.npz"
        code, _, err = run_cli(["export", prefix, "--out", str(out), "--exclude", glob])
        assert code == 0, (glob, err)
        with np.load(out) as npz:
            assert npz.files == ["b"], (glob, npz.files)
            assert same_bits(npz["b"], avg["b"]) and not same_bits(npz["b"], raw["b"])
    for args in (["--exclude", "*/ExponentialMovingAverage"],
                 ["--include", "W", "--exclude", "W/ExponentialMovingAverage"]):
        out = tmp_path / "n.npz"
        code, _, err = run_cli(["export", prefix, "--out", str(out), *args])
        assert code == 3 and "select no" in err and not out.exists(), (args, err)
    # the map (and restore-ema, which reads it) by the same rule
    m = ema_map(prefix, exclude=["W/ExponentialMovingAverage"])
    assert "W" not in m.mapping.values() and "W" not in m.averaged and "W" not in m.raw, m
    assert m.mapping.get("b/ExponentialMovingAverage") == "b", m.mapping
    code, out, err = run_cli(["map", prefix, "--exclude", "W/*"])
    assert code == 0 and "W/ExponentialMovingAverage" not in out and "b" in out, (out, err)


def test_export_help_says_what_a_filter_matches():
    code, out, _ = run_cli(["export", "--help"])
    assert code == 0 and "read from" in out, out

"""Smaller CLI contract points (issue 13, attack review round 2): option values that are not
numbers, a wrong ``--ema-name``, advice that names options the command has."""

from __future__ import annotations

import numpy as np
import pytest
from _corpus import run_cli, write_bundle
from helpers import FIXTURES

BN = str(FIXTURES / "towers_bn")


@pytest.mark.parametrize("value", ["nan", "NaN", "-1"])
def test_stats_drift_must_be_a_number_at_least_zero(value, capsys):
    code, out, err = run_cli(["stats", BN, "--drift", value], capsys)
    assert code == 2 and out == "", err
    assert err.startswith("Usage: ckpt stats") and "--drift" in err


def test_stats_drift_inf_flags_nothing(capsys):
    code, out, _ = run_cli(["stats", BN, "--drift", "inf", "--json"], capsys)
    assert code == 0 and '"drift"]' not in out and '"flags":["drift"' not in out


@pytest.mark.parametrize("command", ["map", "restore-ema"])
def test_wrong_ema_name_names_the_right_one_and_nothing_false(command, capsys, tmp_path):
    argv = [command, BN, "--ema-name", "foo"] + (["--out", str(tmp_path / "o")]
                                                  if command == "restore-ema" else [])
    code, _, err = run_cli(argv, capsys)
    assert code == 6, err
    assert "pass --ema-name ExponentialMovingAverage" in err
    assert "no EMA shadow is stored at all" not in err and "trainable_variables" not in err
    assert not (tmp_path / "o").exists()


def test_member_name_advice_names_the_commands_own_options(capsys, tmp_path):
    """restore-ema --format h5 has no --rename: its advice is --exclude or --format v2; and
    every bad name is named at once (not one per run)."""
    bad = ["a//b", "nul\x00x", "c/../d"]
    write_bundle(tmp_path / "m", {n: np.zeros(1, np.float32) for n in bad}
                 | {n + "/ExponentialMovingAverage": np.ones(1, np.float32) for n in bad}
                 | {"ok": np.zeros(1, np.float32), "ok/ExponentialMovingAverage":
                    np.ones(1, np.float32)})
    code, _, err = run_cli(["restore-ema", str(tmp_path / "m"), "--out", str(tmp_path / "o"),
                            "--format", "h5"], capsys)
    assert code == 7 and "--rename" not in err and "--exclude" in err and "--format v2" in err
    code, _, export_err = run_cli(["export", str(tmp_path / "m"), "--out",
                                   str(tmp_path / "w.npz")], capsys)
    assert code == 7 and "--rename" in export_err
    for e in (err, export_err):
        assert all(repr(n) in e for n in bad), e


def test_piped_diff_shows_one_sided_names_as_rows(capsys, monkeypatch, tmp_path):
    write_bundle(tmp_path / "a", {"w": np.zeros(2, np.float32), "only/a": np.zeros(1, np.float32)})
    write_bundle(tmp_path / "b", {"w": np.ones(2, np.float32), "only/b": np.zeros(1, np.float32),
                                  "only/b2": np.zeros(1, np.float32)})
    monkeypatch.setenv("TTY_COMPATIBLE", "0")
    code, out, _ = run_cli(["diff", str(tmp_path / "a"), str(tmp_path / "b"), "-q"], capsys)
    assert code == 0
    rows = [line.split("\t") for line in out.splitlines()]
    assert {len(r) for r in rows} == {6}, out
    # -q: the rows only, no header (as every table with -q)
    assert {(r[0], r[1]) for r in rows} == {("w", "changed"), ("only/a", "only in A"),
                                                ("only/b", "only in B"),
                                                ("only/b2", "only in B")}, out


def test_usage_lines_and_empty_out_agree_across_commands(capsys, tmp_path):
    for command in ("eval", "train", "list", "restore-ema", "export"):
        code, out, _ = run_cli([command, "--help"], capsys)
        usage = out.splitlines()[0]
        assert code == 0 and usage.startswith(f"Usage: ckpt {command} [OPTIONS]"), usage
        assert usage == usage.upper().replace("USAGE: CKPT", "Usage: ckpt").replace(
            command.upper(), command), usage  # PATH, never `checkpoint`
    for argv in (["export", BN, "--out", ""], ["restore-ema", BN, "--out", ""]):
        code, _, err = run_cli(argv, capsys)
        assert code == 7 and err.startswith("error: --out is empty"), (argv, err)


def test_an_error_about_the_file_a_directory_led_to_names_its_directory(capsys):
    code, _, err = run_cli(["map", str(FIXTURES / "keras_ema"), "-q"], capsys)
    assert code == 6
    assert f"error: {FIXTURES / 'keras_ema' / 'no_ema.keras'}: it holds no" in err, err

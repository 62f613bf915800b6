"""``ckpt export --raw --not-swapped``: the two contradict (--not-swapped states the file's
EMA copies are the averages, --raw exports the file's own weights), so the command is exit 2
naming both, as ``--fit-order`` with ``--trainable`` is (u16 F2); each alone still works."""

from __future__ import annotations

import os

from typer.testing import CliRunner

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KERAS = os.path.join(REPO, "fixtures", "keras_ema", "model.keras")


def _ckpt(*args):
    from ckpt_tools.cli import app

    return CliRunner().invoke(app, [str(a) for a in args])


def test_raw_with_not_swapped_is_a_usage_error(tmp_path):
    out = tmp_path / "a.npz"
    result = _ckpt("export", KERAS, "--raw", "--not-swapped", "--out", out)
    assert result.exit_code == 2, result.output
    assert "--not-swapped" in result.stderr and "--raw" in result.stderr, result.stderr
    assert not out.exists()


def test_each_alone_exports(tmp_path):
    for flag in ("--raw", "--not-swapped"):
        result = _ckpt("export", KERAS, flag, "--out", tmp_path / f"{flag[2:]}.npz")
        assert result.exit_code == 0, result.output

"""A run stopped by a NaN loss names its ``--train-dir`` in the error, and removes that
directory only where this run created it and wrote nothing there (u16 F12); a directory the
user made, or one holding a checkpoint, stays (tests/test_train.py keeps the last good one)."""

from __future__ import annotations

import os

import pytest
from typer.testing import CliRunner


def _nan_run(api, train_dir):
    from ckpt_tools.cli import app

    args = ["train", "--api", api, "--train-dir", str(train_dir), "--max-steps", "6",
            "--batch-size", "8", "--save-every", "4", "--debug-nan-at-step", "2", "-q"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {train_dir}: loss is nan at step 2"), lines
    assert lines[0].endswith("last good checkpoint: none"), lines


@pytest.mark.parametrize("api", ["v1", "keras"])
def test_nan_before_any_save_leaves_no_empty_run_directory(api, tmp_path):
    train_dir = tmp_path / "runs" / api
    train_dir.parent.mkdir()
    _nan_run(api, train_dir)
    assert os.listdir(train_dir.parent) == []


def test_a_directory_the_user_made_stays(tmp_path):
    train_dir = tmp_path / "mine"
    train_dir.mkdir()
    _nan_run("v1", train_dir)
    assert train_dir.is_dir() and os.listdir(train_dir) == []

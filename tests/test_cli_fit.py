"""Terminal output fits 80 columns without breaking a word (review-13-user-r2): ``stats`` on
``fixtures/dtypes`` (integers up to 20 digits) shortens numbers and hides columns with a note
instead of rows ~105 columns wide; ``--wide`` and pipes keep every column and exact values."""

from __future__ import annotations

import numpy as np
import pytest
from _corpus import run_cli
from helpers import FIXTURES

from ckpt_tools.cli._output import cell_len

DTYPES = str(FIXTURES / "dtypes")
INT64 = np.iinfo(np.int64)  # the fixture's int64 tensor holds the dtype's extremes


def _terminal(monkeypatch, columns: int) -> None:
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", str(columns))


@pytest.mark.parametrize("columns", [80, 100])
def test_stats_fits_the_terminal(columns, capsys, monkeypatch):
    _terminal(monkeypatch, columns)
    code, out, err = run_cli(["stats", DTYPES], capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert all(cell_len(line) <= columns for line in lines), "\n".join(
        f"{cell_len(line)}: {line}" for line in lines)
    header = next(line for line in lines if line.startswith("name "))
    assert header.split()[-1] == "flags", header
    int64 = next(line.split() for line in lines if line.startswith("dtype/int64 "))
    assert f"{INT64.min:.4g}" in int64 and f"{INT64.max:.4g}" in int64, int64
    assert "hidden at" in err and "--wide" in err, err


def test_stats_wide_and_piped_keep_exact_values(capsys, monkeypatch):
    _terminal(monkeypatch, 80)
    code, out, _ = run_cli(["stats", DTYPES, "--wide"], capsys)
    assert code == 0
    assert f"{INT64.min:,}" in out and "mean" in out and "dtype" in out.split("\n")[1]
    monkeypatch.setenv("TTY_COMPATIBLE", "0")
    code, out, _ = run_cli(["stats", DTYPES], capsys)
    row = next(line.split("\t") for line in out.splitlines() if line.startswith("dtype/int64\t"))
    assert f"{INT64.min:,}" in row and f"{INT64.max:,}" in row, row

"""``ckpt export``'s progress bar ends full: its total is the bytes export writes (the chosen
values of the selected weights, widened where the format widens them), not every tensor of
the checkpoint, which stopped the bar at 50% (at 25% with Adam's slots) (review-29-user-u31
F1). The checkpoints are the TensorFlow-written fixtures."""

from __future__ import annotations

import numpy as np
import pytest
from _corpus import run_cli
from helpers import FIXTURES

from ckpt_tools import export_weights


def _bar_ends(monkeypatch) -> list[tuple[str, int, int | None]]:
    """Records each byte bar's (label, bytes done, total) as it closes."""
    from ckpt_tools.cli import _progress

    ends: list[tuple[str, int, int | None]] = []
    closing = _progress.ByteProgress.__exit__

    def record(self, *exc):
        ends.append((self.label, self.done, self.total))
        return closing(self, *exc)

    monkeypatch.setattr(_progress.ByteProgress, "__exit__", record)
    return ends


@pytest.mark.parametrize("fixture", ["partitioned", "towers_bn"])  # Adam; Momentum + BN
@pytest.mark.parametrize("fmt", ["npz", "safetensors", "h5"])
@pytest.mark.parametrize("raw", [False, True])
def test_export_bar_reaches_the_bytes_it_writes(fixture, fmt, raw, tmp_path, capsys,
                                                monkeypatch):
    ends = _bar_ends(monkeypatch)
    out = tmp_path / f"w.{fmt}"
    code, _, err = run_cli(["export", str(FIXTURES / fixture), "--out", str(out),
                            *(["--raw"] if raw else [])], capsys)
    assert code == 0, err
    [(label, done, total)] = ends
    assert label == "exporting" and done == total
    if fmt == "npz":  # the values np.load reads back, byte for byte
        with np.load(out) as z:
            assert total == sum(z[k].nbytes for k in z.files)


def test_export_total_counts_widened_tensors_as_written(tmp_path):
    """bfloat16 widened to float32 in ``.npz``: counted as written, as ``nbytes`` says."""
    seen: list[int] = []
    totals: list[int] = []
    result = export_weights(FIXTURES / "dtypes", tmp_path / "d.npz", ema=False,
                            progress=seen.append, progress_total=totals.append)
    assert totals == [sum(seen)] == [result.nbytes]
    with np.load(tmp_path / "d.npz") as z:
        assert result.nbytes == sum(z[k].nbytes for k in z.files)

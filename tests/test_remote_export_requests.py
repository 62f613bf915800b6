"""``ckpt export`` of a URL reads through the read-ahead, following the writer's read plan
(review-16-attack-r3: 334 range GETs for make_ckpt's 1,003-tensor checkpoint, one per weight
exported, since the weights are not back to back in the shards: each lies beside its EMA
shadow and its slot, and export read them outside the read-ahead). Counted on moto's S3
server's own request log (conftest.py's ``s3`` fixture)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import BUCKET
from helpers import bench_make_ckpt, data_gets, small_read_ahead, upload_dir
from typer.testing import CliRunner

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

from ckpt_tools.cli import app  # noqa: E402
from ckpt_tools.formats import remote  # noqa: E402
from ckpt_tools.formats import remote_readahead as ra  # noqa: E402

SIZE = 6 << 20


@pytest.fixture(scope="module")
def uploaded(s3, tmp_path_factory):
    root = tmp_path_factory.mktemp("exp") / "c"
    bench_make_ckpt().write_checkpoint(str(root), SIZE)
    upload_dir(s3["client"], root, BUCKET, "exp")
    return root


@pytest.fixture
def small_windows(monkeypatch):
    small_read_ahead(monkeypatch, window=1 << 20, piece=256 << 10)


@pytest.mark.parametrize("flags", [["--raw"], []])
def test_export_over_s3_costs_a_request_per_window_not_per_tensor(s3, uploaded, small_windows,
                                                                   tmp_path, flags):
    start = len(s3["requests"].lines)
    out = tmp_path / "w.npz"
    result = CliRunner().invoke(app, ["export", f"s3://{BUCKET}/exp/", "--out", str(out),
                                      "-q", *flags])
    assert result.exit_code == 0, result.output
    gets = data_gets(s3["requests"].since(start))
    data = sum(f.stat().st_size for f in uploaded.iterdir() if ".data-" in f.name)
    # 334 tensors exported, a third of the bytes: one request per window (or piece of a big
    # tensor) and shard, not one per tensor.
    assert len(gets) <= data // ra.WINDOW + data // remote.PIECE // 3 + 6, len(gets)
    local = tmp_path / "l.npz"
    again = CliRunner().invoke(app, ["export", str(uploaded), "--out", str(local), "-q",
                                     *flags])
    assert again.exit_code == 0, again.output
    with np.load(out) as a, np.load(local) as b:
        assert sorted(a.files) == sorted(b.files) and len(a.files) == 334
        for k in b.files:
            assert a[k].tobytes() == b[k].tobytes(), k

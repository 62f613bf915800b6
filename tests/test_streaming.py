"""One-pass streaming reads: chunks CRC-checked as consumed, parallel CRC of large tensors,
streamed stats and diff with progress, against TensorFlow-written fixtures and whole-tensor
computations."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from _corpus import write_bundle
from helpers import FIXTURES, expected_values

from ckpt_tools import CorruptCheckpointError, open_checkpoint
from ckpt_tools.diff import compare_tensors, diff_checkpoints, diff_ema
from ckpt_tools.formats import crc
from ckpt_tools.stats import checkpoint_stats
from ckpt_tools.tensor_stats import tensor_stats


def _flip_last_data_byte(directory: Path) -> None:
    data = sorted(directory.glob("*.data-*"))[0]
    raw = bytearray(data.read_bytes())
    raw[-1] ^= 0xFF
    data.write_bytes(bytes(raw))


def test_chunks_equal_tensorflow_values():
    values = expected_values("linear_v2")  # recorded from TensorFlow at save time
    with open_checkpoint(FIXTURES / "linear_v2") as ckpt:
        for name, want in values.items():
            parts = list(ckpt.chunks(name, max_bytes=4))
            got = np.concatenate(parts) if parts else np.empty(0, want.dtype)
            assert got.tobytes() == np.asarray(want).reshape(-1).tobytes(), name
            assert all(p.nbytes <= max(4, p.itemsize) for p in parts)


def test_chunks_raise_on_checksum_mismatch_after_the_last_chunk(tmp_path):
    big = np.arange(1000, dtype=np.float32)
    write_bundle(tmp_path / "c" / "model", {"big": big})
    _flip_last_data_byte(tmp_path / "c")
    with open_checkpoint(tmp_path / "c" / "model") as ckpt:
        stream = ckpt.chunks("big", max_bytes=1024)
        first = next(stream)
        assert first.size == 256
        with pytest.raises(CorruptCheckpointError, match="checksum mismatch"):
            list(stream)
        assert list(ckpt.chunks("big", max_bytes=1024, verify=False))  # opt out: no error


def test_a_one_chunk_tensor_is_refused_before_its_chunk_is_handed_out(tmp_path):
    big = np.arange(1000, dtype=np.float32)
    write_bundle(tmp_path / "c" / "model", {"big": big})
    _flip_last_data_byte(tmp_path / "c")
    with open_checkpoint(tmp_path / "c" / "model") as ckpt:
        stream = ckpt.chunks("big")  # 4,000 bytes: one chunk
        with pytest.raises(CorruptCheckpointError, match="checksum mismatch for tensor 'big'"):
            next(stream)
        parts = list(ckpt.chunks("big", verify=False))
        assert len(parts) == 1 and parts[0][:-1].tobytes() == big[:-1].tobytes()
        assert list(ckpt.chunks("big", max_bytes=4000, verify=False))[0].size == 1000


def test_large_tensor_crc_runs_in_parallel_pieces(tmp_path):
    n = (crc.PARALLEL_MIN + crc.PIECE // 2) // 4 + 3  # several pieces, a short last one
    big = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    write_bundle(tmp_path / "c" / "model", {"big": big})
    with open_checkpoint(tmp_path / "c" / "model") as ckpt:
        assert ckpt.tensor("big").tobytes() == big.tobytes()
    _flip_last_data_byte(tmp_path / "c")
    with open_checkpoint(tmp_path / "c" / "model") as ckpt, pytest.raises(
            CorruptCheckpointError, match="checksum mismatch"):
        ckpt.tensor("big")


def test_checkpoint_stats_threads_and_progress_match_whole_tensors():
    calls = []
    with open_checkpoint(FIXTURES / "towers_bn") as ckpt:
        records = list(checkpoint_stats(ckpt, progress=lambda d, t: calls.append((d, t))))
        serial = list(checkpoint_stats(ckpt, workers=1))
        counted = list(checkpoint_stats(ckpt, histogram=True))
        assert records == serial
        for r, h in zip(records, counted, strict=True):
            if r.stats is not None and r.stats.kind != "string":
                assert r.stats == tensor_stats(ckpt.tensor(r.name), histogram=False), r.name
                assert r.stats.histogram is None
                assert h.stats == tensor_stats(ckpt.tensor(r.name)), r.name
        total = sum(ckpt.entry(k).stored_bytes or ckpt.entry(k).nbytes for k in ckpt.keys())
    assert calls and calls[-1] == (total, total)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)


def test_stats_flags_a_corrupt_tensor_unreadable(tmp_path):
    write_bundle(tmp_path / "c" / "model", {"a": np.ones(8, np.float32),
                                            "b": np.arange(300, dtype=np.float64)})
    _flip_last_data_byte(tmp_path / "c")
    with open_checkpoint(tmp_path / "c" / "model") as ckpt:
        by_name = {r.name: r for r in checkpoint_stats(ckpt)}
        assert by_name["a"].stats is not None and by_name["b"].flags == ("unreadable",)
        with pytest.raises(CorruptCheckpointError):
            list(checkpoint_stats(ckpt, strict=True))


def test_streamed_diff_equals_whole_tensor_comparison(tmp_path):
    shutil.copytree(FIXTURES / "linear_v2", tmp_path / "a")
    calls = []
    report = diff_ema(tmp_path / "a", progress=lambda d, t: calls.append((d, t)))
    values = expected_values("linear_v2")
    assert report.tensors
    for t in report.tensors:
        whole = compare_tensors(values[t.name], values[t.other], t.name, t.other,
                                t.dtype_a, t.dtype_b)
        assert (t.status, t.max_abs) == (whole.status, whole.max_abs)
        assert t.rel_l2 == pytest.approx(whole.rel_l2, rel=1e-12)
    assert calls[-1][0] == calls[-1][1]
    same = diff_checkpoints(tmp_path / "a", FIXTURES / "linear_v2")
    assert same.identical and all(t.status == "same" for t in same.tensors)


@pytest.mark.parametrize("fmt", ["npz", "safetensors", "h5"])
def test_export_streams_chunks_and_never_holds_a_whole_bundle_tensor(fmt, tmp_path, monkeypatch):
    from ckpt_tools.checkpoint import Checkpoint
    from ckpt_tools.export import export_weights

    released = []
    chunks = Checkpoint.chunks

    def spy(self, name, max_bytes=1 << 20, **kw):
        released.append(kw.get("release"))
        return chunks(self, name, max_bytes, **kw)

    def whole(self, name):
        raise AssertionError(f"export read {name} whole")

    monkeypatch.setattr(Checkpoint, "chunks", spy)
    monkeypatch.setattr(Checkpoint, "tensor", whole)
    result = export_weights(FIXTURES / "towers_bn", tmp_path / f"w.{fmt}")
    assert released and all(released) and len(released) >= len(result.tensors)
    values = expected_values("towers_bn")  # TensorFlow's values, recorded at save time
    if fmt == "npz":
        with np.load(tmp_path / "w.npz") as npz:
            got = {k: npz[k] for k in npz.files}
    elif fmt == "h5":
        import h5py

        with h5py.File(tmp_path / "w.h5") as f:
            got = {n: f[n.rpartition("/")[0] or n][n + ":0"][()] for n in result.tensors}
    else:
        from safetensors.numpy import load_file

        got = load_file(str(tmp_path / "w.safetensors"))
    assert set(got) == set(result.tensors)
    for name, src in result.tensors.items():
        assert got[name].tobytes() == np.asarray(values[src]).tobytes(), name


def test_export_of_a_corrupt_tensor_fails_and_leaves_nothing(tmp_path):
    from ckpt_tools.export import export_weights

    write_bundle(tmp_path / "c" / "model", {"dense/kernel": np.ones((4, 3), np.float32)})
    _flip_last_data_byte(tmp_path / "c")
    with pytest.raises(CorruptCheckpointError, match="checksum mismatch"):
        export_weights(tmp_path / "c" / "model", tmp_path / "w.safetensors", ema=False)
    assert not any(p.name.startswith(("w.", ".w.")) for p in tmp_path.iterdir())


@pytest.mark.parametrize("chunk", [1 << 12, 1 << 18])
def test_streamed_stats_drift_and_histogram_over_many_parts(tmp_path, monkeypatch, chunk):
    """A shadow of several 4 MiB parts: its moments, histogram (asked for) and drift from
    the variable equal NumPy's on the whole tensors, whatever the piece size; the drift
    reuses the shadow's float64 copy, so a NaN in the variable must still count."""
    monkeypatch.setattr("ckpt_tools.tensor_stats.CHUNK", chunk)
    rng = np.random.default_rng(7)
    w = rng.normal(0.2, 0.05, 2_500_003).astype(np.float32)
    ema = (w + rng.normal(0, 1e-3, w.size)).astype(np.float32)
    ema[::1001] = 0
    nan_w = w.copy()
    nan_w[1_234_567] = np.nan
    write_bundle(tmp_path / "c" / "model", {"w": w, "w/ExponentialMovingAverage": ema,
                                             "v": nan_w, "v/ExponentialMovingAverage": ema})
    with open_checkpoint(tmp_path / "c" / "model") as ckpt:
        plain = {r.name: r for r in checkpoint_stats(ckpt)}
        counted = {r.name: r for r in checkpoint_stats(ckpt, histogram=True, workers=1)}
    x = ema.astype(np.float64)
    s, h = plain["w/ExponentialMovingAverage"].stats, counted["w/ExponentialMovingAverage"]
    assert s.histogram is None and h.stats.histogram == tuple(
        int(c) for c in np.histogram(x, 16, (x.min(), x.max()))[0])
    assert (s.min, s.max, s.count, s.nan) == (x.min(), x.max(), x.size, 0)
    assert s.mean == pytest.approx(x.mean(), rel=1e-12)
    assert s.std == pytest.approx(x.std(), rel=1e-9)
    assert s.l2 == pytest.approx(np.linalg.norm(x), rel=1e-12)
    assert s.zero_fraction == pytest.approx(np.mean(x == 0))
    ref = w.astype(np.float64)
    expected = np.linalg.norm(x - ref) / np.linalg.norm(ref)
    assert plain["w/ExponentialMovingAverage"].drift == pytest.approx(expected, rel=1e-12)
    assert h.drift == plain["w/ExponentialMovingAverage"].drift
    assert math.isnan(plain["v/ExponentialMovingAverage"].drift)
    assert "drift" in plain["v/ExponentialMovingAverage"].flags

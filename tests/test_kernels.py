"""The fused per-chunk kernels of ``ckpt stats``/``ckpt diff`` against NumPy on whole tensors.

Every expected value is NumPy's own (``min``, ``max``, ``mean``/``std`` in float64,
``np.histogram``, ``np.linalg.norm``) over the whole tensor; the kernels see it in pieces.
Every test runs twice: on the NumPy path alone and with the compiled kernels
(``ckpt_tools/ckernels.c``, built here from source so the test does not depend on how the
package was installed).
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from helpers import build_extension

from ckpt_tools import kernels
from ckpt_tools.kernels import Histogram, L2Accumulator, Moments, sumsq, work_dtype
from ckpt_tools.tensor_stats import relative_l2, tensor_stats


@pytest.fixture(scope="session")
def compiled(tmp_path_factory):
    """``ckpt_tools/ckernels.c`` compiled as setup.py compiles it, imported from a temp dir."""
    return build_extension("ckernels", [Path(kernels.__file__).with_name("ckernels.c")],
                           tmp_path_factory.mktemp("ckernels"))


@pytest.fixture(autouse=True, params=["numpy", "compiled"])
def backend(request, monkeypatch):
    """Runs the test on the NumPy path, then with the compiled kernels."""
    module = request.getfixturevalue("compiled") if request.param == "compiled" else None
    monkeypatch.setattr(kernels, "_fused", module)
    return request.param


def _reference(values: np.ndarray) -> dict:
    x = values.astype(np.float64).reshape(-1)
    fin = x[np.isfinite(x)]
    return {"count": x.size, "nan": int(np.isnan(x).sum()), "inf": int(np.isinf(x).sum()),
            "min": float(fin.min()) if fin.size else None,
            "max": float(fin.max()) if fin.size else None,
            "mean": float(fin.mean()) if fin.size else None,
            "std": float(fin.std()) if fin.size else None, "l2": float(np.linalg.norm(fin)),
            "zero_fraction": float((x == 0).mean()) if x.size else None,
            "histogram": np.histogram(fin, 16, (fin.min(), fin.max()))[0] if fin.size else None}


def _check(values: np.ndarray) -> None:
    s, ref = tensor_stats(values), _reference(values)
    assert (s.count, s.nan, s.inf, s.min, s.max) == (ref["count"], ref["nan"], ref["inf"],
                                                     ref["min"], ref["max"])
    if ref["mean"] is None:
        assert (s.mean, s.std, s.histogram) == (None, None, ())
        return
    assert s.mean == pytest.approx(ref["mean"], rel=1e-12, abs=1e-300)
    assert s.std == pytest.approx(ref["std"], rel=1e-9, abs=1e-300)
    assert s.l2 == pytest.approx(ref["l2"], rel=1e-12)
    assert s.zero_fraction == pytest.approx(ref["zero_fraction"])
    assert s.histogram == tuple(int(c) for c in ref["histogram"])


@pytest.mark.parametrize("chunk", [997, 1 << 12, 1 << 16])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, ml_dtypes.bfloat16])
def test_chunked_stats_equal_whole_tensor_numpy(monkeypatch, chunk, dtype):
    monkeypatch.setattr("ckpt_tools.tensor_stats.CHUNK", chunk)
    rng = np.random.default_rng(1)
    values = rng.normal(0.3, 2.0, size=20_011).astype(dtype)
    values[::97] = 0
    _check(values)


@pytest.mark.parametrize("chunk", [5, 1 << 16])
def test_nan_inf_empty_and_constant_tensors(monkeypatch, chunk):
    monkeypatch.setattr("ckpt_tools.tensor_stats.CHUNK", chunk)
    mixed = np.array([1.0, np.nan, 2.0, np.inf, -np.inf, 0.0, -3.5, np.nan, 7.25, 0.0, 1.0],
                     np.float32)
    _check(mixed)
    only_bad = tensor_stats(np.array([np.nan, np.inf], np.float32))
    assert (only_bad.count, only_bad.nan, only_bad.inf, only_bad.min) == (2, 1, 1, None)
    empty = tensor_stats(np.zeros((3, 0), np.float32))
    assert (empty.count, empty.mean, empty.l2, empty.histogram) == (0, None, 0.0, ())
    const = tensor_stats(np.full(1001, 0.1, np.float32))
    assert const.std == 0.0 and const.histogram[0] == 1001 and sum(const.histogram) == 1001
    assert const.mean == pytest.approx(float(np.float32(0.1)), rel=1e-15)
    _check(np.array([-1e38, 3e38, 1e-45, 0.0], np.float32))


def test_positive_range_has_no_zeros_and_offset_data_keeps_precision():
    rng = np.random.default_rng(2)
    values = rng.normal(1e4, 1e-3, size=70_000)  # float64: mean >> std
    s = tensor_stats(values)
    assert s.zero_fraction == 0.0
    assert s.std == pytest.approx(values.std(), rel=1e-6)
    assert s.mean == pytest.approx(values.mean(), rel=1e-14)


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.int32, np.int64, np.bool_,
                                   np.complex64, np.complex128])
def test_integer_bool_and_complex_pieces(dtype):
    rng = np.random.default_rng(3)
    if dtype is np.bool_:
        values = rng.random(5001) < 0.3
    elif np.dtype(dtype).kind == "c":
        values = (rng.normal(size=5001) + 1j * rng.normal(size=5001)).astype(dtype)
    else:
        info = np.iinfo(dtype)
        values = rng.integers(max(info.min, -1000), min(info.max, 1000), 5001, dtype=dtype)
    s = tensor_stats(values)
    ref = np.abs(values).astype(np.float64) if values.dtype.kind == "c" else values.astype(
        np.float64)
    assert s.mean == pytest.approx(ref.mean(), rel=1e-12)
    assert s.std == pytest.approx(ref.std(), rel=1e-9)
    assert (float(s.min), float(s.max)) == (ref.min(), ref.max())
    assert sum(s.histogram) == values.size


def test_work_dtypes():
    assert work_dtype(np.dtype(np.float32)) == np.float32
    assert work_dtype(np.dtype(ml_dtypes.bfloat16)) == np.float32
    assert work_dtype(np.dtype(ml_dtypes.float8_e4m3fn)) == np.float32
    assert work_dtype(np.dtype(np.int16)) == np.float32
    assert work_dtype(np.dtype(np.int32)) == np.float64
    assert work_dtype(np.dtype(np.float64)) == np.float64
    assert work_dtype(np.dtype(np.complex64)) == np.float32


@pytest.mark.parametrize("size", [1, 2, 7, 1000, 4097])
@pytest.mark.parametrize("bins", [1, 16, 256])
def test_histogram_byte_pairs_equal_a_plain_bincount(size, bins):
    """Counting bin indices two at a time (uint16 pairs) gives bincount's histogram."""
    rng = np.random.default_rng(size)
    x = rng.uniform(-3, 5, size).astype(np.float32)
    lo, hi = float(x.min()), float(x.max())
    h = Histogram(lo, hi, bins)
    for start in range(0, size, 1024):
        h.add(x[start : start + 1024])
    idx = np.zeros(size, np.int64)  # one value: the first bin
    if hi > lo:
        t = (x.astype(np.float64) * 0.5 - lo / 2) / (hi / 2 - lo / 2) * bins
        idx = np.clip(np.floor(t), 0, bins - 1).astype(np.int64)
    expected = np.bincount(idx, minlength=bins)
    assert h.counts() == tuple(int(c) for c in expected)


def test_l2_accumulator_matches_whole_tensor_numpy():
    rng = np.random.default_rng(4)
    a = rng.normal(size=30_001).astype(np.float32)
    b = (a + rng.normal(scale=1e-3, size=a.size)).astype(np.float32)
    b[:10] = a[:10]  # the first chunk starts equal: the full compare decides
    ref = a.astype(np.float64)
    diff = b.astype(np.float64) - ref
    acc = L2Accumulator()
    for start in range(0, a.size, 4096):
        acc.add(a[start : start + 4096], b[start : start + 4096])
    max_abs, rel = acc.result()
    assert not acc.identical
    assert max_abs == np.abs(diff).max()
    assert rel == pytest.approx(np.linalg.norm(diff) / np.linalg.norm(ref), rel=1e-12)
    same = L2Accumulator()
    same.add(a, a.copy())
    assert same.identical and same.result() == (0.0, 0.0)
    assert relative_l2(np.array([np.inf, 1.0], np.float32),
                       np.array([np.inf, 2.0], np.float32)) == (1.0, pytest.approx(1.0))
    nan = relative_l2(np.array([1.0, 2.0]), np.array([np.nan, 2.0]))
    assert math.isnan(nan[0]) and math.isnan(nan[1])
    assert relative_l2(np.array([1e308, -1e308]), np.array([-1e308, 1e308]))[0] == math.inf


@pytest.mark.parametrize("size", [0, 1, 8191, 8192, 8193, 3 * 8192 + 5, 1 << 18])
def test_sumsq_by_rows_equals_a_float64_dot(size):
    """The blocked sum of squares (BLAS rows of 8,192, then the tail) is NumPy's own to the
    last few ulps, on row boundaries and off them."""
    d = np.random.default_rng(size).normal(0.0, 3.0, size)
    assert sumsq(d) == pytest.approx(float(np.dot(d, d)), rel=1e-14, abs=0.0)
    assert sumsq(d[: size // 2]) == pytest.approx(float(np.sum(d[: size // 2] ** 2)),
                                                  rel=1e-14, abs=0.0)


def test_install_built_the_compiled_kernels(compiled):
    """Where a compiler works (``compiled`` built), an installed package (``pip install -e``)
    has ckpt_tools.ckernels too: setup.py marks it optional, so a broken build would only
    show as 3x slower stats and diff. A source checkout on PYTHONPATH was never built."""
    here = Path(kernels.__file__).parent
    if not [*here.glob("ckernels*.so"), *here.glob("ckernels*.pyd")]:
        pytest.skip("this checkout was not built (pip install -e builds the extension)")
    importlib.import_module("ckpt_tools.ckernels")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pieces_with_and_without_nan_inf_combine_exactly(monkeypatch, dtype):
    """Finite pieces (the compiled kernel's) and pieces holding NaN/Inf (redone on the NumPy
    path) merge into the whole tensor's statistics; an empty piece changes nothing."""
    monkeypatch.setattr("ckpt_tools.tensor_stats.CHUNK", 1000)
    rng = np.random.default_rng(5)
    values = rng.normal(-2.0, 0.5, 10_000).astype(dtype)
    values[1500] = np.nan
    values[4321] = -np.inf
    values[4322] = np.inf
    values[7000:7100] = 0
    values[9999] = np.nan  # the last piece's last value
    _check(values)
    acc = Moments()
    acc.add(values[:0])
    assert (acc.n, acc.finite_n, acc.lo) == (0, 0, math.inf)


def test_offset_float32_and_float64_extremes():
    """A shift inside the range keeps the variance of offset data; sums that overflow float64
    (values near its limit) go the NumPy way and give inf, not a wrong number."""
    rng = np.random.default_rng(6)
    offset = (1000.0 + rng.normal(0, 1e-3, 300_001)).astype(np.float32)
    s, ref = tensor_stats(offset), offset.astype(np.float64)
    assert s.mean == pytest.approx(ref.mean(), rel=1e-14)
    assert s.std == pytest.approx(ref.std(), rel=1e-9)
    huge = tensor_stats(np.array([1e308, -1e308, 5e307, 0.0]))
    assert (huge.min, huge.max, huge.l2, huge.zero_fraction) == (-1e308, 1e308, math.inf, 0.25)
    assert huge.mean == pytest.approx(1.25e307)


def test_big_endian_and_strided_pieces_take_the_numpy_path():
    values = np.random.default_rng(7).normal(size=5000)
    _check(values.astype(">f4"))
    strided = values.astype(np.float32)[::3]
    acc, ref = Moments(), Moments()
    acc.add(strided)
    ref.add(strided.copy())
    assert (acc.lo, acc.hi, acc.zeros) == (ref.lo, ref.hi, ref.zeros)
    assert acc.mean == pytest.approx(ref.mean, rel=1e-14)
    a, b = values[::2], values[1::2]
    assert relative_l2(a, b)[1] == pytest.approx(np.linalg.norm(b - a) / np.linalg.norm(a),
                                                 rel=1e-12)

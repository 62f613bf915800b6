"""Fused per-chunk NumPy kernels behind ``ckpt stats`` and ``ckpt diff``.

Each kernel takes one cache-sized piece of a flat tensor at a time (``stats.CHUNK`` elements,
1 MiB of float32) and runs its reductions over it while it sits in the core's cache, writing
intermediates into per-thread scratch buffers instead of a fresh float64 copy per operation.
Values stay in their own dtype where NumPy reduces them exactly (``min``/``max`` of float32);
everything that sums is accumulated in float64.

CPU cost per float32 element of a cached 256 Ki-element piece on the 2-core benchmark machine
(AMD EPYC, AVX-512, load average 5): ``min`` and ``max`` 0.04 each, zero count (``== 0`` then a
count of bools) 0.09, float64 widening copy 0.15, shift 0.18, shifted sum (``einsum``) 0.10,
sum of squares (:func:`sumsq`: BLAS dot products over 8,192-element rows) 0.14: moments 0.73,
~0.9 with the data streamed from memory (``sum()`` and ``einsum("i,i->")`` took 0.87 cached).
An EMA shadow's drift adds ~0.75 (the raw piece read and widened, its sum of squares, the
difference and its sum of squares; the shadow's float64 copy is the moments' own). The
histogram (opt-in, a second pass) costs ~1.2 more: float64 index arithmetic 0.5, byte cast
0.1, ``bincount`` 0.6. A CRC32C-verified read of the same bytes is ~0.35 ns an element, page
faults included. Each operation is one NumPy pass already at SIMD speed, and float64
accumulation (the mean to 1e-12) needs the widened copy: only a compiled one-pass kernel
would go lower, and does: :mod:`ckpt_tools.ckernels` (C, built by ``pip install`` where a
compiler is there) updates min, max, zero count and both shifted sums from one read of each
element, 0.1 ns an element (0.12 for a drift's two tensors), and is used for native float32 and
float64 pieces whenever it is importable. A piece holding NaN or Inf (its sums come back
non-finite) is redone on the NumPy path, which counts them; without the extension every piece
takes that path, with the same results to float64 rounding.
"""

from __future__ import annotations

import math
import threading

import numpy as np

try:  # the optional compiled kernels (setup.py); NumPy alone computes the same
    from . import ckernels as _fused
except ImportError:  # no compiler at install time, or a source checkout never built
    _fused = None

_local = threading.local()
# Pieces the compiled kernels take: native-order float32/float64 (``>f4`` is not among them).
_FUSED_DTYPES = frozenset({np.dtype(np.float32), np.dtype(np.float64)})


def _scratch(key: str, size: int, dtype) -> np.ndarray:
    """A per-thread scratch buffer of at least ``size`` elements, reused across tensors: a
    fresh ``np.empty`` of a few hundred KiB is a fresh ``mmap``, and its page faults cost
    more than the arithmetic on a tensor of 40,000 elements."""
    bufs = getattr(_local, "bufs", None)
    if bufs is None:
        bufs = _local.bufs = {}
    buf = bufs.get(key)
    if buf is None or buf.size < size:
        buf = bufs[key] = np.empty(size, dtype)
    return buf[:size]


# Rows of a blocked sum of squares: at most 10,000 elements, so OpenBLAS runs each row's ddot
# on the calling thread (it spreads longer ones over every core, and under load its threads
# wait for each other: 4 ns an element instead of 0.05).
_ROW = 8192


def sumsq(d: np.ndarray) -> float:
    """Returns ``Σ d²`` of a flat float64 array, with one BLAS dot product per 8,192-element
    row (``matmul`` of stacked row vectors: the loop over rows runs in C): 0.12 ns an element
    on the benchmark machine against 0.27 for ``einsum("i,i->")``, with the same rounding
    (several SIMD accumulators per row, rows summed pairwise)."""
    size = d.size
    head = size - size % _ROW
    total = 0.0
    if head:
        rows = d[:head].reshape(-1, 1, _ROW)
        total = float(np.matmul(rows, rows.reshape(-1, _ROW, 1)).sum())
    if head < size:
        tail = d[head:]
        total += float(np.einsum("i,i->", tail, tail))
    return total


_F32_EXACT = {"float16", "bfloat16", "bool", "int8", "uint8", "int16", "uint16"}


def work_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype a piece of ``dtype`` is reduced in: float32 for float32 and every type float32
    holds exactly (narrower floats, 8/16-bit integers, bool, float8/int4 of ml_dtypes),
    float64 otherwise (float64, 32/64-bit integers); complex pieces become ``abs`` in the float
    of their width."""
    if dtype.kind == "c":
        return np.dtype(np.float32 if dtype.itemsize <= 8 else np.float64)
    if dtype == np.float32 or dtype.name in _F32_EXACT or (
            dtype.kind == "V" and dtype.itemsize <= 2):  # ml_dtypes: float8_*, int4, ...
        return np.dtype(np.float32)
    return np.dtype(np.float64)


def as_work(piece: np.ndarray, work: np.dtype) -> np.ndarray:
    """``piece`` in ``work`` dtype (``abs`` for complex); no copy when it already is."""
    if piece.dtype.kind == "c":
        return np.abs(piece).astype(work, copy=False)
    return piece if piece.dtype == work else piece.astype(work)


class Moments:
    """Streaming count, NaN/Inf/zero counts, finite min/max, mean, variance and sum of squares.

    Per piece, the shifted-data algorithm around a ``K`` inside the piece's range: ``s1 =
    Σ(x-K)``, ``s2 = Σ(x-K)²`` in float64, giving the piece's mean and M2 (``s2 - s1²/n``: with
    ``K`` inside the range the cancellation is bounded by ``n·eps·range²``), merged across
    pieces with Chan et al.'s update. The compiled kernel takes the piece's first value as
    ``K`` and everything in one read; the NumPy path takes ``min``/``max`` in the piece's own
    dtype first (NaN or Inf there sends the piece down the slow path that counts and drops
    them) and the midrange as ``K``, with one float64 difference buffer.
    """

    __slots__ = ("n", "finite_n", "nan", "inf", "zeros", "mean", "m2", "sumsq", "lo", "hi",
                 "wide")

    def __init__(self):
        self.n = self.finite_n = self.nan = self.inf = self.zeros = 0
        self.mean = self.m2 = self.sumsq = 0.0
        self.lo, self.hi = math.inf, -math.inf
        self.wide: np.ndarray | None = None

    def add(self, x: np.ndarray) -> None:
        """Adds one flat piece (float32 or float64, any size).

        Afterwards :attr:`wide` is the piece in float64, element for element, when it held
        only finite values (``None`` otherwise): a per-thread scratch buffer, valid until
        the next call on this thread, that an EMA shadow's drift reuses
        (:meth:`L2Accumulator.add`'s ``wide``) instead of widening the piece again.
        """
        self.wide = None
        size = x.size
        if not size:
            return
        if _fused is not None and x.dtype in _FUSED_DTYPES and x.flags.c_contiguous:
            k, s1, s2, mn, mx, zeros = _fused.moments(x)
            if math.isfinite(s1) and math.isfinite(s2):  # else NaN/Inf: the NumPy path
                self.n += size
                self.zeros += zeros
                self._merge(size, k, s1, s2, mn, mx)
                return
        self.n += size
        mn, mx = float(x.min()), float(x.max())
        whole = math.isfinite(mn) and math.isfinite(mx)
        if not whole:  # rare: NaN/Inf in this piece
            self.zeros += size - int(np.count_nonzero(x))
            finite = np.isfinite(x)
            nans = int(np.count_nonzero(np.isnan(x)))
            self.nan += nans
            self.inf += size - int(np.count_nonzero(finite)) - nans
            x = x[finite]
            size = x.size
            if not size:
                return
            mn, mx = float(x.min()), float(x.max())
        elif mn <= 0.0 <= mx:  # a range without 0 has no zeros: skip the count
            # x == 0 then a count of bools: 5x faster than count_nonzero on floats.
            self.zeros += int(np.count_nonzero(np.equal(x, 0, out=_scratch("b", size, bool))))
        k = mn / 2 + mx / 2  # midrange, without overflowing near float64's limits
        d = _scratch("moments", size, np.float64)
        if x.dtype == np.float64:
            wide = x
        else:  # a plain widening copy, then same-type arithmetic: 2x faster than mixed types
            wide = _scratch("wide", size, np.float64)
            np.copyto(wide, x)
        np.subtract(wide, k, out=d)
        # einsum's unrolled sum: 0.09 ns an element against 0.15 for sum()'s pairwise one
        # (the shifted values are small, so plain accumulation loses nothing measurable).
        s1 = float(np.einsum("i->", d))
        s2 = sumsq(d)
        if whole:
            self.wide = wide
        self._merge(size, k, s1, s2, mn, mx)

    def _merge(self, size: int, k: float, s1: float, s2: float, mn: float, mx: float) -> None:
        """Merges a piece of ``size`` finite values given as ``s1 = Σ(x-k)``, ``s2 =
        Σ(x-k)²`` (``k`` within their range) and their range (Chan et al.'s update)."""
        c_mean = k + s1 / size
        # s2 overflowed (values near float64's limit): so did Σx², and inf - inf must not
        # make the L2 norm NaN.
        c_m2 = s2 if math.isinf(s2) else max(s2 - s1 * s1 / size, 0.0)
        new_n = self.finite_n + size
        delta = c_mean - self.mean
        self.mean += delta * size / new_n
        self.m2 += c_m2 + delta * delta * self.finite_n * size / new_n
        self.sumsq += c_m2 + size * c_mean * c_mean  # Σx² = M2 + n·mean²: no cancellation
        self.finite_n = new_n
        self.lo, self.hi = min(self.lo, mn), max(self.hi, mx)


class Histogram:
    """Counts of finite values in ``bins`` equal-width bins over ``[lo, hi]``, piece by piece.

    A value's bin is ``floor((x/2 - lo/2) / (hi/2 - lo/2) · bins)`` (the maximum's in the last
    bin), in float64 (halved, so ranges like ``[-1e308, 1e308]`` do not overflow; float64, so
    values on a bin edge fall where ``np.histogram`` puts them, which float32 does not). Bin
    indices are written as bytes and counted two at a time: ``bincount`` over the pairs
    viewed as uint16 (``i0 + 256·i1``), whose row and column sums are the two halves'
    histograms. That halves ``bincount``, which costs more than all the arithmetic.
    """

    __slots__ = ("bins", "top", "half_lo", "span", "pairs", "extra")

    def __init__(self, lo: float, hi: float, bins: int):
        if not 1 <= bins <= 256:
            raise ValueError(f"bins must be 1..256, not {bins}")
        self.bins = bins
        # For lo <= x <= hi the bin value lies in [0, bins] (rounding is monotonic and hi's is
        # exactly bins), so truncating to a byte is the floor and needs no clip: index ``bins``
        # (the maximum's) is folded into the last bin at the end. 256 bins do not fit a byte.
        self.top = bins if bins < 256 else bins - 1
        self.half_lo = lo / 2
        self.span = hi / 2 - lo / 2
        self.pairs = np.zeros(257 * self.top + 1, np.int64)
        self.extra = np.zeros(self.top + 1, np.int64)  # the odd element of odd-sized pieces

    def add(self, x: np.ndarray) -> None:
        """Adds one flat piece of finite values within ``[lo, hi]`` (any size).

        Raises:
            ValueError: if a value lies outside ``[lo, hi]``.
        """
        size = x.size
        if not size:
            return
        if self.span <= 0:  # a single value: everything in the first bin
            self.extra[0] += size
            return
        t = _scratch("histogram", size, np.float64)
        if x.dtype == np.float64:
            np.multiply(x, 0.5, out=t)  # x / 2, exactly
        else:
            np.copyto(t, x)
            t *= 0.5
        t -= self.half_lo
        t /= self.span  # then * bins: the rounding np.histogram's bins agree with
        t *= self.bins
        if self.top < self.bins:
            np.minimum(t, self.top, out=t)
        idx = _scratch("bins", size + 1, np.uint8)[:size]  # aligned: viewed as uint16
        np.copyto(idx, t, casting="unsafe")  # truncation: the floor of t >= 0
        even = size & ~1
        if even:
            counts = np.bincount(idx[:even].view(np.uint16), minlength=self.pairs.size)
            if counts.size != self.pairs.size:
                raise ValueError("histogram value outside [lo, hi]")
            self.pairs += counts
        if size & 1:
            self.extra[idx[size - 1]] += 1

    def counts(self) -> tuple[int, ...]:
        """Returns the histogram (row sums plus column sums of the pair counts)."""
        n = self.top + 1
        grid = np.zeros(256 * n, np.int64)
        grid[: self.pairs.size] = self.pairs
        grid = grid.reshape(n, 256)[:, :n]  # [high byte, low byte]
        total = grid.sum(axis=0) + grid.sum(axis=1) + self.extra
        if n > self.bins:  # the maximum's index, ``bins``: the last bin holds it
            total[-2] += total[-1]
            total = total[:-1]
        return tuple(total.tolist())


def _bits(a: np.ndarray) -> np.ndarray:
    """``a``'s bytes as unsigned integers of its item size (one compare per element)."""
    size = a.dtype.itemsize
    if size in (1, 2, 4, 8) and a.flags.c_contiguous:
        return a.view(f"u{size}")
    return a.view(np.uint8)


class L2Accumulator:
    """Streaming ``(max |b - a|, ||b - a|| / ||a||)`` over aligned flat chunks of ``a``, ``b``
    (see :func:`ckpt_tools.stats.relative_l2` for the conventions). Feed chunks of at most
    ``stats.CHUNK`` elements with :meth:`add`; bit-identical chunks skip the difference
    arithmetic (a differing first element proves a chunk differs without comparing it all)."""

    __slots__ = ("work", "max_abs", "diff_sq", "ref_sq", "identical", "extremes")

    def __init__(self, complex_: bool = False, *, extremes: bool = True):
        self.work = np.complex128 if complex_ else np.float64
        self.max_abs, self.diff_sq, self.ref_sq = 0.0, 0.0, 0.0
        self.identical = True  # every chunk so far bit-identical
        # Without extremes (a shadow's drift needs only the norms) max_abs is not kept: two
        # float64 passes (max and min of the difference) fewer per element.
        self.extremes = extremes

    def add(self, ref: np.ndarray, oth: np.ndarray, wide: np.ndarray | None = None) -> None:
        """Adds one aligned pair of flat chunks. ``wide``, when given, is ``oth`` already
        widened to float64 and known finite (:attr:`Moments.wide`): it is used instead of a
        second widening copy."""
        with np.errstate(all="ignore"):
            if ref.dtype == oth.dtype and ref.size and (
                    ref[:1].tobytes() == oth[:1].tobytes()) and np.array_equal(
                    _bits(ref), _bits(oth)):
                self._same(ref)
                return
            if ref.dtype == oth.dtype and not ref.size:
                return
            self.identical = False
            if self.work is np.float64 and ref.size and (
                    self._compiled(ref, oth) or self._fast(ref, oth, wide)):
                return
            self._general(ref, oth)

    def _compiled(self, ref: np.ndarray, oth: np.ndarray) -> bool:
        """The compiled one-pass kernel, where it is built and takes these pieces; returns
        False, having added nothing, otherwise or when a value is NaN or Inf."""
        if (_fused is None or ref.dtype != oth.dtype or ref.dtype not in _FUSED_DTYPES
                or not (ref.flags.c_contiguous and oth.flags.c_contiguous)):
            return False
        ref_sq, diff_sq, max_abs = _fused.l2(ref, oth)
        if not (math.isfinite(ref_sq) and math.isfinite(diff_sq)):
            return False
        if self.extremes:
            self.max_abs = max(self.max_abs, max_abs)
        self.diff_sq += diff_sq
        self.ref_sq += ref_sq
        return True

    def _fast(self, ref: np.ndarray, oth: np.ndarray, wide: np.ndarray | None) -> bool:
        """Finite chunks: widening copies, then same-type arithmetic (2x faster than mixed
        types); returns False, having added nothing, when a value is NaN or Inf."""
        a = _scratch("ref", ref.size, np.float64)
        np.copyto(a, ref, casting="unsafe")
        if wide is None:
            wide = _scratch("diff", ref.size, np.float64)
            np.copyto(wide, oth, casting="unsafe")
        ref_sq = sumsq(a)
        d = np.subtract(wide, a, out=a)  # oth - ref, over ref's copy
        diff_sq = sumsq(d)
        if not (math.isfinite(ref_sq) and math.isfinite(diff_sq)):
            return False  # NaN/Inf (or overflow): the general path decides
        if self.extremes:
            self.max_abs = max(self.max_abs, float(d.max()), -float(d.min()))
        self.diff_sq += diff_sq
        self.ref_sq += ref_sq
        return True

    def _same(self, ref: np.ndarray) -> None:
        a = ref.astype(self.work, copy=False)
        if self.work is np.float64:
            total = float(a.sum())
            if math.isfinite(total):
                self.ref_sq += sumsq(a)
                return
            fin = a[np.isfinite(a)]
        else:
            fin = np.abs(a)[np.isfinite(a)]
        self.ref_sq += float(np.einsum("i,i->", fin, fin))

    def _general(self, ref: np.ndarray, oth: np.ndarray) -> None:
        """NaN/Inf (or complex) chunks: positions equal in both (same NaN, same Inf) count
        as equal; NaN anywhere else makes ``max_abs`` NaN."""
        a, b = ref.astype(self.work, copy=False), oth.astype(self.work, copy=False)
        same = (a == b) | (np.isnan(a) & np.isnan(b))
        d = np.where(same, 0.0, np.abs(b - a))
        if d.size:
            self.max_abs = max(self.max_abs, float(d.max()))  # NaN propagates via max()
            if np.isnan(d).any():
                self.max_abs = math.nan
        self.diff_sq += float(np.einsum("i,i->", d, d))
        fin = np.abs(a)[np.isfinite(a)]
        self.ref_sq += float(np.einsum("i,i->", fin, fin))

    def result(self) -> tuple[float, float]:
        """Returns ``(max_abs, rel_l2)``."""
        if math.isnan(self.diff_sq):
            return self.max_abs, math.nan
        if self.ref_sq == 0.0:
            return self.max_abs, 0.0 if self.diff_sq == 0.0 else math.inf
        return self.max_abs, math.sqrt(self.diff_sq / self.ref_sq)

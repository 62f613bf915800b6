"""Summary statistics of one tensor: ranges, moments, NaN/Inf counts, histograms, drift.

Every function works on any dtype a checkpoint can hold: floats of every width (bfloat16, float16
and float8 are reduced as float32, which holds them exactly; sums are float64), integers and
bools (as numbers), complex (on ``abs``), and strings (only count and byte lengths). Tensors are
processed in pieces of :data:`CHUNK` elements by the fused kernels of :mod:`ckpt_tools.kernels`
(scratch of one piece per tensor, in cache), and empty tensors give ``None`` instead of NaN
warnings.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass

import numpy as np

from .kernels import Histogram, L2Accumulator, Moments, as_work, work_dtype

# Elements per fused piece: 2 MiB of float64 scratch, in the L2/L3 caches. Smaller pieces run
# each operation from L2 but make 4x the NumPy calls, and the GIL held between calls then keeps
# the second thread waiting (2^16: 0.96 s, 2^18: 0.82 s for `ckpt stats` on 1 GB, 2 threads).
# It must divide every part (4 MiB / itemsize elements, itemsize <= 16) so any split into
# parts gives the same pieces.
CHUNK = 1 << 18
BINS = 16  # histogram bins


@dataclass(frozen=True)
class TensorStats:
    """Statistics of one tensor.

    Moments and ranges cover finite values only; ``nan`` and ``inf`` count the others. For
    complex tensors they describe ``abs(x)``; for strings ``min``/``max``/``mean`` describe byte
    lengths and the remaining moments are ``None``.

    Attributes:
        dtype: NumPy dtype name (``float32``, ``bfloat16``, ``object`` for strings).
        shape: tensor shape.
        count: number of elements.
        min: smallest finite value (``None`` when there is none).
        max: largest finite value.
        mean: mean of finite values.
        std: population standard deviation of finite values.
        l2: Euclidean norm of the finite values (0.0 for an empty tensor).
        nan: number of NaN elements.
        inf: number of +/-Inf elements.
        zero_fraction: share of elements equal to zero (``None`` when empty or strings).
        histogram: counts of finite values in :data:`BINS` equal-width bins over
            ``[min, max]``, as ``np.histogram`` counts them (empty for strings and tensors
            without finite values; ``None`` when not computed: ``checkpoint_stats`` and
            ``ckpt stats`` compute it only when asked, ``--histogram``).
        kind: ``"float"``, ``"int"``, ``"bool"``, ``"complex"`` or ``"string"``.
    """

    dtype: str
    shape: tuple[int, ...]
    count: int
    min: float | None
    max: float | None
    mean: float | None
    std: float | None
    l2: float | None
    nan: int
    inf: int
    zero_fraction: float | None
    histogram: tuple[int, ...] | None
    kind: str

    @property
    def finite(self) -> bool:
        """True when the tensor holds no NaN or Inf."""
        return self.nan == 0 and self.inf == 0

    def to_dict(self) -> dict:
        """Returns a JSON-ready dict (non-finite floats become ``"nan"``/``"inf"`` strings)."""
        d = asdict(self)
        d["shape"] = list(self.shape)
        d["histogram"] = None if self.histogram is None else list(self.histogram)
        for key in ("min", "max", "mean", "std", "l2", "zero_fraction"):
            d[key] = json_float(d[key])
        return d


def json_float(value: float | int | None) -> float | int | str | None:
    """Returns ``value`` unchanged unless it is NaN/Inf, which JSON cannot hold (then a string)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


@functools.cache
def dtype_facts(dtype: np.dtype) -> tuple[str, str, np.dtype]:
    """``(name, kind, work dtype)`` of a dtype, once per dtype: ``dtype.name`` is a Python
    property costing microseconds, a real share of the time on checkpoints of small tensors."""
    return dtype.name, _kind(dtype), work_dtype(dtype)


def _kind(dtype: np.dtype) -> str:
    if dtype.kind in "OSU":
        return "string"
    if dtype.kind == "b":
        return "bool"
    if dtype.kind == "c":
        return "complex"
    if dtype.kind in "iu" or dtype.name.startswith(("int", "uint")):  # ml_dtypes int4/uint4
        return "int"
    return "float"  # f, and ml_dtypes (bfloat16, float8: kind 'V')


def _string_stats(array: np.ndarray) -> TensorStats:
    lengths = np.fromiter((len(x) if isinstance(x, (bytes, str)) else len(str(x))
                           for x in array.reshape(-1)), dtype=np.int64, count=array.size)
    empty = lengths.size == 0
    return TensorStats(
        dtype=array.dtype.name, shape=tuple(array.shape), count=int(array.size),
        min=None if empty else int(lengths.min()), max=None if empty else int(lengths.max()),
        mean=None if empty else float(lengths.mean()), std=None, l2=None, nan=0, inf=0,
        zero_fraction=None, histogram=(), kind="string")


def tensor_stats(array: np.ndarray, *, bins: int = BINS, histogram: bool = True) -> TensorStats:
    """Computes :class:`TensorStats` for one tensor of any dtype.

    Args:
        array (`np.ndarray`): the tensor (a read-only memory-mapped view is fine).
        bins (`int`, *optional*, defaults to `16`): histogram bins.
        histogram (`bool`, *optional*, defaults to `True`): compute the histogram (a second
            pass over the values); without it ``histogram`` is ``None``.

    Returns:
        `TensorStats`: range, moments, L2 norm, NaN/Inf counts, zero fraction and histogram.

    Raises:
        TypeError: if ``array`` holds values that are neither numbers nor strings.

    Example:
        >>> s = tensor_stats(np.array([1.0, 2.0, np.nan], np.float32))
        >>> (s.min, s.max, s.mean, s.nan)
        (1.0, 2.0, 1.5, 1)
    """
    array = np.asarray(array)
    if dtype_facts(array.dtype)[1] == "string":
        return _string_stats(array)
    flat = array.reshape(-1)
    return stream_stats(lambda: iter((flat,)), array.dtype, tuple(array.shape), bins=bins,
                        histogram=histogram)


def stream_stats(parts: Callable[[], Iterable[np.ndarray]], dtype: np.dtype,
                 shape: tuple[int, ...], *, bins: int = BINS,
                 histogram: bool = True) -> TensorStats:
    """Computes :class:`TensorStats` of a numeric tensor from its flat values in parts.

    One fused pass gives the count, NaN/Inf/zero counts, min/max, mean, variance (Chan et
    al.'s parallel update, stable without a second pass) and the sum of squares; the histogram,
    whose bins depend on the range, takes a second pass when asked for and the tensor has
    finite values.

    Args:
        parts (`Callable[[], Iterable[np.ndarray]]`): returns a fresh iterable of the flat
            values in order (e.g. ``lambda: ckpt.chunks(name)``); called once, or twice for
            the histogram.
        dtype (`np.dtype`): the tensor's dtype (not a string dtype).
        shape (`tuple[int, ...]`): the tensor's shape.
        bins (`int`, *optional*, defaults to `16`): histogram bins.
        histogram (`bool`, *optional*, defaults to `True`): compute the histogram; without it
            ``histogram`` is ``None``.

    Returns:
        `TensorStats`.
    """
    dtype = np.dtype(dtype)
    kind = dtype_facts(dtype)[1]
    with np.errstate(all="ignore"):  # overflow near float64's range gives inf, as it should
        return numeric_stats(((part, None) for part in parts()),
                              parts if histogram else None, dtype, shape, kind, bins, None)


def _pieces(parts: Iterable[np.ndarray], work: np.dtype) -> Iterator[np.ndarray]:
    """Yields ``parts`` (flat arrays of any size) in ``work`` dtype as pieces of at most
    :data:`CHUNK` elements, aligned to the tensor's element index (so any split into parts
    gives the same pieces): small enough that every fused operation on a piece reads it from
    the core's cache, not from memory."""
    step = CHUNK
    for part in parts:
        for start in range(0, part.size, step):
            yield as_work(part[start : start + step], work)


def numeric_stats(pairs: Iterable[tuple[np.ndarray, np.ndarray | None]],
                   again: Callable[[], Iterable[np.ndarray]] | None, dtype: np.dtype,
                   shape: tuple[int, ...], kind: str, bins: int,
                   drift: L2Accumulator | None) -> TensorStats:
    """The statistics of the flat parts in ``pairs`` (each with the aligned part of an EMA
    shadow's raw variable when ``drift`` accumulates its distance, else ``None``), in one
    pass; ``again`` gives the parts anew for the histogram's pass (``None``: no histogram)."""
    name, _, work = dtype_facts(dtype)
    exact_int = dtype.kind in "iu" and dtype.itemsize == 8  # float64 rounds above 2**53
    # The shadow's drift reuses the float64 copy the moments make of each piece.
    share = drift is not None and drift.work is np.float64
    step = CHUNK
    ilo = ihi = None
    acc = Moments()
    for part, ref in pairs:
        if exact_int and part.size:
            pmin, pmax = int(part.min()), int(part.max())
            ilo = pmin if ilo is None else min(ilo, pmin)
            ihi = pmax if ihi is None else max(ihi, pmax)
        for start in range(0, part.size, step):
            piece = part[start : start + step]
            acc.add(as_work(piece, work))
            if drift is not None:
                drift.add(ref[start : start + step], piece, acc.wide if share else None)
    n, finite_n = acc.n, acc.finite_n
    has = finite_n > 0
    lo, hi = acc.lo, acc.hi
    vmin, vmax = (lo, hi) if has else (None, None)
    if has and kind in ("int", "bool"):
        vmin, vmax = (ilo, ihi) if exact_int else (int(lo), int(hi))
    histogram: tuple[int, ...] | None = None if again is None else ()
    if has and again is not None:
        hist = Histogram(lo, hi, bins)
        nonfinite = acc.nan + acc.inf > 0
        for x in _pieces(again(), work):
            hist.add(x[np.isfinite(x)] if nonfinite else x)
        histogram = hist.counts()
    return TensorStats(
        dtype=name, shape=shape, count=n, min=vmin, max=vmax,
        mean=acc.mean if has else None,
        std=math.sqrt(max(acc.m2 / finite_n, 0.0)) if has else None,
        l2=math.sqrt(acc.sumsq), nan=acc.nan, inf=acc.inf,
        zero_fraction=acc.zeros / n if n else None, histogram=histogram, kind=kind)


def relative_l2(reference: np.ndarray, other: np.ndarray) -> tuple[float, float]:
    """Returns ``(max |other - reference|, ||other - reference|| / ||reference||)``.

    Computed in float64 (``abs`` of the difference for complex), chunk by chunk. Positions
    where both tensors hold the same value (including both NaN, or the same Inf) count as
    equal. The relative difference is ``inf`` when ``reference`` is all zero and ``other`` is
    not, and 0.0 when both are all zero.

    Args:
        reference (`np.ndarray`): the raw variable (or checkpoint A).
        other (`np.ndarray`): its EMA shadow (or checkpoint B), same shape.

    Returns:
        `tuple[float, float]`: max absolute and relative L2 difference (NaN when a position
        is NaN in only one of them).

    Raises:
        ValueError: if the shapes differ.

    Example:
        >>> relative_l2(np.array([3.0, 4.0]), np.array([3.0, 4.5]))
        (0.5, 0.1)
    """
    if reference.shape != other.shape:
        raise ValueError(f"shapes differ: {reference.shape} vs {other.shape}")
    with np.errstate(all="ignore"):
        return _relative_l2(reference.reshape(-1), other.reshape(-1),
                            reference.dtype.kind == "c" or other.dtype.kind == "c")


def _relative_l2(ref: np.ndarray, oth: np.ndarray, complex_: bool) -> tuple[float, float]:
    acc = L2Accumulator(complex_)
    for start in range(0, ref.size, CHUNK):
        acc.add(ref[start : start + CHUNK], oth[start : start + CHUNK])
    return acc.result()

"""Summary statistics of tensors: ranges, moments, NaN/Inf counts, histograms, EMA drift.

Every function works on any dtype a checkpoint can hold: floats of every width (bfloat16, float16
and float8 are computed in float64), integers and bools (as numbers), complex (on ``abs``), and
strings (only count and byte lengths). Large tensors are processed in chunks of
:data:`CHUNK` elements, so the float64 working copy never exceeds a few MiB, and empty tensors
give ``None`` instead of NaN warnings.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass

import numpy as np

from .checkpoint import Checkpoint
from .errors import CheckpointError

CHUNK = 1 << 20  # elements converted to float64 at a time
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
            ``[min, max]`` (empty for strings and empty tensors).
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
    histogram: tuple[int, ...]
    kind: str

    @property
    def finite(self) -> bool:
        """True when the tensor holds no NaN or Inf."""
        return self.nan == 0 and self.inf == 0

    def to_dict(self) -> dict:
        """Returns a JSON-ready dict (non-finite floats become ``"nan"``/``"inf"`` strings)."""
        d = asdict(self)
        d["shape"] = list(self.shape)
        d["histogram"] = list(self.histogram)
        for key in ("min", "max", "mean", "std", "l2", "zero_fraction"):
            d[key] = json_float(d[key])
        return d


def json_float(value: float | int | None) -> float | int | str | None:
    """Returns ``value`` unchanged unless it is NaN/Inf, which JSON cannot hold (then a string)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


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


def _chunks(array: np.ndarray) -> Iterator[np.ndarray]:
    """Yields the tensor as float64 (abs for complex) chunks of at most CHUNK elements."""
    flat = array.reshape(-1)
    complex_ = array.dtype.kind == "c"
    for start in range(0, flat.size, CHUNK):
        part = flat[start : start + CHUNK]
        yield np.abs(part).astype(np.float64) if complex_ else part.astype(np.float64)


def _string_stats(array: np.ndarray) -> TensorStats:
    lengths = np.fromiter((len(x) if isinstance(x, (bytes, str)) else len(str(x))
                           for x in array.reshape(-1)), dtype=np.int64, count=array.size)
    empty = lengths.size == 0
    return TensorStats(
        dtype=array.dtype.name, shape=tuple(array.shape), count=int(array.size),
        min=None if empty else int(lengths.min()), max=None if empty else int(lengths.max()),
        mean=None if empty else float(lengths.mean()), std=None, l2=None, nan=0, inf=0,
        zero_fraction=None, histogram=(), kind="string")


def tensor_stats(array: np.ndarray, *, bins: int = BINS) -> TensorStats:
    """Computes :class:`TensorStats` for one tensor of any dtype.

    Args:
        array (`np.ndarray`): the tensor (a read-only memory-mapped view is fine).
        bins (`int`, *optional*, defaults to `16`): histogram bins.

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
    kind = _kind(array.dtype)
    if kind == "string":
        return _string_stats(array)
    with np.errstate(all="ignore"):  # overflow near float64's range gives inf, as it should
        return _numeric_stats(array, kind, bins)


def _numeric_stats(array: np.ndarray, kind: str, bins: int) -> TensorStats:
    n = finite_n = nan = inf = zeros = 0
    mean = m2 = sumsq = 0.0
    lo, hi = math.inf, -math.inf
    for x in _chunks(array):
        n += x.size
        zeros += int(np.count_nonzero(x == 0))
        bad = ~np.isfinite(x)
        if bad.any():
            nan += int(np.count_nonzero(np.isnan(x)))
            inf += int(np.count_nonzero(np.isinf(x)))
            x = x[~bad]
        if not x.size:
            continue
        # Chan et al. parallel update: stable mean/variance without a second pass.
        c_mean = float(x.mean())
        c_m2 = float(((x - c_mean) ** 2).sum())
        total = finite_n + x.size
        delta = c_mean - mean
        mean += delta * x.size / total
        m2 += c_m2 + delta * delta * finite_n * x.size / total
        finite_n = total
        sumsq += float(np.dot(x, x))
        lo, hi = min(lo, float(x.min())), max(hi, float(x.max()))
    has = finite_n > 0
    vmin, vmax = (lo, hi) if has else (None, None)
    if has and kind in ("int", "bool"):
        vmin, vmax = _exact_int_range(array, lo, hi)
    return TensorStats(
        dtype=array.dtype.name, shape=tuple(array.shape), count=n, min=vmin, max=vmax,
        mean=mean if has else None, std=math.sqrt(max(m2 / finite_n, 0.0)) if has else None,
        l2=math.sqrt(sumsq), nan=nan, inf=inf, zero_fraction=zeros / n if n else None,
        histogram=_histogram(array, lo, hi, bins) if has else (), kind=kind)


def _exact_int_range(array: np.ndarray, lo: float, hi: float) -> tuple[int, int]:
    """Integer min/max without float64 rounding (int64 values above 2**53)."""
    if array.dtype.kind in "iu" and array.dtype.itemsize == 8:
        return int(array.min()), int(array.max())
    return int(lo), int(hi)  # exact: every narrower integer fits a float64


def _histogram(array: np.ndarray, lo: float, hi: float, bins: int) -> tuple[int, ...]:
    # Bin by hand on halved values: np.histogram rejects ranges like [-1e308, 1e308] (whose
    # width overflows) and denormal-wide ones, both of which corrupt data can hold.
    counts = np.zeros(bins, dtype=np.int64)
    span = hi / 2 - lo / 2
    for x in _chunks(array):
        x = x[np.isfinite(x)]
        if span > 0:
            idx = np.floor((x / 2 - lo / 2) / span * bins)
            idx = np.clip(idx, 0, bins - 1).astype(np.int64)
        else:
            idx = np.zeros(x.size, dtype=np.int64)  # a single value: all in the first bin
        counts += np.bincount(idx, minlength=bins)
    return tuple(int(c) for c in counts)


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
    work = np.complex128 if complex_ else np.float64
    max_abs, diff_sq, ref_sq = 0.0, 0.0, 0.0
    for start in range(0, ref.size, CHUNK):
        a = ref[start : start + CHUNK].astype(work)
        b = oth[start : start + CHUNK].astype(work)
        same = (a == b) | (np.isnan(a) & np.isnan(b))
        d = np.where(same, 0.0, np.abs(b - a))
        if d.size:
            max_abs = max(max_abs, float(d.max()))  # NaN propagates through max()
            if np.isnan(d).any():
                max_abs = math.nan
        diff_sq += float(np.dot(d, d))
        fin = np.abs(a)[np.isfinite(a)]
        ref_sq += float(np.dot(fin, fin))
    if math.isnan(diff_sq):
        return max_abs, math.nan
    if ref_sq == 0.0:
        return max_abs, 0.0 if diff_sq == 0.0 else math.inf
    return max_abs, math.sqrt(diff_sq / ref_sq)


# -- whole checkpoints -------------------------------------------------------------------------
NAN, INF, DRIFT, UNREADABLE = "nan", "inf", "drift", "unreadable"


@dataclass(frozen=True)
class StatsRecord:
    """Statistics of one checkpoint tensor, with its role and any warning flags.

    Attributes:
        name: checkpoint key.
        dtype: TensorFlow dtype name.
        shape: shape.
        role: role from :meth:`Checkpoint.variables` (``weight``, ``ema``…).
        stats: the statistics (``None`` when the tensor could not be read).
        ema_of: for an EMA shadow, the raw variable's key.
        drift: for an EMA shadow, ``||ema - raw|| / ||raw||`` (``None`` otherwise).
        flags: any of ``"nan"``, ``"inf"``, ``"drift"`` (over the threshold), ``"unreadable"``.
        error: why the tensor could not be read.
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    role: str
    stats: TensorStats | None
    ema_of: str | None = None
    drift: float | None = None
    flags: tuple[str, ...] = ()
    error: str | None = None

    def to_dict(self, path: str | None = None) -> dict:
        """The ``ckpt stats --json`` record; ``path`` is the display name (object path)."""
        return {"name": self.name, "key": self.name, "path": path, "role": self.role,
                "dtype": self.dtype, "shape": list(self.shape),
                "stats": self.stats.to_dict() if self.stats else None, "ema_of": self.ema_of,
                "drift": json_float(self.drift), "flags": list(self.flags), "error": self.error}


def checkpoint_stats(ckpt: Checkpoint, names: list[str] | None = None, *,
                     drift_threshold: float = 0.5,
                     strict: bool = False) -> Iterator[StatsRecord]:
    """Yields a :class:`StatsRecord` per tensor, reading one tensor (pair) at a time.

    Args:
        ckpt (`Checkpoint`): an open checkpoint.
        names (`list[str]`, *optional*): keys to summarise (default: all, in key order).
        drift_threshold (`float`, *optional*, defaults to `0.5`): flag EMA shadows whose
            relative L2 distance from their raw variable exceeds this.
        strict (`bool`, *optional*, defaults to `False`): raise on unreadable tensors instead
            of yielding a record flagged ``"unreadable"``.

    Returns:
        `Iterator[StatsRecord]`.

    Raises:
        VariableNotFoundError: if a name is not stored.
        CheckpointError: with ``strict``, if a tensor cannot be read.

    Example:
        >>> with open_checkpoint("fixtures/linear_v2") as ckpt:  # doctest: +SKIP
        ...     [r.name for r in checkpoint_stats(ckpt) if "drift" in r.flags]
        []
    """
    variables = {v.name: v for v in ckpt.variables()}
    for name in ckpt.keys() if names is None else names:
        entry = ckpt.entry(name)
        var = variables.get(name)
        role = var.role if var else "other"
        ema_of = var.ema_of if var else None
        base = {"name": name, "dtype": entry.dtype_name, "shape": entry.shape, "role": role,
                "ema_of": ema_of}
        try:
            value = ckpt.tensor(name)
            stats = tensor_stats(value)
        except CheckpointError as exc:
            if strict:
                raise
            yield StatsRecord(stats=None, flags=(UNREADABLE,), error=str(exc), **base)
            continue
        flags = [f for f, n in ((NAN, stats.nan), (INF, stats.inf)) if n]
        drift = _drift(ckpt, role, ema_of, value)
        if drift is not None and not drift <= drift_threshold:  # NaN drift is flagged too
            flags.append(DRIFT)
        yield StatsRecord(stats=stats, drift=drift, flags=tuple(flags), **base)


def _drift(ckpt: Checkpoint, role: str, ema_of: str | None, value: np.ndarray) -> float | None:
    if role != "ema" or not ema_of or ema_of not in ckpt or value.dtype.kind in "OSU":
        return None
    try:
        raw = ckpt.tensor(ema_of)
    except CheckpointError:
        return None  # the raw variable's own record reports the error
    if raw.shape != value.shape or raw.dtype.kind in "OSU":
        return None
    return relative_l2(raw, value)[1]


def select_keys(ckpt: Checkpoint, patterns: list[str]) -> list[str]:
    """Resolves user-typed names to checkpoint keys, in the order given, without duplicates.

    Each pattern is an exact key, a TF2 object path (``model/dense/kernel``), or a glob
    (``conv*/weights``) matched against keys and object paths.

    Args:
        ckpt (`Checkpoint`): an open checkpoint.
        patterns (`list[str]`): names or globs.

    Returns:
        `list[str]`: checkpoint keys.

    Raises:
        VariableNotFoundError: if a name is not stored or a glob matches nothing.

    Example:
        >>> select_keys(ckpt, ["W", "*/ExponentialMovingAverage"])  # doctest: +SKIP
        ['W', 'W/ExponentialMovingAverage', 'b/ExponentialMovingAverage']
    """
    import fnmatch

    from .errors import VariableNotFoundError

    by_path = {v.path: v.name for v in ckpt.variables() if v.path}
    out: dict[str, None] = {}
    for pattern in patterns:
        if pattern in ckpt:
            out[pattern] = None
        elif pattern in by_path:
            out[by_path[pattern]] = None
        elif any(c in pattern for c in "*?["):
            hits = [k for k in ckpt.keys() if fnmatch.fnmatchcase(k, pattern)]
            hits += [k for p, k in by_path.items() if fnmatch.fnmatchcase(p, pattern)]
            if not hits:
                raise VariableNotFoundError(f"{ckpt.path}: no variable matches {pattern!r}")
            out.update(dict.fromkeys(hits))
        else:
            ckpt.entry(pattern)  # raises VariableNotFoundError with suggestions
    return list(out)

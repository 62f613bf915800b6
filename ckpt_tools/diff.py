"""Compare two checkpoints, or each variable of one checkpoint with its EMA shadow.

:func:`diff_checkpoints` lists keys only in A or only in B, shape and dtype changes, and for
tensors in both the largest absolute and the relative L2 difference. :func:`diff_ema` does the
same for every ``(variable, EMA shadow)`` pair that :meth:`Checkpoint.variables` links, which
shows how far the averages lag the raw weights. Tensors are read one pair at a time.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from .checkpoint import CHUNK_BYTES, Checkpoint, open_checkpoint
from .emamap import UnprovenPairingError, proven_pairs
from .errors import CheckpointError, EmaError
from .formats.dtypes import numpy_dtype
from .kernels import L2Accumulator
from .parallel import ordered_map
from .stated_open import opened_stated, refuse_unknown
from .stats import ByteCounter
from .tensor_stats import CHUNK, json_float, relative_l2

SAME, CHANGED, SHAPE, DTYPE, UNREADABLE = "same", "changed", "shape", "dtype", "unreadable"
#: Status with ``values=False`` when names, shapes and dtypes agree: the values were not read,
#: so nothing is known about them (never reported as ``same``).
NOT_COMPARED = "not_compared"


@dataclass(frozen=True)
class TensorDiff:
    """How one tensor differs between A and B.

    Attributes:
        name: key in A.
        other: key in B (differs from ``name`` only for EMA comparisons).
        status: ``"same"`` (bit-identical), ``"changed"``, ``"shape"`` (shapes differ, values
            not compared), ``"dtype"`` (dtypes differ; values compared when both are numeric
            and shapes match), ``"unreadable"``, or ``"not_compared"`` (``values=False``:
            same shape and dtype, values not read).
        dtype_a, dtype_b: dtype names.
        shape_a, shape_b: shapes.
        max_abs: largest ``|b - a|`` (``None`` when not compared).
        rel_l2: ``||b - a|| / ||a||``.
        error: why the values could not be read (status ``"unreadable"``).
    """

    name: str
    other: str
    status: str
    dtype_a: str
    dtype_b: str
    shape_a: tuple[int, ...]
    shape_b: tuple[int, ...]
    max_abs: float | None = None
    rel_l2: float | None = None
    error: str | None = None

    @property
    def changed(self) -> bool:
        """True when the tensors are known to differ (or could not be read)."""
        return self.status not in (SAME, NOT_COMPARED)

    def to_dict(self) -> dict:
        return {"name": self.name, "other": self.other, "status": self.status,
                "dtype_a": self.dtype_a, "dtype_b": self.dtype_b,
                "shape_a": list(self.shape_a), "shape_b": list(self.shape_b),
                "max_abs": json_float(self.max_abs), "rel_l2": json_float(self.rel_l2),
                "error": self.error}


@dataclass
class DiffReport:
    """Result of :func:`diff_checkpoints` or :func:`diff_ema`.

    Attributes:
        a, b: the two checkpoints (the same path for an EMA comparison).
        mode: ``"checkpoints"`` or ``"ema"``.
        only_a: keys only in A (for ``"ema"``: weights without a shadow).
        only_b: keys only in B (for ``"ema"``: shadows whose variable is not stored).
        tensors: one :class:`TensorDiff` per compared pair, sorted by name.
        assumed: (``"ema"``) what the pairing takes for granted that the file cannot prove
            (``"fit_order"``, ``"not_swapped"``: :mod:`~ckpt_tools.keras_assumed`).
    """

    a: str
    b: str
    mode: str
    only_a: list[str] = field(default_factory=list)
    only_b: list[str] = field(default_factory=list)
    tensors: list[TensorDiff] = field(default_factory=list)

    values: bool = True
    assumed: list[str] = field(default_factory=list)

    @property
    def identical(self) -> bool | None:
        """True when both sides hold the same keys with bit-identical values; ``None`` when
        that is unknown (values not compared, nothing else differs)."""
        if self.only_a or self.only_b or any(t.changed for t in self.tensors):
            return False
        if any(t.status == NOT_COMPARED for t in self.tensors):
            return None
        return True

    @property
    def unreadable(self) -> list[TensorDiff]:
        """Pairs whose values could not be read."""
        return [t for t in self.tensors if t.status == UNREADABLE]

    def counts(self) -> dict[str, int]:
        """How many pairs were paired, compared by value, same, different, not compared,
        unreadable, and only on one side (over every pair, whatever is shown)."""
        by = {s: 0 for s in (SAME, CHANGED, SHAPE, DTYPE, UNREADABLE, NOT_COMPARED)}
        for t in self.tensors:
            by[t.status] = by.get(t.status, 0) + 1
        return {"paired": len(self.tensors),
                "compared": len(self.tensors) - by[NOT_COMPARED] - by[UNREADABLE],
                "same": by[SAME], "differ": by[CHANGED] + by[SHAPE] + by[DTYPE],
                "not_compared": by[NOT_COMPARED], "unreadable": by[UNREADABLE],
                "only_a": len(self.only_a), "only_b": len(self.only_b)}

    def to_dict(self, changed_only: bool = False,
                paths: dict[str, str] | None = None) -> dict:
        """The ``ckpt diff --json`` document.

        Args:
            changed_only: list only pairs that differ (``counts`` still covers all).
            paths: display names (object paths) by key, added as ``path``/``other_path``.
        """
        paths = paths or {}
        tensors = []
        for t in self.tensors:
            if changed_only and not t.changed:
                continue
            d = t.to_dict()
            d["key"] = t.name
            d["path"] = paths.get(t.name) if paths.get(t.name) != t.name else None
            tensors.append(d)
        return {"a": self.a, "b": self.b, "mode": self.mode, "values": self.values,
                "identical": self.identical, "counts": self.counts(),
                "only_a": list(self.only_a), "only_b": list(self.only_b), "tensors": tensors}


def _numeric(arr: np.ndarray) -> bool:
    kind = arr.dtype.kind
    return kind in "biufc" or (kind == "V" and arr.dtype.name.startswith(("bfloat", "float",
                                                                          "int", "uint")))


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.array_equal(a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8)))


def compare_tensors(a: np.ndarray, b: np.ndarray, name: str, other: str | None = None,
                    dtype_a: str | None = None, dtype_b: str | None = None) -> TensorDiff:
    """Compares two arrays.

    Args:
        a (`np.ndarray`): the value in A.
        b (`np.ndarray`): the value in B.
        name (`str`): key in A.
        other (`str`, *optional*): key in B (defaults to ``name``).
        dtype_a, dtype_b (`str`, *optional*): TensorFlow dtype names to report (default: the
            NumPy names).

    Returns:
        `TensorDiff`: status and, for numeric tensors of one shape, the differences.

    Example:
        >>> compare_tensors(np.array([3.0, 4.0]), np.array([3.0, 4.5]), "w").rel_l2
        0.1
    """
    da, db = dtype_a or a.dtype.name, dtype_b or b.dtype.name
    base = {"name": name, "other": other or name, "dtype_a": da, "dtype_b": db,
            "shape_a": tuple(a.shape), "shape_b": tuple(b.shape)}
    if a.shape != b.shape:
        return TensorDiff(status=SHAPE, **base)
    status = DTYPE if da != db else None
    if not (_numeric(a) and _numeric(b)):
        same = da == db and bool(np.array_equal(a, b))
        return TensorDiff(status=status or (SAME if same else CHANGED), **base)
    if status is None and a.dtype == b.dtype and _same_bits(a, b):
        return TensorDiff(status=SAME, max_abs=0.0, rel_l2=0.0, **base)
    max_abs, rel = relative_l2(a, b)
    return TensorDiff(status=status or CHANGED, max_abs=max_abs, rel_l2=rel, **base)


def _read_pair(ca: Checkpoint, cb: Checkpoint, name: str, other: str,
               tick: ByteCounter) -> TensorDiff:
    ea, eb = ca.entry(name), cb.entry(other)
    try:
        if _streamable(ea, eb):
            return _stream_pair(ca, cb, name, other, ea, eb, tick)
        a, b = ca.tensor(name), cb.tensor(other)
        tick(_nbytes(ea) + _nbytes(eb))
    except CheckpointError as exc:
        return TensorDiff(name=name, other=other, status=UNREADABLE, dtype_a=ea.dtype_name,
                          dtype_b=eb.dtype_name, shape_a=ea.shape, shape_b=eb.shape,
                          error=str(exc))
    return compare_tensors(a, b, name, other, ea.dtype_name, eb.dtype_name)


def _nbytes(entry) -> int:
    return entry.stored_bytes or entry.nbytes


def _streamable(ea, eb) -> bool:
    """Same dtype and shape, numeric: chunks of both line up element for element."""
    if ea.dtype != eb.dtype or ea.shape != eb.shape or ea.dtype_name == "string":
        return False
    try:
        return _numeric(np.empty(0, numpy_dtype(ea.dtype)))
    except CheckpointError:  # resource/variant handles: reported by the whole-tensor path
        return False




def _stream_pair(ca: Checkpoint, cb: Checkpoint, name: str, other: str, ea, eb,
                 tick: ByteCounter) -> TensorDiff:
    """One pass over both tensors: each part CRC-checked as it is consumed, bit-identical
    parts skipped, the differences of the others accumulated."""
    acc = L2Accumulator(ea.dtype_name.startswith("complex"))
    for a, b in zip(ca.chunks(name, CHUNK_BYTES), cb.chunks(other, CHUNK_BYTES), strict=True):
        for start in range(0, a.size, CHUNK):
            acc.add(a[start : start + CHUNK], b[start : start + CHUNK])
        tick(a.nbytes + b.nbytes)
    base = {"name": name, "other": other, "dtype_a": ea.dtype_name, "dtype_b": eb.dtype_name,
            "shape_a": tuple(ea.shape), "shape_b": tuple(eb.shape)}
    if acc.identical:
        return TensorDiff(status=SAME, max_abs=0.0, rel_l2=0.0, **base)
    max_abs, rel = acc.result()
    return TensorDiff(status=CHANGED, max_abs=max_abs, rel_l2=rel, **base)


def _keep(name: str, match: Callable[[str], bool] | None) -> bool:
    return match is None or match(name)


def diff_checkpoints(a: str | os.PathLike | Checkpoint, b: str | os.PathLike | Checkpoint, *,
                     match: Callable[[str], bool] | None = None, values: bool = True,
                     progress: Callable[[int, int], None] | None = None) -> DiffReport:
    """Compares two checkpoints key by key.

    Args:
        a, b (`str` or `Checkpoint`): checkpoints (any path ``open_checkpoint`` accepts).
        match (`Callable[[str], bool]`, *optional*): compare only keys it accepts.
        values (`bool`, *optional*, defaults to `True`): read and compare tensor values; with
            False only names, shapes and dtypes are compared (status ``"not_compared"`` where
            they agree).
        progress (`Callable[[int, int], None]`, *optional*): called as
            ``progress(done_bytes, total_bytes)`` while tensors are read (both sides count).

    Returns:
        `DiffReport`.

    Raises:
        CheckpointNotFoundError, CorruptCheckpointError: if either checkpoint cannot be opened.

    Example:
        >>> r = diff_checkpoints("train/model.ckpt-20", "train/model.ckpt-30")  # doctest: +SKIP
        >>> [(t.name, t.rel_l2) for t in r.tensors if t.changed][:1]  # doctest: +SKIP
        [('conv1/weights', 0.013)]
    """
    # key by key, nothing paired: a meta-less http(s) checkpoint opens (defer_unknown)
    with _opened(a, defer_unknown=True) as ca, _opened(b, defer_unknown=True) as cb:
        keys_a = {k for k in ca.keys() if _keep(k, match)}
        keys_b = {k for k in cb.keys() if _keep(k, match)}
        report = DiffReport(a=ca.path, b=cb.path, mode="checkpoints",
                            only_a=sorted(keys_a - keys_b), only_b=sorted(keys_b - keys_a),
                            values=values)
        report.tensors = list(_pairs(ca, cb, [(k, k) for k in sorted(keys_a & keys_b)], values,
                                     progress))
    return report


def diff_ema(target: str | os.PathLike | Checkpoint, *,
             match: Callable[[str], bool] | None = None, values: bool = True,
             progress: Callable[[int, int], None] | None = None,
             pairs: dict[str, str] | None = None, ema_name: str | None = None,
             use_meta: bool = True, apply_order: str | None = None, strict: bool = False,
             **statements) -> DiffReport:
    """Compares every variable with its EMA shadow in one checkpoint.

    Args:
        target (`str` or `Checkpoint`): the checkpoint.
        match (`Callable[[str], bool]`, *optional*): compare only variables whose key (or
            shadow key) it accepts.
        values (`bool`, *optional*, defaults to `True`): compare values, not only shapes.
        progress (`Callable[[int, int], None]`, *optional*): ``progress(done_bytes,
            total_bytes)`` while tensors are read.
        pairs (`dict[str, str]`, *optional*): variable key -> average key, the pairing
            ``ckpt map`` proves with the caller's options (the CLI passes
            :func:`ckpt_tools.emamap.proven_pairs` with ``--ema-name``...); default: that
            pairing with ``ema_name``, ``use_meta`` and ``apply_order`` (``ckpt diff --ema``'s
            ``--ema-name``, ``--no-meta``, ``--apply-order``).
        strict (`bool`, *optional*): refuse a pairing that rests on an assumption the file
            cannot prove, as ``--strict`` (:mod:`~ckpt_tools.keras_assumed`).
        **statements: the file statements (``use_ema``, ``trainable``…: ``ckpt diff --ema
            --use-ema``…), as :mod:`~ckpt_tools.stated_open` takes them.

    Returns:
        `DiffReport` with mode ``"ema"``: ``tensors`` pairs raw (A) with shadow (B),
        ``only_a`` lists weights without a shadow (when any shadow exists), ``only_b`` shadows
        whose variable is not stored.

    Raises:
        CheckpointNotFoundError, CorruptCheckpointError: if the checkpoint cannot be opened.
        EmaError: the checkpoint holds no EMA shadow (there is nothing to compare).
        UnprovenPairingError: without ``pairs``, as ``ckpt diff --ema`` refuses: the file
            does not prove the pairing (:func:`ckpt_tools.ema_map`), or it assumes what no
            statement said (``not_swapped``; with ``strict``, anything).

    Example:
        >>> r = diff_ema("fixtures/linear_v2")
        >>> [(t.name, t.other) for t in r.tensors]
        [('W', 'W/ExponentialMovingAverage'), ('b', 'b/ExponentialMovingAverage')]
    """
    refuse_unknown("diff_ema", statements, target)
    with opened_stated(target, statements) as ckpt:
        variables = ckpt.variables_unwarned()
        # The CLI's order (review-16-attack-r34 F10): the pairing, then what it assumes.
        paired = pairs if pairs is not None else _proven(
            ckpt, variables, ema_name=ema_name, use_meta=use_meta, apply_order=apply_order)
        assumed = [] if pairs is not None else _assumed(ckpt, strict)
        # an average of a variable not stored (a TF1 Saver of the averages alone) has no raw
        # value to compare with: listed in only_b
        lone = {e for k, e in paired.items() if k not in ckpt}  # w/slow too: no name marks it
        paired = {k: e for k, e in paired.items() if k in ckpt}
        pairs = [(k, e) for k, e in paired.items() if _keep(k, match) or _keep(e, match)]
        shadows = [v for v in variables if v.role == "ema" or v.name in lone]
        if not shadows and not paired:
            raise EmaError(f"{ckpt.path}: no EMA shadow in this checkpoint, so there is "
                           "nothing to compare raw weights with (see 'ckpt list --role ema')")
        report = DiffReport(a=ckpt.path, b=ckpt.path, mode="ema", values=values,
                            assumed=[a.name for a in assumed])
        used = set(paired.values())  # a swapping Saver's W holds the average compared
        if shadows:
            report.only_a = [v.name for v in variables
                             if v.role == "weight" and v.name not in paired
                             and v.name not in used and _keep(v.name, match)]
        report.only_b = [v.name for v in shadows
                         if v.name not in used and v.ema_of not in ckpt and _keep(v.name, match)]
        report.tensors = list(_pairs(ckpt, ckpt, sorted(pairs), values, progress))
    return report


def _assumed(ckpt: Checkpoint, strict: bool = False) -> list:
    """What the pairing of ``ckpt`` assumes, issued as an
    :class:`~ckpt_tools.errors.AssumptionWarning` at :func:`diff_ema`'s caller."""
    from .keras_assumed import keras_assumptions, refuse_assumed, warn_assumed

    assumed = keras_assumptions(ckpt)
    refuse_assumed(ckpt, assumed, strict=strict)  # not_swapped: never by default
    warn_assumed(ckpt, assumed, stacklevel=4)
    return assumed


def _proven(ckpt: Checkpoint, variables, **options) -> dict[str, str]:
    """The pairing ``ckpt map`` proves with ``options`` (variable key -> average key); a
    Keras file without averages has none to prove (its variables hold no shadow either).

    Raises:
        UnprovenPairingError: the file does not prove it.
    """
    try:
        return proven_pairs(ckpt, **options)
    except UnprovenPairingError:
        raise
    except EmaError:
        return {v.name: v.ema for v in variables if v.ema}


def _pairs(ca: Checkpoint, cb: Checkpoint, pairs, values: bool,
           progress: Callable[[int, int], None] | None = None,
           workers: int | None = None) -> Iterator[TensorDiff]:
    if not values:
        for name, other in pairs:
            ea, eb = ca.entry(name), cb.entry(other)
            status = SHAPE if ea.shape != eb.shape else DTYPE if ea.dtype != eb.dtype \
                else NOT_COMPARED
            yield TensorDiff(name=name, other=other, status=status, dtype_a=ea.dtype_name,
                             dtype_b=eb.dtype_name, shape_a=ea.shape, shape_b=eb.shape)
        return
    total = sum(_nbytes(ca.entry(n)) + _nbytes(cb.entry(o)) for n, o in pairs)
    tick = ByteCounter(progress, total)
    yield from ordered_map(lambda pair: _read_pair(ca, cb, pair[0], pair[1], tick), pairs,
                           workers=workers,  # small pairs share a thread hand-off
                           cost=lambda pair: _nbytes(ca.entry(pair[0])) + _nbytes(
                               cb.entry(pair[1])))


class _opened:
    """Context manager: opens a path, or borrows an already open checkpoint (left open)."""

    def __init__(self, target, **options):
        self.target = target
        self.owned = not isinstance(target, Checkpoint)
        self.options = options

    def __enter__(self) -> Checkpoint:
        self.ckpt = open_checkpoint(self.target, **self.options) if self.owned else self.target
        return self.ckpt

    def __exit__(self, *exc) -> None:
        if self.owned:
            self.ckpt.close()

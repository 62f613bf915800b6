"""Statistics of whole checkpoints (``ckpt stats``): every tensor's summary, its EMA drift,
streamed part by part with a progress count over bytes.

The per-tensor reductions are in :mod:`ckpt_tools.tensor_stats`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from .checkpoint import CHUNK_BYTES, Checkpoint, Variable
from .ema_decide import decide_pairing
from .errors import CheckpointError
from .formats.dtypes import numpy_dtype
from .kernels import L2Accumulator
from .parallel import ordered_map
from .stated_open import opened_stated, refuse_unknown
from .tensor_stats import (
    BINS,
    TensorStats,
    dtype_facts,
    json_float,
    numeric_stats,
    tensor_stats,
)

NAN, INF, DRIFT, UNREADABLE = "nan", "inf", "drift", "unreadable"
# An EMA shadow whose own bytes were read (its statistics stand) but whose variable's were
# not: no drift (review-22-user-u24 F6)
NO_DRIFT = "drift: variable unreadable"


class _PartnerUnreadable(Exception):
    """The drift partner's read failed, not the shadow's own (:func:`_tensor_pass`)."""


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
        flags: any of ``"nan"``, ``"inf"``, ``"drift"`` (over the threshold), ``"unreadable"``,
            ``"drift: variable unreadable"`` (an EMA shadow read whole whose variable could
            not be read: its statistics stand, its drift is ``None``).
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


def checkpoint_stats(ckpt: Checkpoint | str, names: list[str] | None = None, *,
                     drift_threshold: float = 0.5, strict: bool = False,
                     progress: Callable[[int, int], None] | None = None,
                     workers: int | None = None,
                     variables: list[Variable] | None = None,
                     histogram: bool = False, **statements) -> Iterator[StatsRecord]:
    """Yields a :class:`StatsRecord` per tensor, in order, streaming each tensor once.

    Each tensor is read in one pass of chunks (CRC-checked as they are consumed, statistics
    fused); an EMA shadow's drift is computed in that same pass, reading its raw variable
    alongside. Tensors are processed on ``workers`` threads (default: one per core), a few at
    a time, so memory stays at a few chunks per thread.

    Args:
        ckpt (`Checkpoint` or `str`): an open checkpoint, or a path (open while iterating).
        names (`list[str]`, *optional*): keys to summarise (default: all, in key order).
        drift_threshold (`float`, *optional*, defaults to `0.5`): flag EMA shadows whose
            relative L2 distance from their raw variable exceeds this.
        strict (`bool`, *optional*, defaults to `False`): raise on unreadable tensors instead
            of yielding a record flagged ``"unreadable"``.
        progress (`Callable[[int, int], None]`, *optional*): called as
            ``progress(done_bytes, total_bytes)`` while tensors are read (from worker threads,
            one call at a time).
        workers (`int`, *optional*): threads (1 = everything on the calling thread).
        variables (`list[Variable]`, *optional*): the variables with the pairing to report,
            as :func:`ckpt_tools.ema_decide.decide_pairing` gives them (the CLI passes those its
            ``--ema-name``/``--apply-order``/``--no-meta`` decide); default: that function's
            pairing without options. An average whose pairing the file does not prove has
            no ``ema_of`` and no drift.
        histogram (`bool`, *optional*, defaults to `False`): also count each tensor's
            histogram (:attr:`TensorStats.histogram`, otherwise ``None``). Its bins depend
            on the range, so it takes a second pass over every tensor with finite values,
            about five times the cost of the verified read itself: off unless asked for.
        **statements: the file statements (``use_ema``, ``trainable``…: ``ckpt stats
            --use-ema``…), as :mod:`~ckpt_tools.stated_open` takes them.

    Returns:
        `Iterator[StatsRecord]`.

    Raises:
        VariableNotFoundError: if a name is not stored.
        CheckpointError: with ``strict``, if a tensor cannot be read.

    Example:
        >>> from ckpt_tools import open_checkpoint
        >>> with open_checkpoint("fixtures/linear_v2") as ckpt:
        ...     [r.name for r in checkpoint_stats(ckpt) if "drift" in r.flags]
        ['W/ExponentialMovingAverage']
    """
    refuse_unknown("checkpoint_stats", statements, ckpt)
    with opened_stated(ckpt, statements) as ckpt:
        yield from _stats(ckpt, names, drift_threshold, strict, progress, workers, variables,
                          histogram)


def _stats(ckpt, names, drift_threshold, strict, progress, workers, variables, histogram):
    if variables is None:
        variables = decide_pairing(ckpt)[0]
    variables = {v.name: v for v in variables}
    keys = [k for k in ckpt.keys() if k not in ckpt.aliases()] if names is None else list(names)
    for name in keys:
        ckpt.entry(name)  # unknown names fail now, not on a worker thread
    tick = ByteCounter(progress, sum(_nbytes(ckpt.entry(k)) for k in keys))

    # Over a URL, the shards learn the reads to come: an EMA shadow reads its variable again
    # (for the drift), the histogram reads each tensor twice; kept until then, not fetched
    # twice however the worker threads interleave.
    ckpt.plan_reads([read for name in keys for read in _reads(ckpt, name, variables.get(name),
                                                              histogram)])
    # A shadow's variable that has its own record here is read for the drift unverified (its
    # record checks its CRC: one pass, commit 6a0ff4a); the shadow's record then waits for
    # that verdict. A variable not listed is verified where the shadow reads it.
    listed = set(keys)
    checked_by = {name: raw for name in keys
                  if (raw := _partner(ckpt, name, variables.get(name))) in listed}

    def one(name: str) -> StatsRecord:  # raises (with strict) when this item's turn comes
        return _record(ckpt, name, variables.get(name), drift_threshold, strict, tick,
                       histogram, verify_partner=name not in checked_by)

    yield from _drift_checked(ordered_map(one, keys, workers=workers,  # small tensors share
                                          cost=lambda name: _nbytes(ckpt.entry(name))),
                              checked_by)


def _partner(ckpt: Checkpoint, name: str, var) -> str | None:
    """:func:`_drift_partner` of ``name`` as :func:`_record` finds it."""
    entry = ckpt.entry(name)
    if entry.dtype_name == "string":
        return None
    return _drift_partner(ckpt, var.role if var else "other", var.ema_of if var else None,
                          entry)


def _drift_checked(records: Iterator[StatsRecord],
                   checked_by: dict[str, str]) -> Iterator[StatsRecord]:
    """Yields ``records`` in their order, each shadow in ``checked_by`` (shadow -> variable
    read unverified for its drift) once its variable's record is out: where that record
    failed its check, the drift came from damaged bytes, so it is dropped and flagged
    :data:`NO_DRIFT` (the shadow's own statistics, CRC-checked, stand).

    Returns:
        `Iterator[StatsRecord]`.
    """
    import collections
    from dataclasses import replace

    seen: set[str] = set()
    failed: set[str] = set()
    held: collections.deque[StatsRecord] = collections.deque()
    for record in records:
        seen.add(record.name)
        if record.error:
            failed.add(record.name)
        held.append(record)
        while held and checked_by.get(held[0].name, held[0].name) in seen:
            out = held.popleft()
            if checked_by.get(out.name) in failed and out.stats is not None \
                    and NO_DRIFT not in out.flags:
                out = replace(out, drift=None, flags=tuple(
                    f for f in out.flags if f != DRIFT) + (NO_DRIFT,))
            yield out
    yield from held  # nothing waits past the last record: every variable waited on is listed


def _reads(ckpt: Checkpoint, name: str, var, histogram: bool) -> list[str]:
    """The tensors :func:`_record` reads for ``name``, in its order."""
    entry = ckpt.entry(name)
    if entry.dtype_name == "string":
        return [name]
    raw = _drift_partner(ckpt, var.role if var else "other", var.ema_of if var else None,
                         entry)
    return ([raw] if raw else []) + [name] * (1 + histogram)


def _nbytes(entry) -> int:
    return entry.stored_bytes or entry.nbytes


class ByteCounter:
    """Serializes ``progress(done_bytes, total_bytes)`` calls from several threads."""

    def __init__(self, progress: Callable[[int, int], None] | None, total: int):
        self.progress, self.total, self.done = progress, total, 0
        self.lock = threading.Lock()

    def __call__(self, nbytes: int) -> None:
        if self.progress is None or not nbytes:
            return
        with self.lock:
            self.done += nbytes
            self.progress(self.done, self.total)


def _record(ckpt: Checkpoint, name: str, var, drift_threshold: float, strict: bool,
            tick: ByteCounter, histogram: bool, verify_partner: bool = True) -> StatsRecord:
    entry = ckpt.entry(name)
    role = var.role if var else "other"
    ema_of = var.ema_of if var else None
    base = {"name": name, "dtype": entry.dtype_name, "shape": entry.shape, "role": role,
            "ema_of": ema_of}
    lost = False
    try:
        try:
            stats, drift = _tensor_pass(ckpt, name, role, ema_of, tick, histogram,
                                        verify_partner)
        except _PartnerUnreadable:
            # the variable's bytes failed, not the shadow's: its statistics without the
            # drift (the variable's own record, where listed, reports the error once)
            stats, drift = _tensor_pass(ckpt, name, role, None, tick, histogram)
            lost = True
    except CheckpointError as exc:
        if strict:
            raise
        return StatsRecord(stats=None, flags=(UNREADABLE,), error=str(exc), **base)
    flags = [f for f, n in ((NAN, stats.nan), (INF, stats.inf)) if n]
    if lost:
        flags.append(NO_DRIFT)
    if drift is not None and not drift <= drift_threshold:  # NaN drift is flagged too
        flags.append(DRIFT)
    return StatsRecord(stats=stats, drift=drift, flags=tuple(flags), **base)


def _tensor_pass(ckpt: Checkpoint, name: str, role: str, ema_of: str | None,
                 tick: ByteCounter, histogram: bool,
                 verify_partner: bool = True) -> tuple[TensorStats, float | None]:
    """One streamed pass over ``name``: its statistics and, for an EMA shadow, its drift
    from ``ema_of`` (read alongside, CRC-checked only where ``verify_partner``).

    Returns:
        `tuple[TensorStats, float | None]`.

    Raises:
        CheckpointError: ``name`` cannot be read.
        _PartnerUnreadable: ``ema_of`` cannot be read.
    """
    entry = ckpt.entry(name)
    if entry.dtype_name == "string":
        value = ckpt.tensor(name)
        tick(_nbytes(entry))
        return tensor_stats(value), None
    raw = _drift_partner(ckpt, role, ema_of, entry)
    drift = (L2Accumulator(entry.dtype_name.startswith("complex"), extremes=False)
             if raw is not None else None)

    def pairs() -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
        if raw is None:
            for part in ckpt.chunks(name, CHUNK_BYTES):
                tick(part.nbytes)
                yield part, None
            return
        try:
            # The raw variable first: it was read just before (its own record, verified
            # there), so a remote shard still holds it; then the shadow, in storage order.
            partner = _partner_chunks(ckpt, raw, verify_partner)
            for ref, part in zip(partner, ckpt.chunks(name, CHUNK_BYTES), strict=True):
                tick(part.nbytes)
                yield part, ref
        except ValueError:  # zip: the partner's chunks do not line up (cannot happen for
            raise CheckpointError(f"{ckpt.path}: {raw} and {name} differ in size") from None

    def again() -> Iterator[np.ndarray]:  # the histogram's pass: bytes already verified
        return ckpt.chunks(name, CHUNK_BYTES, verify=False)

    dtype = numpy_dtype(entry.dtype)
    with np.errstate(all="ignore"):
        stats = numeric_stats(pairs(), again if histogram else None, dtype,
                               tuple(entry.shape), dtype_facts(dtype)[1], BINS, drift)
    return stats, drift.result()[1] if drift is not None else None




def _partner_chunks(ckpt: Checkpoint, raw: str, verify: bool) -> Iterator[np.ndarray]:
    """``raw``'s chunks, a failed read raised as :class:`_PartnerUnreadable` (the shadow read
    beside it is not the one at fault)."""
    try:
        yield from ckpt.chunks(raw, CHUNK_BYTES, verify=verify)
    except CheckpointError as exc:
        raise _PartnerUnreadable(str(exc)) from exc


def _drift_partner(ckpt: Checkpoint, role: str, ema_of: str | None, entry) -> str | None:
    """The raw variable an EMA shadow drifts from, when both can be compared element-wise."""
    if role != "ema" or not ema_of or ema_of not in ckpt:
        return None
    raw = ckpt.entry(ema_of)
    if raw.shape != entry.shape or raw.dtype != entry.dtype or raw.dtype_name == "string":
        return None
    return ema_of


def select_keys(ckpt: Checkpoint, patterns: list[str]) -> list[str]:
    """Resolves user-typed names to checkpoint keys, in the order given, without duplicates.

    Each pattern is an exact key, a TF2 object path (``model/dense/kernel``), or a glob
    (``conv*/weights``) matched against keys and object paths.

    Args:
        ckpt (`Checkpoint` or `str`): an open checkpoint, or a path (open while iterating).
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
    from .order_marks import marked_paths
    from .stats_names import not_found

    by_path = {v.path: v.name for v in ckpt.variables_unwarned() if v.path}
    for key, bare in marked_paths(ckpt).items():  # 'adam/b_average?' typed without its '?'
        by_path.setdefault(bare, key)  # (u33 F6)
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
            raise not_found(ckpt, pattern, by_path)
    return list(out)

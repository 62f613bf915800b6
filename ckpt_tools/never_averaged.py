"""Keys named as averages of a variable that the ``.meta``'s graph shows no EMA object
averaging under that name (review-29-attack-r108 F1).

``ema = ExponentialMovingAverage(0.5)`` with ``ema.apply([w, b])`` beside a trainable ``c``:
an evaluation graph restores with ``Saver(ema.variables_to_restore([w, b]))`` and saves again
with ``Saver(ema.variables_to_restore())``, whose default maps every trainable, so it writes
raw ``c`` under ``c/ExponentialMovingAverage``. ``--averages-only`` (and the renamed layout's
``--no-meta --averages-only`` offer) read that key as ``c``'s average, exit 0. The graph
records what it holds: its update ops write no average of ``c`` under that name and it has no
such shadow variable, so whatever graph saved it, the key holds ``c``'s raw (or initial)
value. Such a key is never paired as an average on a statement; the refusal offers
``--exclude`` of it.
"""

from __future__ import annotations

from .checkpoint import Checkpoint
from .ema_refusals import UnprovenPairingError
from .ema_updates import part_update_ops
from .save_op import written_sources
from .saved_keys import PART


def _whole(name: str) -> str:
    """``name`` with its ``/part_N`` parts dropped (a partitioned variable's own name)."""
    return PART.sub("", name)


def _named_average(key: str, var: str) -> str:
    """The EMA name ``key`` carries after ``var`` (``model/c/ExponentialMovingAverage`` of
    ``c``: ``ExponentialMovingAverage``); ``""`` where ``key`` is not named as an average of
    ``var``."""
    if key.startswith(var + "/"):
        return key[len(var) + 1:]
    at = key.find("/" + var + "/")
    return key[at + len(var) + 2:] if at >= 0 else ""


def never_averaged(ckpt: Checkpoint) -> dict[str, str]:
    """Keys named as the average of the variable the ``.meta``'s save op wrote them from
    (``c/ExponentialMovingAverage`` written from ``c``) where the graph shows no average of
    that name: no ``AssignMovingAvg`` update op writes a shadow of that variable ending in
    ``<variable>/<name>`` and no graph variable is so named.

    Returns:
        key -> the graph variable it was written from; ``{}`` without a ``.meta`` whose save
        op and update ops are read (a graph that builds no ``ema.apply()`` proves nothing).
        Computed once per open checkpoint (callers must not change it).
    """
    if ckpt.objects is not None or ckpt.meta is None:
        return {}
    return ckpt.memo("never_averaged", lambda: _never_averaged(ckpt))


def _never_averaged(ckpt: Checkpoint) -> dict[str, str]:
    """:func:`never_averaged`, computed."""
    got = part_update_ops(ckpt)
    sources = written_sources(ckpt)
    if got is None or not got[0].averages or not sources:
        return {}
    # every shadow or graph variable name and each of its tails after a "/": "<var>/<name>"
    # is among them exactly where some name is it or ends in "/<var>/<name>" (a set, not a
    # scan of every name per key: 2,000 keys by 4,000 names took ~15 s)
    tails: set[str] = set()
    for name in {_whole(s) for s in got[0].averages} | {_whole(v) for v in ckpt.meta.variables}:
        tails.add(name)
        at = name.find("/")
        while at >= 0:
            tails.add(name[at + 1:])
            at = name.find("/", at + 1)
    found: dict[str, str] = {}
    for key, src in sources.items():
        wrote = {_whole(s) for s in src}
        if len(wrote) != 1:
            continue
        var = next(iter(wrote))
        name = _named_average(key, var)
        if name and f"{var}/{name}" not in tails:
            found[key] = var
    return found


def exclude_text(keys) -> str:
    """The ``--exclude`` options leaving ``keys`` out, as typed (sorted)."""
    return " ".join(f"--exclude '{k}'" for k in sorted(keys))


def refuse_never_averaged(ckpt: Checkpoint, pairs: list[tuple[str, str]],
                          left_out=None) -> None:
    """Refuses a stated ``--averages-only`` pairing (``ckpt.averages_only``) that reads a
    :func:`never_averaged` key as an average: the statement covers what the file cannot show
    (a training or an evaluation graph's re-save), never what the graph records.

    Args:
        pairs: ``(average key, variable key)``; a variable paired with itself is raw.
        left_out: ``left_out(key, variable)``, whether the caller's filters drop that pair.

    Raises:
        UnprovenPairingError: (exit 6, ``--exclude``) naming the keys, the variable each was
            written from, and the ``--exclude`` options that leave them out.
    """
    if not ckpt.averages_only:
        return
    never = never_averaged(ckpt)
    if not never:
        return
    bad = sorted({s for s, t in pairs if s != t and s in never
                  and not (left_out is not None and left_out(s, t))})
    if not bad:
        return
    k = bad[0]
    raise UnprovenPairingError(
        f"{ckpt.path}: --averages-only states that keys named as averages hold averages, but "
        f"{len(bad)} of them carry a name no EMA object of the graph writes, e.g. {k}: the .meta's "
        f"save op wrote it from {never[k]} itself and its update ops write no average of "
        f"{never[k]} under that name (a Saver of ema.variables_to_restore() maps every "
        "trainable variable, averaged or not), so it holds the raw value whichever graph "
        f"saved it: pass {exclude_text(bad)} (Python: exclude=[...]) to leave "
        f"{'them' if len(bad) > 1 else 'it'} out",
        "--exclude", {s: (never[s],) for s in bad}, tuple(bad))

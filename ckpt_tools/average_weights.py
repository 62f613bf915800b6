"""What the keys named as variables of ``ckpt average``'s inputs and output hold: raw weights,
or the averages a writer of ours put there (the mark's ``weights``:
:func:`~ckpt_tools.tools_mark.with_weights`).

A TF checkpoint ``ckpt restore-ema`` (or ``ckpt average --ema --bake``) wrote looks like any
other: its plain names hold the averages, its keys named as averages too. A plain average of
it with a raw checkpoint of the same run wrote the mean of one save's raw weight and the
other's average under the plain name, exit 0, and ``export --raw`` labelled it raw
(review-33-attack-r128 F1). Its mark now says what its plain names hold: inputs that disagree
are refused (:func:`refuse_mixed_weights`), and the output says what its own hold
(:func:`output_weights`).
"""

from __future__ import annotations

from .errors import EmaError
from .tools_mark import RECORD_KEY
from .weights_mark import raw_weights, weights_averaged, weights_ema_name, with_weights

__all__ = ["output_weights", "refuse_mixed_weights"]


def _held(ckpt) -> tuple[str | None, frozenset[str]]:
    """(who wrote averages into ``ckpt``'s plain names, or ``None`` where they are as saved;
    the plain names it left raw)."""
    mark = getattr(ckpt, "tools_mark", None)
    return weights_averaged(mark), frozenset(raw_weights(mark))


def _refuse_other_objects(ckpts) -> None:
    """Refuses inputs whose plain names hold averages of differently named EMA objects
    (``restore-ema --ema-name fast`` and ``--ema-name slow`` of one save): their mean is no
    average any object kept (review-33-attack-r128 F1, two objects)."""
    named = [(c, weights_ema_name(getattr(c, "tools_mark", None))) for c in ckpts]
    named = [(c, n) for c, n in named if n]
    for c, n in named[1:]:
        if n != named[0][1]:
            raise EmaError(
                f"{named[0][0].path}: its {RECORD_KEY} key says its keys named as variables "
                f"hold the averages of EMA object {named[0][1]!r}, and {c.path}'s those of "
                f"{n!r}: a plain average would write the mean of two EMA objects' averages "
                "under one name; average checkpoints written with one --ema-name, or the EMA "
                "averages of one object with --ema --bake --ema-name")


def refuse_mixed_weights(ckpts, ema: bool) -> None:
    """Refuses a plain average (``ema`` false: every float averaged under its own name) of
    inputs whose keys named as variables hold different things: one's the averages a writer
    of ours put there, another's the raw weights (or the same averages but other keys left
    raw). ``--ema`` averages only the keys named as averages, which hold the averages in
    both, and ``--ema --bake`` writes their mean under the plain names too.

    Raises:
        EmaError: (exit 6) naming both inputs, what each holds, and ``--ema --bake``.
    """
    if ema:
        return
    _refuse_other_objects(ckpts)
    first = _held(ckpts[0])
    for c in ckpts[1:]:
        held = _held(c)
        if (bool(held[0]), held[1]) == (bool(first[0]), first[1]):  # whoever wrote them
            continue
        a, b = (ckpts[0], c) if first[0] else (c, ckpts[0])
        by, raw = _held(a)
        other = _held(b)
        if other[0]:  # both averages, other keys left raw
            left = sorted(raw ^ other[1])
            said = (f"both hold averages under their keys named as variables, but "
                    f"{left[0]!r} holds the raw weight in one of them (left out by a filter)")
        else:
            said = (f"its {RECORD_KEY} key says {by} wrote the averages into its keys named "
                    f"as variables, which hold the raw weights in {b.path}")
        raise EmaError(
            f"{a.path}: {said}: a plain average would write the mean of one checkpoint's "
            "averages and another's raw weights under one name; average the EMA averages "
            "with --ema --bake (their mean under both names; --ema alone keeps the newest "
            "input's keys named as variables)")


def output_weights(mark: dict | None, ckpts, ema: bool, bake: bool,
                   source_of: dict[str, str], ema_name: str | None = None) -> dict | None:
    """``mark`` (the average's, :func:`~ckpt_tools.average_write.average_mark`) saying too
    what the output's keys named as variables hold: the averages where ``--ema --bake`` wrote
    them (``source_of``: key -> the key averaged into it), where ``--ema`` copied them from
    the newest input that holds averages there, or where every input of a plain average
    does (:func:`refuse_mixed_weights` refused the others); ``ema_name``: the EMA object
    ``--ema --bake`` was told to read (``--ema-name``).

    Returns:
        `dict`, or ``None`` where there is nothing to say.
    """
    if ema and bake:
        baked = any(s != t for t, s in source_of.items())
        return with_weights(mark, "ckpt average", (), ema_name) if baked else mark
    by, raw = _held(ckpts[-1])  # --ema: copied from the newest; plain: alike in every input
    name = weights_ema_name(getattr(ckpts[-1], "tools_mark", None))
    return with_weights(mark, "ckpt average", raw, name) if by else mark

"""Keras ``use_ema`` weights of equal shapes, whose EMA copies are paired by position (fit()'s
order): :func:`equal_groups` finds them, :func:`fit_order_note` says a stated ``--fit-order``
decided their pairing, :func:`trading_group` names the first group that could trade copies.

Moved out of :mod:`ckpt_tools.keras_assumed` (which builds the assumptions and refusals from
these and still answers ``equal_groups`` and ``fit_order_note``) to keep that module to one
concern.
"""

from __future__ import annotations

from .checkpoint import Checkpoint
from .keras_order_values import unchecked


def equal_groups(ckpt: Checkpoint) -> list[tuple[tuple, str, list[str]]]:
    """The weights of a Keras file that share a shape and dtype and get their EMA copies by
    position (``pairs``' weights not paired by a ``--trainable`` statement), in build order.

    Returns:
        `list` of ``(shape, dtype name, [weight keys])``, one per group of two or more; empty
        for other files and for a legacy ``.h5`` (its copies' names pair them).
    """
    layout = getattr(ckpt.reader, "keras", None)
    if layout is None or not layout.averages or layout.kind == "legacy":
        # A legacy .h5 names each copy after its weight (Adam/average/d1/kernel): a copy is
        # paired by a name only one weight has, by --trainable where several have it
        # (stated_pairs), or not at all; never by position (review-12-attack-r18 F2).
        return []
    entries = ckpt.entries()
    groups: dict[tuple, list[str]] = {}
    for a, w in layout.averages.items():
        if w is not None and w in entries and a not in layout.stated_pairs:
            e = entries[w]
            groups.setdefault((tuple(e.shape), e.dtype_name), []).append(w)
    return [(shape, dtype, ws) for (shape, dtype), ws in groups.items() if len(ws) > 1]


def fit_order_note(ckpt: Checkpoint) -> str:
    """The note for a stated ``--fit-order`` (``fit_order=True``) where it decides a pairing:
    a Keras ``use_ema`` file with weights of equal shapes paired by position.

    Returns:
        `str`: the note, or ``""`` where ``--fit-order`` decides nothing.
    """
    layout = getattr(ckpt.reader, "keras", None)
    groups = equal_groups(ckpt) if ckpt.fit_order and layout is not None \
        and layout.use_ema else []
    if not groups:
        return ""
    n = sum(len(ws) for _s, _d, ws in groups)
    record = getattr(ckpt, "fit_order_record", None)
    if record:  # ckpt train built its optimizer with model.trainable_variables (run_record)
        return (f"the EMA copies of {n} weights of equal shapes are paired in fit()'s order "
                f"(model.trainable_variables) because ckpt train's run record {record} states "
                "it (it built this file's optimizer so, bytes unchanged), as --fit-order "
                "states it")
    return (f"the EMA copies of {n} weights of equal shapes are paired in fit()'s order "
            "(model.trainable_variables) because you stated --fit-order; the file cannot show "
            "it, so this is your statement, not a proof: if a custom loop's first "
            "apply_gradients() listed them otherwise these averages are on the wrong weights")


def trading_group(ckpt: Checkpoint, groups: list[tuple[tuple, str, list[str]]]) -> str:
    """The first group of weights that could trade copies (an unchecked one where there is
    one), in a few words (bounded: long names cut), for the ``fit_order`` note
    (review-11-user-r12 F1)."""
    paths = ckpt.reader.keras.paths

    def name(k: str) -> str:
        p = paths.get(k, k)
        return p if len(p) <= 48 else p[:22] + "..." + p[-22:]

    # Groups whose values were not compared (too small, noise-level: keras_order_values) are
    # said so: their copies' trade is refused nowhere (review-21-user-u23 F4). One of them is
    # named first, since nothing checked it: the copies a loop traded between two Dense(8)
    # biases were exported while the note named the kernels the values had checked
    # (review-32-user-u34 F1).
    why = unchecked(ckpt)
    groups = sorted(groups, key=lambda g: g[2][0] not in why)  # stable: build order kept
    shape, dtype, ws = groups[0]
    shown = " and ".join(map(name, ws[:2])) + (f" (and {len(ws) - 2} more)" if ws[2:] else "")
    more = len(groups) - 1
    dims = "[" + ",".join(map(str, shape)) + "]"  # a shape as list's column shows it, not a count
    first = f" unchecked ({why[ws[0]]})" if ws[0] in why else ""
    others = sum(gw[0] in why for _s, _d, gw in groups[1:])
    return (f"{shown} ({dims} {dtype}) could trade EMA copies{first}"
            + (f", and {more} more group{'s' if more > 1 else ''} of weights" if more else "")
            + (f" ({others} unchecked)" if others else "") + ": ")

"""``ckpt average`` of TF1 checkpoints saved without their own ``.meta`` beside another
checkpoint's graph of their prefix whose ``Saver`` keyed variables under other variables'
names (review-32-attack-r121 F4).

A ``Saver({"a": w, "c": b, "a/ExponentialMovingAverage": ema.average(w), ...})`` names its
keys by a dict the training code builds, which can change between saves (``{"a": b, "c": w}``
at a later one). Where every input has its own ``.meta``, :mod:`~ckpt_tools.average_held`
compares the save ops; where only another checkpoint's graph of their prefix shows the dict
(the "graph at the first save only" habit), nothing proves which variable any key held at each
save: the plain average (the doubt carried, :mod:`~ckpt_tools.average_doubt`) wrote the mean
of w's and b's averages under ``a``, exit 0, and ``--ema --bake --not-swapped`` (a true
statement: no average was swapped with its weight) baked it as a's EMA value. So such inputs
are refused, whatever is stated. A swapping Saver (a key named as its own variable's average,
or the reverse) names its variable, and is carried as before.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from .checkpoint import Checkpoint
from .errors import UnprovenPairingError

__all__ = ["refuse_renamed_doubt"]


def _renaming(ckpt: Checkpoint, keys: set[str]) -> tuple[str, str, list[str]] | None:
    """``(graph file, key, its sources)`` for the first of ``keys`` that a doubting graph of
    ``ckpt``'s prefix records its save op wrote from a variable the key does not name; ``None``
    where none does (or ``ckpt`` is not doubted)."""
    from .meta_sibling import siblings
    from .sibling_roles import names_another_variable

    if not getattr(ckpt, "meta_doubt", ()):
        return None
    for sibling in siblings(ckpt.path, ckpt.entries()):
        for sources, nodes in sibling.saves:
            for key in sorted(k for k in sources if k in keys):
                if names_another_variable(key, sources[key], nodes):
                    return sibling.path, key, list(sources[key])
    return None


def refuse_renamed_doubt(ckpts: list[Checkpoint], keys: Iterable[str]) -> None:
    """Refuses averaging ``ckpts`` where one has no ``.meta`` of its own and another graph of
    its prefix records a ``Saver`` that wrote one of ``keys`` (the floating-point keys) from a
    variable of another name: the dict that named the keys may have changed between the
    saves, and no file shows it for that input.

    Raises:
        UnprovenPairingError: (exit 6, ``option`` ``None``) naming the input, the graph, the
            key and the variable written under it.
    """
    keys = set(keys)
    for ckpt in ckpts:
        found = _renaming(ckpt, keys)
        if found is None:
            continue
        path, key, sources = found
        wrote = " + ".join(repr(s) for s in sorted(sources))
        raise UnprovenPairingError(
            f"{ckpt.path}: it has no .meta of its own, and {os.path.basename(path)}, the graph "
            f"of another checkpoint of its prefix, records a Saver that wrote {key!r} from "
            f"variable {wrote}: a var_list dict names these keys, and it may have changed "
            "between the saves, which no file shows for this checkpoint, so averaging by key "
            "could mix different variables' values: refused; average only checkpoints that "
            "each have their own .meta, or of a Saver keying each variable under its own name "
            "(no option decides)", option=None)

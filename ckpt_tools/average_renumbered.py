"""``ckpt average`` of TF2 saves whose recorded names another process numbered otherwise
(review-32-attack-r120 F3): a run resumed in a new process that built something first (an
evaluation copy of the model with its own EMA, a throwaway Keras model) records the same
holders under names TF / Keras numbered on: ``w/ExponentialMovingAverage_1`` for
``w/ExponentialMovingAverage``, ``sequential_1/dense_2/kernel`` for ``sequential/dense/kernel``,
``adam_1/sequential_1_dense_2_kernel_average``. Requiring equal ``full_name`` refused every such
run with "the holders changed".

Where the two inputs record different SETS of names (a permutation of one set is a reordered
list or swapped objects and stays refused by :mod:`~ckpt_tools.average_held`), a key is
accepted only where:

- its two names are equal once every ``_N`` counter TF / Keras append (``_1`` before a ``_``, a
  ``/`` or the end) is stripped; a name recorded in one input only is no match;
- the counters keep their order: among the keys whose names strip to one name, each counter
  position maps the older input's values onto the newest's strictly increasing (equal stays
  equal). TF and Keras number objects in the order a process makes them, so the same code run
  again numbers the same holders in the same order; ``layers=[l1, l2]`` rebuilt as
  ``[l2, l1]`` (``dense_1`` where ``dense`` was) breaks that order and is refused;
- each average key's weight, as each input's own EMA map proves it
  (:func:`~ckpt_tools.emamap.proven_pairs`, the command's own statements), is the same key in
  both, where both maps can be built.

What stays undetectable (the files are identical but for values): see docs/averaging.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from .checkpoint import Checkpoint
from .errors import CheckpointError

__all__ = ["unnumbered", "renumbering_fault", "pairing_fault", "proven_owners"]

# TF's and Keras' uniquifying counter: "_<digits>" ending a name or a part of one
_COUNTER = re.compile(r"_(\d+)(?=[_/]|$)")
_TOKEN = re.compile(r"([_/]?)([^_/]+)")


def unnumbered(name: str) -> str:
    """``name`` with every ``_N`` counter stripped (``sequential_1/dense_2/kernel`` ->
    ``sequential/dense/kernel``)."""
    return _COUNTER.sub("", name)


def _counters(name: str) -> tuple[tuple[int, ...], ...]:
    """Per name part (split at ``_`` and ``/``) that is no counter, the counters that follow
    it (``()`` where none): ``sequential_1/dense/kernel`` -> ``((1,), (), ())``."""
    parts: list[list[int]] = []
    for sep, token in _TOKEN.findall(name):
        if sep == "_" and token.isdigit() and parts:
            parts[-1].append(int(token))
        else:
            parts.append([])
    return tuple(tuple(p) for p in parts)


def renumbering_fault(have: dict[str, str | None], want: dict[str, str | None],
                      keys: Iterable[str]) -> tuple[str, str | None] | None:
    """The first key (of ``keys``) whose names in ``have`` (an older input) and ``want`` (the
    newest) do not differ by an order-keeping renumbering alone.

    Returns:
        ``(key, None)`` where its two names differ by more than counters; ``(key, other)``
        where its counters and ``other``'s (names that strip to the same name) are in another
        order in each input (``key``'s two names may then be equal: the difference is what
        ``other`` holds); ``None`` where every key's names differ by such a renumbering alone.
    """
    groups: dict[str, list[str]] = {}
    for k in sorted(keys):
        a, b = have.get(k), want.get(k)
        if a is None or b is None or unnumbered(a) != unnumbered(b):
            return k, None
        groups.setdefault(unnumbered(a), []).append(k)
    for members in groups.values():
        if len(members) < 2:
            continue
        a_of = {k: _counters(have[k]) for k in members}
        b_of = {k: _counters(want[k]) for k in members}
        if any(len(a_of[k]) != len(b_of[k]) for k in members):
            return members[0], None
        for i in range(len(a_of[members[0]])):
            # the older input's counter at position i, ascending: the newest's must ascend
            # with it, strictly where the older one's does (and stay where it stays)
            seq = sorted(members, key=lambda k, i=i: (a_of[k][i], b_of[k][i]))
            for k1, k2 in zip(seq, seq[1:], strict=False):
                a1, a2, b1, b2 = a_of[k1][i], a_of[k2][i], b_of[k1][i], b_of[k2][i]
                if (a1 == a2) != (b1 == b2) or b2 < b1:
                    return k2, k1
    return None


def proven_owners(ckpt: Checkpoint, pairing: dict) -> dict[str, str] | None:
    """Average key -> the weight key ``ckpt``'s own EMA map proves it belongs to, under the
    command's statements; ``None`` where that map cannot be built (refused, no averages)."""
    from .emamap import proven_pairs

    try:
        pairs = proven_pairs(ckpt, **{k: v for k, v in pairing.items()
                                      if k not in ("allow_missing", "strict")})
    except CheckpointError:
        return None
    return {s: w for w, s in pairs.items()}


def pairing_fault(old: Checkpoint, newest: Checkpoint, keys: Iterable[str],
                  pairing: dict | None) -> tuple[str, str, str] | None:
    """The first average key (of ``keys``) that ``old``'s and ``newest``'s own EMA maps both
    prove, each to belong to another weight: (key, its weight in ``old``, in ``newest``);
    ``None`` where none does or a map cannot be built."""
    theirs = proven_owners(old, pairing or {})
    ours = proven_owners(newest, pairing or {}) if theirs is not None else None
    if theirs is None or ours is None:
        return None
    for k in sorted(keys):
        if k in theirs and k in ours and theirs[k] != ours[k]:
            return k, theirs[k], ours[k]
    return None

"""Pairings that rest on dtypes and shapes alone, for :func:`ckpt_tools.pairing.pair_by_names`:
the shadows one variable of a group fits, and the order-preserving assignments of a group's
shadows to its variables in a stated order. Split out of :mod:`ckpt_tools.pairing`.
"""

from __future__ import annotations

MAX_PAIRINGS = 64  # beyond this many fitting pairings a group is simply ambiguous


def pair_unique_fits(result, shadows: list[str], variables: list[str], fits) -> None:
    """Records in ``result`` (an :class:`~ckpt_tools.pairing.ObjectPairing`) each shadow that
    ``fits`` exactly one of ``variables`` (dtype and shape) as proven, and each that fits
    several as ambiguous with its candidates; returns nothing (``result`` is filled in
    place)."""
    for s in shadows:
        fitting = sorted(v for v in variables if fits(s, v))
        if len(fitting) == 1:
            result.pairs[s] = fitting[0]
        elif fitting:
            result.ambiguous[s] = tuple(fitting)


def injections(shadows: list[str], seq: list[str], fits) -> list[tuple[str, ...]]:
    """Order-preserving assignments of ``shadows`` to distinct members of ``seq`` where every
    pair ``fits``; at most ``MAX_PAIRINGS + 1`` of them."""
    out: list[tuple[str, ...]] = []

    def walk(i: int, start: int, acc: list[str]) -> None:
        if len(out) > MAX_PAIRINGS:
            return
        if i == len(shadows):
            out.append(tuple(acc))
            return
        for j in range(start, len(seq) - (len(shadows) - i) + 1):
            if fits(shadows[i], seq[j]):
                acc.append(seq[j])
                walk(i + 1, j + 1, acc)
                acc.pop()

    walk(0, 0, [])
    return out

"""Which EMA copies of a Keras file a ``--trainable`` statement pairs (``stated_pairs``).

A statement decides a copy's weight where the file alone pairs it otherwise, and also where
the file leaves it open: copies of weights that share a shape and dtype get them by position,
the order the optimizer was built in, which no Keras 3 file records (review-12-attack-r21 F5:
a statement in the model's order moves nothing, yet it is what pairs those copies).
"""

from __future__ import annotations

from collections import Counter

from ..entry import TensorEntry


def stated_pairs(averages: dict[str, str | None], alone: dict[str, str | None],
                 entries: dict[str, TensorEntry]) -> dict[str, str]:
    """The pairings that rest on the caller's ``trainable``.

    Args:
        averages: EMA copy key -> weight key, as paired with the statement.
        alone: the same without the statement (empty where the file alone pairs none).
        entries: the file's entries (shapes and dtypes).

    Returns:
        `dict[str, str]`: EMA copy key -> weight key, for every copy paired otherwise than
        ``alone`` pairs it or whose weight shares its shape and dtype with another paired
        weight (their order is the statement's), in ``averages`` order.
    """
    def kind(w: str) -> tuple:
        e = entries.get(w)
        return (None, w) if e is None else (tuple(e.shape), e.dtype_name)

    paired = {a: w for a, w in averages.items() if w is not None}
    shared = Counter(kind(w) for w in paired.values())
    return {a: w for a, w in paired.items() if alone.get(a) != w or shared[kind(w)] > 1}


def paired_by_order(lay, entries) -> set[str]:
    """The weights whose optimizer variables only the build order places: those of a shape and
    dtype another weight with an EMA copy shares, where no ``--trainable`` stated the order.
    Their copies keep the name the file stores (``optimizer/vars/4``): the name Keras gives
    them in memory (``adam/d2_kernel_average``) would be derived from the order that
    ``fit_order`` assumes, and read as proven."""
    if not lay.use_ema or lay.trainable_stated:
        return set()
    groups: dict[tuple, list[str]] = {}
    for w in lay.averages.values():
        if w is not None and w in entries:
            groups.setdefault((tuple(entries[w].shape), entries[w].dtype_name), []).append(w)
    return {w for ws in groups.values() if len(ws) > 1 for w in ws}

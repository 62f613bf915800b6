"""How a bare tf_keras ``.weights.h5``'s optimizer variables fit the weights it holds, where
the file records neither the optimizer's class nor the order of a subclassed model's
sublayers (moved out of :mod:`.tf_keras`, which uses them)."""

from __future__ import annotations

_PERMUTATIONS = 5040  # sublayer orders tried per container (7 sublayers)


#: Slots per weight of the built-in tf_keras optimizers, at most (Adam/AdamW with amsgrad:
#: m, v, vhat; Adafactor: r, c, v).
_MOST_SLOTS = 3


def only_count(shapes: list, rest: list) -> bool:
    """Whether the optimizer's variables (``rest``: their shapes, in order) prove they hold one
    average and the same slots for each of the weights of ``shapes``, where the optimizer's
    class, and so its slots per weight, is not recorded: tf_keras makes the averages first,
    then each weight's slots in turn, so the layout must read so, and no fewer weights (layers
    frozen when it was built, or held where the file does not save them) with more slots each
    may read so too (2 weights with an average and 3 slots, or 4 with an average and one).

    Example:
        >>> only_count([(4, 4), (4,)], [(4, 4), (4,), (4, 4), (4,)])
        True
    """
    from collections import Counter

    def fits(first: list) -> bool:
        n = len(first)
        if not n or len(rest) % n:
            return False
        k = len(rest) // n - 1  # no built-in tf_keras optimizer keeps more than 3 per weight
        return k <= _MOST_SLOTS and rest[n:] == [s for s in first for _ in range(k)]

    if rest[:len(shapes)] != shapes and Counter(rest[:len(shapes)]) != Counter(shapes):
        return False
    if not fits(rest[:len(shapes)]):
        return False
    have = Counter(shapes)
    return not any(fits(rest[:n]) and not Counter(rest[:n]) - have
                   for n in range(1, len(shapes)))


def bag_targets(lay, entries, keys: list[str], got: list) -> list[str | None] | None:
    """The weight each of ``got`` (the shapes of the optimizer's per-weight variables, in
    ``model.trainable_variables`` order) belongs to, for ``keys``, the weights it was built
    with in file order. Sublayers whose order the file does not record (``lay.unordered``: a
    custom layer's attributes, lists and dicts, saved alphabetically or by insertion while
    tf_keras tracks them by assignment, index, sorted key) are tried in every order; a weight
    is paired only where every order whose shapes fit agrees (``None`` elsewhere).

    Returns:
        One weight key or ``None`` per position, or ``None`` when no order fits the shapes.
    """
    import itertools
    import math
    from collections import Counter

    if len(got) != len(keys):
        return None
    out: list[str | None] = []
    i = 0
    while i < len(keys):
        bag = lay.unordered.get(keys[i], (None,))[0]
        j = i + 1
        while bag is not None and j < len(keys) and \
                lay.unordered.get(keys[j], (None,))[0] == bag:
            j += 1
        run, want = keys[i:j], [tuple(s) for s in got[i:j]]
        parts: dict = {}
        for k in run:
            parts.setdefault(lay.unordered[k][1] if bag is not None else k, []).append(k)
        if Counter(tuple(entries[k].shape) for k in run) != Counter(want):
            return None
        if len(parts) == 1:
            fits = [run]
        elif math.factorial(len(parts)) <= _PERMUTATIONS:
            fits = []
            for perm in itertools.permutations(parts.values()):
                flat = [k for part in perm for k in part]
                if [tuple(entries[k].shape) for k in flat] == want:
                    fits.append(flat)
            if not fits:
                return None
        else:  # too many orders to try: only a shape one weight of the container has
            fits = [[k for k in run if tuple(entries[k].shape) == w] for w in want]
            out += [f[0] if len(f) == 1 else None for f in fits]
            i = j
            continue
        out += [f[0] if len(set(f)) == 1 else None for f in zip(*fits, strict=True)]
        i = j
    return out


__all__ = ["bag_targets", "only_count"]

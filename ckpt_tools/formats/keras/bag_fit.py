"""Which weights a Keras 3 optimizer was built with, where the file leaves layers frozen at
build time and the order of some sublayers unrecorded (a bare ``.weights.h5`` of a frozen
``keras.applications`` backbone: its layers are saved alphabetically, ``conv2d_10`` before
``conv2d_2``, and their data offsets need not follow model order).

The optimizer holds one EMA copy per weight of ``model.trainable_variables``, in that order,
with the weight's shape and dtype. ``model.trainable_variables`` is the model's weights, run
after run (``seq``: the file records their order; ``bag``: it does not, only that they are
contiguous), each run contributing the weights trainable in it. :func:`fit_runs` takes every
such choice at once, any subset of each run and any order inside a bag (more than Keras can
write: a layer is frozen as a whole, a sublayer's weights keep their order), and gives, for
each copy, every weight some choice pairs it with. A copy with exactly one is proven: no
choice of frozen layers or sublayer order Keras can write pairs it otherwise. Values never
decide.
"""

from __future__ import annotations

from collections import Counter

_BUDGET = 2_000_000  # steps of the search; beyond, nothing is proven (the caller refuses)


class _OverBudget(Exception):
    pass


def fit_runs(sub: list, tspecs: list, runs: list[tuple[str, list[int]]],
             witnesses_per_copy: int = 2):
    """Every pairing of the copies' specs ``sub`` (in trainable order) with the weights.

    Args:
        sub: ``(shape, dtype)`` of each EMA copy, in the optimizer's order.
        tspecs: ``(shape, dtype)`` of every weight the optimizer may have been built with.
        runs: ``("seq"|"bag", indexes into tspecs)`` in model order, covering them.
        witnesses_per_copy: pairings returned per copy that several weights fit (two that
            differ there are enough to leave it open when they are merged).

    Returns:
        ``(targets, witnesses)``: for each copy the indexes of every weight it can pair with;
        and whole pairings (tuples of weight indexes, one per copy) that together cover every
        target of a proven copy and at least ``witnesses_per_copy`` of an open one. ``None``
        when no pairing fits, or the search is too large to finish (never a partial answer).
    """
    try:
        return _fit(sub, tspecs, runs, witnesses_per_copy)
    except _OverBudget:
        return None


def _fit(sub, tspecs, runs, per_copy):
    n, nruns = len(sub), len(runs)
    if not n:
        return None
    steps = [0]

    def tick(k: int = 1) -> None:
        steps[0] += k
        if steps[0] > _BUDGET:
            raise _OverBudget

    def ends(u: int, a: int) -> list[int]:
        """Every b such that sub[a:b] can be the weights run u contributes."""
        kind, idx = runs[u]
        out = [a]
        if kind == "seq":
            p = 0
            for k in range(a, n):
                while p < len(idx) and tspecs[idx[p]] != sub[k]:
                    p += 1
                    tick()
                if p == len(idx):
                    break
                p += 1
                out.append(k + 1)
        else:
            left = Counter(tspecs[i] for i in idx)
            tick(len(idx))
            for k in range(a, n):
                if left[sub[k]] <= 0:
                    break
                left[sub[k]] -= 1
                out.append(k + 1)
        tick(len(out))
        return out

    back = [[False] * (n + 1) for _ in range(nruns + 1)]  # sub[a:] fits runs[u:]
    back[nruns][n] = True
    for u in range(nruns - 1, -1, -1):
        for a in range(n + 1):
            back[u][a] = any(back[u + 1][b] for b in ends(u, a))
    if not back[0][0]:
        return None
    fwd = [[False] * (n + 1) for _ in range(nruns + 1)]  # sub[:a] fits runs[:u]
    fwd[0][0] = True
    chunks = []  # (u, a, b): run u takes sub[a:b] in some full pairing
    for u in range(nruns):
        for a in range(n + 1):
            if not fwd[u][a]:
                continue
            for b in ends(u, a):
                if back[u + 1][b]:
                    fwd[u + 1][b] = True
                    if b > a:
                        chunks.append((u, a, b))
    targets: list[dict[int, tuple]] = [{} for _ in range(n)]  # weight -> (u, a, b, p)
    placed: set[tuple[int, int]] = set()  # (bag run, copy): its places do not vary
    for u, a, b in chunks:
        kind, idx = runs[u]
        for i in range(a, b):
            if kind == "bag" and (u, i) in placed:
                continue
            placed.add((u, i))
            for p in _places(sub, tspecs, idx, kind, a, b, i, tick):
                targets[i].setdefault(idx[p], (u, a, b, p))
    witnesses: list[tuple[int, ...]] = []
    wanted = [(0, next(iter(targets[0].values())))] + [
        (i, place) for i in range(n) if len(targets[i]) > 1
        for place in list(targets[i].values())[:per_copy]]
    for i, (u, a, b, p) in wanted:
        w = tuple(_prefix(sub, tspecs, runs, fwd, ends, u, a)
                  + _chunk(sub, tspecs, runs[u], a, b, i, p)
                  + _suffix(sub, tspecs, runs, back, ends, u + 1, b))
        if w not in witnesses:
            witnesses.append(w)
    return [tuple(sorted(t)) for t in targets], witnesses


def _places(sub, tspecs, idx, kind, a, b, i, tick) -> list[int]:
    """Positions in run ``idx`` that copy ``i`` can take when the run takes ``sub[a:b]``."""
    if kind == "bag":
        tick(len(idx))
        return [p for p, w in enumerate(idx) if tspecs[w] == sub[i]]
    lo, k = 0, a  # first place after sub[a:i] embedded from the left
    while k < i:
        if tspecs[idx[lo]] == sub[k]:
            k += 1
        lo += 1
    hi, k = len(idx), b - 1  # sub[i+1:b] embedded from the right starts at hi
    while k > i:
        hi -= 1
        if tspecs[idx[hi]] == sub[k]:
            k -= 1
    tick(len(idx))
    return [p for p in range(lo, hi) if tspecs[idx[p]] == sub[i]]


def _chunk(sub, tspecs, run, a, b, i, p) -> list[int]:
    """Weights (indexes) for ``sub[a:b]`` in ``run``, copy ``i`` on the run's place ``p``."""
    kind, idx = run
    if kind == "bag":
        free = [w for q, w in enumerate(idx) if q != p]
        out = []
        for k in range(a, b):
            if k == i:
                out.append(idx[p])
                continue
            w = next(w for w in free if tspecs[w] == sub[k])
            free.remove(w)
            out.append(w)
        return out
    left = _embed(sub[a:i], tspecs, idx[:p])
    right = _embed(sub[i + 1:b], tspecs, idx[p + 1:])
    return left + [idx[p]] + right


def _embed(part, tspecs, idx) -> list[int]:
    out, q = [], 0
    for s in part:
        while tspecs[idx[q]] != s:
            q += 1
        out.append(idx[q])
        q += 1
    return out


def _fill(sub, tspecs, run, a, b) -> list[int]:
    kind, idx = run
    if kind == "seq":
        return _embed(sub[a:b], tspecs, idx)
    free, out = list(idx), []
    for k in range(a, b):
        w = next(w for w in free if tspecs[w] == sub[k])
        free.remove(w)
        out.append(w)
    return out


def _prefix(sub, tspecs, runs, fwd, ends, u, a) -> list[int]:
    """A pairing of ``sub[:a]`` with runs ``[:u]`` (``fwd[u][a]`` holds)."""
    out: list[list[int]] = []
    while u > 0:
        prev = next(p for p in range(a + 1) if fwd[u - 1][p] and a in ends(u - 1, p))
        out.append(_fill(sub, tspecs, runs[u - 1], prev, a))
        u, a = u - 1, prev
    return [w for part in reversed(out) for w in part]


def _suffix(sub, tspecs, runs, back, ends, u, b) -> list[int]:
    """A pairing of ``sub[b:]`` with runs ``[u:]`` (``back[u][b]`` holds)."""
    out: list[int] = []
    while u < len(runs):
        nxt = next(e for e in ends(u, b) if back[u + 1][e])
        out += _fill(sub, tspecs, runs[u], b, nxt)
        u, b = u + 1, nxt
    return out


def runs_of(tkeys: list[str], bag_of: dict) -> list[tuple[str, list[int]]]:
    """``tkeys`` (in model order) as runs: consecutive keys outside bags are one ``seq`` run
    (their order is recorded), the keys of one bag a ``bag`` run."""
    out: list[tuple[str, list[int]]] = []
    last = object()
    for i, k in enumerate(tkeys):
        kind = ("bag", bag_of[k]) if k in bag_of else ("seq", None)
        if kind != last:
            out.append((kind[0], []))
            last = kind
        out[-1][1].append(i)
    return out


def open_candidates(lay, okeys: list[str], tkeys: list[str], hyps: list,
                    open_targets: dict[int, list[tuple[int, ...]]]) -> None:
    """Sets ``lay.candidates`` of each EMA copy left open to every weight :func:`fit_runs`
    pairs it with (not merely those of its shape): the '?' rows ``ckpt list`` shows; and
    marks frozen (``lay.trainable`` False) the weights no copy can pair with: the optimizer
    was not built with them.

    ``okeys``: the optimizer variables after iteration/learning_rate, the copies first;
    ``hyps``: the hypotheses the pairing was chosen among (all of one ``use_ema``), whose
    number of copies must agree with one search of ``open_targets``."""
    counts = {len(h[1]) for h in hyps if h[0][0]}
    n = counts.pop() if len(counts) == 1 and len(hyps) and all(h[0][0] for h in hyps) \
        else None
    if n is None or n not in open_targets:
        return
    for i, key in enumerate(okeys[:n]):
        if key in lay.averages and lay.averages[key] is None:
            lay.candidates[key] = tuple(tkeys[t] for t in open_targets[n][i])
    possible = {t for ts in open_targets[n] for t in ts}
    lay.trainable.update({k: False for i, k in enumerate(tkeys) if i not in possible})

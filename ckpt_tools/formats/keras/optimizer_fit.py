"""Which trainable weights a Keras 3 optimizer setting was built with: every subset of the
weights (frozen layers) and every set of whole layers whose specs give the file's optimizer
variables. Split out of :mod:`.optimizer`.
"""

from __future__ import annotations

from . import untracked
from .bag_fit import fit_runs, runs_of
from .optimizer_slots import Spec, expand, matches

Hypothesis = tuple  # ((use_ema, grad accumulation, slot groups), indexes of trained weights)

_SUBSETS = 64  # frozen-layer subsets enumerated; beyond, even agreeing pairings prove nothing



def hypotheses(cands, rest, tkeys, tspecs, bag_of, now: tuple[int, ...], *,
                subsets: bool, layers: list[list[int]] | None = None,
                open_targets: dict | None = None) -> tuple[list, bool, bool]:
    """Every (setting, subset of ``tkeys``) that writes exactly ``rest``.

    The optimizer holds one variable per block for each weight that was trainable when it was
    built, in ``model.trainable_variables`` order. ``tkeys`` are every weight it may have been
    built with (``now``: the indexes of those trainable when the file was saved). Tried in
    turn, per setting: the weights trainable at save; all of them (layers frozen after the
    optimizer was built, whose copies it still holds: never the first averages shifted onto
    the weights trainable now); and only when neither fits, every other subset whose specs
    the optimizer's own per-variable blocks give (layers frozen at build time that a bare
    ``.weights.h5`` does not record). Where the weights trainable at save fit and some
    weights are frozen, every other set of whole ``layers`` with the same shapes fits as well
    (the flags may have changed since the optimizer was built: gradual unfreezing), and is
    returned too. Where sublayers' order is unrecorded (``bag_of``), the subsets are those
    :func:`~.bag_fit.fit_runs` finds: pairings that together show every weight each copy
    may take (``open_targets``: number of copies -> each use_ema copy's possible weights).
    Returns the hypotheses, whether more subsets fit than were enumerated (``_SUBSETS``) and
    whether other sets of layers fit beside the flags at save."""
    out, truncated, swapped = [], False, False
    every = tuple(range(len(tspecs)))
    for c in cands:
        if c[2] is None:
            continue
        sub = [tspecs[i] for i in now]
        if matches(expand(*c, sub), rest, [tkeys[i] for i in now], sub, bag_of):
            out.append(((c[0], c[1], c[2]), now))
            if layers and now != every:
                others = [s for s in layer_sets(sub, tspecs, layers, _SUBSETS) if s != now]
                out += [((c[0], c[1], c[2]), s) for s in others]
                swapped |= bool(others)
            continue
        if now != every and matches(expand(*c, tspecs), rest, tkeys, tspecs, bag_of):
            out.append(((c[0], c[1], c[2]), every))
            continue
        if not subsets:
            continue
        subs, more = _weight_specs(c, rest, len(tspecs))
        truncated |= more
        for sub in subs:
            n = len(sub)
            if not matches(expand(*c, sub), rest, [str(j) for j in range(n)], sub, {}):
                continue
            found, more = _subset_hypotheses(c, sub, tspecs, tkeys, bag_of, open_targets)
            out += found
            truncated |= more
    return out, truncated, swapped


def _weight_specs(c, rest, limit: int) -> tuple[list[list[Spec]], bool]:
    """The specs of every set of fewer than ``limit`` weights setting ``c`` may have been
    built with to write ``rest`` (each to be checked), and whether more were left out."""
    if any(kind == untracked.UNTRACKED for kind, _ in c[2]):  # not affine in the weights
        return untracked.weight_specs(int(c[0]) + int(c[1]), rest, limit)
    dummy = ((1, 1), 1)
    # the count of variables is affine in the number of weights: solve for it
    f0 = len(expand(*c, []))
    slope = len(expand(*c, [dummy])) - f0
    n, r = divmod(len(rest) - f0, slope) if slope > 0 else (0, 1)
    if r or not 1 <= n < limit:
        return [], False
    first: dict[int, int] = {}
    for i, (_, j, _, ref) in enumerate(expand(*c, [dummy] * n)):
        if ref and j is not None:
            first.setdefault(j, i)
    return ([[rest[first[j]] for j in range(n)]] if len(first) == n else []), False


def _subset_hypotheses(c, sub, tspecs, tkeys, bag_of, open_targets) -> tuple[list, bool]:
    """The hypotheses ``(setting, weight indexes)`` placing weights of specs ``sub`` among
    ``tspecs``, and whether more fit than were enumerated."""
    setting = (c[0], c[1], c[2])
    if bag_of:
        fit = fit_runs(sub, tspecs, runs_of(tkeys, bag_of))
        if fit is None:
            return [], False
        if c[0] and open_targets is not None:
            open_targets[len(sub)] = fit[0]
        return [(setting, w) for w in fit[1]], False
    embs = _embeddings(sub, tspecs, limit=_SUBSETS)
    return [(setting, emb) for emb in embs], len(embs) >= _SUBSETS


def layer_sets(sub: list, specs: list, layers: list[list[int]],
                limit: int) -> list[tuple[int, ...]]:
    """Up to ``limit`` sets of whole layers whose weights, in model order, have exactly the
    specs ``sub`` (index tuples into ``specs``; ``layers`` holds each layer's indexes)."""
    n, g = len(sub), len(layers)
    lspecs = [[specs[i] for i in idx] for idx in layers]
    # ways[j][p]: sets of layers j.. matching sub[p:], capped at limit
    ways = [[0] * (n + 1) for _ in range(g + 1)]
    ways[g][n] = 1
    for j in range(g - 1, -1, -1):
        size, mine, row, nxt = len(lspecs[j]), lspecs[j], ways[j], ways[j + 1]
        for p in range(n, -1, -1):
            w = nxt[p]
            if size and p + size <= n and sub[p] == mine[0] and sub[p:p + size] == mine:
                w += nxt[p + size]
            row[p] = min(w, limit)
    out: list[tuple[int, ...]] = []
    stack = [(0, 0, ())] if ways[0][0] else []
    while stack and len(out) < limit:
        j, p, acc = stack.pop()
        if j == g:
            out.append(acc)
            continue
        size = len(lspecs[j])
        if ways[j + 1][p]:
            stack.append((j + 1, p, acc))
        if size and p + size <= n and sub[p:p + size] == lspecs[j] and ways[j + 1][p + size]:
            stack.append((j + 1, p + size, acc + tuple(layers[j])))
    return out


def _embeddings(sub: list, specs: list, limit: int) -> list[tuple[int, ...]]:
    """Up to ``limit`` ways to find ``sub`` as a subsequence of ``specs`` (index tuples)."""
    n, m = len(sub), len(specs)
    # ways[k][i]: embeddings of sub[k:] in specs[i:], capped at limit (iterative: no recursion
    # limit on models with thousands of weights)
    ways = [[0] * (m + 1) for _ in range(n + 1)]
    ways[n] = [1] * (m + 1)
    for k in range(n - 1, -1, -1):
        row, nxt = ways[k], ways[k + 1]
        for i in range(m - 1, -1, -1):
            row[i] = min(row[i + 1] + (nxt[i + 1] if specs[i] == sub[k] else 0), limit)
    out: list[tuple[int, ...]] = []
    stack = [(0, 0, ())] if ways[0][0] else []
    while stack and len(out) < limit:
        k, i, acc = stack.pop()
        if k == n:
            out.append(acc)
            continue
        nexts = [x for x in range(i, m) if specs[x] == sub[k] and ways[k + 1][x + 1]]
        stack += [(k + 1, x + 1, acc + (x,)) for x in reversed(nexts)]
    return out

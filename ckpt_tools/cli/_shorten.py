"""Shortening a column of names to a width, keeping the rows apart.

A name is shortened by leaving out whole ``/`` segments (each gap shows as ``…``), never by
cutting inside a segment, so ``conv1/BatchNorm/moving_mean/ExponentialMovingAverage`` becomes
``conv1/…/moving_mean/…`` and never ``conv1/Batch…Average``. The segments kept are those that
tell the rows of the column apart (a segment that many rows share, such as
``ExponentialMovingAverage``, says less than one only this row has), and two rows never get the
same shortened text: a text several rows would share is given to none of them.

Only a single segment wider than the column is cut by characters; the cut is made between
escaped characters, never inside an escape (``\\x1b``, ``\\u202e``), so what is shown is always
a piece of the escaped name. Names that such a cut would show the same (they differ only inside
one long segment) are cut again around the characters where they differ (``p…pAp…p``,
``p…pBp…p``); a name that still cannot be told apart is shown whole (:func:`_tell_apart`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from itertools import combinations

ELLIPSIS = "…"
#: Above this many names to shorten, fewer shapes are tried per name (time stays linear).
_MANY = 2000


def shorten_column(texts: Sequence[str], width: int, escape: Callable[[str], str],
                   measure: Callable[[str], int], *,
                   prefixes: Sequence[str | None] | None = None, lead: str = "") -> list[str]:
    return shorten_counted(texts, width, escape, measure, prefixes=prefixes, lead=lead)[0]


def shorten_counted(texts: Sequence[str], width: int, escape: Callable[[str], str],
                    measure: Callable[[str], int], *,
                    prefixes: Sequence[str | None] | None = None,
                    lead: str = "") -> tuple[list[str], int]:
    """Returns the shown (escaped) text of every raw name in ``texts``, each at most ``width``
    columns wide, distinct wherever the names are.

    Args:
        texts: raw names (not yet escaped), one per row.
        width: columns available.
        escape: turns raw text into its shown form (control characters escaped).
        measure: the columns a shown text takes.
        prefixes: per row, a text already shown elsewhere in the row (``diff --ema``'s raw
            name beside its shadow ``<raw>/ExponentialMovingAverage``): when a name does not
            fit and starts with it and ``/``, that part is the first left out (``…/Exponential
            MovingAverage``), and such rows need not differ from each other.
        lead: a word a cell may start with that is always kept whole (``of `` in ``list``'s
            ``of conv1/BatchNorm/beta``); only the name after it is shortened, by the same rule
            (whole segments that tell the rows apart), never to a bare ``…`` or ``..``.

    Returns:
        The shown texts, in order (:func:`shorten_column`); :func:`shorten_counted` also returns
        their total loss: 2 for each cut inside a segment, 1 for each row that lost its last
        segment (0: every row shows whole segments, its last one among them).
    """
    shown = [escape(t) for t in texts]
    long = [i for i, s in enumerate(shown) if measure(s) > width]
    if not long:
        return shown, 0
    cuts = 0
    if lead:
        led = [i for i in long if texts[i].startswith(lead) and len(texts[i]) > len(lead)]
        if led:
            raws = [texts[i][len(lead):] for i in led]
            inner, cut = shorten_counted(raws, width - measure(lead), escape, measure)
            cuts += cut + _keep_last(raws, inner, width - measure(lead), escape, measure)
            targets = [escape(t[len(lead):]) for t in texts
                       if t.startswith(lead) and len(t) > len(lead)]
            for i, text in zip(led, inner, strict=True):
                shown[i] = escape(lead) + text
                # The target's last segment says which variable it is (kernel or bias): left
                # out, it is a loss even when other rows share it, so width goes here first.
                last = texts[i].rsplit("/", 1)[-1]
                cuts += "/" in texts[i][len(lead):] and not text.endswith(escape(last))
                # so is a target another row's target also reads as (…/kernel for
                # dense_1/kernel beside dense/kernel): it no longer says which variable
                cuts += _ambiguous(text, targets)
            long = [i for i in long if i not in set(led)]
    if width <= 1:
        cut = [s if i not in long else ELLIPSIS[:width] for i, s in enumerate(shown)]
        return cut, 2 * len(long)
    free = set()
    for i in long:
        prefix = prefixes[i] if prefixes else None
        if prefix and texts[i].startswith(prefix + "/") and len(texts[i]) > len(prefix) + 1:
            rest = _tokens(texts[i][len(prefix) + 1:], escape)
            shown[i] = _cut(ELLIPSIS + "/", rest, width, measure)
            cuts += 2 * (measure(ELLIPSIS + "/" + "".join(rest)) > width)
            free.add(i)
    long = [i for i in long if i not in free]
    if not long:
        return shown, cuts
    segments = {i: [escape(s) for s in texts[i].split("/")] for i in long}
    freq = Counter(s for i in long for s in set(segments[i]))
    few = len(long) <= _MANY
    rows_with: dict[str, set[int]] = {}
    for i in long if few else ():
        for seg in segments[i]:
            rows_with.setdefault(seg, set()).add(i)
    choices = {i: _candidates(segments[i], texts[i], width, escape, measure, freq, few,
                              shared=len(long) > 1 and freq[segments[i][-1]] == len(long),
                              rows_with=rows_with, rows=len(long))
               for i in long}
    fixed = Counter(shown[i] for i in range(len(shown)) if i not in long and i not in free)
    pick = dict.fromkeys(long, 0)
    banned: set[str] = set()
    for _ in range(64):  # each round bans at least one text, and every row has few choices
        counts = fixed + Counter(choices[i][pick[i]][0] for i in long)
        clash = [i for i in long if counts[choices[i][pick[i]][0]] > 1]
        if not clash:
            break
        banned.update(choices[i][pick[i]][0] for i in clash)
        moved = False
        for i in clash:
            options = choices[i]
            nxt = next((k for k in range(pick[i], len(options)) if options[k][0] not in banned),
                       None)
            if nxt is not None and nxt != pick[i]:
                pick[i], moved = nxt, True
        if not moved:
            break
    for i in long:
        shown[i] = choices[i][pick[i]][0]
        cuts += choices[i][pick[i]][1]
    return shown, cuts + _tell_apart(texts, shown, long, width, escape, measure)


def _keep_last(raws: Sequence[str], shown: list[str], width: int,
               escape: Callable[[str], str], measure: Callable[[str], int]) -> int:
    """A target whose shortened form left out its last segment (``transformer_block_0/…``:
    which of the block's variables?) is cut by characters instead where a cut keeping that
    segment fits and no other row shows it (``tr…_0/…ut/kernel``): README's ema column always
    names the variable's last segment (review-16-user-u18 F6). Changes ``shown``; returns the
    loss such a cut adds (2 for a cut inside a segment, less the 1 already counted for the
    segment left out), so the column widths chosen stay as they were."""
    lost = [j for j, raw in enumerate(raws) if "/" in raw
            and not shown[j].endswith("/" + escape(raw.rsplit("/", 1)[-1]))]
    if not lost or len(raws) > _MANY:
        return 0
    keys = _differences(list(raws))
    taken = set(shown)
    added = 0
    for j in lost:
        last = "/" + escape(raws[j].rsplit("/", 1)[-1])
        text = _keep_cut(_tokens(raws[j], escape), raws[j], keys[j], width, measure)
        if measure(text) <= width and text.endswith(last) and text not in taken:
            taken.discard(shown[j])
            shown[j] = text
            taken.add(text)
            added += 1
    return added


def _ambiguous(text: str, targets: Sequence[str]) -> bool:
    """Whether ``text``, a shown (escaped) name whose ``…`` each stand for whole ``/``
    segments, reads as more than one of ``targets`` (escaped names); only for up to 500
    targets (the check is quadratic)."""
    if ELLIPSIS not in text or len(targets) > 500:
        return False
    import re

    pattern = re.compile("".join(
        "[^/]+(?:/[^/]+)*" if part == ELLIPSIS else re.escape(part)
        for part in re.split(f"({ELLIPSIS})", text)))
    return sum(1 for t in targets if pattern.fullmatch(t)) > 1


def _tell_apart(texts: Sequence[str], shown: list[str], long: list[int], width: int,
                escape: Callable[[str], str], measure: Callable[[str], int]) -> int:
    """Rows of ``long`` that still show the same text as another row (names alike but in the
    middle of a segment wider than the column: ``p…pAp…p`` / ``p…pBp…p``) are cut again,
    keeping the characters where they differ; a row that still clashes after a few rounds is
    shown whole (wider than the column, but never the same as another). Changes ``shown``;
    returns the loss."""
    long_set = set(long)
    keys: dict[int, set[int]] = {}
    for _ in range(4):
        names_of: dict[str, list[int]] = {}
        for i, text in enumerate(shown):
            names_of.setdefault(text, []).append(i)
        clashing = [g for g in names_of.values()
                    if len({texts[i] for i in g}) > 1 and long_set.intersection(g)]
        if not clashing:
            break
        for group in clashing:
            for i, k in zip(group, _differences([texts[i] for i in group]), strict=True):
                if i in long_set:
                    keys.setdefault(i, set()).update(k)
                    shown[i] = _keep_cut(_tokens(texts[i], escape), texts[i], keys[i], width,
                                         measure)
    else:
        names_of = {}
        for i, text in enumerate(shown):
            names_of.setdefault(text, []).append(i)
        for i in long:
            if len({texts[j] for j in names_of[shown[i]]}) > 1:
                shown[i] = escape(texts[i])  # the last resort: the whole name
    return 2 * len(keys)


def _differences(names: list[str]) -> list[set[int]]:
    """Per name, the indices of characters that set it apart from its neighbours in sorted
    order, read from the start and from the end (at most four per name, whatever the group's
    size)."""
    keys: list[set[int]] = [set() for _ in names]

    def mark(order: list[int], reverse: bool) -> None:
        for a, b in zip(order, order[1:], strict=False):
            x, y = names[a], names[b]
            if reverse:
                x, y = x[::-1], y[::-1]
            n = 0
            while n < min(len(x), len(y)) and x[n] == y[n]:
                n += 1
            for k, s in ((a, x), (b, y)):
                pos = min(n, len(s) - 1)
                keys[k].add(len(s) - 1 - pos if reverse else pos)

    idx = range(len(names))
    mark(sorted(idx, key=lambda k: names[k]), False)
    mark(sorted(idx, key=lambda k: names[k][::-1]), True)
    return keys


def _keep_cut(tokens: list[str], raw: str, keys: set[int], width: int,
              measure: Callable[[str], int]) -> str:
    """``raw``'s shown ``tokens`` cut to ``width`` keeping the characters at ``keys`` (with one
    beside each), then the last segment whole when it fits, then as much of the start and the
    end as fits; each run left out shows as ``…``. Never cuts inside an escape (a token)."""
    n = len(tokens)
    if n == 0:
        return ""
    keep = [False] * n
    size = 1  # one ellipsis: nothing kept yet

    def add(i: int) -> bool:
        nonlocal size
        if keep[i]:
            return True
        left = i == 0 or keep[i - 1]
        right = i == n - 1 or keep[i + 1]
        delta = measure(tokens[i]) + (left and right) * -1 + (not left and not right) * 1
        if size + delta > width:
            return False
        keep[i] = True
        size += delta
        return True

    for k in sorted(keys):
        for i in (k, k - 1, k + 1):
            if 0 <= i < n:
                add(i)
    slash = raw.rfind("/")
    if slash > 0:
        saved_keep, saved_size = list(keep), size
        if not all(add(i) for i in range(n - 1, slash - 1, -1)):
            keep, size = saved_keep, saved_size
    head, tail = 0, n - 1
    while head <= tail:
        grew = False
        while head < n and keep[head]:
            head += 1
        if head < n and add(head):
            grew = True
        while tail >= 0 and keep[tail]:
            tail -= 1
        if tail >= 0 and add(tail):
            grew = True
        if not grew:
            break
    out, gap = [], False
    for i, t in enumerate(tokens):
        if keep[i]:
            out.append(t)
            gap = False
        elif not gap:
            out.append(ELLIPSIS)
            gap = True
    return "".join(out)


def _tokens(raw: str, escape: Callable[[str], str]) -> list[str]:
    """The shown form of each character of ``raw``: cutting between tokens never splits an
    escape."""
    return [escape(c) for c in raw]


def _cut(lead: str, tokens: list[str], width: int, measure: Callable[[str], int],
         tail_share: float = 0.5) -> str:
    """``lead`` + as much of ``tokens`` as fits, with ``…`` in the middle when it does not."""
    whole = lead + "".join(tokens)
    if measure(whole) <= width:
        return whole
    room = width - measure(lead) - 1
    if room <= 0:
        return (lead + ELLIPSIS)[:max(width, 0)] if width > 0 else ""
    tail_room = int(room * tail_share)
    head_room = room - tail_room
    head, n = [], 0
    for t in tokens:
        w = measure(t)
        if n + w > head_room:
            break
        head.append(t)
        n += w
    tail, n2 = [], 0
    for t in reversed(tokens[len(head):]):
        w = measure(t)
        if n2 + w > room - n:
            break
        tail.append(t)
        n2 += w
    return lead + "".join(head) + ELLIPSIS + "".join(reversed(tail))


def _render(segments: list[str], kept: tuple[int, ...]) -> str:
    parts, last = [], -1
    for k in kept:
        if k != last + 1:
            parts.append(ELLIPSIS)
        parts.append(segments[k])
        last = k
    if last != len(segments) - 1:
        parts.append(ELLIPSIS)
    return "/".join(parts)


def _candidates(segments: list[str], raw: str, width: int, escape: Callable[[str], str],
                measure: Callable[[str], int], freq: Counter,
                few: bool, shared: bool = False,
                rows_with: dict[str, set[int]] | None = None,
                rows: int = 0) -> list[tuple[str, int]]:
    """Every shortened form of one name that fits, best first: whole segments kept from the
    start and the end and at most two from the middle, valued by the length of what they keep
    divided by the square of how many rows share each segment (a segment every row has tells
    nothing apart), those keeping the last segment first, then those keeping the one before it
    (the layer: ``layer_with_weights-1/…/kernel`` before ``…/kernel``); then cuts by
    characters, as a last resort. Beside each, its loss: 0, 1 when it leaves out the last
    segment (``…/BatchNorm/…``), 2 for a cut by characters. ``shared``: every name shortened
    ends with this one's last segment (``…/ExponentialMovingAverage``), which then tells
    nothing apart: the segment before it says which variable, and a form without that one
    is the loss (``conv1/BatchNorm/moving_variance/…``, never ``…/BatchNorm/…/Exponential
    MovingAverage``: u16 F15); the shared last is kept where both fit."""
    n = len(segments)
    forms: dict[tuple[int, ...], float] = {}
    if n > 1:
        heads = range(min(3 if few else 1, n) + 1)
        for h in heads:
            for t in range(min(4 if few else 2, n - h) + 1):
                base = tuple(range(h)) + tuple(range(n - t, n))
                inner = range(h, n - t)
                middles = [(), *((m,) for m in inner),
                           *combinations(inner, 2)] if few else [()]
                for m in middles:
                    kept = tuple(sorted(set(base) | set(m)))
                    if kept and len(kept) < n:
                        forms[kept] = sum((len(segments[k]) + 1) / freq[segments[k]] ** 2
                                          for k in kept)
    if few and n > 2 and rows_with:
        # The segments that tell this row from the others, wherever they are: four in
        # block1/unit_1/…/conv1/weights of a TF-slim name, more than the middles above hold.
        # Greedily, each the one that leaves the fewest other rows sharing what is kept; each
        # prefix of that order is a form, with and without the last segment.
        key = n - 2 if shared else n - 1
        alike = set(rows_with[segments[key]])
        order: list[int] = []
        rest = [k for k in range(n) if k != key]

        def left(k: int) -> int:  # rows that still share what is kept, with segment k
            with_k = rows_with[segments[k]]
            return len(with_k) if len(alike) == rows else len(alike & with_k)  # all: no &

        while len(alike) > 1 and rest:
            counts = {k: left(k) for k in rest}
            best = min(rest, key=lambda k: (counts[k], len(segments[k])))
            if counts[best] == len(alike):
                break  # nothing left tells them apart by whole segments
            alike &= rows_with[segments[best]]
            order.append(best)
            rest.remove(best)
        tops = [{*order[:count], key} for count in range(len(order) + 1)]
        tops += [{*order, key, k} for k in rest]  # and one more (conv1/BatchNorm/beta)
        for top in tops:
            for kept in (tuple(sorted(top)), tuple(sorted(top | {n - 1}))):
                if len(kept) < n and kept not in forms:
                    forms[kept] = sum((len(segments[k]) + 1) / freq[segments[k]] ** 2
                                      for k in kept)
    fitting = []
    for kept, value in forms.items():
        text = _render(segments, kept)
        size = measure(text)
        if size <= width:
            # The last segment says which variable it is (kernel or bias), the one before it
            # whose (the layer): a form without the last is a loss even where other rows
            # share it; one without the layer's is only less wanted.
            key = n - 2 if shared and n > 2 else n - 1  # the segment saying which variable
            loses = key not in kept
            layer = key > 0 and key - 1 not in kept
            fitting.append((int(loses), kept[-1] != n - 1, layer, -value, -size, text))
    fitting.sort()
    out = {f[-1]: f[0] for f in fitting}
    tokens = _tokens(raw, escape)
    for share in (0.5, 0.7, 0.3, 0.85, 0.15):
        out.setdefault(_cut("", tokens, width, measure, share), 2)
    return list(out.items())

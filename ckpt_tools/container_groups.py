"""TF2 averages of one EMA object, read under the one name that explains all of them.

Two EMA objects named ``ema`` and ``ema_1`` over unnamed variables (all ``Variable``): the first
writes ``Variable/ema``, ``Variable/ema_1`` (TF's ``_N``), the second ``Variable/ema_1_1``,
``Variable/ema_1_2``. Read name by name, ``Variable/ema_1`` looks like the second object's first
average, and neither object's averages form one group. Where the caller chose a root attribute
(``--ema-name fast`` for ``tf.train.Checkpoint(fast=[...], slow=[...])``), that attribute holds
one object's averages: read them under the one EMA name that explains every one of them
(``ema`` with indices 0 and 1), and only then (review-14-attack-r25 F2c).
"""

from __future__ import annotations

import re

_NUMBERED = re.compile(r"^(.*)_(\d+)$")


def _reading(last: str, base: str) -> int | None:
    """The index ``last`` has as an average named ``base`` (``ema_1`` under ``ema``: 1)."""
    if last == base:
        return 0
    m = _NUMBERED.match(last)
    return int(m.group(2)) if m and m.group(1) == base else None


def regroup_container(groups: dict[tuple[str, str], list[tuple[int, str]]],
                      full: dict[str, str], container: str) -> None:
    """Moves, per variable name, the averages saved under the root attribute ``container``
    into the group of the one EMA name that reads all of them with distinct indices; left as
    they are where they already share one group, or where no name or several names do.

    Args:
        groups: ``(variable name, EMA name)`` -> ``[(index, key)]``, changed in place.
        full: key -> recorded full name.
        container: the root attribute the caller chose.
    """
    mine: dict[str, list[tuple[str, int, str]]] = {}
    for (head, base), members in groups.items():
        for idx, k in members:
            if k.split("/", 1)[0] == container:
                mine.setdefault(head, []).append((base, idx, k))
    for head, found in mine.items():
        if len({b for b, _, _ in found}) < 2:
            continue
        lasts = [full[k].rpartition("/")[2] for _, _, k in found]
        bases = {b for b, _, _ in found} | {_NUMBERED.match(n).group(1) for n in lasts
                                           if _NUMBERED.match(n)}
        fits = []
        for base in sorted(bases):
            idx = [_reading(n, base) for n in lasts]
            if None not in idx and len(set(idx)) == len(idx):
                fits.append((base, idx))
        if len(fits) != 1:
            continue
        base, idx = fits[0]
        keys = {k for _, _, k in found}
        for g in [g for g in groups if g[0] == head]:
            groups[g] = [(i, k) for i, k in groups[g] if k not in keys]
            if not groups[g]:
                del groups[g]
        groups.setdefault((head, base), []).extend(
            (i, k) for i, (_, _, k) in zip(idx, found, strict=True))

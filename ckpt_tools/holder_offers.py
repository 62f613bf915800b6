"""The ``--exclude`` offers of a TF2 split-holder refusal (:mod:`ckpt_tools.ema_holders`):
the globs that export one holder's averages alone, each probed (the export accepts it and
reads that holder's averages and no other's), bounded in how many holders are listed and
probed and how many options an offer may have, and the names those refusals show.
"""

from __future__ import annotations

import fnmatch
import glob

from .checkpoint import Checkpoint
from .offer_probe import exported, option_text

#: holders a split refusal lists and probes an ``--exclude`` offer for (200 holders took 109 s
#: and wrote 983 KB of offers: review-29-attack-r109 F4)
SHOWN = 3
#: the most ``--exclude`` options an offer may have to be printed (and probed)
MOST_EXCLUDES = 8


def shown_names(ckpt: Checkpoint) -> dict[str, str]:
    """``{key: the name every command shows}`` (``net/d2/kernel``, not the optimizer's
    ``optimizer/_trainable_variables/2`` the graph reaches first: review-33-attack-r127 m1)."""
    return {**ckpt.objects.paths, **{v.name: v.path for v in ckpt.variables_unwarned() if v.path}}


def _excludes(ckpt: Checkpoint, each: dict[tuple[str, ...], list[tuple[str, str]]],
              kept: tuple[str, ...]) -> tuple[str, ...]:
    """The ``--exclude`` globs that leave out every holder's averages but ``kept``'s: one
    glob per other holder of several weights, its path (``'ema/disc/*'``: a glob selects a
    weight by the key its average is read from too), where that glob matches none of
    ``kept``'s weights or averages (by key or path); else each of its weights' paths."""
    paths = ckpt.objects.paths if ckpt.objects is not None else {}
    own = {n for w, a in each[kept] for n in (w, a, paths.get(w, w), paths.get(a, a))}
    out: set[str] = set()
    for holder, taken in each.items():
        if holder == kept:
            continue
        taken = [(w, a) for w, a in taken if (w, a) not in each[kept]]
        if not taken:  # a combined list's averages that kept holds too (r111 F4)
            continue
        prefix = glob.escape("/".join(holder)) + "/*"
        if holder and len(taken) > 1 and not any(fnmatch.fnmatchcase(n, prefix) for n in own) \
                and all(fnmatch.fnmatchcase(a, prefix) or fnmatch.fnmatchcase(
                    paths.get(a, a), prefix) for _w, a in taken):
            out.add(prefix)
        else:
            out.update(glob.escape(paths.get(w, w)) for w, _a in taken)
    return tuple(sorted(out))


def _alone(ckpt: Checkpoint, ema_name: str | None, exclude: tuple[str, ...],
           taken: list[tuple[str, str]], others: set[str]) -> bool:
    """Whether the export with ``exclude`` added (the refused command's own options kept) is
    accepted and reads every average of ``taken`` and none of ``others``."""
    read = set(exported(ckpt, ema_name, exclude=exclude).values())
    return bool(read) and {a for _w, a in taken} <= read and not read & others


def holder_offers(ckpt: Checkpoint, each: dict[tuple[str, ...], list[tuple[str, str]]],
                   ema_name: str | None) -> tuple[list[str], list[str]]:
    """The ``--exclude`` offers (typed beside ``--ema-name ema_name``) that export one of the
    first :data:`SHOWN` holders' averages alone, each probed (the export accepts it and reads
    that holder's averages and no other's), and the holders whose offer takes more than
    :data:`MOST_EXCLUDES` options (``"ema/gen's 12"``: counted, not printed nor probed).

    Returns:
        `tuple`: ``(offers, unlisted)``."""
    offers, unlisted = [], []
    every = {a for taken in each.values() for _w, a in taken}
    for holder in sorted(each)[:SHOWN]:  # a bounded number of probes (r109 F4)
        exclude = _excludes(ckpt, each, holder)
        if len(exclude) > MOST_EXCLUDES:  # not printed, not probed: counted
            unlisted.append(f"{'/'.join(holder) or 'the root'}'s {len(exclude)}")
        elif _alone(ckpt, ema_name, exclude, each[holder],
                    every - {a for _w, a in each[holder]}):
            offer = option_text(ema_name, exclude, False)
            # holders keeping the same averages (one list saved under two attributes) need
            # the same --exclude: offered once (review-33-attack-r127 m1)
            offers += [] if offer in offers else [offer]
    return offers, unlisted

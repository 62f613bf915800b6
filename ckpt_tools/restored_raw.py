"""``export --raw`` of a training graph's ``Saver(ema.variables_to_restore())`` checkpoint:
keys named as averages that the ``.meta``'s save op wrote from their own variables hold the
raw weights; :func:`restored_raw_holders` names each variable's key (and every other key a
model variable was written to), :func:`restored_raw_warning` says what the export writes.
Only the save op decides (see :mod:`ckpt_tools.raw_shadows` for the keys alike that hold
averages)."""

from __future__ import annotations

from . import roles as R
from .checkpoint import Checkpoint
from .ema_updates import shadow_owners
from .formats.meta_saver import LAST_PART
from .raw_named import applied_shadows, training_state, vtr_variables, written_from_own
from .restorer_keys import restorer_named
from .save_op import graph_named, written_sources
from .wording import agreeing, counted


def restored_raw_holders(ckpt: Checkpoint, variables) -> dict[str, str] | None:
    """Export name -> key, for ``export --raw`` of a ``Saver(ema.variables_to_restore())``
    checkpoint: each key named as an average that the save op wrote from its own variable
    (``W/ExponentialMovingAverage`` from ``W``), where no key holds that variable, exported
    under the variable's name: a training graph's raw weight, or what an evaluation graph's
    ``W`` held when it saved (:func:`evaluation_graph`: the averages, if it restored them;
    the export's warning says so). A partitioned variable's parts, saved under one key each
    (``W/part_0/ExponentialMovingAverage`` from ``W/part_0``), export as ``W/part_0``, ...
    (review-13-attack-r24 F4).

    Beside them, the save op says what every other key was written from, and that alone
    decides (review-22-attack-r66 F2, F3, F8): a key written from a shadow an
    ``ema.apply()`` update writes, an optimizer's slot or the step (:func:`training_state`)
    is never a weight (a second object's average ``w/slow/x`` of a suffixed Saver, Adam's
    ``w/Adam/x``); a model variable saved under its own name (``b`` of
    ``Saver(ema.variables_to_restore([w]))``) is one, exported under its name, never
    dropped; so is one saved with the prefix every holder's key has (``net/stat``) or without
    the scope every holder's variable has (``emb`` from ``tower/emb`` beside
    ``w/ExponentialMovingAverage`` from ``tower/w``: then every one is exported under the
    graph's name, ``tower/w``, ``tower/emb``; review-23-attack-r70 F4, F7). ``None`` where no
    key holds its variable under an average's name, or where a model variable is saved under
    another name none of these reads (``export --raw`` then refuses what it would drop:
    :mod:`.raw_dropped`), or a key named as
    another graph variable holds an average (a swapping Saver; the export then reads the
    keys as before, and refuses them; TF1's Saver saves no variable under two names).
    """
    sources = written_sources(ckpt)
    if not sources:
        return None
    state = training_state(ckpt)
    shadows = applied_shadows(ckpt)  # the graph's own name of a scoped apply()'s key
    trainable = set(ckpt.meta.collections.get("trainable_variables") or ())

    def model(key: str) -> bool:  # written from variables no update op shows as state
        return all(s not in state for s in sources.get(key) or [None])

    out = {}
    # no shadow: only a renaming Saver's key past its prefix that the graph's restoring
    # vtr Saver named so (model/w/ExponentialMovingAverage from w; review-25-attack-r82 F3)
    graph = set(ckpt.meta.variables) if shadows else restorer_named(ckpt)
    for key, var in written_from_own(sources, variables, whole=False, renamed=graph,
                                     shadows=shadows, averaged=vtr_variables(ckpt),
                                     proven=restorer_named(ckpt) if shadows else ()).items():
        if var not in variables and var not in out and model(key):
            out[var] = key
    held = set(out.values())
    if not held:
        return None
    # ... or from the variable its name sits under with the tail every raw holder's key has:
    # a suffix after each key of a vtr Saver (c/x beside w/ExponentialMovingAverage/x,
    # exported as c; review-22-attack-r64 F3)
    tails = {k: src[0] for k in variables if k not in held and model(k)
             for src in [sources.get(k) or []] if len(src) == 1
             and k.startswith(src[0] + "/")
             and all(h.endswith(k[len(src[0]):]) for h in held)}
    # never a weight: an average, a slot, the step, whatever the key's name
    state_keys = {k for k in variables if sources.get(k)
                  and all(s in state for s in sources[k])}
    if any(k in ckpt.meta.variables and sources[k] != [k] for k in state_keys):
        return None  # another variable's name over an average (a swapping Saver): refused
    # a model variable under its own name; where the update ops are not read whole (some
    # shadows may be unseen), only a trainable one: no shadow is
    # ... or under the prefix every raw holder's name has over its variable's (net/stat from
    # stat beside net/W/ExponentialMovingAverage from W, a Saver of {"net/" + k: v} of
    # variables_to_restore(): review-23-attack-r69 F7)
    prefix = _held_prefix(sources, out)
    renamed = {k: src[0] for k in variables if prefix and k not in held and model(k)
               for src in [sources.get(k) or []] if len(src) == 1 and k == prefix + src[0]}
    # ... or with the scope every raw holder's variable has stripped (emb from tower/emb beside
    # w/ExponentialMovingAverage from tower/w, a Saver of {k.replace("tower/", "", 1): v}):
    # exported, as the holders are, under the graph's name (review-23-attack-r70 F4, F7)
    scope = _stripped_scope(sources, out)
    if scope:
        out = {sources[key][0]: key for key in out.values()}
        renamed.update({k: src[0] for k in variables if k not in held and k not in renamed
                        and model(k) for src in [sources.get(k) or []]
                        if len(src) == 1 and src[0] == scope + k})
    # where the update ops are read whole and show no ema.apply() (an evaluation graph), no
    # key is a shadow: its batch-norm statistics are the model's (review-23-attack-r70 F8)
    whole = shadows is not None or shadow_owners(ckpt, whole=True) is not None
    own = [k for k in variables if (sources.get(k) == [k] or k in renamed) and model(k) and (
        renamed.get(k, k) in trainable
        or (whole and variables[k].role in (R.WEIGHT, R.BN_STAT)))]
    if any(k not in held and k not in tails and k not in state_keys and k not in renamed
           and sources.get(k) != [k] for k in variables):
        return None
    for key, var in tails.items():
        if var not in variables and var not in out:
            out[var] = key
    out.update((name, k) for k in own for name in [renamed[k] if scope and k in renamed else k]
               if name not in out and k not in out.values())
    return out


def _held_prefix(sources: dict[str, list[str]], holders: dict[str, str]) -> str:
    """The prefix every one of ``holders`` (export name -> key) has before the variable its
    key was written from (``net/`` of ``net/W`` from ``W``); ``""`` where they have none,
    or not one and the same."""
    found = {name[: -len(src[0])] if name.endswith("/" + src[0]) else None
             for name, key in holders.items() for src in [sources.get(key) or [""]]}
    return next(iter(found)) or "" if len(found) == 1 else ""


def _stripped_scope(sources: dict[str, list[str]], holders: dict[str, str]) -> str:
    """The scope every one of ``holders`` (export name -> key) has on the variable its key
    was written from and not on the key (``tower/`` of ``w/ExponentialMovingAverage`` from
    ``tower/w``, a Saver that stripped it); ``""`` where they have none, or not one and the
    same."""
    found = set()
    for key in holders.values():
        src = (sources.get(key) or [""])[0]
        cuts = {src[: i + 1] for i, c in enumerate(src) if c == "/"
                and key.startswith(src[i + 1:] + "/") and not key.startswith(src[: i + 1])}
        found.add(max(cuts, key=len) if len(cuts) == 1 else None)
    return next(iter(found)) or "" if len(found) == 1 else ""


def restored_raw_warning(ckpt: Checkpoint, holders: dict[str, str]) -> str:
    """``export --raw``'s warning for what :func:`restored_raw_holders` exports (without
    ``warning:``), where the caller stated ``keys_are_raw``
    (:func:`~ckpt_tools.raw_stated.refuse_unstated_raw`)."""
    k, h = next(iter(holders.items()))
    k = ((written_sources(ckpt) or {}).get(h) or [k])[0]  # the graph's name (b of model/b)
    graph = graph_named(ckpt)
    parts = [n for n in holders if LAST_PART.search(n)]
    said = (f"; the parts of a partitioned variable export one each, as stored (e.g. "
            f"{parts[0]})" if parts else "")
    # an evaluation graph's keys are refused before (raw_stated.refuse_unstated_raw)
    shadows = training_state(ckpt, shadows_only=True)
    stored = sorted(k for k, src in (written_sources(ckpt) or {}).items()
                    if src and all(s in shadows for s in src))
    # another object's averages (or this one's, beside a subset) may be stored: said so,
    # never "no average is stored" (review-22-attack-r66 F6)
    averages = (f"; {counted(len(stored), 'key')} it wrote from EMA shadows "
                f"{agreeing(len(stored), 'holds', 'hold')} averages, not raw "
                f"weights, and are left out (e.g. {stored[0]})" if stored else
                "; no average is stored")
    # an evaluation graph that built ema.apply() (never run), restored the averages and saved
    # again with such a Saver writes the averages the same way: the graph cannot tell it from
    # a training one, so they are written only as stated (review-23-attack-r70 F1, F2)
    return (f"exporting the raw weights under their variables' names: the {graph}'s save op "
            f"wrote them under their averages' names (e.g. {h} from {k}), as a training "
            "Saver(ema.variables_to_restore()) does" + averages + said + "; written as the raw "
            "weights only because you stated --keys-are-raw: if an evaluation graph restored "
            "the averages and saved again with that Saver, they are the averages")

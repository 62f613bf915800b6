"""TF1 keys holding an average under a name that is not an average's, paired through the
save op.

A swapping Saver (``{v.op.name: ema.average(v), ema.average_name(v): v}``,
``MovingAverageOptimizer.swapping_saver()``), one that swaps only some variables (the rest
saved plainly: review r20 F1), or one saving averages under other keys (``{"W": W, "avgW":
ema.average(W)}``) stores the average of ``W`` under a key that does not say so, and maybe
``W`` itself under ``W/ExponentialMovingAverage``. The ``.meta``'s save op records which
variable each key was written from (:mod:`.save_op`), and its update ops which variable each
shadow averages (``AssignMovingAvg``: :mod:`.formats.meta_updates`; TF's ``<var>/<name>``
where the graph records none): :func:`swapped_pairs` pairs every key through them, so the
average of ``W`` comes from whatever key holds ``W``'s shadow, into whatever key holds ``W``.
Where any key's holder is unproven it pairs nothing (:mod:`.saved_keys` refuses).
"""

from __future__ import annotations

from . import roles as R
from .checkpoint import Checkpoint
from .meta_shadows import update_ops_of
from .raw_named import raw_named_keys
from .saved_keys import PART, held_variables, translated_pairs, written_over
from .wording import agreeing, counted

_OBJECT_GRAPH = "_CHECKPOINTABLE_OBJECT_GRAPH"


def _averaged(ckpt: Checkpoint) -> dict[str, tuple[str, str]]:
    """Shadow op -> ``(the variable op its AssignMovingAvg averages, that op's EMA name
    scope)``, from the ``.meta``'s (or TF1 SavedModel's) update ops (``{}`` where it records
    none), read as every reader of them does (:func:`~ckpt_tools.meta_shadows.update_ops_of`):
    its ``ckpt.meta.path`` is the file :func:`~ckpt_tools.save_op.graph_file` reads the save
    op from (both the file the graph was read from; ``None`` in a ``--no-meta`` view)."""
    def read() -> dict[str, tuple[str, str]]:
        ops = update_ops_of(ckpt.meta)
        found = {} if ops is None else dict(ops[0].averages)
        return {**_whole(found), **found}
    return ckpt.memo("saved_swaps_averaged", read)


def _whole(averaged: dict[str, tuple[str, str]]) -> dict[str, tuple[str, str]]:
    """The partitioned variables' shadows as the save op names them: the parts' shadows
    (``W/part_0/ExponentialMovingAverage`` of ``W/part_0``) as one
    (``W/ExponentialMovingAverage`` of ``W``), where every part's says so (a swapping Saver
    of a partitioned variable saves its parts' averages as slices of key ``W``:
    review-13-attack-r24 F4b)."""
    whole: dict[str, tuple[str, str] | None] = {}
    for s, (v, scope) in averaged.items():
        ws, wv = PART.sub("", s), (PART.sub("", v), scope)
        if ws != s:
            whole[ws] = wv if whole.get(ws, wv) == wv else None
    return {s: v for s, v in whole.items() if v is not None and s not in averaged}


def key_holders(ckpt: Checkpoint, variables) -> dict[str, str] | None:
    """Key -> the one variable the save op wrote it from, for every key; ``None`` where the
    save op is not proven the writer or a key holds several variables' parts."""
    held_of = held_variables(ckpt)
    if not held_of:
        return None
    held: dict[str, str] = {}
    for key in variables:
        if key == _OBJECT_GRAPH:
            continue
        h = held_of.get(key)
        if h is None:
            return None
        held[key] = h
    return held if len(set(held.values())) == len(held) else None


def _shadow_owner(held_name: str, averaged: dict[str, tuple[str, str]], holder: dict[str, str],
                  ema_name: str | None) -> str | None:
    """The variable whose shadow ``held_name`` is: the update ops' word, or TF's
    ``<var>/<ema_name>`` where they record none (a stored variable's, ``ema_name`` the one EMA
    name); ``None`` for a model variable."""
    if held_name in averaged:
        return averaged[held_name][0]
    if averaged or not ema_name:
        return None
    head, _, last = held_name.rpartition("/")
    return head if last == ema_name and head in holder else None


def _objects(owner: dict[str, str | None], held: dict[str, str],
             averaged: dict[str, tuple[str, str]]) -> dict[str, tuple[str, str]]:
    """Key holding a shadow -> ``(the EMA name scope its update op ran in, or "";
    the shadow's name after its variable's, as TF's average_name() made it)``."""
    out = {}
    for k, o in owner.items():
        if o is not None:
            suffix = held[k][len(o) + 1:] if held[k].startswith(o + "/") else ""
            out[k] = (averaged.get(held[k], ("", ""))[1], suffix)
    return out


def _chosen(objects: dict[str, tuple[str, str]], ema_name: str | None) -> set[str] | None:
    """The keys holding the shadows of the EMA object ``ema_name`` names (``--ema-name``):
    its name scope (``s1/ExponentialMovingAverage``), else the shadows' suffix
    (``ExponentialMovingAverage_1``, ``ema/slow``), else its last part (``slow``), else the
    scope's last part; every shadow-holding key without ``ema_name``; ``None`` where it
    names none."""
    if ema_name is None:
        return set(objects)
    for part in (lambda sc, su: sc, lambda sc, su: su, lambda sc, su: su.rpartition("/")[2],
                 lambda sc, su: sc.rpartition("/")[2]):
        kept = {k for k, (sc, su) in objects.items() if part(sc, su) == ema_name}
        if kept:
            return kept
    return None


def swap_objects(ckpt: Checkpoint, variables) -> list[str]:
    """The ``--ema-name`` values that each pair a swapping Saver's checkpoint whose keys
    hold the shadows of several EMA objects (``{"W": e2.average(W), e2.average_name(W): W,
    e1.average_name(W): e1.average(W)}``), which :func:`swapped_pairs` pairs only with one
    named (review-13-attack-r24 F2): the objects' name scopes where the update ops record
    them, else the shadows' suffixes; ``[]`` where there are not several or one fails."""
    if ckpt.objects is not None:
        return []
    held = key_holders(ckpt, variables)
    if held is None:
        return []
    holder = {h: k for k, h in held.items()}
    averaged = _averaged(ckpt)
    owner = {k: _shadow_owner(h, averaged, holder, None) for k, h in held.items()}
    found = sorted({sc or su for sc, su in _objects(owner, held, averaged).values()})
    if len(found) < 2 or any(swapped_pairs(ckpt, variables, n) is None for n in found):
        return []
    return found


def swapped_pairs(ckpt: Checkpoint, variables,
                  ema_name: str | None = None) -> tuple[list, list, list, dict] | None:
    """:func:`_swapped_pairs`, computed once per open checkpoint and ``ema_name`` for the
    same ``variables`` (the same :class:`~ckpt_tools.variable.Variable` records under the same
    keys: most callers of one command pass the checkpoint's own); each caller gets its own
    lists and dict."""
    memo = ckpt.memo("saved_swaps_pairs", dict)
    items = list(variables.items())
    last = memo.get(ema_name)
    if last is None or len(last[0]) != len(items) or not all(
            k == k2 and v is v2 for (k, v), (k2, v2) in zip(items, last[0], strict=True)):
        last = memo[ema_name] = (items, _swapped_pairs(ckpt, variables, ema_name))
    found = last[1]
    if found is None:
        return None
    pairs, missing, not_saved, names = found
    return list(pairs), list(missing), list(not_saved), dict(names)


def _swapped_pairs(ckpt: Checkpoint, variables,
                   ema_name: str | None) -> tuple[list, list, list, dict] | None:
    """Pairs a TF1 checkpoint whose save op stored some average under a key not named as one
    (a swapping Saver, whole or partial, or averages under other keys).

    Returns:
        ``(pairs, missing, not_saved, names)``: ``pairs`` as
        :func:`~ckpt_tools.ema_names.from_keys` gives them, in checkpoint keys (the key
        holding each variable takes the key holding its shadow); ``missing``: keys holding a
        weight no stored shadow averages; ``names``: key -> the variable it holds, for the
        keys named as that variable's average (what ``export`` calls them). ``None`` where no
        key holds a shadow under another name, or anything is unproven: a key's variable,
        a shadow's variable not stored, another EMA name than ``ema_name``.
    """
    if ckpt.objects is not None:
        return None
    held = key_holders(ckpt, variables)
    if held is None:
        return None
    if all(h == k for k, h in held.items()):
        return None  # every key its variable's name (the common case: no graph walk)
    holder = {h: k for k, h in held.items()}
    averaged = _averaged(ckpt)
    names = {ema_name} if ema_name else set(ckpt.ema_names()) or {R.DEFAULT_EMA_NAME}
    owner = {k: _shadow_owner(h, averaged, holder, next(iter(names)) if len(names) == 1
                              else None) for k, h in held.items()}
    if not any(o and not k.startswith(o + "/") for k, o in owner.items()):
        return None  # every average under an average's name: the keys' own names pair
    kept = _chosen(_objects(owner, held, averaged), ema_name)
    if kept is None:
        return None  # ema_name names no EMA object whose averages are stored here
    shadow_of: dict[str, str] = {}  # key holding a variable -> key holding its shadow
    lone: dict[str, str] = {}  # key holding a shadow -> its variable, which no key holds
    for k, o in owner.items():
        if o is None or k not in kept:
            continue  # (another EMA object's average than ema_name's: not used)
        t = holder.get(o)
        if t is None:  # a Saver of the averages alone: exported under the variable's name
            if o in variables or PART.search(o) or o in lone.values():
                return None  # its name is a key holding something else, or a part's
            lone[k] = o
            continue
        if owner[t] is not None or t in shadow_of:
            return None
        shadow_of[t] = k

    over = written_over(ckpt)  # keys whose role was read as the variable written (r49 F2)

    def role(k: str) -> str:  # the role of what the key holds, as its name would say
        v = variables.get(held[k]) if k not in over and held[k] not in over else None
        return v.role if v is not None else variables[k].role

    plain = [k for k in held if owner[k] is None and role(k) not in (R.EMA, R.EMA_DEBIAS)]
    if any(owner[k] is None and role(k) == R.EMA for k in held):
        return None  # an average the update ops do not record: another EMA object's
    pairs = [(shadow_of.get(k, k), k) for k in plain] + list(lone.items())
    missing = [k for k in plain if role(k) == R.WEIGHT and k not in shadow_of]
    # named as its variable's average: TF's <var>/<name>, or the shadow's own name where
    # ema.apply() ran under a scope (s/W/ExponentialMovingAverage holding W: its update op
    # averages W), never a name another key holding a variable has (s14k)
    names = {k: held[k] for k in plain if k.startswith(held[k] + "/") or (
        averaged.get(k, ("",))[0] == held[k] and held[k] not in plain)}
    return pairs, missing, [], names


def plain_keys_of(ckpt: Checkpoint, variables, ema_name: str | None = None) -> dict[str, str]:
    """Key holding a variable raw under its average's name (a swapping Saver's
    ``W/ExponentialMovingAverage``) -> that variable's own name, a key holding an average, for
    a checkpoint :func:`swapped_pairs` pairs; ``{}`` otherwise. A bake writes each average
    under both (a plain ``Saver()`` reads ``W``, the graph's swapping Saver ``W/<ema>``), which
    a crossed Saver (``{"b": ema.average(c), "c": ema.average(b), ...}``) needs: key ``b``
    holds ``c``'s average there (review-13-attack-r24 F0)."""
    found = swapped_pairs(ckpt, variables, ema_name)
    return {} if found is None else dict(found[3])


def raw_holders(ckpt: Checkpoint, variables,
                ema_name: str | None = None) -> dict[str, str] | None:
    """Export name -> the key holding that model weight raw, for ``export --raw`` of a
    checkpoint :func:`swapped_pairs` pairs (a key named as an average that holds the variable
    is exported under the variable's name; keys holding averages are not exported); ``None``
    where it pairs nothing. Where the keys hold several EMA objects' shadows the keys
    holding the weights are the same whichever ``ema_name`` (:func:`swap_objects`) pairs."""
    found = swapped_pairs(ckpt, variables, ema_name)
    if found is None and ema_name is None:
        objects = swap_objects(ckpt, variables)
        found = swapped_pairs(ckpt, variables, objects[0]) if objects else None
    if found is None:
        return None
    pairs, _, _, names = found
    out: dict[str, str] = {}
    raw = raw_named_keys(ckpt)  # proven raw by the save op, whatever its name reads as
    for _, t in pairs:
        v = variables.get(names[t]) if t in names else variables.get(t)  # None: not stored
        if v is not None and (v.role in (R.WEIGHT, R.BN_STAT) or t in raw):
            # a stripped vtr key beside a second object's averages (w/ExponentialMovingAverage
            # from tower/w) reads by name as a tensor's average: named as its variable
            # (review-22-attack-r66 F8)
            out[names.get(t) or raw.get(t) or t] = t
    return out


def averages_alone(ckpt: Checkpoint, variables) -> dict[str, str]:
    """Key -> the variable whose average it holds, for the keys :func:`swapped_pairs` pairs
    with a variable no key holds (a Saver of the averages alone under other keys:
    ``{"ema/" + ema.average_name(v): ema.average(v)}``); ``{}`` where it pairs nothing."""
    found = swapped_pairs(ckpt, variables)
    return {} if found is None else {s: t for s, t in found[0] if t not in variables}


def averages_alone_said(ckpt: Checkpoint) -> str:
    """Why ``export --raw`` finds no weight where the save op proves every key holds an
    average (:func:`averages_alone`), or ``""``."""
    alone = averages_alone(ckpt, {v.name: v for v in ckpt.variables_unwarned()})
    if not alone:
        return ""
    k, t = next(iter(sorted(alone.items())))
    return (f"its {counted(len(alone), 'tensor')} {agreeing(len(alone), 'holds', 'hold')} "
            f"averages only (the .meta's save op wrote {k} "
            f"from {t}'s shadow), and --raw exports model weights only: without --raw they "
            "export as their variables' averages")


def shadow_keys(ckpt: Checkpoint, variables) -> set[str] | None:
    """The keys holding averages, for a checkpoint :func:`swapped_pairs` pairs (what
    ``average --ema`` averages: ``W`` of a swapping Saver, not ``W/ExponentialMovingAverage``,
    which holds ``W`` raw); where the keys hold several EMA objects' shadows, those of every
    object :func:`swap_objects` finds (each pairs alone); ``None`` where it pairs nothing (the
    roles say)."""
    found = swapped_pairs(ckpt, variables)
    if found is not None:
        return {s for s, t in found[0] if s != t}
    # several objects' shadows (``{"W": fast.average(W), "W/fast": W, "W/slow":
    # slow.average(W)}``) pair only one object at a time: read by the names instead, key
    # ``W`` (fast's average) was copied from the newest input as a raw weight and ``W/fast``
    # (W raw) averaged as a shadow, exit 0 (note/s33e.md)
    objects = swap_objects(ckpt, variables)
    if not objects:
        return None
    held: set[str] = set()
    for name in objects:
        pairs = swapped_pairs(ckpt, variables, name)
        if pairs is None:  # swap_objects found each one pairing: never, but not guessed
            return None
        held |= {s for s, t in pairs[0] if s != t}
    return held


def graph_named_averages(ckpt: Checkpoint) -> dict[str, str]:
    """Key -> the shadow variable the ``.meta``'s save op wrote into it, for each stored key
    named as another graph variable whose written variable the update ops record as an EMA
    shadow (``AssignMovingAvg``): ``{"model/W": slow.average(W), ...}`` holds an average under
    W's name, whatever W's name reads as (the keys named as no graph variable are
    :func:`~ckpt_tools.written_roles.written_shadows`'). ``{}`` without a save op that wrote
    ``ckpt`` or update ops recording shadows, for TF2 files, or where none is so."""
    meta = ckpt.meta
    if meta is None or ckpt.objects is not None:
        return {}
    held = held_variables(ckpt)
    averaged = _averaged(ckpt) if held else {}
    if not averaged:
        return {}
    graph = {v.checkpoint_key for v in meta.variables.values()}
    return {k: h for k, h in held.items()  # type: ignore[union-attr]
            if k in graph and k in ckpt.entries() and h is not None and h != k
            and h in averaged}


def pairs_through_save_op(ckpt: Checkpoint, variables,
                          ema_name: str | None = None) -> tuple[list, list, list] | None:
    """The pairs of a TF1 checkpoint whose keys the save op proves, where the keys' names do
    not: renamed keys (:func:`~ckpt_tools.saved_keys.translated_pairs`), else averages under
    keys not named as averages (:func:`swapped_pairs`); ``None`` where neither pairs."""
    found = translated_pairs(ckpt, variables, ema_name)
    if found is None:
        swapped = swapped_pairs(ckpt, variables, ema_name)
        found = None if swapped is None else swapped[:3]
    return found

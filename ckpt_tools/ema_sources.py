"""TF1 keys named like a weight's average that the ``.meta``'s update ops show written from
something else (review-17-attack-r36 F7, F9): a tensor no variable holds (a gradient's moment
kept by ``assign_moving_average``), or another variable averaged by another EMA object
(object ``slow/ema``'s ``w0/slow/ema`` beside a variable ``w0/slow``). The weight has no
average under that name: the map reports it missing (``--allow-missing`` keeps it raw) or,
where the graph's collections do not pair it, refuses.
"""

from __future__ import annotations

import glob

from .checkpoint import Checkpoint
from .ema_refusals import UnprovenPairingError, unwritten_message
from .ema_unread import unread_message
from .ema_updates import update_ops
from .formats.meta_copies import FEED
from .formats.meta_updates import UpdateOps
from .meta_shadows import unmade_by_training
from .offer_probe import option_text, works
from .saved_keys import held_variables


def tensor_sources(ckpt: Checkpoint, variables, ema_name: str | None,
                   chosen: dict[str, str], use_meta: bool) -> dict[str, tuple[str, str, str]]:
    """TF1 weights ``W`` whose average read by name (``chosen`` for it, or ``W/<ema_name>``)
    the ``.meta``'s ``AssignMovingAvg`` op writes from a tensor no variable holds: a first
    moment of ``W``'s gradient kept by ``assign_moving_average(m, grad, ...)`` under
    ``W/ExponentialMovingAverage`` was exported as ``W``'s average with no statement, exit 0
    under ``--strict`` (review-17-attack-r36 F7); ``ema.average(W)`` is ``None`` there. The
    keys alone cannot tell (``--no-meta``).

    Returns:
        weight key -> ``(that key, the tensor averaged, the update op's name scope)``.
    """
    if not use_meta or ckpt.objects is not None:
        return {}
    ops = update_ops(ckpt)
    if ops is None or not ops.tensors:
        return {}
    named = {t: f"{t}/{ema_name}" for t in variables
             if ema_name and f"{t}/{ema_name}" in variables}
    return {t: (s, *ops.tensors[s]) for t, s in {**named, **chosen}.items()
            if s in ops.tensors and t in variables}


def tensor_source_text(found: dict[str, tuple[str, str, str]]) -> str:
    """What the graph shows of :func:`tensor_sources`' first weight, for a refusal."""
    target, (source, tensor, scope) = next(iter(sorted(found.items())))
    return (f"{source} is no average of {target}: the .meta's update op "
            f"{scope + '/' if scope else ''}AssignMovingAvg averages the tensor {tensor} into "
            f"it, which no variable holds (a gradient's moment kept by assign_moving_average, "
            f"not ema.apply({target})), so no ExponentialMovingAverage averaged {target}")


def written_sources(ckpt: Checkpoint, variables, ema_name: str | None,
                    chosen: dict[str, str], use_meta: bool) -> dict[str, tuple[str, str, str]]:
    """TF1 weights ``W`` whose average read by name (``chosen`` for it, or ``W/<ema_name>``)
    the ``.meta``'s graph shows written by an op that is no ``AssignMovingAvg`` update (its
    ``writers``, :class:`~ckpt_tools.formats.meta_updates.UpdateOps`): a moment kept by a
    plain ``tf1.assign(m, 0.9 * m + 0.1 * grad)`` under ``W/ExponentialMovingAverage`` was
    exported as ``W``'s average, exit 0 under ``--strict`` (review-17-attack-r38 F9). With the
    graph read, a key is ``W``'s average only where nothing but ``ema.apply()``'s update op
    writes it; a key nothing writes (an eval graph's ``.meta``) keeps the name's reading.

    Returns:
        weight key -> ``(that key, the op writing it, the op's type)``.
    """
    if not use_meta or ckpt.objects is not None:
        return {}
    ops = update_ops(ckpt)
    if ops is None or not ops.writers:
        return {}
    named = {t: f"{t}/{ema_name}" for t in variables
             if ema_name and f"{t}/{ema_name}" in variables}
    trained = set(ckpt.meta.keys_in("trainable_variables")) if ckpt.meta else set()
    # a variable the graph trains is no shadow at all: the collections say so (r36 F3)
    return {t: (s, *ops.writers[s]) for t, s in {**named, **chosen}.items()
            if s in ops.writers and t in variables and s != t and s not in trained}


def unwritten_sources(ckpt: Checkpoint, variables, ema_name: str | None,
                      chosen: dict[str, str], use_meta: bool) -> dict[str, str]:
    """TF1 weights ``W`` the ``.meta``'s graph trains or keeps for averaging whose average
    read by name (``chosen`` for it, or ``W/<ema_name>``) no op of the graph writes, where
    the graph is a training graph: an op writes ``W`` (an optimizer's ``Apply*``, an assign)
    or it runs ``ema.apply()`` (``AssignMovingAvg`` updates, of variables or tensors). Such a
    key is no value this graph's ``apply()`` produced: ``w0/ExponentialMovingAverage`` kept as
    ``w0``'s gradient moment from Python (``Variable.load()`` runs the variable's own
    initializer, so no writer is seen) beside a default EMA over ``w1`` was exported as
    ``w0``'s average, exit 0 under ``--strict`` (review-18-attack-r41 F1); so it was beside
    another object's ``apply()`` of ``w0`` (``fast``, in a scope or not: review-19-attack-r45
    F1), beside no EMA at all or one of loss tensors only (F4), beside a multi-graph
    SavedModel's ``apply()`` in a function not read (F3), and with a ``.meta`` whose graph
    lacks the key (F5). The graph cannot tell that key from a real average stored beside a
    ``.meta`` of another graph (``ema_refusals.contradiction_message``'s shape), so the
    caller refuses both ways open: ``--no-meta`` (the checkpoint's names) or
    ``--allow-missing`` (``W`` raw, as ``ema.average(W)`` is ``None`` in this graph).

    So is a weight the graph neither trains nor averages (frozen, or not trainable and trained
    by hand with ``w0.assign_sub(...)``) where an op of the graph trains some variable and the
    graph holds the key as its own variable that nothing writes: the graph made that variable
    outside ``apply()``, so the contradiction refusal's "the .meta is another graph's" and its
    one way out, ``--no-meta`` (the kept tensor as the average), did not fit; TF's answer,
    ``--allow-missing`` (``W`` raw), was refused (review-19-attack-r45 F8); so where the kept
    key is in no collection but its save op saved it (review-20-attack-r49 F1). A graph that
    writes no variable or lacks the key keeps that refusal
    (:func:`~ckpt_tools.ema_names.from_meta`).

    An eval graph's ``.meta`` (nothing writes ``W``, no ``apply()``) keeps the name's reading,
    as ``variables_to_restore()`` does; a Saver that renamed the keys is read through its save
    op (:func:`translated_unwritten`).

    Returns:
        weight key -> the key read as its average.
    """
    if not use_meta or ckpt.objects is not None or ckpt.meta is None:
        return {}
    ops = update_ops(ckpt)
    if ops is None:
        return {}
    applies = bool(ops.averages or ops.tensors)
    meta = ckpt.meta
    named = {t: f"{t}/{ema_name}" for t in variables
             if ema_name and f"{t}/{ema_name}" in variables}
    trained = set(meta.keys_in("trainable_variables"))
    paired = trained | set(meta.keys_in("moving_average_variables"))
    own = {v.checkpoint_key for v in meta.variables.values()}
    # every other reading is another rule's: a writer (written_sources), a tensor's average
    # (tensor_sources), an optimizer's slot (refuse_slot_sources), a trained buffer; a key
    # the graph does not hold at all is no proof either (the .meta is another graph's: F5)
    seen = {*ops.averages, *ops.writers, *ops.tensors, *ops.slots, *trained}
    # an apply() of the key's own name averaging W (a partitioned W's per-part keys are read
    # apart): the key's reading is that object's; another object's apply() of W is not (F1)
    named_by = set(ops.averages.values())  # the whole EMA name counts (r46 F2)
    # a weight in neither collection: the graph's own key nothing writes, in a graph some op
    # of which trains a variable (F8); without both, a .meta from another graph's refusal
    # (the rule list shares: meta_shadows.unmade_by_training)
    return {t: s for t, s in {**named, **chosen}.items()
            if t in variables and s in variables and s != t and s not in seen
            and unmade_by_training(t, s, own=own, paired=paired, applies=applies,
                                   writers=ops.writers, named_by=named_by,
                                   holds=lambda key: _graph_holds(ckpt, key, own))}


def _graph_holds(ckpt: Checkpoint, key: str, own: set[str]) -> bool:
    """Whether the ``.meta``'s graph holds ``key`` as a variable of its own: one of its
    collections' (``own``), or one in no collection (``collections=[]``, saved by an explicit
    ``var_list``) that its save op, proven the writer of ``ckpt``, saved under that very key
    (review-20-attack-r49 F1); a ``.meta`` of another graph's save op proves nothing."""
    return key in own or (held_variables(ckpt) or {}).get(key) == key


def unlisted_weights(ckpt: Checkpoint, found: dict[str, str]) -> tuple[str, ...]:
    """The weights of :func:`unwritten_sources`' ``found`` in neither of the graph's
    ``trainable_variables`` and ``moving_average_variables`` (r45 F8), for the refusal's
    wording.

    Returns:
        those weight keys, sorted."""
    meta = ckpt.meta
    if meta is None:
        return ()
    paired = {*meta.keys_in("trainable_variables"), *meta.keys_in("moving_average_variables")}
    return tuple(sorted(t for t in found if t not in paired))


def translated_unwritten(ckpt: Checkpoint, pairs, use_meta: bool) -> dict[str, str]:
    """:func:`unwritten_sources`' rule for a TF1 ``Saver(var_list=dict)`` whose keys are not
    its variables' names (``{"net/" + v.op.name: v}``), paired through the save op by
    :func:`~ckpt_tools.saved_keys.translated_pairs`: each pair is read as the graph's
    variables the save op saved under its keys, and where the graph trains the weight or runs
    ``ema.apply()``, a key is its average only where an ``AssignMovingAvg`` update of the
    graph averages the weight into it; a moment kept from Python or written by a hand assign
    under ``net/w0/ExponentialMovingAverage`` was exported as ``net/w0``'s average, exit 0
    (review-19-attack-r45 F2). An eval graph's ``.meta`` keeps the names' reading.

    Args:
        pairs: ``(average key, weight key)`` pairs in checkpoint keys.

    Returns:
        weight key -> the key read as its average that the graph does not prove.
    """
    if not use_meta or ckpt.objects is not None or ckpt.meta is None:
        return {}
    ops = update_ops(ckpt)
    held = held_variables(ckpt)
    if ops is None or not held:
        return {}
    applies = bool(ops.averages or ops.tensors)
    found = {}
    for s, t in pairs:
        # a weight not stored (a Saver of the averages alone) is named as the graph's variable
        hs, ht = held.get(s), held.get(t, t)
        if s == t or (hs in ops.averages and ops.averages[hs][0] == ht):
            continue  # proven by the graph's apply() (or no average at all)
        if applies or ht in ops.writers or hs in ops.writers or hs in ops.slots \
                or hs in ops.reads:  # an optimizer's input (its lr), as a slot: unproven
            found[t] = s
    return found


def refuse_unwritten_sources(ckpt: Checkpoint, variables, ema_name: str | None,
                             chosen: dict[str, str], use_meta: bool,
                             allow_missing: bool,
                             found: dict[str, str] | None = None, left_out=None,
                             stated: str | None = None) -> dict[str, str]:
    """:func:`unwritten_sources` (or ``found``, :func:`translated_unwritten`'s), refused unless
    ``allow_missing`` states that the weights have no average (they are then returned and
    kept raw: :attr:`~ckpt_tools.EmaMap.raw` lists them, and, as for every weight
    ``allow_missing`` restores raw, :attr:`~ckpt_tools.EmaMap.missing` does not;
    review-20-attack-r49 F3) or the map's filters leave each pair out
    (``left_out(average key, weight key)``: ``--exclude``, note s28g F5), the refusal then
    offering the ``--exclude`` of those weights (with the ``stated`` ``--ema-name``) where
    the export accepts it.

    Returns:
        `dict`: weight key -> the key read as its average, none proven (also those left
        out: no average of theirs is read).

    Raises:
        UnprovenPairingError: (exit 6) naming ``--exclude``, ``--no-meta`` and
            ``--allow-missing``.
    """
    unlisted: tuple[str, ...] = ()
    if found is None:
        found = unwritten_sources(ckpt, variables, ema_name, chosen, use_meta)
        unlisted = unlisted_weights(ckpt, found)
    refused = {t: s for t, s in found.items() if left_out is None or not left_out(s, t)}
    if refused and not allow_missing:
        ops = update_ops(ckpt)
        if ops is not None and not ops.whole:  # an unread apply() may write them (r103 F5)
            raise UnprovenPairingError(unread_message(ckpt, refused, stated),
                                       "--exclude or --no-meta",
                                       {t: (s,) for t, s in refused.items()})
        exclude = tuple(sorted(glob.escape(t) for t in refused))
        offer = option_text(stated, exclude) if works(ckpt, stated, exclude) else ""
        raise UnprovenPairingError(
            unwritten_message(ckpt, refused, tuple(t for t in unlisted if t in refused),
                              offer),
            "--exclude, --no-meta or --allow-missing" if offer else
            "--no-meta or --allow-missing", {t: (s,) for t, s in refused.items()})
    return found


def written_source_text(ckpt: Checkpoint, found: dict[str, tuple[str, str, str]]) -> str:
    """What the graph shows of :func:`written_sources`' first weight, for a refusal."""
    target, (source, op, kind) = next(iter(sorted(found.items())))
    ops = update_ops(ckpt)
    what = f"the op {op}" if op.rpartition("/")[2] == kind else f"the {kind} op {op}"
    copied = copied_value(ops, target, source)
    if copied:  # a copy the graph cannot prove an average or not: the name decides (r41 F2)
        return (f"{source} is no proven average of {target}: the .meta's graph shows {what} "
                f"writing it {copied}, and no AssignMovingAvg op of "
                f"ema.apply() averaging {target} into it, so the graph does not prove what it "
                f"holds; --no-meta (use_meta=False) reads the key by its name, as {target}'s "
                "average: that option decides")
    besides = " (besides an AssignMovingAvg op averaging it)" if ops is not None and \
        ops.averages.get(source, ("",))[0] == target else ""
    # the key names the EMA whose apply() would write it: W/adam_m is no default EMA's key
    name = source[len(target) + 1:] if source.startswith(target + "/") else ""
    key = (f"{source}, the key an ExponentialMovingAverage named {name!r} would give "
           f"{target}'s average" if name else f"{source}, a key named like an average")
    return (f"{source} is no proven average of {target}: the .meta's graph shows {what} "
            f"writing it{besides}, which is not ema.apply()'s update (an "
            f"AssignMovingAvg op averaging {target} into it, and nothing else writing it): a "
            f"tensor kept by hand under {key}")


def copied_value(ops: UpdateOps | None, target: str, source: str) -> str:
    """What every write of ``source`` (``target``'s average read by name) the ``.meta``'s graph
    shows copies into it, where each is a copy the graph cannot prove an average or not: of
    ``target``'s value, of its own, of a backup variable only given those, or fed from outside
    (a ``Placeholder`` or ``Const``: a warm start's); ``""`` where a write computes its value
    (a tensor kept by hand) or copies another variable. Such copies into ``apply()``'s own
    shadow of ``target`` are no writers at all (:mod:`.formats.meta_copies`); elsewhere the
    keys' names decide (``--no-meta``; review-18-attack-r41 F2)."""
    found = ops.copies.get(source, ()) if ops is not None else ()

    def only_copied(key: str) -> bool:
        """Whether ``key``'s writers are all copies (no write computing its value)."""
        return ops.writers.get(key, ("",))[0] in {o for o, _t, _s in ops.copies.get(key, ())}

    def plain(value: str) -> bool:
        return value in (FEED, target, source) or only_copied(value) and all(
            s in (target, source) for _o, _t, s in ops.copies[value])

    if not found or not only_copied(source) or not all(plain(s) for _o, _t, s in found):
        return ""
    values = sorted({"a value fed from outside the graph (a Placeholder or Const, as a warm "
                     "start assigns)" if s == FEED else f"{target}'s value" if s == target
                     else f"the backup {s} of {target} or of itself" for _o, _t, s in found
                     if s != source})
    return " and ".join(values) or "its own value"


def foreign_sources(variables, ema_name: str | None, chosen: dict[str, str],
                    ops: UpdateOps | None) -> list[str]:
    """Variables ``W`` whose ``W/<ema_name>`` another EMA object's ``apply()`` wrote from
    another variable (object ``slow/ema``'s average of ``w0``, ``w0/slow/ema``, beside a
    variable ``w0/slow``): ``W`` has no average of its own under that name; read by name it
    was given ``w0``'s (review-17-attack-r36 F9)."""
    if ema_name is None or ops is None:
        return []
    found = []
    for target in variables:
        source = f"{target}/{ema_name}"
        other, scope = ops.averages.get(source, ("", ""))
        own = ops.averages.get(chosen.get(target, ""), ("",))[0] == target  # proven its own
        if other and other != target and chosen.get(target) != source and not own \
                and scope in ops.grouped and chosen.get(other) != source:
            found.append(target)
    return found


def refuse_tensor_sources(ckpt: Checkpoint, variables, ema_name: str | None,
                          chosen: dict[str, str], use_meta: bool) -> None:
    """Refuses :func:`tensor_sources` where the graph's collections cannot report the weight
    missing its average instead.

    Raises:
        UnprovenPairingError: (exit 6, ``--ema-name``) naming the tensor the graph averages.
    """
    found = tensor_sources(ckpt, variables, ema_name, chosen, use_meta)
    if found:
        said = f"--ema-name {ema_name}: " if ema_name else ""
        raise UnprovenPairingError(
            f"{ckpt.path}: {said}{tensor_source_text(found)}; nothing stored holds its "
            "average", "--ema-name", {t: (s,) for t, (s, _x, _y) in found.items()})


def trained_sources(ckpt: Checkpoint, variables, ema_name: str | None,
                    chosen: dict[str, str], ops: UpdateOps | None) -> list[str]:
    """Variables ``W`` whose ``W/<ema_name>`` is a variable the graph trains (a hand-made
    buffer ``w1/ema``), where the ``.meta``'s update ops prove an EMA object of that name
    (``ema.apply()``'s grouped scope ``ema``): ``W`` has no average of that object's, so the
    true ``--ema-name ema`` is no longer refused as naming no EMA object
    (review-17-attack-r36 F3)."""
    if ema_name is None or ops is None or ckpt.meta is None:
        return []
    if not any(s == ema_name or s.endswith("/" + ema_name) for s in ops.grouped):
        return []
    trained = set(ckpt.meta.keys_in("trainable_variables"))
    return [t for t in variables if f"{t}/{ema_name}" in trained and t not in chosen
            and f"{t}/{ema_name}" not in ops.averages]


def renumbered_averages(ckpt: Checkpoint, variables, ema_name: str | None,
                        chosen: dict[str, str], use_meta: bool) -> dict[str, str]:
    """``chosen``, with each weight whose ``W/<ema_name>`` is another EMA's average of an
    average (:func:`~ckpt_tools.ema_updates.stacked_sources`) given the key the ``.meta``'s
    update ops show the object of name scope ``ema_name`` writing from ``W``: with ``fast``
    over ``ema.average(w0)`` applied before object ``ema/fast``, TF names ``fast``'s average
    ``w0/ema/fast`` and ``ema/fast``'s ``w0/ema/fast_1`` (review-17-attack-r36 F11)."""
    from .ema_updates import stacked_sources

    ops = update_ops(ckpt) if use_meta and ema_name and ckpt.objects is None else None
    stacked = stacked_sources(ckpt, variables, ema_name, chosen, ops)
    if not stacked:
        return chosen
    out = dict(chosen)
    for target in stacked:
        keys = [k for k, (v, scope) in ops.averages.items()
                if v == target and scope == ema_name and scope in ops.grouped
                and k in variables]
        if len(keys) == 1:
            out[target] = keys[0]
    return out


def refuse_other_averaged(ckpt: Checkpoint, variables, chosen: dict[str, str],
                          use_meta: bool) -> None:
    """Refuses pairing a TF1 weight ``W`` with the key read as its average where the
    ``.meta``'s update ops show a hand-written ``assign_moving_average`` (no ``apply()``
    group) averaging another variable into that key: ``w0/ExponentialMovingAverage`` kept as
    the running mean of a slot ``w0/accum``, with no name stated, was exported as ``w0``'s
    average, exit 0 under ``--strict`` (a stated ``--ema-name`` was refused already:
    :func:`~ckpt_tools.ema_updates.refuse_slot_sources`).

    Raises:
        UnprovenPairingError: naming the key and the variable averaged into it (exit 6).
    """
    if not use_meta or ckpt.objects is not None:
        return
    ops = update_ops(ckpt)
    if ops is None:
        return
    for target, source in sorted(chosen.items()):
        other, scope = ops.averages.get(source, ("", ""))
        if other and other != target and target in variables and scope not in ops.grouped \
                and chosen.get(other) != source:
            raise UnprovenPairingError(
                f"{ckpt.path}: {source} is no average of {target}: the .meta's update op "
                f"{scope + '/' if scope else ''}AssignMovingAvg averages {other} into it (a "
                f"running mean of another variable kept by assign_moving_average, not "
                f"ema.apply({target})), so nothing "
                f"stored holds {target}'s average; --raw exports the raw weights",
                None, {target: (source,)})

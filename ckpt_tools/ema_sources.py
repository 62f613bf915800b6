"""TF1 keys named like a weight's average that the ``.meta``'s update ops show written from
something else (review-17-attack-r36 F7, F9): a tensor no variable holds (a gradient's moment
kept by ``assign_moving_average``), or another variable averaged by another EMA object
(object ``slow/ema``'s ``w0/slow/ema`` beside a variable ``w0/slow``). The weight has no
average under that name: the map reports it missing (``--allow-missing`` keeps it raw) or,
where the graph's collections do not pair it, refuses.
"""

from __future__ import annotations

from .checkpoint import Checkpoint
from .ema_refusals import UnprovenPairingError
from .ema_updates import update_ops
from .formats.meta_updates import UpdateOps


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


def written_source_text(ckpt: Checkpoint, found: dict[str, tuple[str, str, str]]) -> str:
    """What the graph shows of :func:`written_sources`' first weight, for a refusal."""
    target, (source, op, kind) = next(iter(sorted(found.items())))
    ops = update_ops(ckpt)
    besides = " (besides an AssignMovingAvg op averaging it)" if ops is not None and \
        ops.averages.get(source, ("",))[0] == target else ""
    what = f"the op {op}" if op.rpartition("/")[2] == kind else f"the {kind} op {op}"
    # the key names the EMA whose apply() would write it: W/adam_m is no default EMA's key
    name = source[len(target) + 1:] if source.startswith(target + "/") else ""
    key = (f"{source}, the key an ExponentialMovingAverage named {name!r} would give "
           f"{target}'s average" if name else f"{source}, a key named like an average")
    return (f"{source} is no proven average of {target}: the .meta's graph shows {what} "
            f"writing it{besides}, which is not ema.apply()'s update (an "
            f"AssignMovingAvg op averaging {target} into it, and nothing else writing it): a "
            f"tensor kept by hand under {key}")


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

"""The TF1 EMA objects a ``.meta``'s update ops prove, by the name scope of each ``apply()``:
which object's averages a stated ``--ema-name`` takes where the names alone leave it open
(:func:`owned_averages`; TF1 numbers averages per variable, not per object), the objects
that averaged every averaged variable (:func:`complete_objects`), and the refusal that
offers them (:func:`offer_objects`).
"""

from __future__ import annotations

from . import roles as R
from .checkpoint import Checkpoint
from .ema_objects import last_part_reads, named_applies
from .ema_refusals import UnprovenPairingError, suffix_base
from .ema_scopes import Applies, apply_averages, named_apply, scope_averages, scope_offers
from .ema_updates import mixed_keys, scope_name, update_ops


def _applies(ckpt: Checkpoint, variables) -> Applies | None:
    """:func:`~ckpt_tools.ema_scopes.apply_averages` of the ``.meta``'s update ops."""
    ops = update_ops(ckpt)
    return apply_averages(ops, mixed_keys(ckpt) if ops is not None else set(), variables)


def _scopes(ckpt: Checkpoint, variables) -> tuple[dict[str, dict[str, str]], set] | None:
    """``(EMA name scope -> {variable: its average}, every variable averaged)`` where the
    ``.meta``'s update ops show every TF1 average updated from its variable and each scope
    one ``apply()``'s; else ``None``."""
    found = _applies(ckpt, variables)
    if found is None:
        return None
    applies, scope_of, averaged = found
    scopes = {scope_of[label]: avs for label, avs in applies.items()}
    if len(scopes) < len(applies):
        # apply() calls of one scope but for a tf.cond/while context or a tf.function (whose
        # scopes restart): maybe two objects, so no scope names one (review-18-attack-r41 F3)
        return None
    return scopes, averaged


def _named_apply(ckpt: Checkpoint, variables, ema_name: str) -> dict[str, str] | None:
    """:func:`~ckpt_tools.ema_scopes.named_apply` of the ``.meta``'s update ops."""
    found = _applies(ckpt, variables)
    return None if found is None else named_apply(found, update_ops(ckpt).grouped, ema_name)


def complete_objects(ckpt: Checkpoint, variables, use_meta: bool) -> list[str]:
    """The ``--ema-name`` of each EMA object the ``.meta``'s update ops show averaged every
    variable any TF1 average is of (see :func:`owned_averages`): the last part of its name
    scope, or, where that is not the name its averages carry and they all carry one no other
    object's carry, that name (a.apply() twice, then b.apply(): b's scope is
    ``ExponentialMovingAverage_2``, its averages ``<W>/ExponentialMovingAverage_1``, which
    ``--ema-name`` reads; review-18-attack-r41 F5)."""
    if not use_meta or ckpt.objects is not None:
        return []
    found = _scopes(ckpt, variables)
    if found is None:  # apply() calls sharing a scope: each name one apply() writes (r43 F7)
        applies = _applies(ckpt, variables)
        return sorted({k[len(t) + 1:] for avs in (applies[0].values() if applies else ())
                       for t, k in avs.items() if k.startswith(t + "/")
                       and _named_apply(ckpt, variables, k[len(t) + 1:]) == avs})
    grouped = update_ops(ckpt).grouped
    stored = {(v.ema_of, key) for key, v in variables.items()
              if v.role == R.EMA and v.ema_style == "tf1"}
    names: set[str] = set()
    # only ema.apply()'s scopes (a NoOp of their name groups them): a hand-written
    # assign_moving_average's ops at the graph's root name no EMA object (review-15-attack-r29 F2)
    for scope, avs in found[0].items():
        name = scope_name(scope, avs)
        if scope not in grouped or owned_averages(ckpt, variables, name, use_meta,
                                                  None) is None:
            continue
        tails = {k[len(t) + 1:] if k.startswith(t + "/") else "" for t, k in avs.items()}
        tail = next(iter(tails)) if len(tails) == 1 else ""
        names.add(tail if tail and all(avs.get(t) == k for t, k in stored
                                       if k == f"{t}/{tail}") else name)
    return sorted(names)


def owned_averages(ckpt: Checkpoint, variables, ema_name: str | None, use_meta: bool,
                   chosen: dict[str, str] | None) -> dict[str, str] | None:
    """The averages of the one EMA object whose update ops' name scope is ``ema_name``
    (``ExponentialMovingAverage_1`` for the second default-named one), where the ``.meta``'s
    graph proves whose every TF1 average is and that object averaged every variable any
    average is of.

    TF1 numbers averages per variable, not per object: after ``e1.apply([w])`` and
    ``e2.apply([w, v])``, e2's are ``w/ExponentialMovingAverage_1`` and
    ``v/ExponentialMovingAverage`` (review-11-attack-r16 F1); their ``AssignMovingAvg`` ops
    share e2's scope. An object that averaged only some of the variables is left to the
    name-based reading (which refuses where the names leave it open).

    Args:
        chosen: what the name-based reading picked (``None``: it refused); a reading that
            gives every averaged variable an average is kept as it is.

    Returns:
        `dict[str, str]`: variable key -> its average key, or ``None`` where the graph does
        not prove such an object.
    """
    if ema_name is None or not use_meta or ckpt.objects is not None:
        return None
    if chosen is not None and {v.ema_of for v in variables.values() if v.role == R.EMA
                               and v.ema_style == "tf1"} <= set(chosen):
        return None
    found = _scopes(ckpt, variables)
    if found is None:  # apply() calls sharing a scope: the one writing the name (r43 F7)
        return _named_apply(ckpt, variables, ema_name)
    scopes, averaged = found
    # the object whose shadows carry the name, wherever a name_scope or variable_scope put
    # its scope (an object fast applied in name_scope("ema") has the scope ema/fast; r58 F3)
    ops, mine = update_ops(ckpt), named_applies(ckpt, ema_name, use_meta)
    called = {scope for s, (_v, scope) in ops.averages.items()
              if ops.applies.get(s, scope) in mine}
    scoped = scope_averages(ckpt, variables, ema_name, use_meta, scopes) if (
        not called or ema_name in called) else None
    if scoped is not None:  # gen/ExponentialMovingAverage: the scope names one object
        return scoped
    # the root scope of that very name before one under a variable_scope (x/ExponentialMoving
    # Average, whose averages x/<W>/... --ema-name x/ExponentialMovingAverage takes; r43 F4)
    named = [s for s in scopes if s in called] if called else [
        s for s in scopes if s.rpartition("/")[2] == ema_name
        and last_part_reads(ckpt, ema_name, use_meta)]  # no object named so (r53 F1)
    if ema_name in named or ema_name in scopes and not called:
        named = [ema_name]
    if len(named) != 1 or set(scopes[named[0]]) != averaged:
        return None
    mine = scopes[named[0]]
    if any(v.role == R.EMA and v.ema_style == "tf1" and mine[v.ema_of] != key and (
            key == f"{v.ema_of}/{ema_name}" if named[0] == ema_name
            else key.rpartition("/")[2] == ema_name) for key, v in variables.items()):
        # another object's average carries the name as its suffix (the scope's name was
        # taken, so the scopes and the suffixes count apart): which one is meant is open
        return None
    return mine


def offer_objects(ckpt: Checkpoint, variables, use_meta: bool,
                  refusal: UnprovenPairingError) -> UnprovenPairingError:
    """``refusal``, saying which ``--ema-name`` takes one EMA object's averages whole where
    the ``.meta``'s update ops prove one (:func:`complete_objects`)."""
    from .offer_probe import works  # it runs the map: imported late

    # each as its export accepts it, never one refused (review-23-attack-r68 F5: "with this
    # .meta --ema-name fast decides" where --ema-name fast is refused, c having no fast average)
    proven = complete_objects(ckpt, variables, use_meta)
    names = [n for n in proven if works(ckpt, n)]
    found = _scopes(ckpt, variables) if use_meta and ckpt.objects is None else None
    scoped = [s for s in scope_offers(found[0] if found else None, proven)
              if works(ckpt, s.partition(" (")[0], (), True)]
    if not names and not scoped:
        return refusal
    text = (f" (with this .meta --ema-name {names[0]} decides: it takes the averages of the "
            "EMA object that averaged every one of these variables, as the graph's update ops "
            "show)" if len(names) == 1 else
            f" (with this .meta each of --ema-name {', --ema-name '.join(names)} decides: "
            "each takes the averages of the EMA object of that name, which averaged every one "
            "of these variables, as the graph's update ops show)" if names else "")
    twice = sorted(n for n in names if n != suffix_base(n) and suffix_base(n) in names)
    if twice:  # two objects given one name: TF numbers the later apply()'s (r31 F7)
        first = suffix_base(twice[0])
        text += (f"; if you gave two objects the name {first!r}, TF named the scope and the "
                 f"averages of the second one to run apply() {twice[0]}: --ema-name {first} "
                 f"takes the first one's, which TF's own variables_to_restore() (average_name "
                 f"{first}) restores for either object")
    if scoped:
        text += ("; yet this .meta tells the objects apart: its update ops show EMA objects of "
                 "one name under different name scopes, and --ema-name "
                 f"{' or --ema-name '.join(scoped)} takes that object's averages (with "
                 "--allow-missing, the variables it did not average raw)")
    said = str(refusal)  # less its "no option decides", which the offer makes false (r118 F5)
    said = said[:len(said) - len(refusal.none_decides)]
    return UnprovenPairingError(f"{said}{text}", "--ema-name", refusal.undecided)

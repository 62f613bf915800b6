"""A stated TF1 ``--ema-name`` behind a renaming Saver whose object averaged a weight left
without an average (review-24-attack-r73 F1, F7).

``Saver({"model/" + v.op.name: v})`` stores ``c`` as ``model/c`` and fast's shadow of ``c``
made under ``variable_scope("s")`` (``s/c/fast``) as ``model/s/c/fast``. The renamed keys are
paired through the save op (:func:`~ckpt_tools.saved_keys.translated_pairs`), by TF's
``<variable>/<name>``: that shadow is no ``model/c/fast``, so ``c`` was left without an average
and ``--allow-missing`` exported it raw, exit 0, though the stored ``model/s/c/fast`` is fast's
average of ``c`` (or a second object named ``fast``'s: the file does not tell). Likewise
fast's average of ``c`` left out of the Saver: the plain Saver's twin is refused. The
``.meta``'s update ops name the graph's variables, so each weight is read as the variable the
save op wrote into its key.
"""

from __future__ import annotations

import glob

from .checkpoint import Checkpoint
from .ema_refusals import UnprovenPairingError, suffix_base
from .ema_updates import update_ops
from .formats.meta_updates import UpdateOps
from .offer_probe import option_text, works
from .saved_keys import PART, held_variables


def _ends_in(parts: list[str], name: str) -> bool:
    """Whether ``parts`` end in every part of ``name``, each as given or with TF's ``_N``."""
    want = name.split("/")
    tail = parts[len(parts) - len(want):]
    return len(parts) >= len(want) and all(
        p == q or suffix_base(q) == p for p, q in zip(want, tail, strict=True))


def _carries(scope: str, shadow: str, var: str, name: str) -> bool:
    """Whether an object named ``name`` (the whole stated name: ``fast``, ``x/fast``) may
    have written ``shadow``, ``var``'s average, in an ``apply()`` of name scope ``scope``:
    the scope ends in the name (``s/fast``, ``fast_1``), and the shadow is
    ``<variable_scope>/<var>/<name>`` (its last part may carry TF's ``_N``). An object named
    ``x/fast`` averages ``c`` into ``c/x/fast``, which no object named ``fast`` writes, and
    runs apply() under ``x/fast``, which no object named ``x/fast`` does for ``fast``
    (review-25-attack-r80 F4)."""
    parts = shadow.split("/")
    head = parts[:len(parts) - len(name.split("/"))]
    owner = var.split("/")
    return (_ends_in(scope.split("/"), name) and _ends_in(parts, name)
            and len(head) >= len(owner) and head[len(head) - len(owner):] == owner)


def _ops_and_held(ckpt: Checkpoint, asked: bool) -> tuple[UpdateOps, dict] | None:
    """What both refusals read of a TF1 ``.meta``: its update ops
    (:func:`~ckpt_tools.ema_updates.update_ops`) and the variable its save op wrote into each
    key (:func:`~ckpt_tools.saved_keys.held_variables`).

    Returns:
        ``(ops, held)``, or ``None`` where nothing is ``asked`` (no keys, or ``--no-meta``),
        for a TF2 file, or where the graph records neither.
    """
    if not asked or ckpt.objects is not None:
        return None
    ops = update_ops(ckpt)
    held = held_variables(ckpt)
    if ops is None or not held:
        return None
    return ops, held


def refuse_stated_unaveraged(ckpt: Checkpoint, ema_name: str | None, missing: list[str],
                             use_meta: bool) -> None:
    """Refuses a stated ``--ema-name`` whose pairing through a renaming Saver's save op left
    weights (``missing``, checkpoint keys) without an average where the ``.meta``'s update ops
    show an ``apply()`` carrying the stated name averaging the variable the save op wrote
    into that weight's key: its average is stored under a key not named
    ``<weight>/<ema_name>`` (a variable_scope's), or not stored beside several other
    objects' averages of it; neither makes the weight one the stated object left out. With
    no name stated, a weight left raw whose variable's average (any ``apply()``'s) is stored
    is refused too: ``model/c`` exported raw beside ``model/s/c/fast``, fast's average of
    ``c`` applied again under ``variable_scope("s")`` (review-25-attack-r80 F1).

    Raises:
        UnprovenPairingError: naming the weight, the shadow and the ``apply()`` (exit 6; no
            option decides: ``ckpt export --raw`` exports the raw weights).
    """
    read = _ops_and_held(ckpt, bool(missing) and use_meta)
    if read is None:
        return
    ops, held = read
    key_of = {h: k for k, h in held.items() if h is not None}
    for target in sorted(missing):
        var = held.get(target) or target
        shadows = [(PART.sub("", s), scope) for s, (v, scope) in ops.averages.items()
                   if PART.sub("", v) == var]
        kept = {key_of[s] for s, _scope in shadows if s in key_of}
        # an unsaved one as the plain Saver's twin reads it: a weight with one other
        # object's average is the stated object's missing one (raw, --allow-missing); one
        # with several, none the stated object's, is refused (review-23-attack-r68 F2)
        found = sorted((s, scope) for s, scope in shadows
                       if _carries(scope, s, var, ema_name) and (s in key_of or len(kept) > 1)
                       ) if ema_name is not None else sorted(
            (s, scope) for s, scope in shadows if s in key_of and s not in ops.slots)
        if not found:
            continue
        shadow, scope = found[0]
        stored = key_of.get(shadow)
        if ema_name is None:  # one name or none stated: its stored average left unread (r80 F1)
            raise UnprovenPairingError(
                f"{ckpt.path}: {target} holds {var}, and the .meta's update ops show apply() "
                f"{scope!r} averaging {var} into {shadow}, stored as {stored}, which the "
                f"renaming Saver's keys do not pair with {target}, so --allow-missing would "
                f"export {target} raw beside its stored average; ckpt export --raw exports "
                "the raw weights instead", None, {target: (stored,)})
        why = (f"stored as {stored}, which is not named {target}/{ema_name}, so its average "
               f"is not proven the stated object's ({ema_name} applied again, or a second "
               f"object named {ema_name}, under a variable_scope writes such a key)" if stored
               else f"which the checkpoint does not store, beside {len(kept)} other objects' "
               f"averages of it ({', '.join(sorted(kept))}): the Saver left out the stated "
               f"object's average, so {target} is no weight that object left out, which "
               "--allow-missing exports raw")
        raise UnprovenPairingError(
            f"{ckpt.path}: --ema-name {ema_name}: {target} holds {var}, and the .meta's update "
            f"ops show apply() {scope!r} averaging {var} into {shadow}, {why}; "
            "ckpt export --raw exports the raw weights instead",
            None, {target: (stored,) if stored else ()})


def refuse_averaged_elsewhere(ckpt: Checkpoint, found: dict[str, str], use_meta: bool) -> None:
    """Refuses the keys a renaming Saver's pairing reads as a weight's average (``found``:
    weight key -> key, :func:`~ckpt_tools.ema_sources.translated_unwritten`'s) where the
    ``.meta``'s update ops show an ``apply()`` averaging another variable into that key:
    fast applied again under ``variable_scope('s')`` over ``c`` writes ``s/c/fast``, stored
    as ``model/s/c/fast`` beside a model variable ``s/c``. The refusal of keys nothing writes
    would say no ``apply()`` writes it and offer ``--no-meta``, whose reading by the names
    exports ``c``'s average as ``s/c`` (review-25-attack-r80 F2).

    Raises:
        UnprovenPairingError: naming the key, the ``apply()`` and the variable it averages
            (exit 6; no option decides: ``ckpt export --raw`` exports the raw weights).
    """
    read = _ops_and_held(ckpt, bool(found) and use_meta)
    if read is None:
        return
    ops, held = read
    for target, key in sorted(found.items()):
        shadow = held.get(key)
        if shadow is None or shadow not in ops.averages:
            continue
        var, scope = ops.averages[shadow]
        raise UnprovenPairingError(
            f"{ckpt.path}: {key} is named as {target}'s average, but the .meta's update ops "
            f"show apply() {scope!r} averaging {PART.sub('', var)} into it ({shadow}), not "
            f"{held.get(target) or target}, and the renaming Saver's keys do not pair that "
            f"average with its weight; neither reading by the names (--no-meta) nor "
            "--allow-missing is right here: ckpt export --raw exports the raw weights instead",
            None, {target: (key,)})



#: How :func:`other_objects_hint` begins.
OTHER_OBJECTS = "the .meta's update ops show that their stored averages are other "


def other_objects_hint(ckpt: Checkpoint, ema_name: str | None, missing: list[str],
                       use_meta: bool) -> str | None:
    """The hint for a stated ``--ema-name`` whose pairing through a renaming Saver's save op
    left weights (``missing``, checkpoint keys) without an average where the ``.meta``'s
    update ops show that their stored averages are other objects': slow over ``w``, ``b`` and
    fast over ``c``, saved as ``avg/w``, ``avg/b``, ``avg/c``: ``--ema-name slow`` leaves
    ``c``, whose average ``avg/c`` is fast's. The missing-shadow refusal said ``c`` was
    probably frozen, read ``avg/c`` as another EMA name and offered ``--allow-missing``
    (review-28-attack-r104 F3). Keys the Saver stored under their own names
    (``c/ExponentialMovingAverage``) name their object, and the other hints say so.

    Returns:
        `str` naming each such weight's stored average and the ``apply()`` that wrote it,
        with the ``--exclude`` offer that exports the stated object's averages without them
        where the export accepts it; ``None`` where no such weight is left.
    """
    read = _ops_and_held(ckpt, bool(missing) and ema_name is not None and use_meta)
    if read is None or ema_name is None:
        return None
    ops, held = read
    key_of = {h: k for k, h in held.items() if h is not None}
    names = [n for n in ema_name.split(",") if n]  # slow,fast states each name's averages
    said = []
    for target in sorted(missing):
        var = held.get(target) or target
        # a key the Saver renamed (avg/c, not c/fast): one named so says its object itself
        stored = sorted((key_of[s], scope) for s, (v, scope) in ops.averages.items()
                        if PART.sub("", v) == var and s in key_of and s not in ops.slots
                        and PART.sub("", key_of[s]) != PART.sub("", s)
                        and not any(_carries(scope, PART.sub("", s), var, n) for n in names))
        if stored:
            said.append((target, var, *stored[0]))
    if not said:
        return None
    shown = "; ".join(f"{t}'s average {key} is written by apply() {scope!r}"
                      + (f" (of {var})" if var != t else "") for t, var, key, scope in said[:3])
    exclude = tuple(glob.escape(t) for t, *_rest in said)
    offer = next((option_text(ema_name, exclude, allow) for allow in (False, True)
                  if works(ckpt, ema_name, exclude, allow)), None)
    return (f"{OTHER_OBJECTS}ExponentialMovingAverage objects', not {ema_name}'s: {shown}"
            f"{' ...' if len(said) > 3 else ''}; "
            + (f"{offer} exports {ema_name}'s averages without them; " if offer else "")
            + "ckpt export --raw exports the raw weights instead")

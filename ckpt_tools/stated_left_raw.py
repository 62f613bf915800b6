"""A stated TF1 ``--ema-name`` that leaves a weight without an average where the ``.meta``'s
update ops show that weight's variable averaged into a stored key carrying the very name the
stated reading takes (review-25-attack-r86 F2, F10).

TF1 names an average ``<variable_scope>/<var>/<object name>``: one object applied again
under ``variable_scope('s')`` (or a second object of its name applied there) writes
``s/c/fast`` beside ``w/fast``. A stated name reads one of the two only: ``--ema-name
x/fast`` read ``w/x/fast`` and ``b/x/fast`` and left ``c`` without an average though
``s/c/x/fast`` (an object named ``x/fast``'s) is stored, and ``--ema-name s/fast``, no
object's name (``s/c/fast`` is an object named ``fast``'s, its ``apply()`` scope
``s/fast``), read ``c``'s and left ``w`` and ``b``, whose ``w/fast`` and ``b/fast`` are
stored. The map then said the weights were probably frozen, and ``--allow-missing`` exported
them raw, exit 0: they are no weights the stated object left out, and the graph does not
tell whether one object or two of that name wrote the averages, so no option decides.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from .checkpoint import Checkpoint
from .ema_refusals import UnprovenPairingError, suffix_base
from .ema_scopes import vscoped_hint
from .ema_updates import update_ops
from .offer_probe import works
from .saved_keys import PART, held_variables


def carried_name(shadow: str, var: str) -> str | None:
    """The object name an average carries after its variable's name: ``s/c/x/fast`` of
    ``c`` -> ``x/fast`` (the last place ``var``'s parts occur with a name after them), or
    ``None`` where ``shadow`` holds no such place."""
    parts, owner = shadow.split("/"), var.split("/")
    for i in range(len(parts) - len(owner) - 1, -1, -1):
        if parts[i:i + len(owner)] == owner:
            return "/".join(parts[i + len(owner):])
    return None


def _object_name(shadow: str, var: str, tails: set[str]) -> str | None:
    """The name of the object that wrote ``shadow`` (``var``'s average) as TF1 numbers it:
    ``w/fast_1`` beside ``w/fast`` (``tails``: the names ``var``'s averages carry) is a second
    object named ``fast``'s (TF numbers averages per variable), while a lone ``c/fast_1`` is an
    object named ``fast_1``'s."""
    tail = carried_name(shadow, var)
    if tail is None:
        return None
    base = suffix_base(tail)
    return base if base != tail and base in tails else tail


def refuse_left_beside_named(ckpt: Checkpoint, ema_name: str | None,
                             pairs: Iterable[tuple[str, str]], missing: Iterable[str],
                             use_meta: bool,
                             kept: Callable[[str], bool] = lambda _t: True) -> None:
    """Refuses a stated ``--ema-name`` whose map leaves a weight (of ``missing``, checkpoint
    keys, that ``kept`` says the command writes) without an average where the ``.meta``'s
    update ops show its variable averaged into a stored key written by an object of the name
    the stated name is, or of the name an average the map reads (``pairs``: ``(average key,
    weight key)``) was written by (``s/c/fast``: ``fast``; ``w/fast_1`` beside ``w/fast``: a
    second object named ``fast``; review-25-attack-r84 F3). Keys are read as the variables the
    save op wrote into them (a renaming Saver's ``model/c`` as ``c``).

    Raises:
        UnprovenPairingError: naming the weight, the stored average and the ``apply()``
            calls writing that object name's averages, and, where no average of the graph
            carries the stated name, the names they carry (exit 6; no option writes the
            weight raw: ``ckpt export --raw`` exports the raw weights), and, where the
            averages sit under a variable_scope, :func:`~ckpt_tools.ema_scopes.vscoped_hint`'s
            stored keys and the ``--ema-name`` that takes them.
    """
    missing = [t for t in missing if kept(t)]
    if ema_name is None or not missing or not use_meta or ckpt.objects is not None:
        return
    ops = update_ops(ckpt)
    if ops is None:
        return
    held = held_variables(ckpt) or {}

    def graph(key: str) -> str:
        return PART.sub("", held.get(key) or key)

    stored = {graph(k): k for k in ckpt.keys()}
    averages: dict[str, set[tuple[str, str]]] = {}  # variable -> {(shadow, apply() scope)}
    for shadow, (var, scope) in ops.averages.items():
        if shadow not in ops.slots:
            averages.setdefault(PART.sub("", var), set()).add(
                (PART.sub("", shadow), ops.applies.get(shadow, scope)))
    tails = {v: {t for s, _scope in found if (t := carried_name(s, v)) is not None}
             for v, found in averages.items()}
    owner = {s: n for v, found in averages.items() for s, _scope in found
             if (n := _object_name(s, v, tails[v])) is not None}
    read = {ema_name: None} | {owner[graph(s)]: (s, t) for s, t in sorted(pairs)
                               if s != t and graph(s) in owner}
    # variables (each part its own) each apply() scope averaged: two scopes averaging one
    # variable into two averages are two objects (an object keeps one average per variable:
    # TF 2.x's apply() of a variable its object averages already reuses that average and
    # adds a second update op under the new scope, which ops.averages, keyed by average,
    # records once; review-27-attack-r98 F5)
    by_scope: dict[str, set[str]] = {}
    for shadow, (var, scope) in ops.averages.items():
        if shadow not in ops.slots:
            by_scope.setdefault(ops.applies.get(shadow, scope), set()).add(var)
    names = {t for found in tails.values() for t in found}
    # a scope that is no object's name only (fast_1 may be a second fast's scope, or a name)
    mine = by_scope.get(ema_name, set()) if ema_name not in names else set()
    for target in sorted(missing):
        var = graph(target)
        if mine and all(sc != ema_name and by_scope[sc] & mine
                        for _s, sc in averages.get(var, ())):
            continue  # --ema-name <apply() scope>: only other objects averaged it (r20 F7)
        found = sorted((s, scope) for s, scope in averages.get(var, ())
                       if s in stored and owner.get(s) in read)
        if not found:
            continue
        shadow, scope = found[0]
        name = owner[shadow]
        example = read[name]
        like = (f", as {example[0]} (read as {example[1]}'s average) is" if example else "")
        writes: dict[str, list[str]] = {}
        for each in averages.values():
            for s, sc in each:
                if owner.get(s) == name and s in stored:
                    writes.setdefault(sc, []).append(stored[s])
        shows = "; ".join(f"apply() {sc!r} writes {', '.join(sorted(ks))}"
                          for sc, ks in sorted(writes.items()))
        carried = sorted({carried_name(s, v) or s for v, each in averages.items()
                          for s, _scope in each if s in stored})
        named = ""
        if ema_name not in carried:  # no object of the graph is named so (r86 F10)
            named = (f"no stored average of the graph is named <variable>/{ema_name}, so no "
                     f"EMA object is named {ema_name} (an object named N writes "
                     f"<variable_scope>/<var>/N): the averages carry the names "
                     f"{', '.join(carried)}; ")
        offered = [n for n in carried if n != ema_name and works(ckpt, n)]
        offer = (f"--ema-name {' or '.join(offered)} is accepted without --allow-missing; "
                 if offered else "")
        twice = sorted(s for v, each in averages.items() for s, _scope in each
                       if owner.get(s) == name and carried_name(s, v) != name)
        why = (f"several objects named {name} ({twice[0]}: TF numbers the average of a "
               f"variable another object named {name} averaged first; one object keeps "
               "one average per variable, its apply() of it again reusing that one)"
               if twice else
               f"one object named {name} applied again under another scope, or a second "
               "object of that name (the graph does not tell which made each apply())")
        hint = vscoped_hint(ckpt, ema_name, sorted({graph(t) for t in missing}))
        scoped = f"; {hint}" if hint else ""  # the stored keys and the option taking them
        raise UnprovenPairingError(
            f"{ckpt.path}: --ema-name {ema_name}: {named}{target} is left without an "
            f"average, but the .meta's update ops show apply() {scope!r} averaging {var} "
            f"into {shadow}, stored as {stored[shadow]}, an object named {name}'s average"
            f"{like} ({shows}): {why}, so "
            f"{target} is not proven a weight the stated object left out (not frozen: an "
            f"average of it is stored), which --allow-missing would export raw; {offer}"
            f"ckpt export --raw exports the raw weights instead{scoped}", None,
            {target: (stored[shadow],)})

"""Which TF1 EMA objects the ``.meta``'s update ops show averaging each variable
(review-21-attack-r53 F3, F1).

One ``ExponentialMovingAverage`` object keeps one average per variable, so a variable whose
``AssignMovingAvg`` ops update two average keys was averaged by two objects, whatever the
Saver kept of them. Read by the names alone, a Saver keeping ``fast``'s average of ``w`` and
``slow``'s of ``b`` gives each variable one average and a model mixed from two objects, exit 0;
and a stated ``--ema-name fast`` read by the last part of a name scope took the averages of an
object named ``ema/fast`` where the graph shows an object named ``fast`` whose averages were
not saved. The rules here refuse both, naming the objects. An object's name is what its
shadows carry (:func:`object_names`), not its name scope, which a ``name_scope`` or
``variable_scope`` moves (review-21-attack-r58 F1, F3).
"""

from __future__ import annotations

import fnmatch

from .checkpoint import Checkpoint
from .ema_refusals import UnprovenPairingError
from .ema_updates import part_update_ops, update_ops
from .wording import counted


def averaging_objects(ckpt: Checkpoint, use_meta: bool) -> dict[str, dict[str, str]]:
    """Returns variable key -> {average key: the EMA name that reads it} for each variable the
    ``.meta``'s update ops show ``AssignMovingAvg`` ops averaging into two average keys or more
    (two objects: one object keeps one average per variable); ``{}`` without a readable TF1
    ``.meta`` (or ``use_meta`` false). The name is what follows the variable's key in the
    average's (``w/ema/fast``: ``ema/fast``), else the update ops' name scope (an ``apply()``
    inside ``variable_scope("tower")`` writes ``tower/w/ExponentialMovingAverage``)."""
    got = part_update_ops(ckpt) if use_meta and ckpt.objects is None else None
    if got is None:
        return {}
    ops, key = got
    # by the graph's op names: each part of a partitioned variable has its own shadow, all
    # stored under one key (net/w/part_0/avg, net/w/part_1/avg): one object, not two
    per_part: dict[str, dict[str, str]] = {}
    for shadow, (var, scope) in ops.averages.items():
        per_part.setdefault(var, {})[shadow] = scope
    found: dict[str, dict[str, str]] = {}
    for var, shadows in per_part.items():
        if len(shadows) < 2:
            continue
        v = key(var)
        for shadow, scope in shadows.items():
            s = key(shadow)
            found.setdefault(v, {})[s] = s[len(v) + 1:] if s.startswith(v + "/") else scope
    return {v: names for v, names in found.items() if len(names) > 1}


def refuse_unstated_objects(ckpt: Checkpoint, pairs: list[tuple[str, str]], stored,
                            use_meta: bool) -> None:
    """Refuses an unstated pairing (no ``--ema-name``) that restores a variable from an
    average where the ``.meta``'s update ops show several EMA objects averaging it
    (:func:`averaging_objects`): the checkpoint does not record which object an evaluation
    uses, and a Saver keeping one object's average of ``w`` and another's of ``b`` made the
    names read as one model mixed from two objects, exit 0 (review-21-attack-r53 F3).

    Args:
        pairs: ``(average key, variable key)``; a variable paired with itself is raw.
        stored: the checkpoint's keys (a container answering ``in``).

    Raises:
        UnprovenPairingError: (exit 6, ``--ema-name``) naming the variable, the objects and
            which of their averages are stored.
    """
    several = averaging_objects(ckpt, use_meta)
    used = {t: s for s, t in pairs if s != t and s in stored and t in several}
    if not used:
        return
    names = sorted({n for t in used for n in several[t].values()})
    taken = sorted({several[t].get(s, s) for t, s in used.items()})
    t, s = sorted(used.items())[0]
    from .saved_keys import held_variables

    # the key it is stored under, where a renamed Saver's is another name (r117 M3)
    key = next((k for k, h in (held_variables(ckpt) or {}).items() if h == s and k != s), None)
    stored_as = f"{s} under key {key}" if key else s
    shows = ", ".join(f"{n} writes {k}" for k, n in sorted(several[t].items()))
    mixed = (f"; the averages read here would mix {' and '.join(taken)}" if len(taken) > 1
             else "")
    from .offer_probe import accepted, option_text, takes  # they run the map: late
    from .raw_stated import raw_offer

    # each offer as the export plan accepts it, never one refused (review-22-attack-r66 F4: a
    # renamed vtr Saver's ExponentialMovingAverage keys hold raw values, slow needs
    # --allow-missing; a Saver that kept no key of slow)
    took = [(n, a) for n, a in accepted(ckpt, names) if _takes_own(ckpt, several, n, a)]
    # with what each takes, so a variable it leaves raw is said (review-23-attack-r68 F6: a
    # renamed vtr Saver's --ema-name slow writes w raw with no --allow-missing)
    offers = [option_text(n, (), a) + "".join(f" (it takes {w})" for w in [takes(ckpt, n, a)]
                                              if w)
              for n, a in took]
    # a renamed vtr Saver's keys holding raw values only if a training graph saved them:
    # --exclude leaves those variables out, as without the prefix (s28a)
    from .raw_offers import excluding_offers

    out = excluding_offers(ckpt, [n for n in names if not any(n in o.split(",")
                                                              for o, _ in took)])
    offers += [f"{option_text(*o)} (their only keys hold raw values if a training graph "
               "saved them)" for o in out]
    took += [(n, False) for n, _, _ in out]
    raw_option = raw_offer(ckpt)  # --keys-are-raw where it rests on that (r70 F1, F2)
    raw = f", or {raw_option} for the raw weights" if raw_option else ""
    # the objects not offered, said refused (one whose averages were not saved)
    left = [n for n in names if not any(n in o.split(",") for o, _ in took)]
    refused = (f"; --ema-name {' or --ema-name '.join(left)} is refused (with "
               "--allow-missing too)" if left and offers else "")
    from .ema_scopes import vscoped_hint

    ops = update_ops(ckpt)  # averages stored under a variable_scope: which, and the way out
    scoped = vscoped_hint(ckpt, None, sorted({v for v, _scope in ops.averages.values()})
                          if ops is not None else [])
    raise UnprovenPairingError(
        f"{ckpt.path}: the .meta's update ops show {len(several[t])} EMA objects averaging "
        f"{t} ({shows}; the checkpoint stores {stored_as}), and "
        f"{counted(len(used), 'variable')} read here have averages of several "
        f"objects{mixed}; nothing recorded says which object an evaluation uses: "
        + (f"pass {' or '.join(offers)} (the object you evaluate with; "
           "--allow-missing restores raw the variables whose average of "
           f"it was not saved){raw}{refused}" if offers else
           f"no --ema-name decides (--ema-name {' or --ema-name '.join(names)}"
           " is refused, with --allow-missing too)"
           + (f"; ckpt export {raw_option} writes the raw weights" if raw_option else ""))
        + (f"; {scoped}" if scoped else ""),
        "--ema-name", {t: tuple(sorted(several[t])) for t in sorted(used)})


def _takes_own(ckpt: Checkpoint, several: dict[str, dict[str, str]], name: str,
               allow_missing: bool) -> bool:
    """Whether ``--ema-name name`` (``a,b`` too) exports, taking for each variable several
    objects averaged an average of one of the objects named: on towers' averages alone (fast
    under variable_scope a and b, a's saved) ``--ema-name b/fast --allow-missing`` takes
    a/fast's ``a/net/b/fast`` for ``net/b`` (review-22-attack-r65 F1's twins)."""
    from .offer_probe import exported  # it runs the export plan, which imports this module
    from .saved_keys import held_variables

    got = exported(ckpt, name, allow_missing)
    named = set(name.split(","))
    # each key as the variable the save op wrote under it: a renamed Saver's key model/W/fast
    # holding slow's average of W is slow's (review-32-attack-r117 M3: slow was said refused)
    held = held_variables(ckpt) or {}
    of = {t: (held.get(t) or t, held.get(k) or k) for t, k in got.items()}
    return bool(got) and all(several[v][a] in named for v, a in of.values()
                             if v in several and a in several[v])


def refuse_named_both(ckpt: Checkpoint, names: list[str], use_meta: bool,
                      include: list[str] | None = None,
                      exclude: list[str] | None = None) -> None:
    """Refuses ``--ema-name a,b`` where the ``.meta``'s update ops show two of the named
    objects averaging one variable: each name's map may take one of its averages and the
    join a model mixed from two objects (``fast``'s average of ``w``, ``slow``'s of ``b``,
    each other one not saved; review-21-attack-r53 F3).

    Only a variable the export writes matters (review-27-attack-r98 F2): one ``exclude``
    selects by its name or by any of its average keys is left out of the joined map
    (:func:`~ckpt_tools.ema_several.join_maps`' rule), and under ``include`` one only the
    key of one named object's average is selected by is that object's alone.

    Raises:
        UnprovenPairingError: (exit 6, ``--ema-name``) naming the variable and the objects.
    """
    def match_any(name: str, globs: list[str]) -> bool:  # emamap.match_any's rule
        return any(fnmatch.fnmatchcase(name, g) for g in globs)

    for var, found in sorted(averaging_objects(ckpt, use_meta).items()):
        if exclude and any(match_any(n, exclude) for n in (var, *found)):
            continue  # left out, whichever object's average it would be read from
        hit = sorted({n for n in names for k, own in found.items() if _names(n, own, k)
                      and (not include or match_any(var, include) or match_any(k, include))})
        if len(hit) > 1:
            raise UnprovenPairingError(
                f"{ckpt.path}: {var} has averages of two of the EMA objects named: the "
                f".meta's update ops show {' and '.join(hit)} both averaging it ("
                f"{', '.join(sorted(found))}, stored or not), so no one map takes both "
                "objects' averages; pass only the one whose averages you want to --ema-name "
                "(Python: ema_name=; --allow-missing restores raw the variables whose average "
                "of it was not saved), or leave it out (--exclude)",
                "--ema-name", {var: tuple(sorted(found))})


def both_averaged(ckpt: Checkpoint, name: str, other: str) -> list[str]:
    """The variables the ``.meta``'s update ops show the EMA objects ``name`` and ``other``
    both averaging: where there are some, ``--ema-name name,other`` is refused
    (:func:`refuse_named_both`) and is not to be offered."""
    return sorted(v for v, found in averaging_objects(ckpt, True).items()
                  if any(_names(name, n, k) for k, n in found.items())
                  and any(_names(other, n, k) for k, n in found.items()))


def _names(stated: str, own: str, key: str) -> bool:
    """Whether the stated EMA name reads ``key``, whose own name is ``own``: that name, or the
    last part of it (``fast`` of ``ema/fast``, as ``--ema-name fast`` may read it)."""
    return stated == own or own.endswith("/" + stated) or key.endswith("/" + stated)


def object_names(ckpt: Checkpoint, use_meta: bool) -> dict[str, frozenset[str]]:
    """Each ``apply()`` of the ``.meta``'s update ops (as
    :attr:`~ckpt_tools.formats.meta_updates.UpdateOps.applies` tells them apart) -> the EMA
    names its ``AssignMovingAvg`` ops write: TF1 creates ``ExponentialMovingAverage(name=N)``'s
    average of ``v`` as ``<variable scope of the apply()>/<v>/N`` (``N_1`` where that name was
    taken), so each shadow less its variable's key and less the one variable-scope prefix all
    the ``apply()``'s shadows share is its name. Its name scope is not: a ``name_scope`` or a
    ``variable_scope`` moves it, and TF numbers it apart from the shadows (``fast`` applied
    under ``variable_scope("ema")`` beside an object named ``ema/fast`` has the scope
    ``ema/fast_1`` and writes ``ema/net/w/fast``; review-21-attack-r58 F1, F3). A split that
    more than one prefix allows gives every name it allows; ``{}`` without update ops."""
    ops = update_ops(ckpt) if use_meta and ckpt.objects is None else None
    if ops is None:
        return {}

    def read() -> dict[str, frozenset[str]]:
        shadows: dict[str, list[tuple[str, str]]] = {}
        for shadow, (var, scope) in ops.averages.items():
            shadows.setdefault(ops.applies.get(shadow, scope), []).append((shadow, var))
        return {label: _written_names(found) for label, found in shadows.items()}

    return ckpt.memo("ema_object_names", read)


def _written_names(shadows: list[tuple[str, str]]) -> frozenset[str]:
    """The names ``(shadow, its variable)`` pairs of one ``apply()`` carry after the variable's
    key, under a variable-scope prefix all of them share (:func:`object_names`)."""
    splits = [{(s[:i], s[i + len(v) + 1:]) for i in range(len(s) - len(v) - 1)
               if s.startswith(v + "/", i) and (not i or s[i - 1] == "/")}
              for s, v in shadows]
    shared = set.intersection(*({p for p, _n in each} for each in splits))
    return frozenset(n for each in splits for p, n in each if p in shared)


def named_applies(ckpt: Checkpoint, ema_name: str, use_meta: bool) -> set[str]:
    """The ``apply()`` calls (:func:`object_names`' labels) whose shadows carry ``ema_name``,
    stored or not: the objects of that name, wherever their name scope went."""
    return {label for label, names in object_names(ckpt, use_meta).items()
            if ema_name in names}


def _endings(ckpt: Checkpoint, ema_name: str, use_meta: bool) -> list[str] | None:
    """The ``.meta``'s ``apply()`` name scopes ending in ``/<ema_name>`` where no EMA object's
    whole name is ``ema_name`` (an ``apply()`` scope of that name, an average
    ``<variable>/<ema_name>``, or an ``apply()`` whose shadows carry that name under a
    variable scope: :func:`object_names`, stored or not); ``None`` where one is, or without
    update ops."""
    ops = update_ops(ckpt) if use_meta and ckpt.objects is None else None
    if ops is None:
        return []
    scopes = {scope for _v, scope in ops.averages.values()}
    if ema_name in scopes or any(s == f"{v}/{ema_name}" for s, (v, _x) in ops.averages.items()
                                 ) or named_applies(ckpt, ema_name, use_meta):
        return None
    return sorted(s for s in scopes if s.endswith("/" + ema_name))


def last_part_reads(ckpt: Checkpoint, ema_name: str, use_meta: bool) -> bool:
    """Whether a stated ``--ema-name`` may be read as the last part of one EMA object's name
    scope (``fast`` for an object named ``ema/fast``, docs/setups.md): only where the
    ``.meta``'s update ops show no object whose whole name it is (:func:`_endings`), stored
    or not, and one scope only ending in it. An object named ``fast`` whose averages were
    not saved made ``--ema-name fast`` take ``ema/fast``'s, exit 0 (review-21-attack-r53
    F1); of ``a/fast`` and ``b/fast`` it took the one saved."""
    endings = _endings(ckpt, ema_name, use_meta)
    return endings is not None and len(endings) < 2


def refuse_two_endings(ckpt: Checkpoint, ema_name: str, chosen: dict[str, str],
                       use_meta: bool) -> None:
    """Refuses a stated ``--ema-name fast`` that reads no average by its whole name
    (``chosen`` empty) where no object is named so and the name scopes of several end in it
    (``a/fast`` and ``b/fast``): it names none of them (review-21-attack-r53 F1).

    Raises:
        UnprovenPairingError: (exit 6, ``--ema-name``) naming the scopes.
    """
    if chosen or "," in ema_name:
        return
    ending = _endings(ckpt, ema_name, use_meta)
    if ending and len(ending) > 1:
        raise UnprovenPairingError(
            f"{ckpt.path}: --ema-name {ema_name}: no EMA object of the .meta is named "
            f"{ema_name}, and the name scopes of {len(ending)} end in it "
            f"({', '.join(ending)}), so it names none of them; pass --ema-name "
            f"{' or --ema-name '.join(ending)}", "--ema-name", {})


def refuse_twin_taken(ckpt: Checkpoint, ema_name: str | None, chosen: dict[str, str],
                      use_meta: bool) -> None:
    """Refuses a stated ``--ema-name`` whose map took, for a variable ``w``, an average of
    another ``apply()`` where the ``.meta``'s update ops show ``w/<ema_name>`` (stored or
    not) written by one ``apply()`` and the average taken by another: two default-named
    objects write ``w/ExponentialMovingAverage`` and ``w/ExponentialMovingAverage_1``; with
    only the second one's saved, ``--ema-name ExponentialMovingAverage`` took its ``_1``
    average, the averages of the object the unstated refusal calls
    ``ExponentialMovingAverage_1``, exit 0 (review-21-attack-r58 F7, F6).

    Raises:
        UnprovenPairingError: (exit 6, ``--ema-name``) naming the variable, both averages and
            their name scopes.
    """
    ops = update_ops(ckpt) if use_meta and ckpt.objects is None and ema_name else None
    if ops is None or "," in ema_name:
        return
    for var, taken in sorted(chosen.items()):
        own = f"{var}/{ema_name}"
        if taken == own or own not in ops.averages or taken not in ops.averages:
            continue
        (of, scope), (taken_of, taken_scope) = ops.averages[own], ops.averages[taken]
        if of != var or taken_of != var or scope == taken_scope:
            continue
        raise UnprovenPairingError(
            f"{ckpt.path}: --ema-name {ema_name}: the .meta's update ops show {own} (the "
            f"average of {var} an EMA object named {ema_name} writes) written by the apply() "
            f"of name scope '{scope}' and {taken} by another one, of name scope "
            f"'{taken_scope}'; {own} is not stored, and {taken} is another object's average "
            f"of {var}: pass the --ema-name of the object whose averages were saved (as "
            f"'ckpt list' shows them), or --raw for the raw weights",
            "--ema-name", {var: (own, taken)})


def refuse_other_named(ckpt: Checkpoint, ema_name: str | None, chosen: dict[str, str],
                       use_meta: bool) -> None:
    """Refuses a stated ``--ema-name N`` whose map took, for a variable, the average another
    ``apply()`` wrote where the ``.meta``'s update ops show an EMA object whose shadows carry
    ``N`` (:func:`named_applies`, stored or not): that object is the one named. ``fast``
    applied under ``variable_scope("ema")`` writes ``ema/net/w/fast``; with only an object
    ``ema/fast``'s ``net/w/ema/fast`` saved, ``--ema-name fast`` took those (read by the last
    part of a name scope), exit 0; ``--ema-name ema/fast`` took ``fast``'s where
    ``fast.apply()`` ran in ``name_scope("ema")``, whose name scope is ``ema/fast``
    (review-21-attack-r58 F1, F3).

    Args:
        chosen: variable -> the average the map took for it, as the graph names them.

    Raises:
        UnprovenPairingError: (exit 6, ``--ema-name``) naming the variable, the average taken
            and the named object's average of it.
    """
    ops = update_ops(ckpt) if use_meta and ckpt.objects is None and ema_name else None
    if ops is None or "," in ema_name:
        return
    named = named_applies(ckpt, ema_name, use_meta)
    if not named:
        return
    names = object_names(ckpt, use_meta)
    for var, taken in sorted(chosen.items()):
        if taken not in ops.averages:
            continue
        label = ops.applies.get(taken, ops.averages[taken][1])
        if label in named:
            continue
        own = sorted(s for s, (v, scope) in ops.averages.items()
                     if v == var and ops.applies.get(s, scope) in named)
        other = " or ".join(sorted(names.get(label, ()))) or "unnamed"
        writes = ", ".join(own) if own else "no average of " + var
        raise UnprovenPairingError(
            f"{ckpt.path}: --ema-name {ema_name}: {taken}, read here for {var}, is the "
            f"average of another EMA object (its shadows carry {other}; name scope "
            f"'{ops.averages[taken][1]}'): the .meta's update ops show the object named "
            f"{ema_name} writing {writes}; pass the --ema-name of the object whose averages "
            "were saved (as 'ckpt list' shows them), or --raw for the raw weights",
            "--ema-name", {var: (*own, taken)})

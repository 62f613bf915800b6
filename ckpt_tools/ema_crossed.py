"""TF1 EMA objects of one name applied in crossed order (review-18-attack-r39 F2).

TF1 names an average after its variable and the EMA's name, made unique per variable: the
first object to average ``w`` writes ``w/ExponentialMovingAverage``, the next
``w/ExponentialMovingAverage_1``. So ``_N`` says which object came n-th *for that variable*.
With ``a.apply([w0])``, ``b.apply([w1, w0])``, ``a.apply([w1])`` every variable has both
names, as when both objects averaged both in the same order, but ``w0/ExponentialMovingAverage``
is ``a``'s and ``w1/ExponentialMovingAverage`` ``b``'s: ``--ema-name ExponentialMovingAverage``
would mix the two objects. The ``.meta`` shows it: one ``apply()`` scope
(``ExponentialMovingAverage_1``, ``b``'s) writes keys of two suffix levels
(``w1/ExponentialMovingAverage`` and ``w0/ExponentialMovingAverage_1``). Where each apply()
gets one variable, each scope writes one level, and several scopes writing one level prove no
object (:func:`split_names`); the decays the scopes use are not read: equal decays would not
tell two objects apart either.
"""

from __future__ import annotations

import re

from .checkpoint import Checkpoint
from .ema_refusals import UnprovenPairingError, suffix_base
from .ema_updates import mixed_keys, part_update_ops, update_ops
from .offer_probe import option_text, works


def _written(ckpt: Checkpoint, use_meta: bool) -> dict[str, dict[str, str]]:
    """apply() -> {average: its variable} of the ``.meta``'s update ops, for averages named
    ``<variable>/<name>``; each ``apply()`` told by its scope with the control-flow-v1
    context and the function it runs in (``cond/ExponentialMovingAverage``,
    ``ExponentialMovingAverage in cond_true_12``): read without them, an ``apply()`` in a
    ``tf.cond``, ``tf.while_loop`` or ``tf.function`` has the scope of one in the graph, and
    two objects' averages read as one ``apply()``'s (review-18-attack-r41 F3, F4). Averages
    and variables are the graph's op names: TF numbers a partitioned variable's averages per
    part (``w/part_0/ExponentialMovingAverage_1``), which the checkpoint stores as slices of
    one key, so the rules below read each part (review-19-attack-r43 F1)."""
    if not use_meta or ckpt.objects is not None:
        return {}
    found = part_update_ops(ckpt)
    if found is None:
        return {}
    ops = found[0]
    by_scope: dict[str, dict[str, str]] = {}
    for shadow, (var, scope) in ops.averages.items():
        if shadow.startswith(var + "/"):
            by_scope.setdefault(ops.applies.get(shadow, scope), {})[shadow] = var
    return by_scope


def _undecided(ckpt: Checkpoint, pairs) -> dict[str, tuple[str, ...]]:
    """variable key -> its candidate average keys, of ``(average, variable)`` op names."""
    found = part_update_ops(ckpt)
    key = found[1] if found is not None else str
    undecided: dict[str, set[str]] = {}
    for shadow, var in pairs:
        undecided.setdefault(key(var), set()).add(key(shadow))
    return {v: tuple(sorted(ks)) for v, ks in undecided.items()}


def _refuse_unread(ckpt: Checkpoint, ema_name: str | None, use_meta: bool) -> None:
    """Refuses the names of an EMA name family the checkpoint stores at two levels or more
    (``w/ExponentialMovingAverage``, ``w/ExponentialMovingAverage_1``) where the ``.meta``'s
    update ops were not read whole (more function calls than are read): an ``apply()`` not
    read may cross the objects, so no name of the family is proven one object's, and the
    reading offers none (review-19-attack-r43 F3).

    Raises:
        UnprovenPairingError: naming the file and ``--no-meta`` (exit 6).
    """
    ops = update_ops(ckpt) if use_meta and ckpt.objects is None else None
    if ops is None or ops.whole:
        return
    variables = {v.checkpoint_key for v in ckpt.meta.variables.values()}
    families = {suffix_base(ema_name)} if ema_name is not None else {
        suffix_base(k[len(v) + 1:]) for k, (v, _s) in ops.averages.items()
        if k.startswith(v + "/")}
    levels: dict[str, dict[str, list[str]]] = {}  # family -> name -> variables
    for key in variables:
        for family in families:
            head, _, name = key.rpartition("/" + family)
            if head in variables and re.fullmatch(r"(?:_\d+)?", name):
                levels.setdefault(family, {}).setdefault(family + name, []).append(head)
    split = {f: names for f, names in levels.items() if len(names) > 1}
    if not split:
        return
    family, names = sorted(split.items())[0]
    raise UnprovenPairingError(
        f"{ckpt.path}: " + (f"--ema-name {ema_name}: " if ema_name is not None else "")
        + f"the averages named {', '.join(sorted(names))} are not proven each one EMA "
        f"object's: TF1 numbers averages per variable, so two objects applied in different "
        f"orders give one name two objects' averages, and the .meta's graph calls more "
        f"functions (tf.cond, tf.function) than are read, so its update ops do not show "
        f"which apply() wrote each; --no-meta reads the names as the checkpoint gives them, "
        f"ckpt export --raw exports the raw weights instead",
        "--no-meta", {v: tuple(sorted(f"{v}/{n}" for n in names if v in names[n]))
                      for v in sorted({v for vs in names.values() for v in vs})})


def crossed_names(ckpt: Checkpoint, use_meta: bool) -> tuple[set[str], dict]:
    """``(names, scopes)``: the average names (``ExponentialMovingAverage``,
    ``ExponentialMovingAverage_1``) of each name family that some ``apply()`` scope of the
    ``.meta`` writes under two suffix levels, so that no name of the family is one object's;
    and every scope writing averages of those families (scope -> {average: variable})."""
    written = _written(ckpt, use_meta)
    # each variable's averages of a family in TF's order (w0/ema/fast_1 is the first of
    # w0's where w0/ema/fast is fast's average of w0/ema: no rank of w0's; r36 F11)
    order: dict[tuple[str, str], list[str]] = {}
    for keys in written.values():
        for key, var in keys.items():
            name = key[len(var) + 1:]
            order.setdefault((var, suffix_base(name)), []).append(key)
    rank = {k: i for ks in order.values()
            for i, k in enumerate(sorted(ks, key=lambda k: (len(k), k)))}
    names: set[str] = set()
    for keys in written.values():
        ranks: dict[str, set[int]] = {}
        for key, var in keys.items():
            ranks.setdefault(suffix_base(key[len(var) + 1:]), set()).add(rank[key])
        names |= {k[len(v) + 1:] for k, v in keys.items()
                  if len(ranks[suffix_base(k[len(v) + 1:])]) > 1}
    families = {suffix_base(n) for n in names}
    scopes = {s: keys for s, keys in written.items()
              if any(suffix_base(k[len(v) + 1:]) in families for k, v in keys.items())}
    return names, scopes


def split_names(ckpt: Checkpoint, use_meta: bool) -> tuple[set[str], set[str], dict]:
    """``(names, proven, scopes)``: of each name family with averages of two levels or more
    (``w/ExponentialMovingAverage``, ``w/ExponentialMovingAverage_1``), the names of a level
    whose keys several ``apply()`` scopes write, each one level only: ``a.apply([w0])``,
    ``b.apply([w1])``, ``b.apply([w0])``, ``a.apply([w1])`` give every variable both names,
    each scope one key, and ``w0/ExponentialMovingAverage`` is ``a``'s while
    ``w1/ExponentialMovingAverage`` is ``b``'s (review-18-attack-r39 F2, after b2fcd92). The
    keys and scopes are those of one object applied twice beside another, so such a level is
    not proven one object's; a level one scope writes whole is (one ``apply()``, one object):
    ``proven``. ``scopes``: scope -> {average: variable} of the families of ``names``."""
    written = _written(ckpt, use_meta)
    levels: dict[str, dict[str, set[str]]] = {}  # family -> name -> scopes writing it
    for scope, keys in written.items():
        for key, var in keys.items():
            name = key[len(var) + 1:]
            levels.setdefault(suffix_base(name), {}).setdefault(name, set()).add(scope)
    names: set[str] = set()
    proven: set[str] = set()
    for family in levels.values():
        if len(family) > 1:
            names |= {n for n, s in family.items() if len(s) > 1}
            proven |= {n for n, s in family.items() if len(s) == 1}
    families = {suffix_base(n) for n in names}
    scopes = {s: {k: v for k, v in keys.items() if suffix_base(k[len(v) + 1:]) in families}
              for s, keys in written.items()}
    return names, proven if names else set(), {s: k for s, k in scopes.items() if k}


def refuse_crossed(ckpt: Checkpoint, ema_name: str | None, use_meta: bool) -> None:
    """Refuses reading ``--ema-name`` (or, ``None``, offering one) where the ``.meta``'s update
    ops show the stated name's family (any, unstated) written in crossed order.

    Raises:
        UnprovenPairingError: naming which apply() scope writes which averages (exit 6).
    """
    _refuse_unread(ckpt, ema_name, use_meta)
    names, scopes = crossed_names(ckpt, use_meta)
    if not names:
        _refuse_split(ckpt, ema_name, use_meta)
        return
    if (ema_name is not None
                     and suffix_base(ema_name) not in {suffix_base(n) for n in names}):
        # its own family split is refused whatever other family is crossed (r48 F4)
        _refuse_split(ckpt, ema_name, use_meta)
        return
    if ema_name is not None and _one_apply(ckpt, ema_name, use_meta):
        # a name one apply() writes whole, having averaged every variable of the family: one
        # object's, even where that apply() wrote two levels (fast_1 beside fast; r43 F6,
        # r48 F2)
        return
    base = suffix_base(sorted(names)[0])
    shows = "; ".join(f"apply() scope {s!r} writes {', '.join(sorted(keys))}"
                      for s, keys in sorted(scopes.items()))
    undecided = _undecided(ckpt, [p for keys in scopes.values() for p in keys.items()])
    whole = sorted(n for n in {k[len(v) + 1:] for keys in scopes.values() for k, v in keys.items()}
                   if _one_apply(ckpt, n, use_meta))
    offer = _whole_offer(ckpt, whole, {suffix_base(n) for n in names})
    if not names - set(whole):  # each crossing name one apply()'s whole: pick one (r48 F2)
        raise UnprovenPairingError(
            f"{ckpt.path}: the averages are several EMA objects' (the .meta's update ops show "
            f"{shows}); {offer}ckpt export --raw exports the raw weights instead", None,
            undecided)
    names = names - set(whole)
    raise UnprovenPairingError(
        f"{ckpt.path}: " + (f"--ema-name {ema_name}: " if ema_name is not None else "")
        + (f"the averages named {ema_name} are not proven one apply()'s, and "
           if ema_name is not None and ema_name not in names else "")
        + f"the averages named {', '.join(sorted(names))} are not each one EMA object's: TF1 "
        f"numbers averages per variable (<var>/{base} for the first object to average it, "
        f"<var>/{base}_1 for the next), and the .meta's update ops show one apply() writing "
        f"averages of both levels ({shows}), so the objects averaged the variables in "
        f"different orders and each of --ema-name {' or '.join(sorted(names))} would take "
        f"two objects' averages; {offer}ckpt export --raw exports "
        "the raw weights instead (name the EMA objects, ExponentialMovingAverage(decay, "
        "name='fast'), when training)",
        None, undecided)


def _whole_offer(ckpt: Checkpoint, whole: list[str], families: set[str]) -> str:
    """The offer of :func:`refuse_crossed`'s refusal: each name of ``whole`` (one apply()'s
    whole) that makes a map the command accepts (:func:`~ckpt_tools.offer_probe.works`),
    else another family's name that does: ``--ema-name fast_1`` was offered where it is
    refused the same way, and the default object's name that works was not
    (review-21-attack-r60 F5)."""
    offered = [n for n in whole if works(ckpt, n)]
    if offered:
        return f"--ema-name {' or '.join(offered)} is one apply()'s whole, so one object's; "
    others = [n for n in ckpt.ema_names() if suffix_base(n) not in families and works(ckpt, n)]
    if others:
        return (f"no --ema-name of them picks one object here, while --ema-name "
                f"{' or '.join(others)} takes another EMA object's averages; ")
    return "no --ema-name picks one object here: "


def _one_apply(ckpt: Checkpoint, ema_name: str, use_meta: bool) -> bool:
    """Whether one ``apply()`` of the ``.meta`` writes every stored ``<variable>/<ema_name>``
    (each part of a partitioned one): one ``apply()`` is one object, so the name takes its
    averages whatever other objects of the name family crossed (``a.apply([w0, w1])``,
    ``b.apply([w0])``, ``c.apply([w0, w1])``: ``ExponentialMovingAverage`` is a's whole while
    c writes ``w0/..._2`` and ``w1/..._1``; review-19-attack-r43 F6). That ``apply()`` must
    also have averaged every variable holding an average of the name's family: the reading
    fills a variable lacking ``<v>/<ema_name>`` from its family's other keys, another
    object's (``a.apply([w0])``, ``EMA(name="ExponentialMovingAverage_1").apply([w0, w1])``:
    ``--ema-name ExponentialMovingAverage`` took that object's ``w1/..._1``;
    review-20-attack-r48 F1)."""
    found = part_update_ops(ckpt)
    if found is None:
        return False
    writers: set[str] = set()
    written: set[str] = set()
    family: set[str] = set()  # variables (each part) holding an average of the name's family
    mine: dict[str, set[str]] = {}  # apply() -> variables (each part) it averaged
    for label, keys in _written(ckpt, use_meta).items():
        for shadow, var in keys.items():
            if suffix_base(shadow[len(var) + 1:]) == suffix_base(ema_name):
                family.add(var)
                mine.setdefault(label, set()).add(var)
            if shadow[len(var) + 1:] == ema_name:
                writers.add(label)
                written.add(found[1](shadow))
    stored = set(ckpt.keys())
    named = {k for k in stored if k.endswith("/" + ema_name)
             and k[:-len(ema_name) - 1] in stored}
    return (len(writers) == 1 and bool(named) and named <= written
            and mine[next(iter(writers))] == family)


def _refuse_split(ckpt: Checkpoint, ema_name: str | None, use_meta: bool) -> None:
    """Refuses reading ``--ema-name`` (or, ``None``, offering every name) where a name of its
    family is one of :func:`split_names`: written by several apply() scopes, it may be two
    objects' averages."""
    names, proven, scopes = split_names(ckpt, use_meta)
    if not names or (ema_name is not None and ema_name not in names):
        return
    if ema_name is not None:  # say the stated name's family only, not another's (r48 F4)
        base = suffix_base(ema_name)
        names = {n for n in names if suffix_base(n) == base}
        proven = {n for n in proven if suffix_base(n) == base}
        scopes = {s: mine for s, keys in scopes.items() if (mine := {
            k: v for k, v in keys.items() if suffix_base(k[len(v) + 1:]) == base})}
    shows = "; ".join(f"apply() scope {s!r} writes {', '.join(sorted(keys))}"
                      for s, keys in sorted(scopes.items()))
    both = " or ".join(sorted(names))
    # each offered as the map accepts it, or not at all (review-21-attack-r57 F2)
    plain = [n for n in sorted(proven) if works(ckpt, n)]
    said = [*([f"--ema-name {' or '.join(plain)}"] if plain else []),
            *(option_text(n, (), True) for n in sorted(proven)
              if n not in plain and works(ckpt, n, (), True))]
    offer = (f"{' or '.join(said)} is one apply()'s, so one object's; " if said
             else "no --ema-name picks one object here: " if proven else "")
    undecided = _undecided(ckpt, [(k, v) for keys in scopes.values() for k, v in keys.items()
                                  if k[len(v) + 1:] in names])
    raise UnprovenPairingError(
        f"{ckpt.path}: " + (f"--ema-name {ema_name}: " if ema_name is not None else "")
        + f"the averages named {both} are not proven each one EMA object's: TF1 numbers "
        f"averages per variable (the first object to average a variable gives it the "
        f"unnumbered name, the next _1), and the .meta's update ops show several apply() "
        f"scopes writing them ({shows}); two objects applied to the variables in different "
        f"orders (a.apply([w0]), b.apply([w1]), b.apply([w0]), a.apply([w1])) give these "
        f"keys and scopes as one object applied twice does, so --ema-name {both} may take "
        f"two objects' averages; {offer}ckpt export --raw exports the raw weights instead "
        "(name the EMA "
        "objects, ExponentialMovingAverage(decay, name='fast'), when training)",
        None, undecided)


def refuse_mixed_writers(ckpt: Checkpoint, chosen: dict[str, str], ema_name: str | None,
                         use_meta: bool) -> None:
    """Refuses the averages a stated ``--ema-name`` reads (``chosen``: variable key -> average
    key) where the ``.meta``'s update ops show them written by several ``apply()`` calls and
    either one of those keys is not ``<variable>/<ema_name>`` (another object's ``_N`` twin)
    or two of those ``apply()`` calls averaged one variable into two averages (one object
    keeps one average per variable, its ``apply()`` of it again reusing it: two objects): a
    stated ``fast`` read ``w1/fast_1``, the only average of
    ``w1``, written by an object named ``fast_1`` (review-20-attack-r48 F5, F1). Names of
    several parts (a scope, ``gen/ExponentialMovingAverage``, or several objects) are read
    by their scopes and left to those rules.

    Raises:
        UnprovenPairingError: naming the keys and the ``apply()`` calls writing them (exit 6).
    """
    if (ema_name is None or "/" in ema_name or "," in ema_name or not use_meta
            or ckpt.objects is not None):
        return
    found = part_update_ops(ckpt)
    if found is None:
        return
    ops, key = found
    writers: dict[str, set[str]] = {}  # average key -> apply() calls writing it (each part)
    averaged: dict[str, set[str]] = {}  # apply() -> the variables (each part) it averaged
    of: dict[str, str] = {}  # average key -> the key of the variable averaged into it
    for shadow, (var, scope) in ops.averages.items():
        label = ops.applies.get(shadow, scope)
        writers.setdefault(key(shadow), set()).add(label)
        averaged.setdefault(label, set()).add(var)
        of[key(shadow)] = key(var)
    taken = {t: s for t, s in chosen.items() if s in writers}
    labels = sorted(set().union(*(writers[s] for s in taken.values())))
    if len(labels) < 2:
        return
    # apply() under variable_scope('s') names its averages s/<var>/<name> (s28b): the key of
    # its scope's own, no _N twin; which object wrote it is the decays' (refuse_two_decays),
    # as for the default export
    odd = sorted(s for t, s in taken.items() if s != f"{t}/{ema_name}"
                 and not (of.get(s) == t and _scoped_own(s, t, ema_name, writers[s])))
    shared = [(x, y) for i, x in enumerate(labels) for y in labels[i + 1:]
              if averaged[x] & averaged[y]]
    if not odd and not shared:
        return  # e.g. one object applied to w0, then to w1: each key carries the name
    shows = "; ".join(f"{s} by apply() {', '.join(repr(w) for w in sorted(writers[s]))}"
                      for s in sorted(taken.values()))
    why = (f"{', '.join(odd)} {'is' if len(odd) == 1 else 'are'} not named <var>/{ema_name}, "
           f"so another object's (TF1 names the average of the first object named {ema_name} "
           f"to average a variable <var>/{ema_name})" if odd else
           f"apply() {shared[0][0]!r} and {shared[0][1]!r} both averaged a variable, so they "
           "are two objects")
    raise UnprovenPairingError(
        f"{ckpt.path}: --ema-name {ema_name}: the averages it reads are not proven one EMA "
        f"object's: the .meta's update ops show them written by several apply() calls "
        f"({shows}) and {why}; ckpt export --raw "
        "exports the raw weights instead (give each EMA object a name no other object's averages "
        "carry when training: not fast beside fast_1)",
        None, {t: (s,) for t, s in sorted(taken.items())})


def _scoped_own(key: str, target: str, ema_name: str, labels: set[str]) -> bool:
    """Whether ``key`` is the average ``apply()`` gives ``target`` under a variable scope
    (``s/c/fast`` of ``apply()`` ``s/fast``), the one ``apply()`` writing it (``labels``)
    being of that very scope: the key TF gives the first average of ``target`` there, as
    ``<target>/<ema_name>`` is outside it (note s28b)."""
    if len(labels) != 1 or not key.endswith(f"/{target}/{ema_name}"):
        return False
    scope = key[:-len(f"/{target}/{ema_name}")]
    return bool(scope) and labels == {f"{scope}/{ema_name}"}


def refuse_mixed_parts(ckpt: Checkpoint, chosen: dict[str, str], use_meta: bool) -> None:
    """Refuses the averages read (``chosen``: variable key -> average key), stated name or
    not, where the ``.meta``'s update ops show one key's parts written by several ``apply()``
    calls: TF stores a partitioned variable's averages as one key whatever object wrote each
    part, so ``a.apply([w/part_0])`` then ``b.apply([w/part_0, w/part_1])`` leaves
    ``w/ExponentialMovingAverage`` a's part_0 beside b's part_1 (review-20-attack-r48 F3).

    Raises:
        UnprovenPairingError: naming the key (exit 6).
    """
    if not use_meta or ckpt.objects is not None:
        return
    parts_mixed = mixed_keys(ckpt)  # once, not per pair: 2,000 pairs took ~20 s
    mixed = sorted((t, s) for t, s in chosen.items() if s in parts_mixed)
    for target, key in mixed[:1]:
        # One object applied twice (a.apply([w/part_0]); a.apply([w/part_1])) makes the same
        # graph as two objects, one call each: nothing recorded tells them apart, so the
        # user's word decides (--no-meta reads the key by its name) where no part shows two
        # objects, i.e. none has averages from two apply() calls (review-20-attack-r52 F1)
        one = not _averaged_twice(ckpt)
        raise UnprovenPairingError(
            f"{ckpt.path}: {key} is not proven one EMA object's average of {target}: TF stores "
            f"a partitioned variable's averages as one key, and the .meta's update ops show "
            f"its parts written by different apply() calls, so it may hold two objects' "
            f"averages" + ("; --no-meta reads it by its name, right only where one EMA object "
                           "made those apply() calls (the graph does not record which object "
                           "made each)" if one else " (a part averaged twice shows two "
                                                    "objects)")
            + "; ckpt export --raw exports the raw weights instead",
            "--no-meta" if one else None, {t: (s,) for t, s in mixed})


def _averaged_twice(ckpt: Checkpoint) -> bool:
    """Whether the ``.meta``'s update ops average one variable (or part) into two shadows,
    which one object never does: its second ``apply()`` of a variable reuses the shadow."""
    found = part_update_ops(ckpt)
    if found is None:
        return False
    averaged = [var for var, _scope in found[0].averages.values()]
    return len(averaged) != len(set(averaged))

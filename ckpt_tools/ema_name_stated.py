"""What a stated ``--ema-name`` picks among a variable's several averages, and the refusals
where it cannot: the names the stated object writes (:func:`stated_names`, with TF's ``_N``
counters and scopes), whether the file proves that none of a variable's averages is that
object's (:func:`not_stated`, so the variable is left raw as ``variables_to_restore()`` leaves
it), TF1's uniquified twins ``W/<name>_N`` an ``apply()`` of the stated name is shown writing
(:func:`named_twins`), and the refusals of a name that fits two objects or none
(:func:`refuse_twins`, :func:`refuse_both`, :func:`refuse_mixed_attribute`,
:func:`accepted_names`). Used by
:func:`ckpt_tools.ema_names.choose_averages`.
"""

from __future__ import annotations

from .checkpoint import Checkpoint
from .ema_refusals import UnprovenPairingError, suffix_base
from .ema_updates import update_ops
from .wording import counted


def stated_names(ckpt: Checkpoint, ema_name: str, chosen: dict[str, str],
                  suffix: dict[str, str]) -> set[str]:
    """The names the stated object's averages carry: the stated one (its last part), and in
    TF2 those of the averages it picked (an attribute states an object whose averages are
    named 'fast'), each as recorded and with every trailing ``_N`` stripped: an object named
    ``ema_1`` writes ``kernel/ema_1`` and, for a second variable named ``kernel``,
    ``kernel/ema_1_1``, whose one-step base is ``ema_1``, not ``ema`` (review-24-attack-r73 F4)."""
    names = {ema_name.rpartition("/")[2]}
    if ckpt.objects is not None:
        names |= {n for c in chosen.values()
                  for n in _strips(suffix.get(c, "").rpartition("/")[2])}
    return names - {""}


def _strips(name: str) -> list[str]:
    """``ema_1_1`` -> ``[ema_1_1, ema_1, ema]``: ``name`` and each form with one more
    trailing ``_N`` taken off (each could be the name given, the rest TF's counters)."""
    out = [name]
    while suffix_base(out[-1]) != out[-1]:
        out.append(suffix_base(out[-1]))
    return out


def _may_be(name: str, names: set[str]) -> bool:
    """Whether some part of ``name`` is one of ``names``, or one with TF's ``_N`` (any
    number of them): a name the object writes, scoped (``a/fast``) or numbered
    (``fast_1``, ``fast_1_1``)."""
    return any(not names.isdisjoint(_strips(p)) for p in name.split("/"))


def keys_under(ckpt: Checkpoint, names: set[str]) -> dict[str, set[str]]:
    """Variable name -> the stored keys ``<scope>/<variable>/<rest>`` whose ``<rest>`` may be
    one of ``names`` (:func:`_may_be`): each key is read under every variable name its
    parts could spell, so that a shadow under a variable_scope is found whatever the scope."""
    out: dict[str, set[str]] = {}
    for key in ckpt.entries():
        parts = key.split("/")
        if not _may_be(key, names):
            continue
        for j in range(1, len(parts)):
            if not _may_be("/".join(parts[j:]), names):
                continue
            for i in range(j):
                out.setdefault("/".join(parts[i:j]), set()).add(key)
    return out


def not_stated(ckpt: Checkpoint, target: str, cands: list[str], names: set[str],
                under: dict[str, set[str]], suffix: dict[str, str], holder: dict[str, str],
                ema_name: str) -> bool:
    """Whether the file proves that no average of ``target`` is the stated ``--ema-name``
    object's: none of its averages ``cands`` (nor any other key ``under`` ``target``'s
    name, a shadow put under a variable_scope, ``s/<target>/fast``) carries one of the
    ``names`` that object writes (:func:`stated_names`; ``fast``, ``fast_N``, a scoped
    ``a/fast``; in TF2 also the attribute stated), and no ``.meta`` update op of an apply()
    of that name averages ``target``. Three objects over parts of a model
    (``fast.apply([w, b])``, ``slow.apply([b, c])``, ``mid.apply([c, w])``): ``c/slow``,
    ``c/mid`` are no ``fast``'s.

    Returns:
        `bool`: ``False`` where some key may be the stated object's (it stays refused)."""
    for c in cands:  # its own recorded name, and the key past the variable's name
        rest = c[len(target) + 1:] if c.startswith(target + "/") else c
        if holder.get(c) == ema_name or _may_be(suffix.get(c, ""), names) or _may_be(rest,
                                                                                   names):
            return False
    if under.get(target, set()) - set(cands):
        return False  # another key under the variable's name: an average not read as its
    ops = update_ops(ckpt)
    if ops is not None and any(
            v == target and _may_be(scope, names) for s, (v, scope) in ops.averages.items()
            if s not in cands):
        return False  # the graph's update ops show an apply() of that name averaging it
    return True


def named_twins(ckpt: Checkpoint, target: str, keys: list[str], ema_name: str) -> list[str]:
    """The TF1 ``keys`` (``target``'s ``W/<ema_name>_N``, TF's uniquified twin of the stated
    name) that the ``.meta``'s update ops show one ``apply()`` writing whose name scope is
    ``ema_name``, or its own twin (``Momentum_1``) where something else took ``W/<ema_name>``
    (a ``MomentumOptimizer``'s slot ``W/Momentum``, whose scope ``Momentum`` it took too):
    the stated object's, uniquified. Any other ``_N`` key is another object's (``name=
    "fast_1"``, nothing named ``W/fast``), not the stated one's: a stated ``fast`` took an
    object named ``fast_1``, exit 0 (review-20-attack-r52 F2)."""
    ops = update_ops(ckpt) if keys else None
    if ops is None:
        return []
    own = f"{target}/{ema_name}"
    taken = own in ckpt.entries() or (ckpt.meta is not None and own in ckpt.meta.variables)
    found = []
    for k in keys:
        scope = ops.averages.get(k, ("", ""))[1]
        last = scope if "/" in ema_name else scope.rpartition("/")[2]
        named = scope == ema_name or scope.endswith("/" + ema_name)  # in an outer scope
        if scope in ops.grouped and (named or taken and suffix_base(last) == ema_name):
            found.append(k)
    return found


def counted_apart(shadows: dict[str, list[str]], suffix: dict[str, str], ema_name: str,
                  given: set[str]) -> set[str]:
    """Returns the variables a stated TF2 ``ema_name`` carrying ``_N`` (``ema_1``) cannot pick
    an average of: those with several averages of its family (``w/ema_1``, ``w/ema_2``) that
    only the number tells apart. TF2 numbers ``<v>/<name>`` per variable name across the whole
    process, so where objects named ``ema`` averaged different variables (an earlier one in a
    notebook, or ``e1.apply([w]); e2.apply([w, b]); e1.apply([b])``) ``w/ema_1`` is one
    object's and ``b/ema_1`` another's: taking each variable's ``ema_1`` mixed two objects,
    exit 0 (review-32-attack-r118 F6). The number is a given name only where the file shows
    no counter (``ema_name`` in ``given``, :func:`~ckpt_tools.ema_refusals.exact_names`) and
    every variable of the family holds the same names (``ema_999``, ``ema_9999`` on each):
    then none is returned."""
    family = suffix_base(ema_name)
    if family == ema_name:
        return set()
    kin = {t: sorted(suffix.get(c, "") for c in cs
                     if suffix.get(c) == family or suffix_base(suffix.get(c, "")) == family)
           for t, cs in shadows.items()}
    kin = {t: ks for t, ks in kin.items() if ks}
    apart = {t for t, ks in kin.items() if len(ks) > 1 and ema_name in ks}
    if apart and ema_name in given and len({tuple(ks) for ks in kin.values()}) == 1:
        return set()  # given names, the same on every variable: nothing counted unevenly
    return apart


def refuse_twins(ckpt: Checkpoint, ema_name: str, twins: dict[str, list[str]],
                  suffix: dict[str, str]) -> None:
    """Refuses a stated TF1 ``--ema-name fast`` where a variable's only average of that family
    is TF's uniquified twin ``W/fast_1`` that no ``apply()`` named ``fast`` is shown writing
    (:func:`named_twins`): an object named ``fast_1``, or a second ``fast``, wrote it, and
    taking it answered the stated name with another object's averages, exit 0
    (review-20-attack-r52 F2).

    Raises:
        UnprovenPairingError: (exit 6, ``--ema-name``) naming the EMA names the file keeps.
    """
    t, keys = next(iter(twins.items()))
    names = sorted({s for s in suffix.values() if s})
    raise UnprovenPairingError(
        f"{ckpt.path}: --ema-name {ema_name}: no average is named <variable>/{ema_name} for "
        f"{counted(len(twins), 'variable')} ({t} has {', '.join(keys)}); TF names averages "
        f"<variable>/<EMA name> and gives {suffix.get(keys[0])} to an object named so or to a "
        f"second object named {ema_name}, and nothing recorded shows an apply() named "
        f"{ema_name} writing it; the EMA names kept here are {', '.join(names)}: pass the one "
        "you gave your ExponentialMovingAverage",
        "--ema-name", {k: tuple(v) for k, v in twins.items()})


def refuse_both(ckpt: Checkpoint, ema_name: str, both: dict, suffix: dict[str, str],
                 holder: dict[str, str], of: dict[str, str]) -> None:
    """Refuses an ``--ema-name`` that is both the attribute some averages were saved under and
    the name of an EMA object whose averages (some of them) were saved elsewhere: either
    reading is the caller's, and taking one silently hands back the other's averages. Where
    the attribute holds averages of the stated name only (``slow=[slow(w), slow(b)]``,
    ``other=[slow(c)]``), both readings name averages of one name split over attributes,
    which two objects both named so, saved apart, write too: refused as that.

    Each option offered is run first (:func:`_both_offers`): the refusal offered the same
    option for both readings, options refused when run and options lacking the
    ``--allow-missing`` they need (review-32-attack-r118 F2); where none is accepted it says
    that no ``--ema-name`` decides.

    Raises:
        UnprovenPairingError: (exit 6; ``--ema-name``, or no option where none decides).
    """
    mine = {c for c in of if suffix_base(suffix.get(c, "")) == ema_name
            or suffix.get(c) == ema_name}  # averages of an object named so (or ema_name_N)
    # the names of the averages under the attribute: without TF's _N, but where that would
    # leave the stated name itself, as recorded (an object named 'ema_999', r73 F3)
    attr_names = sorted({n if suffix_base(n) == ema_name else suffix_base(n)
                         for n in {suffix.get(c, "") for a, _ in both.values() for c in a}
                         | {suffix.get(c, "") for c in of if holder.get(c) == ema_name}}
                        - {""})
    name_attrs = sorted({holder.get(c, "") for c in mine} - {"", ema_name})
    # an average named 'ema_2' fits 'ema' only read as TF's _N counter: say its own name
    numbered = sorted({suffix.get(c, "") for _, n in both.values() for c in n} - {ema_name})
    counter = f" (with TF's _N counter: {', '.join(numbered)})" if numbered else ""
    shown = ckpt.objects.paths if ckpt.objects is not None else {}
    where = "; ".join(f"{a} holds averages named {ema_name} of {_some(mine, holder, of, a, shown)}"
                      for a in [ema_name, *name_attrs] if _some(mine, holder, of, a, shown))
    if set(attr_names) <= {ema_name}:  # one name: the same object's, or two of one name
        head = (f"names the attribute {ema_name!r} and the averages named {ema_name}{counter}, "
                f"which are split over {counted(1 + len(name_attrs), 'attribute')} of the "
                f"tf.train.Checkpoint ({where}), as two EMA objects both named {ema_name} "
                "saved apart keep theirs: nothing recorded says they are one object's")
    else:
        head = (f"reads two ways here: {ema_name!r} is the attribute of the tf.train.Checkpoint "
                f"holding averages named {', '.join(attr_names)}, and the name of an EMA "
                f"object{counter}" + (f" ({where})" if name_attrs else
                                      f", whose averages are kept under {ema_name!r} too"))
    offers = _both_offers(ckpt, of, holder, suffix, name_attrs,
                          [n for n in attr_names if suffix_base(n) != ema_name])
    if set(attr_names) <= {ema_name}:  # or the attribute's own, the others' weights left out
        offers = [*_apart_offer(ckpt, ema_name, {of[c] for c in mine
                                                 if holder.get(c) in name_attrs}, of), *offers]
    tried = sorted(dict.fromkeys([*name_attrs[:2], *(n for n in attr_names
                                                      if suffix_base(n) != ema_name)][:4]))
    tail = (f"pass {' or '.join(offers)}" if offers else "no --ema-name decides" + (
        f" (--ema-name {' or --ema-name '.join(tried)} is refused, with --allow-missing too)"
        if tried else ""))
    raise UnprovenPairingError(
        f"{ckpt.path}: --ema-name {ema_name} {head}; {tail}",
        "--ema-name" if offers else None,
        {t: tuple(a + n) for t, (a, n) in both.items()})


def _apart_offer(ckpt: Checkpoint, ema_name: str, others: set[str],
                 of: dict[str, str]) -> list[str]:
    """``--ema-name ema_name --exclude ...`` leaving out ``others`` (the weights whose averages
    of the stated name other attributes hold), where the export accepts it and reads averages
    (``of``: average key -> its weight) held under the attribute ``ema_name`` only: one
    list's, read together (s32k: an ``--exclude`` of them could not lift the refusal).

    Returns:
        `list`: that option's text with what it takes, or ``[]``."""
    import glob

    from .ema_holders import root_attributes  # they run the map: imported late
    from .offer_probe import exported, option_text

    paths = ckpt.objects.paths if ckpt.objects is not None else {}
    exclude = tuple(sorted(glob.escape(paths.get(w, w)) for w in others))
    if not exclude or len(exclude) > 4:  # a few globs typed, one plan run
        return []
    reach = root_attributes(ckpt)
    got = exported(ckpt, ema_name, exclude=exclude)
    taken = sorted(o for o, k in got.items() if k in of)
    if not taken or any(ema_name not in reach.get(k, ()) for k in got.values() if k in of):
        return []
    return [f"{option_text(ema_name, exclude)} (it takes {ema_name}'s averages of "
            f"{', '.join(taken[:3])}{f' and {len(taken) - 3} more' if len(taken) > 3 else ''})"]


def _some(keys: set[str], holder: dict[str, str], of: dict[str, str], attr: str,
          shown: dict[str, str]) -> str:
    """The variables (``of``: average key -> its variable; ``shown``: key -> the path to
    name it by) whose averages among ``keys`` the attribute ``attr`` holds, a few of them
    named (``model/b, model/w and 2 more``), or ``""``."""
    outs = sorted({shown.get(of[c], of[c]) for c in keys if holder.get(c) == attr})
    return ", ".join(outs[:3]) + (f" and {len(outs) - 3} more" if len(outs) > 3 else "")


def _both_offers(ckpt: Checkpoint, of: dict[str, str], holder: dict[str, str],
                 suffix: dict[str, str], attrs: list[str], names: list[str]) -> list[str]:
    """The options a two-ways refusal offers, each run first: ``--ema-name A`` for each of
    ``attrs`` (other attributes holding averages of the stated object's name), whose export
    must read averages held under ``A`` only, and ``--ema-name N`` for each of ``names`` (the
    other EMA names under the stated attribute), whose export must read averages named ``N``
    only; each alone, else with ``--allow-missing``. An option is typed with what it takes
    (:func:`~ckpt_tools.offer_probe.takes`), so that its words are the export's own.

    Returns:
        `list`: the options' texts (at most two of each kind); ``[]`` where none works."""
    from .offer_probe import exported, option_text, takes  # they run the map: imported late

    def reads(ema_name: str, allow: bool, fits) -> bool:
        got = {k for k in exported(ckpt, ema_name, allow).values() if k in of}
        return bool(got) and all(fits(k) for k in got)

    out = []
    for kind, values in ((0, attrs[:2]), (1, names[:2])):
        for n in values:
            fits = ((lambda k, a=n: holder.get(k) == a) if kind == 0 else
                    (lambda k, b=n: b in (suffix.get(k), suffix_base(suffix.get(k, "")))))
            for allow in (False, True):
                if reads(n, allow, fits):
                    said = takes(ckpt, n, allow)
                    out.append(option_text(n, (), allow) + (f" (it takes {said})" if said
                                                            else ""))
                    break
    return list(dict.fromkeys(out))


def refuse_mixed_attribute(ckpt: Checkpoint, ema_name: str, shadows: dict[str, list[str]],
                           suffix: dict[str, str], held: dict[str, str]) -> None:
    """Refuses ``--ema-name ATTR`` where the attribute ``ATTR`` holds averages written under
    two or more EMA names: one ``ExponentialMovingAverage`` writes one name (``<v>/fast``, TF's
    ``_N`` aside), so ``ema=[fast(w), fast(b), slow(c)]`` holds two objects' averages, and
    taking them all gave a model mixed from both, exit 0 (review-32-attack-r118 F1). Two
    default-named objects (``ExponentialMovingAverage``, ``_1``) write one name: the file
    cannot tell them apart, and they are not refused here.

    Raises:
        UnprovenPairingError: (exit 6) naming the attribute and the names, and each name
            that, run, is accepted (``--ema-name``), or that none is (no option).
    """
    under = sorted(c for cs in shadows.values() for c in cs if held.get(c) == ema_name)
    bases = sorted({suffix_base(suffix.get(c, "")) for c in under} - {""})
    if len(bases) < 2:
        return
    paths = ckpt.objects.paths
    # each name offered is run first, with --allow-missing where it needs it: 'slow' was
    # offered where it is refused, reading two ways (review-32-attack-r118 F2)
    from .offer_probe import option_text, takes, works  # they run the map: imported late

    offers = []
    for b in bases[:4]:
        allow = next((a for a in (False, True) if works(ckpt, b, (), a)), None)
        if allow is not None:
            said = takes(ckpt, b, allow)
            offers.append(option_text(b, (), allow) + (f" (it takes {said})" if said else ""))
    first = {b: next(paths.get(c, c) for c in under if suffix_base(suffix.get(c, "")) == b)
             for b in bases}
    raise UnprovenPairingError(
        f"{ckpt.path}: the attribute {ema_name!r} (--ema-name; Python: ema_name=) holds "
        f"averages written under {len(bases)} EMA names ("
        + ", ".join(f"{b}: {first[b]}" for b in bases)
        + "): one ExponentialMovingAverage writes one name, so these are several objects' "
        "averages, and taking them all would mix them; " + (
            f"pass {' or '.join(offers)}" if offers else "no --ema-name decides (--ema-name "
            f"{' or --ema-name '.join(bases[:4])} is refused, with --allow-missing too)"),
        option="--ema-name" if offers else None)


def accepted_names(ckpt: Checkpoint, found: list[str], named: list[str] = ()) -> str:
    """What to pass instead of a TF2 ``--ema-name`` that names none of the averages kept as
    ``found``: the first name, no ``--ema-name``, or all of them comma-separated, each
    alone or with ``--allow-missing``, as the export plan accepts it; "pass --ema-name ema
    or omit it" offered two options both refused beside two objects (review-22-attack-r62
    F1). Where none of those is accepted, each of ``named`` (the EMA names the averages
    carry, ``ExponentialMovingAverage``) alone: the statement a TF2 split-holder refusal
    offers, that the averages of that name are one EMA object's (it said "none decides"
    while ``--ema-name ExponentialMovingAverage`` was accepted: review-30-attack-r111 F2).

    Returns:
        the words to follow the refusal."""
    from .offer_probe import option_text, working  # they run the map: imported late

    names = [found[0], None, *([",".join(found)] if len(found) > 1 else [])]
    # omitted only where the map takes it alone: with --allow-missing beside several objects
    # it would say nothing of which object's averages it took
    ok = working(ckpt, [*((n, (), False) for n in names), *((n, (), True) for n in names if n)])
    said = [f"pass {option_text(n, (), allow)}" if n else "omit it" if i else "omit --ema-name"
            for i, (n, _, allow) in enumerate(ok[:2])]
    if not said:
        # what was tried, exactly: another attribute may be accepted (review-31-attack-r113 F2)
        tried = " or ".join(option_text(n) for n in names if n)
        stated = [n for n, _e, _a in working(ckpt, [(n, (), False) for n in named[:4]
                                                     if n not in found])]
        if stated:
            return (" or ".join(f"pass {option_text(n)}" for n in stated[:2])
                    + f", your statement that the averages named {stated[0]} are one EMA "
                    f"object's ({tried} is refused, with --allow-missing too, and so is "
                    "omitting it)")
        # not "none decides": an --exclude offer may (review-31-attack-r113 F2)
        return (f"{tried} is refused, with --allow-missing too, and so is omitting it: the "
                f"refusal without --ema-name names the options that decide, if any")
    return " or ".join(said) + (" (one EMA object's averages need none)" if len(found) == 1
                                and any(n is None for n, _, _ in ok[:2]) else "")

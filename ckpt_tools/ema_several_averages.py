"""The refusal where a variable has more than one average (:func:`several_message`): several
EMA objects' averages the file does not tell apart, or tensors stored as ``<weight>/<name>``
that nothing recorded proves an EMA's (optimizer slots, gradient accumulators), with the
``--ema-name`` values the export plan accepts (never one it refuses), in the words of the
file's own style. The other refusals of a pairing: :mod:`ckpt_tools.ema_refusals`.
"""

from __future__ import annotations

from . import roles as R
from .checkpoint import Checkpoint
from .ema_refusals import exact_names, suffix_base
from .keras_one_attribute import one_attribute_optimizers
from .wording import agreeing, counted


def several_message(ckpt, variables, suffix, holder, several,
                    ema_name) -> tuple[str, str | None, bool]:
    """Returns (the refusal for variables with several averages, the option that decides:
    ``"--ema-name"``, or None where no EMA name tells the averages apart, whether some of the
    averages' names are not proven an EMA's at all: their pairing is then open too)."""

    def show(key: str) -> str:
        v = variables.get(key)
        return v.path if v is not None and v.path else key

    def named(key: str) -> str:  # TF2: the object path, and the name TF gave the average
        last = suffix.get(key, "")
        return show(key) if show(key).endswith("/" + last) else f"{show(key)} ({last})"

    cands = [c for cs in several.values() for c in cs]
    holders = sorted({holder[c] for c in cands if c in holder})

    def ema_name_of(c: str) -> str:  # a Keras optimizer's averages: the optimizer, whose
        v = variables.get(c)          # per-weight names (dense_kernel_average) pick nothing
        if v is not None and v.ema_style == "keras" and c in holder:
            return holder[c]
        return suffix.get(c, c)

    names = sorted({ema_name_of(c) for c in cands})
    examples = "; ".join(f"{show(t)} has {', '.join(map(named, cs))}"
                         for t, cs in list(several.items())[:3])
    more = f" (and {len(several) - 3} more)" if len(several) > 3 else ""
    stated = f"; --ema-name {ema_name} does not pick one" if ema_name is not None else ""
    given = exact_names(set(names))
    if holders and len(holders) >= max(len(cs) for cs in several.values()):
        options = holders
        decide = (" (the attribute of the tf.train.Checkpoint each EMA's averages were saved "
                  "under; TF2's _N suffixes count names across the whole process and do not "
                  "tell EMA objects apart)")
    elif given and len(given) >= max(len(cs) for cs in several.values()):
        options = sorted(given)  # name='ema_999', name='ema_9999': the names given
        decide = ""
    elif holders:
        options = sorted({suffix_base(n) for n in names})
        decide = ("; in TF2 the _N suffixes count names across the whole process and do not "
                  "tell EMA objects apart: name the EMA objects when training "
                  "(tf.train.ExponentialMovingAverage(decay, name='fast')) or save each one's "
                  "averages under its own attribute (tf.train.Checkpoint(fast=[...], slow=[...]))")
    else:
        options, decide = names, ""
        from .ema_updates import update_ops  # it builds on this module

        if ckpt.objects is None and any(n != suffix_base(n) for n in names) and (
                ckpt.meta_unread or update_ops(ckpt) is None):
            # TF1 numbers per variable: e1.apply([w0]); e2.apply([w1, w0]); e1.apply([w1])
            # gives the same keys with the objects crossed, which only the .meta's update
            # ops tell (ema_crossed; review-18-attack-r39 F2)
            decide = ("; this takes the _N of TF1's names to count EMA objects, as they do "
                      "only where the objects averaged every variable in the same order (TF1 "
                      "numbers averages per variable; the training graph's .meta shows the "
                      "order)")
    recorded = sorted({show(c).split("/", 1)[0] for c in cands})
    if len(options) < max(len(cs) for cs in several.values()) and len(recorded) > 1 and all(
            getattr(variables.get(c), "ema_style", None) == "keras" for c in cands):
        # several Keras optimizers' copies under one attribute (review-32-attack-r123 M3)
        return one_attribute_optimizers(ckpt, len(several), examples + more + stated,
                                        recorded, holders), None, False
    if len(options) < max(len(cs) for cs in several.values()):
        # Every average has the same attribute and EMA name: no --ema-name picks one (it
        # would loop back here). One EMA object also gives two averages here when it averaged
        # a same-named variable the checkpoint does not hold (a GAN's D beside the saved G).
        return (f"{ckpt.path}: {counted(len(several), 'variable')} "
                f"{agreeing(len(several), 'has', 'have')} more than one average that "
                f"nothing recorded tells apart: {examples}{more}; they share the attribute "
                f"and the EMA name ({', '.join(sorted({suffix_base(n) for n in names}))}), so "
                "they are either two EMA objects of one name or one EMA object's averages of "
                "same-named variables of which the checkpoint holds only one (a GAN's "
                "discriminator left unsaved); no --ema-name decides: save every averaged "
                "variable (tf.train.Checkpoint(generator=G, discriminator=D, ema=[...])), name "
                "the variables apart, or name the EMA objects "
                "(tf.train.ExponentialMovingAverage(decay, name='fast'))", None, False)
    if options is holders and len({suffix_base(n) for n in names}) == 1:
        # One EMA name under several attributes: two EMA objects of that name, or one EMA
        # object's averages of same-named variables split over attributes with only one of
        # those variables saved. The file cannot tell, so the option is the caller's statement.
        return (f"{ckpt.path}: {counted(len(several), 'variable')} "
                f"{agreeing(len(several), 'has', 'have')} more than one average: "
                f"{examples}{more}; they share the EMA name "
                f"({suffix_base(names[0])}) and lie under the attributes "
                f"{', '.join(holders)}, so they are either several EMA objects of one name or "
                "one EMA object's averages of same-named variables of which the checkpoint "
                "holds only one (a GAN's discriminator left unsaved), and the file does not "
                f"tell which{stated}; only if each of {', '.join(holders[:4])} holds the "
                "averages of its own EMA object over these variables, "
                + _accepted(ckpt, options, " (Python: ema_name=...) to use that object's "
                            "averages") + "; otherwise save "
                "every averaged variable, or name the EMA objects "
                "(tf.train.ExponentialMovingAverage(decay, name='fast')) when training",
                "--ema-name", False)
    from .ema_proof import proven_ema_names  # it builds on this module

    # the names --ema-name takes here: those given to EMA objects (ema_999), else TF's
    # names without the _N it appends
    bases = set(options) if options is not names else {suffix_base(n) for n in names}
    # the attributes pick; the names say what the tensors may be (a Keras optimizer's
    # use_ema copies are proven by its own records, whatever their names)
    base = {c: suffix_base(suffix.get(c, c)) for c in cands
            if getattr(variables.get(c), "ema_style", None) != "keras"}
    if options is holders:
        bases = set(base.values())
    # --ema-name fast beside 'ema' and 'ema/fast': fast over ema's averages? (r37 F7 note)
    nested = sorted(n for n in bases if ema_name and n.endswith("/" + ema_name)
                    and n[:-len(ema_name) - 1] in bases)
    unproven = sorted(bases - proven_ema_names(ckpt, bases)) if (
        ema_name is None or nested) else []
    if unproven and options is holders:
        doubted = sorted({holder[c] for c in cands if base.get(c) in unproven})
        said = _unproven_holders(ckpt, several, examples, more, unproven, bases, holders,
                                 {c: holder[c] for c in cands if c in holder},
                                 base, lambda: _split_offers(
                                     ckpt, variables, suffix, holder, show,
                                     sorted(bases - set(unproven)), doubted))
        if nested:
            n = nested[0]
            said = (said[0] + f"; --ema-name {ema_name} does not pick one: TensorFlow names "
                    f"the averages of an EMA named {ema_name!r} applied to the averages of "
                    f"one named {n[:-len(ema_name) - 1]!r} (an EMA of an EMA) <weight>/{n}, "
                    f"as it names those of an EMA named {n!r} applied to the weights, and the "
                    "file does not tell them apart; an EMA of an EMA's averages are no "
                    "weight's", *said[1:])
        return said
    if unproven and options is not holders:
        # <weight>/<name> is also how optimizers store slots: say which names nothing proves
        # to be an EMA's, and offer them only as the caller's statement.
        proven = sorted(n for n in options if suffix_base(n) not in unproven
                        and n not in unproven)
        return _unproven_names(
            ckpt, several, examples, more, proven, unproven,
            "optimizers store their slots the same way (AdamOptimizer(name='Opt') writes "
            "W/Opt and W/Opt_1, BERT's optimizer W/adam_m and W/adam_v)",
            proven, "those averages", unproven)
    if options is holders and all(getattr(variables.get(c), "ema_style", None) == "keras"
                                  for c in cands):
        # Keras optimizers' use_ema copies (two training phases, one model): speak of them,
        # not of ExponentialMovingAverage objects (review-15-attack-r30 F6)
        return (f"{ckpt.path}: {counted(len(several), 'variable')} "
                f"{agreeing(len(several), 'has', 'have')} more than one average: "
                f"{len(holders)} Keras optimizers with use_ema=True ({', '.join(holders)}) "
                f"keep EMA copies of the same weights, and the checkpoint does not record "
                f"which to evaluate with: {examples}{more}{stated}; pass "
                + " or ".join(f"--ema-name {n}" for n in options[:4])
                + " (Python: ema_name=...) to say which optimizer's copies to use (its "
                "attribute in the tf.train.Checkpoint)", "--ema-name", False)
    return (f"{ckpt.path}: {counted(len(several), 'variable')} "
            f"{agreeing(len(several), 'has', 'have')} more than one average, so the "
            f"checkpoint holds several ExponentialMovingAverage objects and does not record "
            f"which one to evaluate with: {examples}{more}; EMA names found: "
            f"{', '.join(names)}{stated}; "
            + _accepted(ckpt, options, " (Python: ema_name=...) to say which EMA object's "
                        "averages to use") + decide, "--ema-name", False)


def _accepted(ckpt: Checkpoint, options: list[str], why: str) -> str:
    """``pass --ema-name a or --ema-name b --allow-missing`` and ``why``: each of ``options``
    as the export plan accepts it (alone, two together, else with ``--allow-missing`` where it
    averaged only some variables: :func:`~ckpt_tools.offer_probe.accepted`), never one that is
    refused (review-22-attack-r62 F1: ``fast_2`` /
    ``slow_2`` of one list, TF1 ``fast`` / ``slow`` over overlapping variables were each
    refused); where none is, says so."""
    from .offer_probe import accepted, option_text  # they run the map: imported late

    said = [option_text(n, (), allow) for n, allow in accepted(ckpt, options)]
    if said:
        return "pass " + " or ".join(said) + why
    # every name is probed alone and with --allow-missing, pairs only among the first four:
    # never "none decides" of a pair it did not try (review-23-attack-r68 F3)
    pairs = (f"; of two together only those among {', '.join(options[:4])} were tried"
             if len(options) > 4 else "")
    return ("no --ema-name decides: each of " + ", ".join(options) + " is refused (with "
            f"--allow-missing too{pairs})")

def _split_offers(ckpt, variables, suffix, holder, show, proven: list[str],
                  doubtful: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """The options that read one EMA object's averages out of attributes mixing two objects'
    (``k33split=[sp(w), sp(b)]``, ``part=[sp(c), default(w)]``), probed: each ``proven`` EMA
    name alone or with ``--allow-missing``, and each ``doubtful`` attribute holding averages
    of one name with ``--exclude`` of the weights whose averages of that name lie under
    another attribute (review-33-attack-r129 M2: the follow-up refusals offered both, and
    both were right, while this refusal said no ``--ema-name`` decides).

    Returns:
        `(proven offers, [(doubtful offer, its name)])`: each accepted offer as typed."""
    from .offer_probe import accepted, option_text, works  # they run the map: imported late

    said = [option_text(n, (), a) for n, a in accepted(ckpt, proven)]
    stated = []
    for h in doubtful[:4]:
        names = {suffix_base(suffix.get(k, "")) for k, a in holder.items() if a == h} - {""}
        if len(names) != 1:
            continue
        (n,) = names
        away = tuple(sorted({show(v.ema_of) for k, a in holder.items()
                             if a != h and suffix_base(suffix.get(k, "")) == n
                             and (v := variables.get(k)) is not None and v.ema_of}))
        allow = next((m for m in (False, True) if away and works(ckpt, h, away, m)), None)
        if allow is not None:
            stated.append((option_text(h, away, allow), n))
    return said, stated


def _unproven_holders(ckpt, several, examples, more, unproven, bases, holders, holder,
                      base, split=None) -> tuple[str, str, bool]:
    """The refusal where averages of several attributes sit under a variable and some of
    them carry a name nothing proves an EMA's (a TF2 gradient accumulator ``w0/accum/grad``
    saved as ``accum=[...]`` beside ``ema=[...]``: review-16-attack-r33 F8): the attributes
    whose tensors carry a proven name are offered as such, the others only as the caller's
    statement, never as "several ExponentialMovingAverage objects"."""
    names_of: dict[str, set[str]] = {}
    for c, h in holder.items():
        if c in base:
            names_of.setdefault(h, set()).add(base[c])
    doubtful = [h for h in holders if names_of.get(h, set()) & set(unproven)]
    sure = [h for h in holders if h not in doubtful]
    proven = sorted(bases - set(unproven))
    return _unproven_names(
        ckpt, several, examples, more, proven, unproven,
        "a TF2 checkpoint records no EMA's name, and other per-weight state (gradient "
        "accumulators, optimizer slots) is named the same way",
        sure, "the averages saved under it", doubtful,
        {h: " or ".join(repr(n) for n in sorted(names_of.get(h, ()))) for h in doubtful},
        split)


def _unproven_names(ckpt, several, examples, more, proven, unproven, alike: str,
                    sure: list[str], use: str, doubtful: list[str],
                    named: dict[str, str] | None = None,
                    split=None) -> tuple[str, str, bool]:
    """The refusal where a variable has several ``<weight>/<name>`` tensors and nothing
    recorded proves some of those names an EMA's, for TF1 (names) and TF2 (attributes) alike:
    ``alike`` says what else is stored that way, ``sure`` are the ``--ema-name`` values
    offered as proven (to use ``use``), ``doubtful`` those offered only as the caller's
    statement that it is the name given an ExponentialMovingAverage (``named``: a TF2
    attribute -> the names its tensors carry). Each is offered as the export plan accepts it,
    with the command's filters (alone, two together, with ``--allow-missing``), never one
    that is refused; where none is, the refusal says no ``--ema-name`` decides
    (review-22-attack-r66 F4: ``--ema-name fast_2 or --ema-name slow_2`` of one list were
    each refused, ``--ema-name fast_2 --allow-missing`` exported)."""
    from .offer_probe import accepted, option_text  # they run the map: imported late

    # every name probed alone and with --allow-missing, only the pairs bounded (accepted()):
    # a fifth name that decides (z over every variable) was left out (review-23-attack-r68 F3)
    offers = accepted(ckpt, [*sure, *doubtful])
    sure_said = [option_text(n, (), a) for n, a in offers if set(n.split(",")) <= set(sure)]

    def stated(name: str) -> str:  # whose statement an offer is: the doubtful names in it
        parts = [p for p in name.split(",") if p not in sure]
        return " or ".join((named or {}).get(p) or repr(p) for p in parts)

    doubt = [(option_text(n, (), a), stated(n)) for n, a in offers
             if not set(n.split(",")) <= set(sure)]
    if len(doubt) == 1:
        doubt_said = f"{doubt[0][0]} only if {doubt[0][1]} is "
    else:
        doubt_said = " or ".join(o + (f" (its tensors named {w})" if named else "")
                                 for o, w in doubt) + " only if that is "
    head = (f"{ckpt.path}: {counted(len(several), 'variable')} "
            f"{agreeing(len(several), 'has', 'have')} more than one tensor stored as "
            f"<weight>/<name>: {examples}{more}; "
            + (f"{_proven_why(proven)}, while " if proven else "")
            + f"nothing recorded says that {' or '.join(repr(n) for n in unproven)} is an "
            f"ExponentialMovingAverage's name: {alike}; ")
    refused = ("--ema-name " + " or --ema-name ".join(doubtful) + ", stating that "
               + ("it is" if len(doubtful) == 1 else "each is")
               + " the name you gave an ExponentialMovingAverage, is refused too (with "
               "--allow-missing too)")
    # attributes mixing two objects' averages: one object's read apart, probed (r129 M2)
    sure_apart, apart = split() if split is not None and not doubt and not sure_said \
        else ([], [])
    if sure_apart or apart:
        offers_said = [*(f"{o} to use that EMA's averages alone" for o in sure_apart),
                       *(f"{o} only if {n!r} is the name you gave an "
                         "ExponentialMovingAverage" for o, n in apart)]
        alone = ("--ema-name " + " or --ema-name ".join(doubtful) + " alone is refused "
                 "(with --allow-missing too)")
        return (head + f"{alone}; pass {' or '.join(offers_said)} (Python: ema_name=..., "
                "exclude=[...], allow_missing=...)", "--ema-name", True)
    if not doubt:
        return (head + (f"pass {' or '.join(sure_said)} to use {use} (Python: ema_name=...)"
                        + (f"; {refused}" if doubtful else "") if sure_said else
                        "no --ema-name decides" + (f": {refused}" if doubtful else "")),
                "--ema-name", True)
    return (head + ("pass " + " or ".join(sure_said) + f" to use {use}, or "
                    if sure_said else "pass ")
            + doubt_said
            + "the name you gave an ExponentialMovingAverage (Python: ema_name=...)",
            "--ema-name", True)


def _proven_why(proven: list[str]) -> str:
    """Why each of ``proven`` (names :func:`~ckpt_tools.ema_proof.proven_ema_names` proves) is
    an EMA's: TF's default name, or the ``.meta``'s update ops averaging each weight into its
    tensor under that name (review-14-attack-r28 F3: not every proven name is TF's)."""
    default = [n for n in proven if suffix_base(n) == R.DEFAULT_EMA_NAME]
    named = [n for n in proven if n not in default]
    said = [f"{', '.join(default)} {'is' if len(default) == 1 else 'are'} TF's default EMA "
            "name"] if default else []
    if named:
        said.append(f"the .meta's AssignMovingAvg ops average each weight into its tensor "
                    f"under {', '.join(named)}")
    return " and ".join(said)

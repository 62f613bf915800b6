"""Keras 3 optimizer variables: which are the iteration, the learning rate, EMA copies, slots.

``optimizer/vars/<i>`` is ``optimizer.variables`` in creation order (Keras 3.15): ``iteration``,
``learning_rate`` when it is a float, then ``BaseOptimizer.build``: one ``average`` per trainable
variable (``use_ema=True``) and one ``gradient_accumulator`` per variable
(``gradient_accumulation_steps``), then the subclass' slots (:mod:`.optimizer_slots`). A
layout is checked against the shapes and dtypes of the trainable weights; for a bare
``.weights.h5`` (no config) every setting is tried and ``use_ema`` is decided only when exactly
one value fits.

Which weights a setting was built with is :mod:`.optimizer_fit`; choosing among the pairings
that fit, and the notes on what stays open, :mod:`.optimizer_choice`.
"""

from __future__ import annotations

from ...wording import agreeing, counted
from .bag_fit import open_candidates
from .optimizer_choice import (
    STATE_WEIGHTS,
    choose,
    custom_note,
    note_open_bag,
    pairing,
    settle_sublayers,
)
from .optimizer_fit import hypotheses
from .optimizer_slots import (
    FLOATS,
    Spec,
    candidates,
    default_groups,
    expand,
    fits,
    matches,
    reading,
    shown_name,
    spec,
)
from .stated_tied import stated_twice


def plan_optimizer(lay, keys, entries, trained, segments, *, read=None,
                   use_ema: bool | None = None, bag_groups: dict | None = None,
                   stated: bool = False, layers: list[list[int]] | None = None) -> None:
    """Finds iteration, learning rate, EMA copies and slots among the optimizer variables.

    Fills ``lay`` (a :class:`~ckpt_tools.formats.keras.layout.KerasLayout`): ``iteration``,
    ``learning_rate``, ``ema_offset``, ``use_ema``, ``ema_source``, ``averages``, ``slots``,
    ``var_names`` and, when the layout proves some weights were frozen, ``trainable``.
    ``trained`` holds (key, segment index) of the weights that may be trainable, in
    ``model.weights`` order; ``segments`` the ("seq"|"bag", keys) runs, a bag being keys whose
    order is unknown. ``use_ema`` is the caller's
    statement (``--use-ema``/``--no-use-ema``), which overrides what the file says.
    ``read`` gives the stored iteration count (a trained optimizer with no per-variable state),
    never a pairing: values do not decide which weight an average belongs to.
    ``bag_groups``: segment index -> the keys of each sublayer of that bag (see
    :func:`~.optimizer_choice.settle_sublayers`). ``stated``: ``trained`` is the caller's
    statement of exactly the weights the optimizer was built with (``--trainable``): no other
    subset is tried. ``layers``: indexes into ``trained`` of each layer's weights, in model order
    (a layer is frozen or not as a whole): where config.json's flags fit, whether another set of
    layers fits too (:func:`~.optimizer_fit.layer_sets`); then ``lay.frozen_unproven`` is set and
    nothing is paired that the sets disagree on.
    """
    specs = [spec(entries[k]) for k in keys]
    if not keys:
        lay.use_ema, lay.ema_evidence, lay.ema_source = False, "no optimizer variables", "layout"
        if use_ema:
            lay.notes.append("use_ema=True was stated but the file holds no optimizer variables")
        return
    off = 0
    if specs[0][0] == () and entries[keys[0]].dtype_name in ("int64", "int32"):
        lay.iteration, off = keys[0], 1
    cfg = lay.optimizer_config
    if cfg is not None:
        has_lr = isinstance(cfg.get("learning_rate"), (int, float))
    else:
        has_lr = (len(specs) > off and specs[off][0] == ()
                  and entries[keys[off]].dtype_name in FLOATS)
    if has_lr and len(keys) > off:
        lay.learning_rate, off = keys[off], off + 1
    lay.ema_offset = off
    for key, name in ((lay.iteration, "iteration"), (lay.learning_rate, "learning_rate")):
        if key:
            lay.var_names[key] = name
    tkeys = [k for k, _ in trained]
    tspecs = [spec(entries[k]) for k in tkeys]
    bag_of = {k: seg for k, seg in trained if segments[seg][0] == "bag"}
    rest = specs[off:]
    if not rest and tkeys:
        lay.use_ema, lay.ema_source = False, "layout"
        steps = _steps(lay, read)
        if steps:  # trained, yet nothing per variable: a stateless optimizer (plain SGD)
            lay.ema_evidence = (f"the optimizer holds only iteration/learning_rate after "
                                f"{steps} steps: no per-variable state (e.g. SGD without "
                                "momentum) and no averages (use_ema=True would store one per "
                                "trainable weight)")
        else:
            lay.ema_evidence = ("the optimizer holds only iteration/learning_rate (it was "
                                "never built: saved before training, or an optimizer without "
                                "per-variable state such as SGD without momentum)")
        if cfg is not None and not cfg.get("use_ema"):
            lay.ema_evidence, lay.ema_source = "config.json (optimizer use_ema=False)", "config"
        elif cfg is not None:  # use_ema=True recorded, but no averages were ever created
            lay.ema_source = "config"
            lay.ema_evidence = ("config.json records use_ema=True; the optimizer holds only "
                                "iteration/learning_rate: saved before training")
        return
    cands = candidates(lay)
    now = tuple(i for i, k in enumerate(tkeys) if lay.trainable.get(k))
    open_targets: dict[int, list[tuple[int, ...]]] = {}
    hyps, truncated, swapped = hypotheses(cands, rest, tkeys, tspecs, bag_of, now,
                                           subsets=not stated,
                                           layers=None if stated else layers,
                                           open_targets=open_targets)
    lay.frozen_unproven = swapped
    said_ema = use_ema if cfg is None or "use_ema" not in cfg else bool(cfg["use_ema"])
    if lay.stated_optimizer is not None and cands and not any(
            said_ema is None or h[0][0] == said_ema for h in hyps):
        _refuse_stated(lay, cands, said_ema, [tspecs[i] for i in now] or tspecs, off,
                       len(keys))
    pairings = [pairing(h, keys[off:], rest, tkeys, tspecs, bag_of) for h in hyps]
    if use_ema is not None and "use_ema" not in (cfg or {}):  # a recorded one is checked
        lay.use_ema, lay.ema_source = use_ema, "stated"            # against it, not replaced
        lay.ema_evidence = (f"stated by the caller ({'--use-ema' if use_ema else '--no-use-ema'}; "
                             f"Python: use_ema={use_ema})")
    elif cfg is not None:
        lay.use_ema, lay.ema_source = bool(cfg.get("use_ema")), "config"
        lay.ema_evidence = f"config.json (optimizer use_ema={bool(cfg.get('use_ema'))})"
    elif {h[0][0] for h in hyps} in ({True}, {False}):
        lay.use_ema, lay.ema_source = hyps[0][0][0], "layout"
        lay.ema_evidence = (f"layout of the {len(keys)} {shown_name(lay.optimizer)} variables for "
                            f"{len(tkeys)} weights")
    else:
        # Both use_ema=True and a use_ema=False layout fit. Values cannot tell them apart in
        # general: a gradient accumulator dominated by L2 weight decay is parallel to its
        # weight (and, with L2(0.5), equal to it), a momentum buffer early in training is
        # near it. Only the caller can decide here (review 11-attack-2).
        lay.use_ema = None
        alternatives = sorted({_describe(h[0]) for h in hyps if not h[0][0]})
        lay.notes.append(
            f"cannot tell whether the {len(rest)} "
            f"{shown_name(lay.optimizer) or 'unknown optimizer'} variables after "
            "iteration/learning_rate include EMA copies ("
            + (f"they fit use_ema=True and also use_ema=False with "
               f"{' or '.join(alternatives[:3])} in their place; values cannot tell an "
               "average from such a buffer" if hyps else "no known layout fits")
            + "); pass --use-ema or --no-use-ema")  # (a .keras file would record it)
    if lay.use_ema and lay.custom_optimizer and lay.stated_optimizer is None:
        lay.notes.append(custom_note(lay, len(rest)))
        return
    chosen = [(h, p) for h, p in zip(hyps, pairings, strict=True) if h[0][0] == lay.use_ema]
    # An optimizer class of unknown slots (Muon: one or two slots per weight, by its rank):
    # its averages come first, one per variable it was built with. Their number is proven only
    # by the caller's --trainable, or by a config.json that records no frozen layer; a bare
    # .weights.h5 cannot tell it (a frozen layer shifts a slot into the "averages").
    unknown = not any(c[2] is not None for c in cands)
    if not chosen and lay.use_ema and unknown and (stated or (
            cfg is not None and not lay.frozen)) and rest[: len(tspecs)] and matches(
            [(s, j, "average", True) for j, s in enumerate(tspecs)], rest[: len(tspecs)], tkeys,
            tspecs, bag_of):
        h = ((True, False, []), tuple(range(len(tkeys))))
        chosen = [(h, pairing(h, keys[off:], rest, tkeys, tspecs, bag_of))]
    placed: set[str] = set()
    # no built-in layout without gradient accumulators fits: the count alone says they are
    lay.ga_inferred = cfg is None and bool(chosen) and all(h[0][1] for h, _ in chosen)
    # nor one with the class' default slots: a hyperparameter's block was read off the count
    lay.variant_inferred = cfg is None and bool(chosen) and all(
        h[0][2] not in default_groups(lay) for h, _ in chosen)
    lay.default_fit = cfg is None and any(
        h[0][0] and not h[0][1] and h[0][2] in default_groups(lay) for h, _ in chosen)
    lay.readings = tuple(sorted({r for h, _ in chosen if (r := reading(lay, h[0]))}))
    if chosen:
        (hyp, names), pick = choose(chosen, lay, complete=not truncated, swapped=swapped,
                                     sampled=bool(open_targets))
        # Which weights were frozen is known only when every fitting pairing agrees on it
        # (otherwise hyp is merely the first candidate: saying "frozen" would be a guess).
        known = (all(h[1] == hyp[1] for h, _ in chosen)
                 or all(t is not None for t, n in pick.values() if n == "average"))
        if known:
            lay.trainable.update({k: False for i, k in enumerate(tkeys)
                                  if i not in set(hyp[1])})
        if known and len(set(hyp[1])) < len(tkeys):
            unbuilt = len(tkeys) - len(hyp[1])
            lay.notes.append(f"{counted(unbuilt, 'weight')} {agreeing(unbuilt, 'has', 'have')} "
                             "no optimizer "
                             "variables: "
                             "frozen (trainable=False)")
        kept = [tkeys[i] for i in hyp[1] if tkeys[i] in set(lay.frozen)]
        if kept and pick and all(t is not None for t, n in pick.values() if n == "average"):
            lay.notes.append(
                f"{counted(len(kept), 'weight')} of layers frozen after the optimizer was built "
                f"(trainable=False in config.json, e.g. {lay.paths.get(kept[0], kept[0])}) "
                "keep their EMA copies: the optimizer holds one per weight it was built with")
        if known and lay.use_ema and hyp[0][0] and bag_groups:
            pick = settle_sublayers(pick, keys[off:], [tkeys[i] for i in hyp[1]], entries,
                                     bag_of, bag_groups, lay)
        for key, (target, name) in pick.items():
            if target is None and name == "average":
                note_open_bag(key, names.get(key), lay)
            (lay.averages if name == "average" else lay.slots)[key] = target
            lay.var_names[key] = name
            placed.add(key)
        open_candidates(lay, keys[off:], tkeys, [h for h, _ in chosen], open_targets)
    elif lay.use_ema and stated and _no_set_counts(
            cands, [spec(entries[k]) for k in lay.model if k in entries], len(rest)):
        # no statement can fit: not even every weight of the file gives that many variables
        lay.notes.append(_not_held(len(rest), len(lay.model), lay.optimizer))
    elif lay.use_ema and stated:
        tied = stated_twice(lay.paths, tkeys, read)  # one variable stated twice (s17d)
        lay.notes.append(f"the {len(tkeys)} weights stated with --trainable do not fit the "
                         f"{len(rest)} {shown_name(lay.optimizer) or 'optimizer'} variables after "
                         "iteration/learning_rate" + (f"{tied}: apply_keras_ema(model, path) "
                                                      "with the live model" if tied else
                         ": state every weight the optimizer was built "
                         "with, in model.trainable_variables order (Python: "
                         "apply_keras_ema(model, path))"))
    elif lay.use_ema and unknown:
        lay.notes.append("EMA copies cannot be paired: the "
                         f"{shown_name(lay.optimizer) or 'unknown'} optimizer's per-weight "
                         "variables are not a fixed layout this tool "
                         f"knows, so the file cannot prove how many of its {len(rest)} "
                         "variables are EMA copies"
                         + (" (layers are frozen: which were frozen when it was built is not "
                            "recorded)" if lay.frozen else "")
                         + ": " + ("" if cfg is not None or lay.stated_optimizer else
                                   "if it was Keras' built-in Muon, state it: --optimizer "
                                   "muon (Python: optimizer=\"muon\"), and "
                                   if lay.optimizer == "muon" else
                                   "if it was a Keras built-in under another name (name=), "
                                   "state its class: --optimizer CLASS[:OPTIONS] (Python: "
                                   "optimizer=); for a class of its own no option decides "
                                   "where its copies sit (--trainable neither): save a "
                                   "tf.train.Checkpoint(model=model, optimizer=optimizer), "
                                   "whose variable names carry the weights' paths")
                         + ("" if cfg is None and not lay.stated_optimizer
                            and lay.optimizer != "muon" else STATE_WEIGHTS))
    elif lay.use_ema and bag_of:
        # subsets are not tried where sublayers' order is unknown: "nor a subset" would be
        # false (a subclassed model with a frozen sublayer has one that fits)
        lay.notes.append(f"the optimizer variables fit no set of the {len(tkeys)} weights of "
                         "the file in any order of the sublayers whose order it does not "
                         "record (or too many to try): EMA copies cannot be paired here; "
                         + STATE_WEIGHTS)
    elif lay.use_ema and _lora_factors(rest, tspecs):
        # Keras saves a LoRA layer's kernel merged with a @ b, never the factors the
        # optimizer averaged: no --trainable can fit (config.json, where present, says so)
        lay.notes.append(f"the optimizer variables do not fit the {len(tkeys)} weights of the "
                         "file: some have the shapes of LoRA factors ([in, r] and [r, out] of "
                         "a kernel [in, out]: a layer with enable_lora), which the file does not "
                         "hold (Keras saves the kernel merged with them), so no --trainable "
                         "fits; use the run's tf.train.Checkpoint, which keeps the factors")
    elif lay.use_ema and _no_set_counts(cands, tspecs, len(rest)):
        # no set of the file's weights gives that many variables: the optimizer was built
        # with variables the file does not store, which no --trainable (names of the file)
        # can add (review-11-attack-r15 F2: LoRA of rank = the kernel's dimensions)
        lay.notes.append(_not_held(len(rest), len(tkeys), lay.optimizer))
    elif lay.use_ema:
        lay.notes.append(f"the optimizer variables do not fit the {len(tkeys)} weights of the "
                         "file nor a subset of them (frozen or custom layers?): EMA copies "
                         "cannot be paired here; " + STATE_WEIGHTS)
    for key in keys[off:]:
        if key not in placed:
            lay.slots[key] = None


def _refuse_stated(lay, cands, use_ema, tspecs, off: int, count: int) -> None:
    """``--optimizer`` states a class and options whose layout fits no set of the weights:
    exit 6, saying how many variables it gives and how many the file holds."""
    from ...errors import UnprovenPairingError
    from .stated_optimizer import shown

    ema = [True, False] if use_ema is None else [use_ema]
    gives = sorted({off + len(expand(*c, tspecs)) for c in cands if c[0] in ema})
    said = (f"--optimizer {shown(lay.stated_optimizer)} was stated: that class with those "
            f"options (others default){'' if use_ema is None else f' and use_ema={use_ema}'} ")
    if count in gives:  # the count fits: the shapes do not follow its build order (r30 F5)
        why = (f"gives {count} optimizer variables for the {len(tspecs)} trainable weights, as "
               "many as the file has, but the file's shapes are not in that class' build "
               "order")
    else:
        why = (f"gives {' or '.join(map(str, gives))} optimizer variables for the "
               f"{len(tspecs)} trainable weights (and no set of them, as frozen layers leave, "
               f"gives {count}), the file has {count}")
    raise UnprovenPairingError(
        said + why + ": state the class and options the run used (a custom optimizer: no "
        "option decides)")


def _not_held(count: int, weights: int, optimizer: str | None) -> str:
    """Why no ``--trainable`` fits where :func:`_no_set_counts` rules every set out."""
    return (f"the {count} optimizer variables after iteration/learning_rate do not fit any set "
            f"of the {weights} weights of the file, in any layout of "
            f"{optimizer or 'the optimizer'} with use_ema=True (the count alone rules every set "
            "out): it was built with variables the file does not hold (LoRA factors: a layer "
            "with enable_lora saves its kernel merged with them; or variables a custom layer "
            "does not save), so no --trainable fits; use the run's tf.train.Checkpoint, which "
            "keeps every variable the optimizer was built with")


def _no_set_counts(cands, tspecs: list[Spec], total: int) -> bool:
    """Whether no ``use_ema=True`` setting of ``cands`` builds ``total`` optimizer variables
    for any set of the weights ``tspecs`` (their counts per weight, summed over each subset);
    ``False`` where no such setting is known."""
    known = [c for c in cands if c[0] and c[2] is not None]
    for c in known:
        const = len(expand(*c, []))  # variables of the optimizer, not of a weight
        if total < const:
            continue
        reach = 1  # bit n: some subset of the weights builds n variables
        for s in tspecs:
            reach |= reach << (len(expand(*c, [s])) - const)
        if reach >> (total - const) & 1:
            return False
    return bool(known)


def _lora_factors(rest: list[Spec], weights: list[Spec]) -> bool:
    """Whether two optimizer variables have the shapes of a LoRA pair of some kernel of
    ``weights``: ``[in, r]`` and ``[r, out]`` with ``r`` below both (a message's hint only,
    never a pairing)."""
    shapes = {s for s, _ in rest if len(s) == 2}
    return any((a, r) in shapes and (r, b) in shapes
               for (a, b), _ in (w for w in weights if len(w[0]) == 2)
               for r in range(1, min(a, b)))


def _describe(setting) -> str:
    """Words for a use_ema=False setting's per-variable blocks (``gradient accumulators``)."""
    _ema, ga, groups = setting
    names = (["gradient accumulators"] if ga else []) + [
        "/".join(names) + " slots" for _kind, names in groups or [] if _kind != "s"]
    return " + ".join(names) or "no per-variable state"


def _steps(lay, read) -> int | None:
    """The optimizer's ``iterations`` count stored in the file, or ``None`` if unknown."""
    if read is None or lay.iteration is None:
        return None
    try:
        import numpy as np

        return int(np.asarray(read(lay.iteration)).reshape(()))
    except (TypeError, ValueError, OverflowError):
        return None


def infer_use_ema(layout, entries: dict, trainable: list[Spec]) -> bool | None:
    """Decides ``use_ema`` for a Keras 3 file given the exact trainable variables of the model.

    A bare ``.weights.h5`` does not say which weights were trainable (frozen layers); a live
    model does, which settles layouts :func:`analyze` had to leave open. Values never decide
    here: a gradient accumulator or momentum buffer can sit as near its weight as an average.

    Args:
        layout: the file's layout.
        entries: the file's entries.
        trainable: ``(shape, dtype enum)`` of ``model.trainable_variables``, in order.

    Returns:
        `bool`, or `None` when both ``use_ema=True`` and a ``use_ema=False`` setting would
        write the same variables (the caller must state it).
    """
    if layout.kind != "keras3" or layout.optimizer_config is not None:
        return layout.use_ema
    if layout.ema_source == "stated":
        return layout.use_ema
    if not layout.optimizer_vars[layout.ema_offset:]:
        return False
    found = fitting_use_ema(layout, entries, trainable)
    if layout.tf_keras:  # no config: the live model's weights decide, or nothing does
        return found.pop() if len(found) == 1 else None
    if len(found) > 1 and layout.use_ema is not None and layout.ema_source == "layout":
        return layout.use_ema
    return found.pop() if len(found) == 1 else None


def fitting_use_ema(layout, entries: dict, trainable: list[Spec]) -> set[bool]:
    """The ``use_ema`` values of the known optimizer settings that write exactly the file's
    optimizer variables for a model whose ``trainable_variables`` have these specs (empty: no
    known setting fits, e.g. another number of trainable variables)."""
    rest = [spec(entries[k]) for k in layout.optimizer_vars[layout.ema_offset:]]
    if layout.tf_keras:  # iteration, averages, a built-in's slots: tf_keras.py
        from .tf_keras import fitting_use_ema as tf_keras_fitting
        from .tfk_stated_optimizer import sizes

        return tf_keras_fitting(list(trainable), rest, only=sizes(
            layout.stated_optimizer))  # set only where it decides (stated_optimizer.apply)
    tkeys = [str(i) for i in range(len(trainable))]
    return {c[0] for c in fits(candidates(layout), rest, tkeys, list(trainable), {})}

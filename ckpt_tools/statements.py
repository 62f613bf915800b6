"""What an EMA pairing rests on that the user stated and the file cannot show.

:func:`stated_notes` gives the notes the commands print (on stderr, with ``-q`` too) and the
fields of their ``--json`` documents for each statement that decides a pairing:
``--use-ema``, ``--not-swapped``, ``--fit-order``, ``--averages-only``, ``--trainable``
(with ``--loop-order``) and ``--apply-order``. Library modules are imported inside the
function: the CLI imports this module while building every command.
"""

from __future__ import annotations

from .wording import agreeing, counted


def loss_named_said(lone: dict[str, str]) -> str:
    """What the stated-averages note adds for averages whose names read as a loss's
    (:mod:`~ckpt_tools.loss_named`)."""
    from .loss_named import loss_named

    named = loss_named(lone)
    if not named:
        return ""
    return (f"; {len(named)} of them ({', '.join(named[:3])}{' ...' if len(named) > 3 else ''})"
            " are named after a loss and read as a variable's average too: if one averages "
            "a loss tensor, leave it out (--exclude)")


def moments_named_said(lone: dict[str, str]) -> str:
    """What the stated-averages note adds for averages of keys named after
    ``tf.nn.moments``' outputs (``bn/bn/moments/Squeeze``, ``.../Squeeze_1``: a hand-made
    batch norm's mean and variance, ``ema.apply([mean, var])``): with the ``.meta`` its update
    ops show them averages of tensors, kept under their own keys (``--tensor-averages``);
    ``--averages-only`` without it writes them under the name without the EMA's, which no
    variable of the graph has (review-16-attack-r33 F4, second part).

    Example:
        >>> moments_named_said({"bn/bn/moments/Squeeze/ema": "bn/bn/moments/Squeeze"})[:39]
        '; 1 of them (bn/bn/moments/Squeeze/ema)'
    """
    import re

    named = [a for a, t in lone.items() if re.search(r"(^|/)moments/Squeeze(_\d+)?$", t)]
    if not named:
        return ""
    return (f"; {len(named)} of them ({', '.join(named[:3])}{' ...' if len(named) > 3 else ''})"
            " are named after tf.nn.moments' outputs: if they average a hand-made batch "
            "norm's mean and variance (ema.apply([mean, var])), they are averages of tensors, "
            "not of variables: with the training .meta beside the checkpoint its update ops "
            "show that, and export keeps them under their own keys (--tensor-averages); here "
            "they are written under the name without the EMA's, which no variable of such a "
            "graph has")


def stated_notes(ckpt, apply_order: str | None, ema_name: str | None = None,
                 read=None) -> tuple[list[str], dict]:
    """The statements some pairing of ``ckpt`` rests on alone: the stated ``apply_order`` (the
    file cannot check how ``ema.apply()`` was called, so a wrong statement gives wrong
    averages) or, in a Keras file, the stated ``trainable`` or ``use_ema``.

    Args:
        ckpt: the open checkpoint (opened with the statements: ``use_ema``, ``trainable``…).
        apply_order: the stated order (``"trainable"``, ``"tracked"``) or ``None``.
        ema_name: which EMA object's averages, as :func:`~ckpt_tools.emamap.ema_map` takes it.
        read: the checkpoint keys the command reads (an export's sources, a map's), or
            ``None`` (all it pairs): ``--averages-only`` keys its ``--exclude`` left out are
            neither counted nor named (s30c "Left"), and no note says EMA copies were read as
            the averages under ``--not-swapped`` where none of them (nor a weight they cover)
            is read (s30d "Left").

    Returns:
        `tuple[list[str], dict]`: the notes, in order, each a line to print as it is; and
        ``{"stated_apply_order": {"order": ..., "pairs": {average: variable},
        "numbered_lists": --numbered-lists stated, "read_alike": [container paths read as one
        type], "keras_layers": [object paths read as Keras layers whose sublayers were not
        re-assigned]}}``,
        ``{"stated_trainable": {"pairs": {EMA copy: weight}}}`` and/or
        ``{"stated_use_ema": true}``, ``{"stated_optimizer": "adam:amsgrad"}``,
        ``{"stated_not_swapped": true}`` (with
        ``"not_swapped_record": path`` where ``ckpt train``'s run record states it),
        ``{"stated_fit_order": true}``,
        ``{"stated_averages_only": {"pairs": {average: variable}}}`` for the command's
        ``--json`` document, or ``{}`` when nothing rests on a statement.

    Raises:
        OptionError: ``apply_order`` given where it cannot apply (a Keras file, a TF1
            checkpoint; exit 2), as :func:`~ckpt_tools.ema_apply_order.refuse_apply_order`.
    """
    from .ema_apply_order import read_alike, refuse_apply_order, stated_pairings
    from .keras_assumed import object_pairs
    from .keras_fit_order import fit_order_note
    from .keras_reassign import reassign_note
    from .pairing import lists_stated
    from .restored_record import stated_fields
    from .save_op import written_sources
    from .swap_assumed import SLOT_STATED_NOTE, slot_pairs
    from .tfk_order import recorded_averages
    from .tfk_order import stated_note as tf_keras_stated_note
    from .user_ema_swap import covered_raw, reads_swappable

    refuse_apply_order(ckpt, apply_order)  # before any note: a usage error says it alone
    notes: list[str] = []
    found: dict = {}
    layout = getattr(ckpt.reader, "keras", None)
    if layout is not None and layout.ema_source == "stated" and layout.use_ema \
            and layout.averages and None not in layout.averages.values():  # else refused
        notes.append("note: the optimizer variables are read as EMA copies only because you "
                     "stated --use-ema; the file does not record use_ema, and gradient "
                     "accumulators or momentum buffers sit in the same places: if the optimizer "
                     "ran with use_ema=False these 'averages' are such buffers")
        found["stated_use_ema"] = True
    if layout is not None and layout.stated_optimizer is not None and layout.use_ema \
            and layout.averages and None not in layout.averages.values():
        from .formats.keras.stated_optimizer import shown

        said_opt = shown(layout.stated_optimizer)
        notes.append(f"note: the pairing rests on your statements: --optimizer {said_opt} (the "
                     + (f"file records the optimizer as {layout.named_optimizer}, a "
                        "class of your own whose build order it does not record, and "
                        if layout.optimizer_config is not None else
                        "tf_keras file records no optimizer name, only " if layout.tf_keras
                        else "file records the optimizer only by its name, "
                        f"{layout.named_optimizer or 'none'}, and ")
                     + "its variables by position: if "
                     "the run's optimizer was another class or had other options on, these "
                     "'averages' are other slots)")
        found["stated_optimizer"] = said_opt
    swap = ckpt.not_swapped and (layout is not None and layout.use_ema and layout.averages
                                 and not layout.tf_keras or layout is None and object_pairs(ckpt))
    if swap and read is not None and not reads_swappable(ckpt, read):
        swap = False  # a user EMA's averages only: no copy is read as the averages (s30d)
    if ckpt.not_swapped and not swap and layout is None and slot_pairs(ckpt):
        notes.append(f"note: {SLOT_STATED_NOTE}")  # swap_weights(): average slots
        found["stated_not_swapped"] = True
    elif ckpt.not_swapped and layout is None and ckpt.objects is None and ckpt.meta is not None:
        from .save_op import crossed_keys, written_sources

        crossed = crossed_keys(ckpt)  # a swapping Saver's graph beside a plain Saver's
        if not crossed and written_sources(ckpt) is not None:
            # the save op that wrote it is read: it says what each key holds, not the
            # statement (it said "records no save op" of such graphs: review-32-attack-r117 M5)
            notes.append("note: you stated --not-swapped, but the graph file's save op shows "
                         "what each key holds: the keys are read through it, not by that "
                         "statement")
        else:
            found["stated_not_swapped"] = True
            notes.append("note: the keys are read as holding their names' variables because you "
                         "stated --not-swapped; "
                         + (f"the graph file's save ops disagree about what they hold (e.g. "
                            f"{crossed[0]}) and nothing records which wrote them" if crossed else
                            "the graph file records no save op to show it")
                         + ": if a swapping Saver wrote the checkpoint, its keys named as "
                         "variables are the averages (ckpt export --raw"
                         + (" --no-meta)" if crossed else ")")  # saver_not_swapped (TF1)
                         + _saver_def_said(ckpt, crossed))
    said = fit_order_note(ckpt)  # --fit-order, where it decides a pairing
    record = getattr(ckpt, "not_swapped_record", None) if swap else None
    if record:  # ckpt train's run record states it for this very file (run_record)
        found["not_swapped_record"] = record
    if getattr(ckpt, "fit_order_record", None) and said:  # the run record states fit_order
        found["fit_order_record"] = ckpt.fit_order_record
    if swap and said and not record and not getattr(ckpt, "fit_order_record", None):
        # all stated by the user (review-12-user-r13 F5): one line, not two
        notes.append("note: the pairing rests on your statements: --fit-order, --not-swapped")
        found.update(stated_not_swapped=True, stated_fit_order=True)
        swap = said = ""
    raw = covered_raw(ckpt, read) if swap and read is not None and not record else []
    if raw:  # no copy read: the statement decided that these weights' keys hold raw values
        notes.append(f"note: {', '.join(raw[:3])}{' ...' if len(raw) > 3 else ''} "
                     f"{agreeing(len(raw), 'is', 'are')} read as stored, raw, because you "
                     "stated --not-swapped (not saved after SwapEMAWeights(swap_on_epoch=True)); "
                     f"if it was, {agreeing(len(raw), 'that key holds', 'those keys hold')} the "
                     "optimizer's averages")
    elif swap:
        notes.append(f"note: EMA copies read as the averages because not swapped is stated by "
                     f"ckpt train's run record {record} (it saved this file, bytes unchanged, "
                     "during fit() without SwapEMAWeights), as --not-swapped states it"
                     if record else
                     "note: EMA copies read as the averages because you stated --not-swapped "
                     "(not saved after SwapEMAWeights(swap_on_epoch=True)); if it was, use the "
                     "file as it is (ckpt export --raw)")
        found["stated_not_swapped"] = True
    if said:
        notes.append(f"note: {said}")
        found["stated_fit_order"] = True
    said, fields = averages_only_said(ckpt, read)  # --averages-only
    if said:
        notes.append(said)
        found.update(fields)
    _trainable_notes(ckpt, layout, notes, found)
    # --saver-def-wrote, and what restore-ema's record states (noted by the CLI's
    # note_recorded): fields too (review-28-user-u30 F4)
    found = {**stated_fields(ckpt), **found}
    pairs = stated_pairings(ckpt, apply_order, ema_name)
    if not pairs:
        return notes, found
    lists = " --numbered-lists" if lists_stated(apply_order) else ""  # as the user stated it
    if set(pairs) <= set(recorded_averages(ckpt.objects)):  # a tf_keras optimizer's
        notes.append(tf_keras_stated_note(len(pairs)))
    else:
        notes.append(f"note: {counted(len(pairs), 'average')} {agreeing(len(pairs), 'is', 'are')} "
                     "paired only because you stated "
                     f"--apply-order {apply_order}{lists}; the checkpoint does not record how "
                     f"ema.apply() was called, so this is your statement, not a proof: if "
                     f"apply() got another order these averages are on the wrong variables")
    alike = read_alike(ckpt, pairs, apply_order) if apply_order == "trainable" else []
    if alike:
        notes.append(f"note: --apply-order trainable here also reads {', '.join(alike[:3])}"
                     f"{' ...' if len(alike) > 3 else ''} and the containers beside it holding "
                     "the same children as one type (all tf.Modules or all dicts); the "
                     "checkpoint records no types, and a list or module mixing a tf.Module and "
                     "a dict with the same children ([Block(), {'w': v, 'b': v}]) writes the "
                     "same checkpoint while trainable_variables flattens the dict first: if "
                     "yours does, these averages are on the wrong variables; in Python, "
                     "apply_ema(module, path, apply_order='trainable') with the live module "
                     "reads its real order")
    text, layers = reassign_note(ckpt.objects, ckpt.entries(), pairs, apply_order)
    if text:  # a Keras layer's tracking (re-assignment in build()) is not in the file
        notes.append(text)
    return notes, {**found, "stated_apply_order": {"order": str(apply_order), "pairs": pairs,
                                                   "numbered_lists": bool(lists),
                                                   "read_alike": alike, "keras_layers": layers}}


def _trainable_notes(ckpt, layout, notes: list[str], found: dict) -> None:
    """:func:`stated_notes` of ``--trainable``: a Keras file's copies paired by the stated
    weights (and ``--loop-order``), or a TF-format tf_keras save's averages (tfk_stated)."""
    by_trainable = dict(getattr(layout, "stated_pairs", None) or {})
    if by_trainable:
        n = len(by_trainable)
        notes.append(f"note: {n} EMA cop{'y is' if n == 1 else 'ies are'} paired only because "
                     "you stated --trainable; the file does not record which weights the "
                     "optimizer was built with (or in which order: weights of equal shapes get "
                     "their copies by it), so this is your statement, not a proof: if it was "
                     "built with others, or in another order, these averages are on the wrong "
                     "weights")
        found["stated_trainable"] = {"pairs": by_trainable}
        from .formats.keras.stated_flags import note as stated_flags_note

        flags = stated_flags_note(layout)
        if flags:  # config.json's flags say the other way round (r26 F4)
            notes.append(flags)
            found["stated_trainable"]["contradicts_config"] = list(layout.stated_flags)
        moved = getattr(layout, "stated_reordered", None)
        if moved:
            a, b = (layout.paths.get(k, k) for k in moved)
            notes.append(f"note: --trainable states {a} before {b}, unlike the model's order "
                         "(which fit() builds the optimizer in): paired in the custom training "
                         "loop's order you stated (--loop-order)")
            found["stated_trainable"]["reordered"] = [a, b]
    looped = dict(getattr(ckpt, "stated_pairs", None) or {})
    if looped:  # a TF-format tf_keras save, --trainable NAMES --loop-order (tfk_stated)
        n = len(looped)
        notes.append(f"note: {counted(n, 'average')} of the tf_keras optimizer "
                     f"{agreeing(n, 'is', 'are')} paired only because "
                     "you stated --trainable ... --loop-order: the file records the order the "
                     "optimizer averaged the variables in, not which same-named weight each "
                     "was, so this is your statement of the custom training loop's order, not a "
                     "proof: if its first apply_gradients() listed them otherwise these "
                     "averages are on the wrong weights")
        found["stated_trainable"] = {"pairs": looped, "loop_order": True}


def _saver_def_said(ckpt, crossed) -> str:
    """The --not-swapped note's other way out for crossed Savers (s28d "Left": it offered
    only ``--raw --no-meta``): ``--saver-def-wrote`` where the checkpoint's own ``.meta``
    records one of them (:func:`~ckpt_tools.saver_def_stated.saver_def_offer`).

    Returns:
        `str`: a clause starting with ``"; "``, or ``""``."""
    if not crossed:
        return ""
    from .saver_def_stated import saver_def_offer

    return ("; or pass --saver-def-wrote instead of --not-swapped if the Saver whose SaverDef "
            "the .meta records wrote them" if saver_def_offer(ckpt) else "")


def averages_only_said(ckpt, read=None) -> tuple[str, dict]:
    """What :func:`stated_notes` says of the caller's own ``--averages-only``
    (``averages_only=True``) where it pairs a TF1 Saver's keys named as averages whose
    variables are not stored: a ``"warning: ..."`` where the ``.meta``'s save op wrote them
    from their variables outside an evaluation graph (the raw weights if a training run saved
    them: review-26-user-u28 F1), else a ``"note: ..."``. ``read``: as :func:`stated_notes`.

    Returns:
        `tuple[str, dict]`: the line (``""``: the statement pairs nothing read) and the
        ``--json`` fields (``{"stated_averages_only": {"pairs": ..., "raw_if_trained":
        [...]}}``; ``{}`` with the line ``""``).
    """
    from .raw_named import saved_from
    from .raw_named_said import stated_raw_said
    from .raw_shadows import evaluation_graph, stated_lone_averages
    from .save_op import written_sources

    lone = stated_lone_averages(ckpt)
    if read is not None:  # the keys the command read, not those its --exclude left out
        keys = set(read)
        lone = {s: t for s, t in lone.items() if s in keys}
    if not lone:
        return "", {}
    written = written_sources(ckpt) or {}
    evaluated = any(evaluation_graph(ckpt, s) for s in lone)
    # written from their variables by a graph that is no evaluation graph: the raw weights if
    # a training run saved them; said as a warning, never as averages (review-26-user-u28 F1)
    trained = [] if evaluated else [s for s, t in lone.items() if saved_from(written.get(s), t)]
    if trained:
        return (f"warning: {stated_raw_said(len(lone), trained[0])}"
                + loss_named_said(lone) + moments_named_said(lone),
                {"stated_averages_only": {"pairs": lone, "raw_if_trained": trained}})
    # a TF1 Saver's keys named as averages, their variables not stored
    one = len(lone) == 1
    return (f"note: {counted(len(lone), 'key')} named as averages (e.g. {next(iter(lone))}) "
            + ("is read as the average of a variable" if one else
               "are read as the averages of variables")
            + " the checkpoint does not store only because you stated --averages-only; "
            + (("an evaluation graph's Saver of ema.variables_to_restore() wrote it from its "
                "variable: if that held its raw weight (not the average it restored), so does "
                "this key") if evaluated and one else
               ("an evaluation graph's Saver of ema.variables_to_restore() wrote them "
                "from its variables: if those held their raw weights (not the averages "
                "it restored), so do these keys") if evaluated else
               f"no .meta records which Saver wrote {'it' if one else 'them'}: if it was a "
               "Saver of ema.variables_to_restore(), "
               + ("it holds the raw weight" if one else "they hold the raw weights"))
            + loss_named_said(lone) + moments_named_said(lone),
            {"stated_averages_only": {"pairs": lone}})

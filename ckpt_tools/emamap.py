"""EMA name maps: which checkpoint key feeds which variable when evaluating with averages.

:func:`ema_map` reproduces ``tf.train.ExponentialMovingAverage.variables_to_restore()`` — shadows
of trainable and moving-average variables replace them, every other global variable maps to
itself — but in *checkpoint keys*, so partitioned variables come out right
(``emb/ExponentialMovingAverage -> emb`` rather than the graph's
``emb/part_0/ExponentialMovingAverage``). Without a ``.meta`` graph it infers the same map from
the keys alone.
"""

from __future__ import annotations

import os
from collections.abc import Collection

from . import roles as R
from .checkpoint import Checkpoint
from .crossed_unpaired import refuse_crossed_unpaired
from .ema_apply_order import paired_variables, refuse_apply_order
from .ema_filters import left_out, rescope, restored_name, selected_by, selected_pairs
from .ema_map_steps import (
    pair_by_names,
    pair_through_save_op,
    refuse_unpaired,
    spoken_style,
    unaveraged_weights,
)
from .ema_missing import refuse_orphans
from .ema_objects import refuse_named_both
from .ema_refusals import UnprovenPairingError as UnprovenPairingError  # re-exported
from .ema_refusals import require_keras
from .ema_result import EmaMap
from .ema_several import join_maps, split_ema_names
from .emamap_hints import map_hints
from .formats.objgraph import has_swappable_averages
from .graph_saved import graph_holders
from .keras_detached import detached_copies
from .keras_unstepped import refuse_unstepped_tf2
from .parts_apart import refuse_parts_apart
from .raw_reasons import NOT_FLOAT, expected_raw
from .rescope_clash import refuse_object_rescope, refuse_rescope_clash
from .save_op import named_pairs_unproven
from .saved_keys import refuse_renamed_keys
from .saved_swaps import pairs_through_save_op
from .slashed_stated import refuse_under_shadows, stated_slashed_shadows
from .stated_left_raw import refuse_left_beside_named
from .stated_open import opened_stated, refuse_unknown

KEEP, DROP = "keep", "drop"


def proven_pairs(checkpoint: str | os.PathLike | Checkpoint, *, ema_name: str | None = None,
                 use_meta: bool = True, apply_order: str | None = None,
                 **statements) -> dict[str, str]:
    """The one pairing decision every command uses: variable key -> the key of the average
    to use for it, exactly as :func:`ema_map` (``ckpt map``) pairs them (``statements``:
    ``ema_map``'s, ``use_ema=``...).

    Returns:
        `dict[str, str]`: only variables whose stored average is proven (others are absent).

    Raises:
        UnprovenPairingError: two or more pairings fit (names the option that decides).
        EmaError: a Keras file that holds no averages.
        OptionError: ``apply_order`` given for a Keras file
            (:func:`~.ema_apply_order.refuse_apply_order`).
    """
    m = ema_map(checkpoint, ema_name=ema_name, use_meta=use_meta, apply_order=apply_order,
                non_averaged=DROP, slots=KEEP, allow_missing=True, **statements)
    unstored = set(m.missing)  # allow_missing leaves these only where not one is stored
    return {t: s for s, t in m.pairs if s != t and t not in unstored}


def ema_map(
    checkpoint: str | os.PathLike | Checkpoint,
    *,
    ema_name: str | None = None,
    use_meta: bool = True,
    non_averaged: str = KEEP,
    slots: str = DROP,
    include: list[str] | None = None,
    exclude: list[str] | None = None,
    strip_scope: str | None = None,
    add_scope: str | None = None,
    allow_missing: bool = False,
    style: str | None = None,
    apply_order: str | None = None,
    strict: bool = False,
    in_graph: bool = False,
    not_swapped: bool = False,
    targets: Collection[str] | None = None,
    **statements,
) -> EmaMap:
    """Builds the EMA restore map of a checkpoint, in checkpoint keys.

    Args:
        checkpoint (`str` or `Checkpoint`): path or open checkpoint.
        ema_name (`str`, *optional*): the name of the ``ExponentialMovingAverage`` object whose
            averages to use (``avg``, ``ExponentialMovingAverage_1``…: the last part of the
            average's name); default: detected. Required when a variable has averages of
            several EMA objects (otherwise :class:`EmaError` names them). Several names,
            comma-separated (``"wavg,ExponentialMovingAverage"``), take the averages of EMA
            objects that averaged different variables; a variable two of them averaged is
            refused.
        use_meta (`bool`, defaults to `True`): follow the ``.meta`` graph's collections, exactly
            like ``variables_to_restore()``; otherwise (or with no ``.meta``) infer from keys.
        non_averaged (`"keep"` or `"drop"`): map variables without an average to themselves,
            or leave them out.
        slots (`"drop"` or `"keep"`): optimizer slots are dropped by default (evaluation never
            needs them); ``"keep"`` gives TensorFlow's exact map.
        include / exclude (`list[str]`): globs on target keys; ``include`` also keeps a pair
            whose average's key matches (a filter naming a shadow selects its pair).
        strip_scope / add_scope (`str`): rewrite target keys, e.g. strip ``tower_0/``.
        allow_missing (`bool`): restore raw values where a shadow is missing instead of
            recording it in :attr:`EmaMap.missing`, beside stored averages: where not one is
            stored every weight stays missing (the refusal says to ask for raw weights).
        style (`str`, *optional*): use only averages kept this way (``tf1``, ``object``,
            ``keras``, ``slot``; see :data:`ckpt_tools.roles.EMA_STYLES`) when a checkpoint holds
            several kinds.
        apply_order (`str`, *optional*): TF2 averages of same-named, same-shaped variables
            (unnamed ``tf.Variable``s are all ``Variable``) can only be paired by the order
            ``ema.apply()`` got the variables in, which the checkpoint does not record; state it:
            ``"trainable"`` (``module.trainable_variables`` of a ``tf.Module``) or
            ``"tracked"`` (the order the variables were tracked: the order their attributes were
            assigned, which the checkpoint records, as Keras' ``model.trainable_variables``;
            not creation order: blocks created in one order and assigned in another are
            tracked in the second). Without it
            such averages are refused. Or the order itself, as checkpoint keys in the order
            ``apply()`` got their variables (``apply_ema`` passes a live module's
            ``trainable_variables`` so).
        strict (`bool`, defaults to `False`): refuse a pairing that rests on a Keras file's
            ``fit()`` build order too (:mod:`~ckpt_tools.keras_assumed`), as ``--strict``;
            otherwise it is assumed (and warned).
        not_swapped (`bool`, defaults to `False`): state that a Keras 3 file (or a checkpoint
            of ``average`` slots) was not saved swapped (``SwapEMAWeights(swap_on_epoch=True)``
            before ``ModelCheckpoint``; an EMA optimizer's ``swap_weights()``), as
            ``--not-swapped``; on an open checkpoint it is stated on it. Without it a file
            whose weights differ from their averages is refused (exit 6): nothing in it shows
            which they are; if it was swapped its own weights are the averages. Asked only
            of the pairs the caller reads: those ``include``/``exclude`` keep, of ``targets``.
        targets (`Collection[str]`, *optional*): the target keys the caller restores (the
            variables :func:`~ckpt_tools.apply_ema` assigns); a weight outside them is
            neither read nor written, so the ``not_swapped`` question is not asked of it
            (review-33-attack-r127 M2). Default: every target.
        in_graph (`bool`, defaults to `False`): the targets are the variables of the graph
            (``restore_ema``/``ema_saver``), not checkpoint keys: a TF1 key the ``.meta``'s
            save op wrote from a variable of another name is refused only where it is an
            average's key (:func:`~ckpt_tools.saved_keys.refuse_renamed_keys`).
        **statements: ``use_ema``, ``optimizer``, ``trainable``, ``loop_order``,
            ``fit_order``, ``averages_only``, as :mod:`~ckpt_tools.stated_open` takes them.

    Returns:
        `EmaMap`. Where its pairing rests on an assumption (:attr:`EmaMap.assumed`), an
        :class:`~ckpt_tools.errors.AssumptionWarning` says so, as ``ckpt map``'s note.

    Raises:
        EmaError: if an average cannot be paired with one variable from what the file records
            (its candidates and the option that decides are named), or a variable has averages
            of several EMA objects and ``ema_name`` picks none, or (``strict``) the pairing
            rests on an assumption.
        UnprovenPairingError: (an :class:`EmaError`) a Keras 3 file's weights (or a
            checkpoint's variables) differ from their averages and ``not_swapped`` is not
            stated: option ``--not-swapped``.
        OptionError: ``apply_order`` given for a Keras file, where it cannot apply.
        UnsupportedFormatError: ``strip_scope``/``add_scope`` for a TF2 checkpoint (exit 5).
        CheckpointError: if the checkpoint cannot be read. Missing shadows are *reported* in
        ``missing``; call :meth:`EmaMap.require_complete` to turn them into an :class:`EmaError`.

    Example:
        >>> m = ema_map("fixtures/linear_v2")
        >>> m.mapping
        {'W/ExponentialMovingAverage': 'W', 'b/ExponentialMovingAverage': 'b'}
    """
    if non_averaged not in (KEEP, DROP) or slots not in (KEEP, DROP):
        raise ValueError("non_averaged and slots must be 'keep' or 'drop'")
    if style is not None and style not in R.EMA_STYLES:
        raise ValueError(f"style must be one of {', '.join(R.EMA_STYLES)}, got {style!r}")
    names = split_ema_names(ema_name)
    targets = None if targets is None else frozenset(targets)
    refuse_unknown("ema_map", statements, checkpoint)
    # use_meta=False: the checkpoint as if no .meta were beside it, for every step below;
    # not_swapped on an open checkpoint: stated on the caller's (stated_open)
    opened = opened_stated(checkpoint, {**statements, "not_swapped": not_swapped},
                           meta=use_meta)
    ckpt = opened.__enter__().with_meta(use_meta)
    unknown = getattr(ckpt, "meta_unknown", None)
    if unknown is not None:  # opened past it (defer_unknown): no pairing by names
        opened.__exit__()
        raise UnprovenPairingError(str(unknown), option=unknown.option)
    if not_swapped:
        ckpt.not_swapped = True  # its meta-less view too
    # --no-meta, or a checkpoint opened with meta=False (its Python twin, which arrived here
    # with use_meta=True and skipped every rule below: review-32-attack-r122 F1): its own
    # graph shows the names mislead (r110 F6), or
    if not use_meta or getattr(ckpt, "graph_declined", False):
        from .no_meta_mark import refuse_unrecorded  # its mark (r117), where no output
        from .no_meta_own import refuse_own_graph_swap, refuse_strict_mark  # records it (s32l)

        try:
            refuse_strict_mark(ckpt)
            if getattr(ckpt, "graph_declined", False):
                refuse_own_graph_swap(ckpt)
            refuse_unrecorded(ckpt)
        except UnprovenPairingError:
            opened.__exit__()
            raise
    if len(names) > 1:  # EMA objects that averaged different variables: each one's map, joined
        try:
            refuse_named_both(ckpt, names, use_meta, include,  # two of them averaged one
                              exclude)  # (r53 F3), written (r98 F2)
            maps = [ema_map(ckpt, ema_name=n, use_meta=use_meta, non_averaged=KEEP, slots=slots,
                            include=include, exclude=exclude, strip_scope=strip_scope,
                            add_scope=add_scope, style=style, apply_order=apply_order,
                            strict=strict, in_graph=in_graph, targets=targets)
                    for n in names]
        finally:
            opened.__exit__()
        return join_maps(ckpt.path, names, maps, keep_raw=non_averaged == KEEP,
                         allow_missing=allow_missing)
    ema_name = names[0] if names else None

    def named(key: str) -> str | None:  # the variable the save op restores from key (r117 F5)
        return restored_name(ckpt, key) if use_meta and (include or exclude) else None

    def out(src: str, tgt: str) -> bool:  # whether the name filters leave the pair out
        return left_out(src, tgt, include, exclude, named(tgt))

    assumed: list = []
    asked = False
    try:
        refuse_apply_order(ckpt, apply_order)
        refuse_object_rescope(ckpt, strip_scope, add_scope)  # r38 F7: map too
        if use_meta and style in (None, "tf1"):  # crossed Savers, no pair stored (r94 F1)
            refuse_crossed_unpaired(ckpt)
        if style in (None, "keras"):
            require_keras(ckpt)
        if style in (None, "keras", "slot") and (strict or getattr(
                ckpt.reader, "keras", None) is not None or has_swappable_averages(
                ckpt.objects)) or style == "tf1" and strict or style in (None, "tf1") and (
                named_pairs_unproven(ckpt)):  # TF1 without a save op: saver_not_swapped
            from .keras_assumed import keras_assumptions, refuse_assumed
            from .swap_assumed import of_style

            # a Keras file, or a Keras 3 optimizer's copies or average slots in a TF
            # checkpoint (keras_assumed, swap_assumed: no import else)
            assumed = of_style(keras_assumptions(ckpt), style)
            asked = True  # refused below, once the file's own pairing is proven
        variables = paired_variables(ckpt, apply_order, ema_name)
        # <v>/N/<s> under N's shadow: an EMA of an EMA or a weight? (review-22-attack-r63 F1)
        refuse_under_shadows(ckpt, variables, ema_name, lambda k: out(k, k))
        variables = stated_slashed_shadows(ckpt, variables, ema_name,  # --ema-name ema/slow
                                           apply_order, lambda k: out(k, k))
        # keys that are not their variables' names: paired through the .meta's save op, or
        # refused where it cannot be (restore_ema's targets are the graph's own variables,
        # which the keys' variables are: graph_saved)
        translated = held = None
        if use_meta and style in (None, "tf1"):
            held = graph_holders(ckpt, variables) if in_graph else {}
            translated = None if held is None else pairs_through_save_op(ckpt, variables,
                                                                          ema_name)
            if translated is None:
                held = None
                refuse_renamed_keys(ckpt, variables, in_graph=in_graph, ema_name=ema_name)
        if translated is None:
            refuse_orphans(ckpt, variables)
            refuse_unpaired(ckpt, variables, ema_name, apply_order, style)
            paired = pair_by_names(ckpt, variables, ema_name, use_meta, style, allow_missing,
                                   out)
        else:  # a renamed Saver's keys: the graph's rules through its save op (r45 F2)
            paired = pair_through_save_op(ckpt, variables, translated, ema_name, use_meta,
                                          allow_missing,
                                          out)
        pairs, missing, not_saved, source = (paired.pairs, paired.missing, paired.not_saved,
                                             paired.source)
        # a weight left raw beside a stored average carrying the name read (r86 F2, F10)
        refuse_left_beside_named(ckpt, ema_name, pairs, missing, use_meta,
                                 lambda t: not out(t, t))
        # a partitioned variable whose parts a Saver wrote under keys of their own: no
        # average, and no raw value, of it is stored (review-25-user-u27 F1)
        refuse_parts_apart(ckpt, [*missing, *(t for s, t in pairs if s == t)])
        refuse_unstepped_tf2(ckpt, variables, pairs)  # Keras 3 copies before the first step
        if asked:  # not_swapped: always refused; fit_order: under strict
            from .user_ema_swap import unswapped_pairing

            # a user EMA's averages of every weight, no optimizer copy read (r104 F5), of
            # the pairs the caller reads: its filters, its targets (r127 M2)
            assumed = unswapped_pairing(ckpt, assumed, pairs, missing, lambda s, t: not out(
                s, t) and (targets is None or t in targets))
            refuse_assumed(ckpt, assumed, strict=strict)
        # what the pairing rests on by statement, as every CLI read says it (r128 F5, F3),
        # while the file is open (a Keras mark is read from it)
        from .stated_python import warn_stated

        stated_only = getattr(ckpt, "averages_only", False)  # the keys read decide only it
        warn_stated(ckpt, read={s for s, t in pairs if not out(s, t)} if stated_only else None,
                    stacklevel=3)
    finally:
        opened.__exit__()

    speaks = spoken_style(ckpt, variables)
    unaveraged, missing = unaveraged_weights(variables, pairs, missing, source, speaks)
    if speaks == "keras" and detached_copies(ckpt, variables, unaveraged):
        # another optimizer's use_ema copies saved without it (r55 F3): the saved one's list
        # no longer shows which weights were averaged, so none it leaves out is taken raw
        missing = [*missing, *(t for t in unaveraged if variables[t].dtype in R._FLOAT)]
        unaveraged = [t for t in unaveraged if variables[t].dtype not in R._FLOAT]

    # --allow-missing restores raw values beside stored averages (a weight ema.apply() left
    # out); with not one stored it would only hand back raw weights: refused, --raw says so.
    none_stored = bool(allow_missing and missing and all(s == t or s not in variables
                                                          for s, t in pairs))
    if none_stored:
        allow_missing = False
    missing_set = set(missing)
    mapping, kept, averaged, raw, dropped = selected_pairs(
        variables, pairs, missing_set, allow_missing=allow_missing, non_averaged=non_averaged,
        slots=slots, include=include, exclude=exclude, strip_scope=strip_scope,
        add_scope=add_scope, named=named)
    refuse_rescope_clash(ckpt.path, ((t if t in missing_set else s, t,  # no average: raw
                                      rescope(t, strip_scope, add_scope)) for s, t in kept),
                         strip_scope)
    if allow_missing:
        missing = []
    name = paired.name
    hints = map_hints(ckpt, variables, pairs, missing, source=source, name=name,
                      detected=paired.detected, suffix=paired.suffix, ema_name=ema_name,
                      use_meta=use_meta, style=style, speaks=speaks, none_stored=none_stored)
    return EmaMap(
        checkpoint=ckpt.path, ema_name=name, mapping=mapping, averaged=tuple(averaged),
        raw=tuple(raw), missing=tuple(t for t in missing if t not in set(dropped)),
        unaveraged=tuple(unaveraged), not_saved=tuple(not_saved), dropped=tuple(dropped),
        debias=tuple(k for k, v in variables.items() if v.role == R.EMA_DEBIAS),
        loss_averages=tuple(k for k, v in variables.items() if v.role == R.LOSS_AVERAGE),
        source=source, file_style=speaks, pairs=tuple(kept), hints=tuple(hints),
        names={k: v.path for k, v in variables.items() if v.path},
        expected_raw={**expected_raw(ckpt, unaveraged), **{
            t: NOT_FLOAT for t in unaveraged if speaks != "keras"
            and variables[t].dtype not in R._FLOAT}}, assumed=_warned(ckpt, assumed),
        held=held or {}, filtered_averages=tuple(
            t for s, t in pairs if s != t and t not in missing_set and s in variables
            and out(s, t)),
        filtered_sources=tuple(s for s, t in pairs if s != t and t not in missing_set
                               and s in variables and out(s, t)),
        # a glob selects a pair by its target or by the key its value IS read from: a
        # missing average's key (not stored, nothing reads it) selects nothing, else
        # join_maps dropped the weight under every name (review-28-attack-r101 F3)
        excluded=tuple(t for s, t in pairs if selected_by(
            exclude, t, s if t not in missing_set and s in variables else None,
            variable=named(t))))


def _warned(ckpt: Checkpoint, assumed: list) -> tuple[str, ...]:
    """Issues :class:`~ckpt_tools.errors.AssumptionWarning` for what the map assumes (once
    per open checkpoint) and returns the names, :attr:`EmaMap.assumed`."""
    if assumed:
        from .keras_assumed import warn_assumed

        warn_assumed(ckpt, assumed, stacklevel=4)
    return tuple(a.name for a in assumed)

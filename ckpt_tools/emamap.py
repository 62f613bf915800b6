"""EMA name maps: which checkpoint key feeds which variable when evaluating with averages.

:func:`ema_map` reproduces ``tf.train.ExponentialMovingAverage.variables_to_restore()`` — shadows
of trainable and moving-average variables replace them, every other global variable maps to
itself — but in *checkpoint keys*, so partitioned variables come out right
(``emb/ExponentialMovingAverage -> emb`` rather than the graph's
``emb/part_0/ExponentialMovingAverage``). Without a ``.meta`` graph it infers the same map from
the keys alone.
"""

from __future__ import annotations

import fnmatch
import os

from . import roles as R
from .checkpoint import Checkpoint
from .ema_ambiguous import ambiguous_message
from .ema_apply_order import (
    a_path_decides,
    an_order_pairs,
    lists_decide,
    optimizer_decides,
    paired_variables,
    refuse_apply_order,
)
from .ema_crossed import refuse_crossed, refuse_mixed_parts, refuse_mixed_writers
from .ema_missing import refuse_orphans
from .ema_names import choose_averages, from_keys, from_meta, recorded_suffixes, role_from_name
from .ema_proof import refuse_unproven_names, without_slot_names
from .ema_refusals import UnprovenPairingError, file_style, require_keras
from .ema_result import EmaMap
from .ema_several import join_maps, split_ema_names
from .ema_sources import (
    foreign_sources,
    refuse_other_averaged,
    refuse_tensor_sources,
    refuse_unwritten_sources,
    renumbered_averages,
    tensor_sources,
    trained_sources,
    translated_unwritten,
    written_sources,
)
from .ema_updates import (
    offer_objects,
    owned_averages,
    refuse_slot_sources,
    stacked_sources,
    update_ops,
)
from .emamap_hints import map_hints
from .formats.objgraph import has_swappable_averages
from .graph_saved import graph_holders
from .keras_unstepped import refuse_unstepped_tf2
from .listing import natural_key
from .lone_named import unmarked_lone_averages
from .object_held import off_default
from .pairing import lists_stated, root_child
from .raw_reasons import NOT_FLOAT, expected_raw
from .raw_shadows import lone_averages, settle_lone_averages
from .rescope_clash import refuse_object_rescope, refuse_rescope_clash, scope_prefix
from .save_op import named_pairs_unproven
from .saved_keys import refuse_renamed_keys
from .saved_swaps import pairs_through_save_op
from .scoped_order import within_of
from .slashed_stated import stated_slashed_shadows
from .stacked_unread import refuse_stacked_unread
from .stated_open import opened_stated, refuse_unknown
from .tfk_order import recorded_averages

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


_KERAS3_ITERATIONS = "_iterations/.ATTRIBUTES/VARIABLE_VALUE"


def match_any(name: str, patterns: list[str] | None) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns or ())


def rescope(key: str, strip_scope: str | None, add_scope: str | None) -> str:
    if strip_scope and key.startswith(scope_prefix(strip_scope)):
        key = key[len(scope_prefix(strip_scope)):]
    return (add_scope or "") + key


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
            which they are; if it was swapped its own weights are the averages.
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
    refuse_unknown("ema_map", statements)
    # use_meta=False: the checkpoint as if no .meta were beside it, for every step below;
    # not_swapped on an open checkpoint: stated on the caller's (stated_open)
    opened = opened_stated(checkpoint, {**statements, "not_swapped": not_swapped},
                           meta=use_meta)
    ckpt = opened.__enter__().with_meta(use_meta)
    if not_swapped:
        ckpt.not_swapped = True  # its meta-less view too
    if len(names) > 1:  # EMA objects that averaged different variables: each one's map, joined
        try:
            maps = [ema_map(ckpt, ema_name=n, use_meta=use_meta, non_averaged=KEEP, slots=slots,
                            include=include, exclude=exclude, strip_scope=strip_scope,
                            add_scope=add_scope, style=style, apply_order=apply_order,
                            strict=strict, in_graph=in_graph)
                    for n in names]
        finally:
            opened.__exit__()
        return join_maps(ckpt.path, names, maps, keep_raw=non_averaged == KEEP,
                         allow_missing=allow_missing)
    ema_name = names[0] if names else None
    assumed: list = []
    asked = False
    try:
        refuse_apply_order(ckpt, apply_order)
        refuse_object_rescope(ckpt, strip_scope, add_scope)  # r38 F7: map too
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
        variables = stated_slashed_shadows(ckpt, paired_variables(ckpt, apply_order, ema_name),
                                           ema_name, apply_order)  # --ema-name ema/slow
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
                refuse_renamed_keys(ckpt, variables, in_graph=in_graph)
        if translated is None:
            refuse_orphans(ckpt, variables)
            unpaired = [v for v in variables.values() if v.role == R.EMA and not v.ema_of
                        and v.ema_candidates and style in (None, v.ema_style)]
            if ema_name is not None and ckpt.objects is not None and ema_name in {
                    root_child(k) for k, v in variables.items() if v.role == R.EMA}:
                # --ema-name optimizer beside ema=[...]: the other attribute's averages are not
                # used, so their open pairing is not this map's
                unpaired = [v for v in unpaired if root_child(v.name) == ema_name]
            unpaired = off_default(ckpt, unpaired, ema_name)  # m.masks=[...]: r37 F6
            if unpaired:
                tf2 = any(v.ema_style != "tf1" for v in unpaired)
                spans = any(len({root_child(c) for c in v.ema_candidates}) > 1 for v in unpaired)
                decides = tf2 and not apply_order and not spans
                # averages of only part of a same-named group: an order may place none of them
                part = len({c for v in unpaired for c in v.ema_candidates}) > len(unpaired)
                no_order = decides and part and not an_order_pairs(ckpt, unpaired, ema_name)
                # a list or a dict keyed "0"...: the statement naming which, where it decides
                lists = lists_decide(ckpt, unpaired, ema_name, apply_order) if decides or (
                    isinstance(apply_order, str) and not lists_stated(apply_order)) else None
                # a tf_keras optimizer's averages: its recorded order places them, stated
                # (fit(): --apply-order tracked; a custom loop: --trainable --loop-order)
                tfk = {v.name for v in unpaired} <= set(recorded_averages(ckpt.objects)) and all(
                    sum(u.ema_candidates == v.ema_candidates for u in unpaired)
                    == len(v.ema_candidates) for v in unpaired)  # none frozen: tracked may place
                # a Keras optimizer's _trainable_variables: the one recorded order (u20 F4)
                # (several that disagree: none offered, r44 F5)
                opt, split = (None, ()) if within_of(apply_order) else optimizer_decides(
                    ckpt, unpaired, ema_name)
                raise UnprovenPairingError(
                    ambiguous_message(ckpt, variables, unpaired, apply_order, no_order=no_order,
                                      lists=lists, optimizer=opt, disagree=split),
                    "--apply-order tracked or --trainable NAMES --loop-order" if tfk and (
                        apply_order is None) else f"--apply-order trainable:{opt}" if opt
                    else None if split else lists if lists else
                    "--apply-order" if decides and not no_order else None if apply_order
                    else a_path_decides(ckpt, unpaired, ema_name),  # trainable:PATH (r33 F9)
                    {v.name: tuple(sorted(v.ema_candidates, key=natural_key))
                     for v in unpaired})
            # Under a variable_scope no <w>/<name> key shows the EMA name: the proven shadows do;
            # so do they for a name of several parts (W/ema/slow proven W's by the .meta).
            detected = proven_names(variables, ckpt.ema_names())
            name = ema_name or (detected[0] if detected else R.DEFAULT_EMA_NAME)
            suffix = recorded_suffixes(ckpt, variables)
            try:
                chosen = choose_averages(ckpt, variables, suffix, ema_name, style)
            except UnprovenPairingError as exc:  # the graph's update ops may prove one object's
                chosen = owned_averages(ckpt, variables, ema_name, use_meta, None)
                if chosen is None:
                    if exc.option == "--ema-name":  # never offer a crossed name (r39 F2)
                        refuse_crossed(ckpt, None, use_meta)
                    raise offer_objects(ckpt, variables, use_meta, exc) from None
            else:  # read by the names: a crossed name's keys are two objects' (r39 F2)
                if ema_name is not None:
                    refuse_crossed(ckpt, ema_name, use_meta)
            chosen = owned_averages(ckpt, variables, ema_name, use_meta, chosen) or chosen
            chosen = renumbered_averages(ckpt, variables, ema_name, chosen, use_meta)
            # each key read by the one object's apply(), never another's _N twin (r48 F5)
            refuse_mixed_writers(ckpt, chosen, ema_name, use_meta)
            refuse_mixed_parts(ckpt, chosen, use_meta)  # one key, two objects' parts (r48 F3)
            refuse_unproven_names(ckpt, variables, suffix, chosen, ema_name)
            graph_pairs = bool(use_meta and style in (None, "tf1") and ckpt.meta is not None
                               and ckpt.meta.collections.get("variables"))
            refuse_slot_sources(ckpt, variables, ema_name, chosen, use_meta, graph_pairs)
            if ema_name is None:  # w0/ExponentialMovingAverage, a slot's running mean
                refuse_other_averaged(ckpt, variables, chosen, use_meta)
            refuse_stacked_unread(ckpt, variables, ema_name, chosen, use_meta)
            # averages of variables not stored that no name marks (w/slow, a scope's): proposed
            unmarked = unmarked_lone_averages(ckpt, variables, chosen, ema_name, use_meta)
            chosen = {**chosen, **{t: s for s, t in unmarked.items()}}
            if unmarked and ema_name is None and not detected:  # w/slow: say slow
                name = next(iter(unmarked)).rpartition("/")[2]
            if graph_pairs:
                # a gradient's moment or an EMA of an EMA under W/<name>: W missing its
                # average (r36 F7, F0, F2)
                no_avg = {t: s for t, (s, _x, _o) in [*tensor_sources(
                    ckpt, variables, name, chosen, use_meta).items(), *written_sources(
                    ckpt, variables, name, chosen, use_meta).items()]}
                ops = update_ops(ckpt)
                # a key nothing writes beside apply()'s updates of others: refused (r41 F1)
                unwritten = refuse_unwritten_sources(ckpt, variables, name, chosen,
                                                     use_meta, allow_missing)
                no_avg.update(unwritten)
                no_avg.update({t: chosen.get(t) or f"{t}/{ema_name}" for t in [
                    *stacked_sources(ckpt, variables, ema_name, chosen, ops),
                    *foreign_sources(variables, ema_name, chosen, ops),
                    *trained_sources(ckpt, variables, ema_name, chosen, ops)]})
                pairs, missing, not_saved = from_meta(ckpt, variables, name, chosen, no_avg)
                # a weight the graph does not average at all (r45 F8): stated missing too
                missing += [t for t in unwritten if t not in missing]
                source = "meta"
            else:
                refuse_tensor_sources(ckpt, variables, ema_name, chosen, use_meta)
                pairs, missing, not_saved = from_keys(variables, chosen)
                source = "keys"  # a key written by hand (r38 F9): its weight missing
                missing += [t for t, (s, _o, _k) in written_sources(
                    ckpt, variables, ema_name, chosen, use_meta).items() if chosen.get(t) == s]
            # TF1: an average whose variable is not stored may hold the raw weight
            pairs = [(s, t) for s, t in pairs if not (s == t and s in unmarked)]
            pairs = settle_lone_averages(ckpt, pairs,
                                         {**lone_averages(ckpt, variables, chosen), **unmarked})
        else:
            pairs, missing, not_saved = translated
            # a renamed Saver's keys: the graph's rules through its save op (r45 F2)
            unproven = refuse_unwritten_sources(ckpt, variables, ema_name, {}, use_meta,
                                                allow_missing,
                                                translated_unwritten(ckpt, pairs, use_meta))
            pairs = [(t, t) if unproven.get(t) == s else (s, t) for s, t in pairs]
            missing = [*missing, *(t for t in unproven if t not in missing)]
            source = "meta"
            detected = proven_names(variables, ckpt.ema_names())
            name = ema_name or (detected[0] if detected else R.DEFAULT_EMA_NAME)
            suffix = recorded_suffixes(ckpt, variables)
        refuse_unstepped_tf2(ckpt, variables, pairs)  # Keras 3 copies before the first step
        if asked:  # not_swapped: always refused; fit_order: under strict
            refuse_assumed(ckpt, assumed, strict=strict)
    finally:
        opened.__exit__()

    speaks = file_style(ckpt)
    if speaks == "tf2" and {v.ema_style for v in variables.values()
                            if v.role == R.EMA and v.ema_style} == {"keras"}:
        speaks = "keras"  # a Keras 3 optimizer's use_ema copies in a tf.train.Checkpoint
    elif speaks == "tf2" and not any(v.role == R.EMA for v in variables.values()) and any(
            k.endswith(_KERAS3_ITERATIONS) for k in variables):
        # No average at all beside a Keras 3 optimizer (Checkpoint(model=, optimizer=)): the
        # averages a Keras user expects are its use_ema copies, so say use_ema=False.
        speaks = "keras"
    unaveraged = []
    # BN statistics count only when some have shadows: TF1 trainers average them, Keras not.
    expected_roles = (R.WEIGHT, R.BN_STAT) if any(
        variables[t].role == R.BN_STAT for s, t in pairs if s != t and t in variables) else (
        R.WEIGHT,)
    if source == "keys" and any(s != t for s, t in pairs):
        unaveraged = [t for s, t in pairs if s == t and variables.get(t) is not None
                      and variables[t].role in expected_roles]
        if speaks != "keras":
            # A weight left out of ema.apply() while others were averaged: TF's own
            # variables_to_restore() looks for its average and fails, and evaluating it raw
            # beside averaged ones is not what was asked: missing (--allow-missing keeps it
            # raw). A Keras optimizer's unaveraged weights are those it was not built with
            # (frozen, a target network): raw is what Keras evaluates them with. An integer
            # weight (a hand-quantized w_q) never has one: apply() takes float variables only.
            missing = [*missing, *(t for t in unaveraged if variables[t].dtype in R._FLOAT)]
            unaveraged = [t for t in unaveraged if variables[t].dtype not in R._FLOAT]
    elif source == "keys" and not missing:
        # Not one average stored: every weight misses one (BN statistics count only when
        # some have shadows, as in `ckpt list`'s "none of N weights has a shadow").
        missing = [t for s, t in pairs if variables.get(t) is not None
                   and variables[t].role in expected_roles]

    # --allow-missing restores raw values beside stored averages (a weight ema.apply() left
    # out); with not one stored it would only hand back raw weights: refused, --raw says so.
    none_stored = bool(allow_missing and missing and all(s == t or s not in variables
                                                          for s, t in pairs))
    if none_stored:
        allow_missing = False
    mapping: dict[str, str] = {}
    kept: list[tuple[str, str]] = []
    averaged, raw, dropped = [], [], []
    missing_set = set(missing)
    for src, tgt in pairs:
        role = variables[tgt].role if tgt in variables else role_from_name(tgt)
        # A filter naming the shadow selects its pair, as it does the shadow's row in `list`.
        selected = not include or match_any(tgt, include) or (
            src != tgt and match_any(src, include))
        if src != tgt and tgt in missing_set and allow_missing:
            src = tgt
        keep = True
        if src == tgt and non_averaged == DROP:
            keep = False
        if role == R.OPTIMIZER_SLOT and slots == DROP:
            keep = False
        if not selected or match_any(tgt, exclude):
            keep = False
        if not keep:
            dropped.append(tgt)
            continue
        mapping[src] = rescope(tgt, strip_scope, add_scope)
        kept.append((src, tgt))
        (averaged if src != tgt else raw).append(tgt)
    refuse_rescope_clash(ckpt.path, ((t if t in missing_set else s, t,  # no average: raw
                                      rescope(t, strip_scope, add_scope)) for s, t in kept),
                         strip_scope)
    if allow_missing:
        missing = []
    hints = map_hints(ckpt, variables, pairs, missing, source=source, name=name,
                      detected=detected, suffix=suffix, ema_name=ema_name, use_meta=use_meta,
                      style=style, speaks=speaks, none_stored=none_stored)
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
        held=held or {})


def _warned(ckpt: Checkpoint, assumed: list) -> tuple[str, ...]:
    """Issues :class:`~ckpt_tools.errors.AssumptionWarning` for what the map assumes (once
    per open checkpoint) and returns the names, :attr:`EmaMap.assumed`."""
    if assumed:
        from .keras_assumed import warn_assumed

        warn_assumed(ckpt, assumed, stacklevel=4)
    return tuple(a.name for a in assumed)


def proven_names(variables, by_keys: list[str]) -> list[str]:
    """The EMA names to speak of, most used first: ``by_keys`` (:meth:`Checkpoint.ema_names`)
    unless the proven TF1 shadows use none of them (an EMA name of several parts, whose last
    part alone the keys show); then the names the proven shadows carry after their variable's
    key, or their last part where a scope hides the variable's key."""
    shown: dict[str, int] = {}
    by_keys = without_slot_names(variables, by_keys)  # W/SGDM: the graph shows a slot
    for k, v in variables.items():
        if v.role == R.EMA and v.ema_of and v.ema_style == "tf1":
            part = (k[len(v.ema_of) + 1:] if k.startswith(v.ema_of + "/")
                    else k.rpartition("/")[2])
            shown[part] = shown.get(part, 0) + 1
    if by_keys and (not shown or by_keys[0] in shown):
        return by_keys
    return sorted(shown, key=lambda n: (-shown[n], n != R.DEFAULT_EMA_NAME, n))

"""The hints an :class:`~ckpt_tools.ema_result.EmaMap` gives with its missing averages: why
each may be missing (stored under another name, under a scope, a loss's, a slot's, never
saved) and which option or output decides. :func:`~ckpt_tools.emamap.ema_map` calls it last.
"""

from __future__ import annotations

from . import roles as R
from .elsewhere_hints import elsewhere_hint
from .ema_missing_hints import (
    KERAS3_LAYER_WEIGHTS,
    KERAS3_WEIGHTS,
    KERAS_EXPORT,
    LEGACY_SLOTS,
    MODULE_WEIGHTS,
    NO_OPTIMIZER,
    NONE_TO_ALLOW,
    SERVING_EXPORT,
    TENSOR_SOURCED,
    UNSAVED_INNER,
    misfiled_hint,
    missing_hints,
    unlisted_averages_hint,
    unsaved_inner_optimizers,
)
from .ema_scopes import scope_hints, vscoped_hint
from .ema_sources import (
    foreign_sources,
    tensor_source_text,
    tensor_sources,
    trained_sources,
    written_source_text,
    written_sources,
)
from .ema_updates import slot_named_hint, stacked_sources, update_ops
from .formats.objgraph import SLOT_MARK
from .keras_detached import detached_hint
from .keras_graph import keras3_model, under_keras, under_keras3_layer
from .loss_named import loss_named_missing_hint
from .object_held import held_hint
from .offer_probe import works
from .renamed_stated import other_objects_hint
from .resaved_named import resaved_hint
from .saved_aliases import export_archive
from .scoped_twins import scoped_twin_hint
from .slashed_stated import slashed_hint, stacked_hint
from .unstored_heads import raw_route

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the list path
if TYPE_CHECKING:
    from .checkpoint import Checkpoint


def map_hints(ckpt: Checkpoint, variables: dict, pairs: list[tuple[str, str]],
              missing: list[str], *, source: str, name: str, detected: list[str],
              suffix, ema_name: str | None, use_meta: bool, style: str | None, speaks: str,
              none_stored: bool) -> list[str]:
    """Returns the hints for ``missing`` (the targets left without an average, after
    ``allow_missing``), most telling first.

    Args:
        variables: key -> :class:`~ckpt_tools.variable.Variable`, as the map read them.
        pairs: every (average or raw key, target) pair the map found, kept or not.
        source: ``"meta"`` or ``"keys"``: what the pairs came from.
        name / detected / suffix: the EMA name spoken of, the names the keys show, and
            :func:`~ckpt_tools.ema_names.recorded_suffixes`.
        ema_name / use_meta / style: as given to :func:`~ckpt_tools.emamap.ema_map`.
        speaks: :func:`~ckpt_tools.ema_refusals.file_style`'s answer (or ``"keras"``).
        none_stored: ``allow_missing`` was refused because not one average is stored.
    """
    graph_keys = ({v.checkpoint_key for v in ckpt.meta.variables.values()}
                  if source == "meta" else set())
    partial = getattr(ckpt.reader, "partial", {})  # an average of some parts of t (F3)
    unsaved = [f"{t}/{name}" for t in missing if f"{t}/{name}" in graph_keys
               and f"{t}/{name}" not in variables and f"{t}/{name}" not in partial]
    hints = missing_hints(variables, name, detected, missing, unsaved,
                          {k: partial[k] for t in missing if (k := f"{t}/{name}") in partial},
                          meta_read=source == "meta",
                          accepted=lambda n: works(ckpt, n))
    slashed = slashed_hint(ckpt, variables, missing) or stacked_hint(
        ckpt, variables, missing, ema_name)
    if slashed:  # W/ema/slow without the .meta: not 'no shadow stored at all'
        hints.insert(0, slashed)
    twins = scoped_twin_hint(ckpt, variables, missing, ema_name) if missing else None
    if twins:  # model/model/w/fast without the .meta: not 'no shadow stored at all' (r82 F2)
        hints.insert(0, twins)
    resaved = resaved_hint(ckpt, missing) if source == "meta" else None
    if resaved:  # fc/w/fast written from fc/w by the .meta's save op (s33a)
        hints.append(resaved)
    held = held_hint(ckpt, variables, missing)
    if held:  # w0/fast tracked by the model: read as its weight, unless stated (r33 F1)
        hints.append(held)
    loss_said = loss_named_missing_hint(ckpt, variables, missing)
    if loss_said:  # total_loss/lossavg without the .meta: maybe a tensor's average
        hints.append(loss_said)
    slotted = slot_named_hint(ckpt, variables, name, ema_name is not None, missing)
    if slotted:
        hints.insert(0, slotted)
    others = other_objects_hint(ckpt, ema_name, missing, use_meta) if missing else None
    if others:  # avg/c, fast's, under a stated --ema-name slow: not frozen (r104 F3)
        hints.insert(0, others)
    if none_stored:
        hints.append(NONE_TO_ALLOW)
    if speaks == "keras" and missing and not any(v.role == R.EMA for v in variables.values()) \
            and any(SLOT_MARK in k for k in variables):
        hints.append(LEGACY_SLOTS)  # slot variables: a TF2 slot optimizer, no use_ema
    unlisted = unlisted_averages_hint(variables) if speaks == "keras" and missing and not any(
        v.role == R.EMA for v in variables.values()) else None
    if unlisted:  # averages stored, no list pairing them: not "use_ema=False" (s32m)
        hints.append(unlisted)
    detached = detached_hint(ckpt, variables, missing) if speaks in ("tf2", "keras") \
        else None
    if detached:  # Keras 3 / tf_keras averages saved without their optimizer (r47 F3, r55)
        hints.insert(0, detached)
    if speaks == "tf2" and missing and not ckpt.location.saved_model and not any(
            v.role in (R.EMA, R.OPTIMIZER_SLOT) or R.OPTIMIZER_PATH.search(k)
            for k, v in variables.items()):
        hints.append(NO_OPTIMIZER)  # not "use_ema=False": no optimizer was saved at all
    if speaks == "tf2" and missing and keras3_model(ckpt.objects):
        hints.append(KERAS3_WEIGHTS)  # the advice's code must take v.value (u26 F6)
    if speaks == "keras" and missing and not ckpt.location.saved_model \
            and ckpt.objects is not None and ckpt.objects.node_keys \
            and not under_keras(ckpt.objects, missing):
        # a tf.Module's: a tf.train EMA is as likely (u18 F1); a Keras 3 subclassed model's
        # layers: its unsaved list attributes may have held them (r109 F5)
        hints.append(KERAS3_LAYER_WEIGHTS if under_keras3_layer(ckpt.objects, missing)
                     else MODULE_WEIGHTS)
    if speaks == "keras" and missing and unsaved_inner_optimizers(ckpt.objects):
        hints.append(UNSAVED_INNER)  # not "use_ema=False": the MultiOptimizer's inner ones
    if speaks in ("tf1", "tf2") and missing and ckpt.location.saved_model \
            and not any(v.role == R.EMA for v in variables.values()):
        # maybe the averages already (inception_saved_model.py; TF2: review-14-attack-r25 F4a)
        hints.append(SERVING_EXPORT)
        if export_archive(ckpt.objects):
            hints.append(KERAS_EXPORT)
    lacking = set(missing)
    filed = {s: t for s, t in pairs if s != t}  # the save op may file t's under another name
    elsewhere = {v.ema_of: k for k, v in variables.items()
                 if v.role == R.EMA and v.ema_of in lacking
                 and filed.get(k, v.ema_of) == v.ema_of}
    misfiled = misfiled_hint(ckpt, filed, missing, name)
    if misfiled:
        hints.insert(0, misfiled)
    if elsewhere:  # stored under another name: not 'left out of ema.apply()'
        hints.insert(0, elsewhere_hint(ckpt, name, elsewhere, suffix, variables))
    scoped = scope_hints(ckpt, name, missing) if ema_name and use_meta else None
    hints = hints if scoped is None else scoped  # --ema-name gen/ExponentialMovingAverage
    vscoped = vscoped_hint(ckpt, ema_name, missing) if use_meta and source == "meta" else None
    if vscoped:  # stored as b/W/fast: not "no average of fast's stored" (r58 F2, r65 F5, F10)
        hints.insert(0, vscoped)
    sourced = {t: found for t, found in tensor_sources(
        ckpt, variables, name, {}, use_meta and source == "meta").items() if t in missing}
    if sourced:  # W/<name> stored, a gradient's moment (r36 F7)
        hints.insert(0, TENSOR_SOURCED + tensor_source_text(sourced))
    written = {t: found for t, found in written_sources(
        ckpt, variables, name, {}, use_meta).items() if t in missing}
    if written and not sourced:  # W/<name> stored, written by hand (r38 F9)
        hints.insert(0, TENSOR_SOURCED + written_source_text(ckpt, written))
    stacked = {t: text for t, text in stacked_sources(
        ckpt, variables, ema_name, {}, update_ops(ckpt) if use_meta and source == "meta"
        else None).items() if t in missing}
    if stacked:  # W/a/b stored, b's average of W/a (r36 F0, F2)
        hints.insert(0, TENSOR_SOURCED + stacked[min(stacked)])
    ops = update_ops(ckpt) if use_meta and source == "meta" and ema_name else None
    foreign = sorted(t for t in foreign_sources(variables, ema_name, {}, ops) if t in missing)
    trained = sorted(t for t in trained_sources(ckpt, variables, ema_name, {}, ops)
                     if t in missing)
    if trained and not stacked and not foreign:  # w1/ema a trained buffer (r36 F3)
        hints.insert(0, TENSOR_SOURCED + (
            f"{trained[0]}/{ema_name} is a variable the graph trains (its .meta says), not "
            f"{trained[0]}'s average, while the graph's update ops show an EMA object "
            f"{ema_name!r} averaging others"))
    if foreign and not stacked:  # W/<name>: another object's average of another variable (r36 F9)
        shadow = f"{foreign[0]}/{ema_name}"
        other, scope = ops.averages[shadow]
        hints.insert(0, TENSOR_SOURCED + (
            f"{shadow} is no average of {foreign[0]}: the .meta's update op "
            f"{scope}/AssignMovingAvg averages {other} into it (the EMA of name scope "
            f"'{scope}' averaging {other}), so nothing under {ema_name} holds "
            f"{foreign[0]}'s average"))
    route = raw_route(ckpt, variables) if missing else None
    if missing and not route and getattr(ckpt, "meta_doubt", ()):
        from .swap_assumed import doubted_raw_route  # --raw refused by the doubt (r90 F3)

        route = doubted_raw_route(ckpt)
    if missing and not route:  # crossed Savers, no pair: --raw refused too (s26n leftover)
        from .crossed_routes import crossed_raw_route

        route = crossed_raw_route(ckpt) if use_meta else None
    if route:  # --raw refused without the .meta: never offered as it is (r72 F5)
        hints.append(route)
    kinds = sorted({v.ema_style for v in variables.values() if v.role == R.EMA and v.ema_style})
    if style is not None and missing and style not in kinds and kinds:
        hints.insert(0, f"no averages kept as {style!r} here; this checkpoint keeps them as "
                        f"{', '.join(kinds)} (drop --style, or pass --style {kinds[0]})")
    return hints

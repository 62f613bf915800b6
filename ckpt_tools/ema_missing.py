"""Why an EMA map is refused for averages missing (:func:`missing_message`, from the hints
the map gathers: :mod:`ckpt_tools.ema_missing_hints`), and checkpoints holding averages of
none of their variables (:func:`refuse_orphans`), for :mod:`ckpt_tools.emamap`.
"""

from __future__ import annotations

from . import roles as R
from .checkpoint import Checkpoint
from .ema_missing_hints import (
    KERAS3_LAYER_WEIGHTS,
    KERAS3_WEIGHTS,
    KERAS_EXPORT,
    LEGACY_SLOTS,
    LISTED_TRAINABLE,
    MISFILED,
    MODULE_WEIGHTS,
    PARTIAL,
    SERVING_EXPORT,
    TENSOR_SOURCED,
    UNLISTED_AVERAGES,
    UNSAVED_INNER,
)
from .ema_refusals import SLOT_NAMED
from .ema_scopes import VSCOPED
from .errors import EmaError
from .formats.objgraph import readable_name
from .keras_detached import DETACHED
from .object_held import EMA_OF_EMA, HELD_OWN, HELD_TWIN
from .renamed_stated import OTHER_OBJECTS
from .resaved_named import RESAVED
from .scoped_twins import SCOPED_TWIN
from .slashed_stated import SLASHED
from .unsaved_layers import empty_children, unsaved_layers_advice
from .unstored_heads import RAW_REFUSED
from .wording import agreeing, counted

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .emamap import EmaMap


_TF2_UNSAVED = (
    "a tf.train.Checkpoint saves only what it is given, so save the averages with the model, "
    "e.g. tf.train.Checkpoint(model=model, ema=[ema.average(v) for v in "
    "model.trainable_variables]) (with unique variable names, tf.Variable(..., name=...), the "
    "averages' names pair them; same-named variables of one shape then need --apply-order "
    "trainable, plus --numbered-lists where a list holds more than ten)")


_TF2_UNSAVED_KERAS3 = (
    "a tf.train.Checkpoint saves only what it is given, so save the averages with the model; "
    "a Keras 3 model's variables are no tf.Variables (ema.apply() and ema.average() refuse "
    "them), so average their tf.Variables as README's TF2 custom-loop recipe does: tvars = [v "
    "if isinstance(v, tf.Variable) else v.value for v in model.trainable_variables]; "
    "ema.apply(tvars) each step; tf.train.Checkpoint(model=model, ema=[ema.average(v) for v "
    "in tvars]) (a Keras 3 model names its variables like itself, so same-shaped ones then "
    "need --apply-order trainable:optimizer, the optimizer saved too)")


def none_stored(m: EmaMap) -> bool:
    """Whether ``m`` holds not one stored average: every target read from an average misses
    it, and none that the filters left out has one stored (``--exclude model/body``, whose
    average is stored, beside a ``model/head`` without one: "no average is stored at all"
    would be false, and --allow-missing is offered; review-27-attack-r98 F6).

    Returns:
        `bool`: True where the file holds no average of any weight the map speaks of."""
    return set(m.averaged) <= set(m.missing) and not getattr(m, "filtered_averages", ())


def missing_message(m: EmaMap) -> str:
    """Returns the refusal of ``m``'s missing averages (:meth:`EmaMap.require_complete`),
    in the file's style; several names joined (``--ema-name a,b``) are said one by one,
    never pasted into one key (``'W/a,b'``; review-27-attack-r98 F1)."""
    text = _missing_message(m)
    names = m.ema_name.split(",") if m.ema_name else []
    if len(names) < 2:
        return text
    text = text.replace(f"'<name>/{m.ema_name}'", " or ".join(f"'<name>/{n}'" for n in names))
    for t in m.missing:
        text = text.replace(f"e.g. '{t}/{m.ema_name}' is not", "e.g. " + " and ".join(
            repr(f"{t}/{n}") for n in names) + " are not")
    return text


def _missing_message(m: EmaMap) -> str:
    if m.hints and m.hints[0].startswith(("no averages kept as", DETACHED)):
        return f"{m.checkpoint}: {m.hints[0]}"
    sample = ", ".join(m.shown(t) for t in m.missing[:5]) + (
        f" and {len(m.missing) - 5} more" if len(m.missing) > 5 else "")
    others = next((h for h in m.hints if h.startswith(OTHER_OBJECTS)), None)
    if others:  # avg/c is fast's: not "frozen", no other EMA name (r104 F3)
        return (f"{m.checkpoint}: --ema-name {m.ema_name} leaves "
                f"{counted(len(m.missing), 'variable')} without an average: {sample}; {others}")
    sourced = next((h for h in m.hints if h.startswith(TENSOR_SOURCED)), None)
    if sourced:  # W/<name> is stored: "not in the checkpoint" would be false
        way = ("; no weight has a proven average here: export --raw writes the raw weights"
               if none_stored(m) else  # none: raw weights only (r38 F9)
               "; pass --allow-missing (allow_missing=True) to restore them raw, or --exclude "
               "them")
        return (f"{m.checkpoint}: {counted(len(m.missing), 'variable')} "
                f"{agreeing(len(m.missing), 'has', 'have')} no average stored: "
                f"{sample}; {sourced[len(TENSOR_SOURCED):]}{way}")
    part = next((h for h in m.hints if h.startswith(PARTIAL)), None)
    if part:  # the key is stored, in part: "not in the checkpoint" would be false
        return (f"{m.checkpoint}: {counted(len(m.missing), 'variable')} "
                f"{agreeing(len(m.missing), 'has', 'have')} no whole EMA shadow under "
                f"'<name>/{m.ema_name}': {sample}; {part}; pass --allow-missing "
                "(allow_missing=True) to restore them raw, or export --raw")
    slotted = next((h for h in m.hints if SLOT_NAMED in h), None)
    if slotted:  # the keys may be there, read as slots: "not in the checkpoint" would be false
        return (f"{m.checkpoint}: {counted(len(m.missing), 'variable')} "
                f"{agreeing(len(m.missing), 'has', 'have')} no average proven under "
                f"'<name>/{m.ema_name}': {sample}; {slotted}")
    twins = next((h for h in m.hints if h.startswith(SCOPED_TWIN)), None)
    if twins:  # model/model/w/fast, no .meta: not "no EMA shadow is stored at all" (r82 F2)
        return (f"{m.checkpoint}: {counted(len(m.missing), 'variable')} "
                f"{agreeing(len(m.missing), 'has', 'have')} no EMA shadow under "
                f"'<name>/{m.ema_name}': {sample}; {twins}")
    vscoped = next((h for h in m.hints if h.startswith(VSCOPED)), None)
    if vscoped:  # b/W/fast stored: the other hints' "none of fast's" would be false (r58 F2)
        return (f"{m.checkpoint}: {counted(len(m.missing), 'variable')} "
                f"{agreeing(len(m.missing), 'has', 'have')} no EMA shadow under "
                f"'<name>/{m.ema_name}': {sample}; {vscoped}")
    owner = dict(m.pairs)  # <t>/<name> may be stored as another variable's average:
    taken = {f"{t}/{m.ema_name}": owner[f"{t}/{m.ema_name}"] for t in m.missing
             if owner.get(f"{t}/{m.ema_name}", t) != t}  # ema.apply() in a variable_scope
    shadow = next((f"{t}/{m.ema_name}" for t in m.missing if f"{t}/{m.ema_name}" not in taken),
                  f"{m.missing[0]}/{m.ema_name}")
    held = m.file_style == "tf2" and any(  # Checkpoint(e1=[...]): the attribute's name
        s != t and s.split("/", 1)[0] == m.ema_name for s, t in m.pairs)
    eg = (f"{shadow!r} is {taken[shadow]}'s average, made inside a variable_scope"
          if shadow in taken else f"e.g. {shadow!r} is not in the checkpoint")
    none = none_stored(m)  # not one shadow stored
    renamed = next((h for h in m.hints if h.startswith("the checkpoint uses EMA name")), None)
    other = next((h for h in m.hints if h.startswith("another EMA object averaged")), None)
    misfiled = next((h for h in m.hints if h.startswith(MISFILED)), None)
    slashed = next((h for h in m.hints if h.startswith(SLASHED)), None)
    twin = next((h for h in m.hints if h.startswith(HELD_TWIN)), None)
    if twin:  # m.fast/0 beside a default average of w0: not "created after ema.apply()"
        return (f"{m.checkpoint}: {counted(len(m.missing), 'weight')} "
                f"{agreeing(len(m.missing), 'has', 'have')} no average (ema.average(v)) "
                f"in the checkpoint while others do: {sample}; {twin}")
    if slashed:  # W/ema/slow, no .meta: the averages may be there, under a slashed name
        return (f"{m.checkpoint}: {counted(len(m.missing), 'variable')} "
                f"{agreeing(len(m.missing), 'has', 'have')} no EMA shadow under "
                f"'<name>/{m.ema_name}': {sample}; {slashed}")
    if misfiled:  # not a variable_scope's, not another EMA object's: the Saver's dict
        return (f"{m.checkpoint}: {counted(len(m.missing), 'variable')} "
                f"{agreeing(len(m.missing), 'has', 'have')} no average stored: "
                f"{sample}; {misfiled}")
    if other and not none:
        under = (f"the attribute {m.ema_name}" if held else  # TF2's e1/N, not W/e1
                 f"'<name>/{m.ema_name}' ({eg})")
        return (f"{m.checkpoint}: {counted(len(m.missing), 'variable')} "
                f"{agreeing(len(m.missing), 'has', 'have')} no EMA shadow under "
                f"{under}: {sample}; " + "; ".join(m.hints))
    if other and none and m.file_style == "tf1":  # not "no EMA shadow is stored" (r53 F4)
        return (f"{m.checkpoint}: no variable has an EMA shadow under '<name>/{m.ema_name}' "
                f"({eg}): {sample}; the checkpoint holds another EMA object's averages, none "
                f"of {m.ema_name}'s; " + "; ".join(m.hints))
    if none and renamed:  # the shadows are there, under another name: nothing else to say
        return (f"{m.checkpoint}: no variable has an EMA shadow under '<name>/{m.ema_name}' "
                f"({eg}); {renamed}")
    unlisted = next((h for h in m.hints if h.startswith(UNLISTED_AVERAGES)), None)
    if none and m.file_style == "keras" and LEGACY_SLOTS in m.hints:
        cause = ("its optimizer keeps slot variables (.OPTIMIZER_SLOT), as a tf_keras legacy "
                 "optimizer (tf_keras.optimizers.legacy, or Keras before 2.11) does, which has "
                 "no use_ema (train with e.g. tf_keras.optimizers.SGD(momentum=0.9, "
                 "use_ema=True) to keep them)")
    elif none and UNSAVED_INNER in m.hints:
        cause = ("the optimizer is a Keras MultiOptimizer, and a tf.train.Checkpoint does not "
                 "save its inner optimizers (the object graph records an empty "
                 "_inner_optimizers): their variables, and any use_ema=True copies, are not "
                 "in this file, so it cannot show whether they averaged; saved with it "
                 "(tf.train.Checkpoint(model=model, optimizer=optimizer, "
                 "inner=list(optimizer.optimizers))) their lists pair them; in Python, the "
                 "live model's optimizer holds them: for each inner optimizer o, "
                 "zip(o._trainable_variables, o._model_variables_moving_average)")
    elif none and m.file_style == "keras" and KERAS3_LAYER_WEIGHTS in m.hints:
        cause = ("the weights are a Keras 3 model's layers' (no Keras model object is "
                 "saved above them, as for a subclassed model), so either EMA may have been "
                 "meant: if the Keras optimizer was to keep them, it had use_ema=False "
                 "(train with e.g. keras.optimizers.SGD(..., use_ema=True)); if a "
                 "tf.train.ExponentialMovingAverage averaged them, its averages were not "
                 "saved: a Keras 3 model's list and dict attributes are not saved by a "
                 "tf.train.Checkpoint (Keras keeps them in its own TrackedList/TrackedDict, "
                 "which TensorFlow does not track), so averages kept as model.avgs = [...] "
                 "are not in the file; a tuple or a tf.Module attribute of the model is "
                 "saved (model.avgs = tuple(avgs), or model.ema = tf.Module() holding the "
                 "list), and so is what the checkpoint is given: " + _TF2_UNSAVED_KERAS3)
    elif none and m.file_style == "keras" and MODULE_WEIGHTS in m.hints:
        cause = ("the object graph shows no Keras model or layer holding the weights (a "
                 "tf.Module's variables, or a Keras 3 subclassed model's layers that show no "
                 "Keras-only attribute, e.g. a BatchNormalization, look alike), so either "
                 "EMA may have been meant: if a tf.train.ExponentialMovingAverage averaged "
                 f"them, {_TF2_UNSAVED}; if the Keras optimizer was to keep them, it had "
                 "use_ema=False (train with e.g. keras.optimizers.SGD(..., use_ema=True))")
    elif none and m.file_style == "keras" and unlisted:
        cause = unlisted  # its averages are stored, unpaired: not use_ema=False (s32m)
    elif none and m.file_style == "keras":
        cause = ("the optimizer had use_ema=False (train with e.g. "
                 "keras.optimizers.SGD(..., use_ema=True) to keep them)")
    elif none and SERVING_EXPORT in m.hints and m.file_style == "tf2":
        cause = ("a SavedModel holds what its objects' variables held when "
                 "tf.saved_model.save() ran, and a serving export often "
                 "assigns the averages to the model's variables first (v.assign(ema.average(v)) "
                 "for each, or a tf.train.Checkpoint restore of the averages), so these weights "
                 "may already be the averages; the file cannot show which")
        if KERAS_EXPORT in m.hints:  # Keras' fit() ends by copying the averages in
            cause += ("; this is a Keras model.export() archive: exported after fit() with an "
                      "optimizer of use_ema=True, its weights are the averages, since fit() "
                      "copies them into the weights when it ends")
    elif none and m.file_style == "tf2":
        cause = (_TF2_UNSAVED_KERAS3 if KERAS3_WEIGHTS in m.hints else _TF2_UNSAVED) + (
            ", or training never ran ema.apply()")
    elif none and SERVING_EXPORT in m.hints:
        cause = ("no EMA shadow is stored at all, and a SavedModel holds what its export "
                 "graph's variables held: a serving export often restores the averages into "
                 "the model before saving (Saver(ema.variables_to_restore()).restore(...), as "
                 "inception_saved_model.py does), so these weights may already be the "
                 "averages; the file cannot show which")
    elif none and (resaved := next((h for h in m.hints if h.startswith(RESAVED)), None)):
        cause = resaved  # fc/w/fast written from fc/w: not "no EMA shadow at all" (s33a)
    elif none:
        cause = ("no EMA shadow is stored at all: the Saver probably saved only "
                 "tf.trainable_variables() (build it with tf.compat.v1.global_variables() or "
                 "Saver() to keep the shadows), or training never ran ema.apply()")
    elif m.file_style == "keras":
        cause = ("the optimizer does not average these weights: it was not built with them "
                 "(frozen when it was built, or another model's weights, such as a target "
                 "network); pass --allow-missing (allow_missing=True) to restore their raw "
                 "values")
    elif m.file_style == "tf2" and any(EMA_OF_EMA in h for h in m.hints):
        cause = ("no average of theirs is proven: tensors named like their averages have "
                 "averages of their own stored (below); pass "
                 "--allow-missing (allow_missing=True) to restore their raw values only if "
                 "those tensors are variables of yours, not these weights' averages")
    elif m.file_style == "tf2":
        cause = ("these variables were probably created after ema.apply(), left out of its "
                 "var_list, or their ema.average(v) was not saved; pass --allow-missing "
                 "(allow_missing=True) to restore their raw values")
    elif LISTED_TRAINABLE in m.hints:  # the .meta rules frozen out
        cause = ("these variables were left out of ema.apply()'s var_list (an EMA over part "
                 f"of the model) or created after it: {LISTED_TRAINABLE}, so they were not "
                 "frozen; pass --allow-missing (allow_missing=True) to restore their raw "
                 "values")
    else:  # frozen ones: the .meta proves them (frozen_meta), the names alone cannot
        cause = ("these variables were probably frozen (trainable=False: "
                 "ema.apply(tf.trainable_variables()) never averages them, and the training "
                 ".meta shows which), created after ema.apply() or left out of its var_list; "
                 "pass --allow-missing (allow_missing=True) to restore their raw values")
    said = [h for h in m.hints  # said in cause
            if h not in (LEGACY_SLOTS, SERVING_EXPORT, KERAS_EXPORT, LISTED_TRAINABLE,
                         UNSAVED_INNER, MODULE_WEIGHTS, KERAS3_WEIGHTS,
                         KERAS3_LAYER_WEIGHTS) and not (none and h.startswith(RESAVED))
            and not h.startswith((RAW_REFUSED, UNLISTED_AVERAGES))]
    hint = ("; " + "; ".join(said)) if said else ""
    if none and SERVING_EXPORT in m.hints:
        hint += ("; if it was exported that way, its weights are the averages as they are "
                 "(ckpt export --raw writes them to one file)")
    elif none and (refused := next((h for h in m.hints if h.startswith(RAW_REFUSED)), None)):
        hint += "; " + refused  # no .meta, keys named as averages: --raw refused (r72 F5)
    elif none and not any(h.startswith(RESAVED) for h in m.hints):  # they may be averages
        hint += ("; the raw weights are usable as they are (ckpt export --raw writes them to "
                 "one file)")
    own = next((h for h in m.hints if HELD_OWN in h), None)
    if none and own and m.file_style == "tf2":  # enc.w_avg = fast.average(enc.w): r35 F2
        names = [m.names.get(t) or readable_name(t) for t in m.missing[:5]]
        sample = ", ".join(names) + (f" and {len(m.missing) - 5} more"
                                     if len(m.missing) > 5 else "")
        return (f"{m.checkpoint}: no average is proven for any of its "
                f"{counted(len(m.missing), 'weight')}: {sample}; {own}; if they are the model's "
                "own variables, the raw "
                "weights are usable as they are (ckpt export --raw writes them to one file)")
    if none and m.file_style != "tf1":  # no "<name>/ExponentialMovingAverage" talk here
        names = [m.names.get(t) or readable_name(t) for t in m.missing[:5]]
        sample = ", ".join(names) + (f" and {len(m.missing) - 5} more"
                                     if len(m.missing) > 5 else "")
        return (f"{m.checkpoint}: no "
                + ("average is proven" if unlisted else "averages are stored")  # (s32m)
                + f" for any of its {counted(len(m.missing), 'weight')}: {sample}; likely "
                f"cause: {cause}{hint}")
    if m.file_style != "tf1":  # object paths: no "<name>/ExponentialMovingAverage" keys
        names = [m.names.get(t) or readable_name(t) for t in m.missing[:5]]
        what = ("EMA copy in the optimizer (use_ema=True)" if m.file_style == "keras"
                else "average (ema.average(v)) in the checkpoint")
        return (f"{m.checkpoint}: {counted(len(m.missing), 'weight')} "
                f"{agreeing(len(m.missing), 'has', 'have')} no {what} while others do: "
                + ", ".join(names) + (f" and {len(m.missing) - 5} more"
                                      if len(m.missing) > 5 else "")
                + f"; likely cause: {cause}{hint}")
    return (f"{m.checkpoint}: {counted(len(m.missing), 'variable')} "
            f"{agreeing(len(m.missing), 'has', 'have')} no EMA shadow under "
            f"'<name>/{m.ema_name}' ({eg}): {sample}; "
            f"likely cause: {cause}{hint}")


def refuse_orphans(ckpt: Checkpoint, variables) -> None:
    """Refuses a checkpoint that holds averages but none of the variables they average
    (``tf.train.Checkpoint(ema=[...])`` saved apart from the model): nothing here can be
    restored from them, and "no weights" or "0 averaged" would hide why.

    Raises:
        EmaError: naming the averages' recorded variables and what to save instead (exit 6).
    """
    if any(v.role in (R.WEIGHT, R.BN_STAT) for v in variables.values()):
        return
    orphans = [v for v in variables.values()
               if v.role == R.EMA and not v.ema_of and not v.ema_candidates]
    if not orphans:
        return
    full = ckpt.objects.full_names if ckpt.objects is not None else {}
    of = [full.get(v.name, v.name).rpartition("/")[0] or v.name for v in orphans]
    said = (f"{ckpt.path}: it holds {counted(len(orphans), 'average')} (ema.average(v)) of "
            "variables "
            f"it does not store ({', '.join(of[:4])}{' ...' if len(of) > 4 else ''}): ")
    empty = [] if ckpt.objects is None else empty_children(
        ckpt.objects, {v.name.split("/", 1)[0] for v in orphans})
    if empty:  # the model was given and saved no variable (review-30-user-u32 F5)
        raise EmaError(said + unsaved_layers_advice(empty))
    raise EmaError(
        said + "a "
        "tf.train.Checkpoint saves only what it is given; save them with the model "
        "(tf.train.Checkpoint(model=model, ema=[ema.average(v) for v in "
        "model.trainable_variables])), or read them from a checkpoint that holds both")

"""Why an EMA map is refused for averages missing (:func:`missing_message`), the hints the
map gathers for it (:func:`missing_hints` and the constants), and checkpoints holding
averages of none of their variables (:func:`refuse_orphans`), for :mod:`ckpt_tools.emamap`.
"""

from __future__ import annotations

from . import roles as R
from .checkpoint import Checkpoint
from .ema_refusals import SLOT_NAMED, suffix_base
from .ema_scopes import VSCOPED
from .errors import EmaError
from .formats.objgraph import readable_name
from .keras_detached import DETACHED
from .object_held import EMA_OF_EMA, HELD_OWN, HELD_TWIN
from .renamed_stated import OTHER_OBJECTS
from .scoped_twins import SCOPED_TWIN
from .slashed_stated import SLASHED
from .unsaved_layers import empty_children, unsaved_layers_advice
from .unstored_heads import RAW_REFUSED
from .wording import agreeing, counted

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .emamap import EmaMap


#: The hint that the ``.meta`` lists every variable missing an average as trainable.
LISTED_TRAINABLE = "the .meta lists them in trainable_variables"


#: How the hint of a partitioned variable's average stored for some parts begins.
PARTIAL = "its average is stored for only some of its parts: "
#: A hint of emamap_hints.map_hints: the key is stored, and the graph's update op averages
#: a tensor into it (r36 F7)
TENSOR_SOURCED = "the graph averages no variable into it: "


def missing_hints(variables, name: str, detected: list[str], missing: list[str],
           unsaved: list[str], partial: dict[str, str] | None = None,
           meta_read: bool = False, accepted=None) -> list[str]:
    """The hints for ``missing`` that the variables' roles give; ``meta_read``: the pairs
    came from a ``.meta``'s update ops (only then can a slot be said to be shown one by
    them: a TF2 checkpoint has no ``.meta``); ``accepted(name)``: whether ``--ema-name
    name`` makes a map that is accepted (:func:`~ckpt_tools.offer_probe.works`), so that
    no refused one is offered (review-21-attack-r60 F7)."""
    if not missing:
        return []
    hints = []
    if partial:  # ema.apply() over some parts of a partitioned variable (review-15-attack-r29 F3)
        k, what = next(iter(partial.items()))
        hints.append(f"{PARTIAL}{k} holds {what}, as ema.apply() over a var_list that left "
                     "the other parts out stores it; no whole average of it exists, and "
                     "--allow-missing restores it raw, its averaged parts included"
                     + (f" (and {counted(len(partial) - 1, 'more variable')} "
                        "so)" if len(partial) > 1
                        else ""))
    if unsaved:
        hints.append(f"the .meta graph has {unsaved[0]!r} (and {len(unsaved) - 1} more) but the "
                     "checkpoint does not: the Saver's var_list left the shadows out"
                     if len(unsaved) > 1 else
                     f"the .meta graph has {unsaved[0]!r} but the checkpoint does not: the "
                     "Saver's var_list left it out")
    others = [d for d in detected if d != name]
    if others and accepted is not None and not accepted(others[0]):
        hints.append(f"the checkpoint uses EMA name {others[0]!r}, but --ema-name "
                     f"{others[0]} is refused too" if suffix_base(others[0])
                     == R.DEFAULT_EMA_NAME else
                     f"the checkpoint also stores tensors as <weight>/{others[0]}, but "
                     f"--ema-name {others[0]} is refused too")
    elif others and suffix_base(others[0]) == R.DEFAULT_EMA_NAME:
        hints.append(f"the checkpoint uses EMA name {others[0]!r}: pass --ema-name {others[0]} "
                     f"(ema_name={others[0]!r} in Python)")
    elif others:  # <weight>/<name> is also how optimizers store slots: not proven an EMA's
        hints.append(f"the checkpoint also stores tensors as <weight>/{others[0]} (an EMA's "
                     "averages, or an optimizer's slots: the file does not say): pass "
                     f"--ema-name {others[0]} only if that is the name you gave an "
                     "ExponentialMovingAverage")
    if all("trainable_variables" in variables[t].collections
           and "moving_average_variables" not in variables[t].collections
           for t in missing if t in variables) and any(t in variables for t in missing):
        hints.append(LISTED_TRAINABLE)  # not frozen: the .meta says (review-14-attack-r25 F4b)
    # W/SGDM beside W: named like an EMA's average, shown a slot by the .meta's update ops
    # (meta_shadows.update_op_slots; review-14-attack-r25 F0)
    lacking = set(missing)
    slots = [k for k, v in variables.items() if v.role == R.OPTIMIZER_SLOT
             and v.slot_of in lacking and not R.SLOT_RE.match(k.rpartition("/")[2])]
    if slots and meta_read:
        more = f" (and {len(slots) - 1} more)" if len(slots) > 1 else ""
        hints.append(f"{slots[0]}{more} is named like an average, but the .meta's update ops "
                     "show it is none (an optimizer's Apply op updates it, no "
                     "AssignMovingAvg op does, or one averages another variable into it): "
                     "it is taken for an optimizer's slot")
    return hints


#: How :func:`misfiled_hint` begins.
MISFILED = "the save op in the "


def misfiled_hint(ckpt: Checkpoint, filed: dict[str, str], missing, name: str) -> str | None:
    """The hint for variables whose ``<key>/<name>`` key the save op wrote from another
    variable's average (a Saver's dict filing ``ema.average(b)`` under ``c``'s average name),
    or None: their own average is not stored, so ``--allow-missing`` restores them raw beside
    the others' averages."""
    from .save_op import graph_named, written_sources

    sources = written_sources(ckpt) if missing else None
    if not sources:
        return None
    said = []
    for t in missing:
        key = f"{t}/{name}"
        read = sources.get(key, [key])
        if key in filed and filed[key] != t and read and any(r != key for r in read):
            said.append(f"key {key!r} from {read[0]} ({filed[key]}'s average)")
    if not said:
        return None
    return (f"{MISFILED}{graph_named(ckpt)} wrote {'; '.join(said[:3])}"
            f"{' ...' if len(said) > 3 else ''}, and no average of "
            f"{', '.join(t for t in missing[:5])}: the Saver's var_list filed those averages "
            "under other variables' names; each average is paired with the variable it was "
            "read from, and --allow-missing (allow_missing=True) restores the variables with "
            "none stored raw")


#: A hint of the map: --allow-missing given where not one average is stored.
NONE_TO_ALLOW = ("--allow-missing keeps raw values only beside stored averages (a weight "
                 "ema.apply() left out), and none is stored here")


#: A hint of the map (no message of its own): a Keras checkpoint whose optimizer keeps TF2
#: slot variables (a tf_keras legacy optimizer) and no averages.
LEGACY_SLOTS = ("the optimizer keeps TF2 slot variables (.OPTIMIZER_SLOT), as a tf_keras legacy "
                "optimizer does, which has no use_ema")


#: A hint of the map: a TF2 checkpoint with neither averages nor an optimizer
#: (``tf.train.Checkpoint(model=m)`` of a model trained in a custom loop): the use_ema copies of
#: a Keras optimizer are its own variables, saved only with it (review-11-attack-r16 F6).
NO_OPTIMIZER = ("it holds no optimizer either: a Keras optimizer's use_ema=True copies are "
                "saved only with the optimizer (tf.train.Checkpoint(model=model, "
                "optimizer=optimizer))")


#: A hint of the map (no message of its own): a Keras 3 ``MultiOptimizer`` in a
#: ``tf.train.Checkpoint``, whose inner optimizers (where any ``use_ema`` copies live) the
#: object graph records as an empty ``_inner_optimizers``: not "use_ema=False"
#: (review-14-attack-r27 F7).
UNSAVED_INNER = "a MultiOptimizer whose inner optimizers are not saved"


def unsaved_inner_optimizers(objects) -> bool:
    """Whether the object graph records an optimizer's ``_inner_optimizers`` (a Keras 3
    ``MultiOptimizer``) with no variable under it: its inner optimizers, and any copies they
    kept, are not in the file."""
    if objects is None:
        return False
    kids = objects.children
    for node_kids in kids.values():
        for name, node in node_kids:
            if name != "_inner_optimizers":
                continue
            todo, seen = [node], {node}
            while todo:
                n = todo.pop()
                if n in objects.node_keys:
                    return False
                for _name, c in kids.get(n, ()):
                    if c not in seen:
                        seen.add(c)
                        todo.append(c)
            return True
    return False


#: A hint of the map (no message of its own): a Keras optimizer beside weights no Keras model
#: or layer holds (a ``tf.Module``'s own ``tf.Variable``s, README's TF2 custom loop): its
#: averages may as well have been a ``tf.train.ExponentialMovingAverage``'s, not saved, as
#: ``use_ema=False`` copies never made (review-16-user-u18 F1).
MODULE_WEIGHTS = "weights a tf.Module holds, not a Keras model"

#: A hint of the map (no message of its own): a Keras optimizer beside weights that Keras 3
#: layers hold (``_kernel``) with no Keras model shown above them: a Keras 3 subclassed
#: model's, whose list and dict attributes a ``tf.train.Checkpoint`` does not save, so
#: averages kept there are lost (review-29-attack-r109 F5).
KERAS3_LAYER_WEIGHTS = "weights of a Keras 3 subclassed model's layers"


#: A hint of the map (no message of its own): a SavedModel with no average stored: a serving
#: export often restored the averages into its variables before saving (review-13 r22 F11;
#: a TF2 one: review-14-attack-r25 F4a).
SERVING_EXPORT = "a SavedModel with no average stored"

#: With :data:`SERVING_EXPORT`: the SavedModel is a Keras 3 ``model.export()`` archive, whose
#: weights after ``fit()`` with ``use_ema=True`` are the averages (review-16-attack-r32 F11).
KERAS_EXPORT = "a Keras model.export() archive"


_TF2_UNSAVED = (
    "a tf.train.Checkpoint saves only what it is given, so save the averages with the model, "
    "e.g. tf.train.Checkpoint(model=model, ema=[ema.average(v) for v in "
    "model.trainable_variables]) (with unique variable names, tf.Variable(..., name=...), the "
    "averages' names pair them; same-named variables of one shape then need --apply-order "
    "trainable, plus --numbered-lists where a list holds more than ten)")


#: A hint: the object graph shows a Keras 3 model, whose variables ``ema.apply()`` does not
#: take (review-24-user-u26 F6).
KERAS3_WEIGHTS = "weights of a Keras 3 model"

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
                         KERAS3_LAYER_WEIGHTS)
            and not h.startswith(RAW_REFUSED)]
    hint = ("; " + "; ".join(said)) if said else ""
    if none and SERVING_EXPORT in m.hints:
        hint += ("; if it was exported that way, its weights are the averages as they are "
                 "(ckpt export --raw writes them to one file)")
    elif none and (refused := next((h for h in m.hints if h.startswith(RAW_REFUSED)), None)):
        hint += "; " + refused  # no .meta, keys named as averages: --raw refused (r72 F5)
    elif none:
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
        return (f"{m.checkpoint}: no averages are stored for any of its "
                f"{counted(len(m.missing), 'weight')}: {sample}; likely cause: {cause}{hint}")
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

"""The hints an EMA map gathers for its missing averages (:func:`missing_hints`,
:func:`misfiled_hint`, :func:`unsaved_inner_optimizers`) and the constants that begin or
are them, which :func:`~ckpt_tools.ema_missing.missing_message` reads to word the refusal
and :mod:`ckpt_tools.emamap_hints` gives."""

from __future__ import annotations

import re

from . import roles as R
from .checkpoint import Checkpoint
from .ema_refusals import suffix_base
from .wording import counted

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


#: What a hint of the map starts with (:func:`unlisted_averages_hint`): a Keras optimizer
#: whose variables are named as its ``use_ema`` averages while its object graph records no
#: list pairing them with the weights: not surely "use_ema=False" (note/s32m).
UNLISTED_AVERAGES = "its optimizer holds variables named as its use_ema averages"


def unlisted_averages_hint(variables) -> str | None:
    """The hint for a Keras file whose optimizer variables are named as its ``use_ema``
    averages (``Adam/average/dense_2/kernel``) where the object graph records no
    ``_model_variables_moving_average`` list pairing them with the weights. A tf_keras
    optimizer of ``use_ema=True`` resumed in a new process by a deferred restore stores its
    averages so (TF's object graph then does not track that list: note/s32m); an optimizer
    subclass's own variables named ``average`` (gradient averages, ``use_ema=False``) look
    the same (review-14-attack-r27 F3): the file tells neither apart.

    Returns:
        `str` starting with :data:`UNLISTED_AVERAGES`, or ``None``.
    """
    named = sorted(v.path for v in variables.values()
                   if v.role == R.OPTIMIZER_SLOT and v.path and _AVERAGE_PATH.search(v.path))
    if not named:
        return None
    more = f" and {len(named) - 3} more" if len(named) > 3 else ""
    return (f"{UNLISTED_AVERAGES} ({', '.join(named[:3])}{more}), and its object graph "
            "records no list pairing any with a weight (_model_variables_moving_average): "
            "either use_ema=True averages whose list was not tracked (a tf_keras optimizer "
            "restored in a new process by a deferred restore, before it was built, saves them "
            "so), or variables of its own of that name (use_ema=False); nothing here tells "
            "which, nor which weight each would average")


_AVERAGE_PATH = re.compile(r"(^|/)average/")


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



#: A hint: the object graph shows a Keras 3 model, whose variables ``ema.apply()`` does not
#: take (review-24-user-u26 F6).
KERAS3_WEIGHTS = "weights of a Keras 3 model"

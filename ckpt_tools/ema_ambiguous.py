"""Why averages of same-named variables are refused: the file does not record the order
``ema.apply()`` got them in (:func:`ambiguous_message`), in the words of what would decide it
(``--apply-order``, the live module, unique names), for :mod:`ckpt_tools.emamap`.
"""

from __future__ import annotations

import re

from .ambiguous_readings import (
    a_reading_fits,
    alike_keys,
    dict_or_layer,
    list_or_dict,
    module_or_dict,
    several_objects,
)
from .checkpoint import Checkpoint
from .ema_apply_order import no_order_text, optimizer_text, optimizers_disagree_text
from .formats._record import replace
from .keras_graph import keras_holders, keras_trainable_text
from .keras_reassign import layer_order_text, tracked_in_layers
from .pairing import APPLY_ORDERS, lists_stated, root_child
from .scoped_order import scope_hint, within_of
from .wording import agreeing, counted


def _read_list_hint(unpaired) -> str:
    """For averages saved as one list (``ema=[ema.average(v) for v in ...]``): how TensorFlow
    itself reads them into the variables a user knows they average, else ``""``."""
    lists = {m.group(1) for v in unpaired
             if (m := re.fullmatch(r"([^/.]+)/\d+/\.ATTRIBUTES/VARIABLE_VALUE", v.name))}
    if len(lists) != 1:
        return ""
    attr = lists.pop()
    return (f"; if you know which variable each entry of the list '{attr}' averages (the list "
            f"you saved, e.g. [ema.average(v) for v in gen.trainable_variables]), TensorFlow "
            f"reads them into those variables: tf.train.Checkpoint({attr}=[the same variables, "
            f"in that order]).read(path).expect_partial(), then save or export the model")


def ambiguous_message(ckpt: Checkpoint, variables, unpaired, apply_order, *,
                      no_order: bool = False, lists: str | None = None,
                      optimizer: str | None = None, disagree: tuple[str, ...] = ()) -> str:
    """Why ``unpaired`` averages (each with its candidates) are refused, and what decides.

    ``no_order``: neither ``--apply-order`` pairs any of them (the caller tried both): where
    they cover only part of their same-named group the message says no option decides.
    ``lists``: the statement with ``--numbered-lists`` that pairs them all
    (:func:`~ckpt_tools.ema_apply_order.lists_decide`), where objects with more than ten
    children named ``0``… hold them (a list or a dict keyed ``"0"``…: the file cannot tell).
    ``optimizer``: the path of the Keras optimizer whose ``_trainable_variables`` order pairs
    them all, stated (:func:`~ckpt_tools.ema_apply_order.optimizer_decides`); ``disagree``:
    the paths of Keras optimizers that each list them all, in orders that pair them
    differently (none is offered).

    Returns:
        `str`: the refusal, naming the file.
    """
    from .listing import natural_key

    # in the order a reader counts them (vs/2 before vs/10), candidates alike
    unpaired = [replace(v, ema_candidates=tuple(sorted(v.ema_candidates, key=natural_key)))
                for v in sorted(unpaired, key=lambda v: natural_key(v.name))]
    apart = sorted({root_child(c) for v in unpaired for c in v.ema_candidates})
    spans = any(len({root_child(c) for c in v.ema_candidates}) > 1 for v in unpaired)

    def path_of(key: str) -> str:
        v = variables.get(key)
        return v.path if v is not None and v.path else key

    involved = {v.name for v in unpaired} | {c for v in unpaired for c in v.ema_candidates}
    apart_by_path = len({path_of(k) for k in involved}) == len(involved)

    def show(key: str) -> str:
        if spans and not apart_by_path:  # same-named models whose paths 'ckpt list' shows
            return key.removesuffix("/.ATTRIBUTES/VARIABLE_VALUE")  # alike: keys tell apart
        return path_of(key)

    scoped = [v for v in unpaired if v.ema_style == "tf1"]
    if scoped:  # TF1 ema.apply() under a variable_scope: <scope>/w/ExponentialMovingAverage
        examples = "; ".join(f"{v.name} may average {' or '.join(v.ema_candidates)}"
                             for v in scoped[:3])
        more = f" (and {len(scoped) - 3} more)" if len(scoped) > 3 else ""
        why = ("the training .meta graph beside it would prove it (its "
               "moving_average_variables collection), but there is none or --no-meta was given"
               if ckpt.meta is None or not ckpt.meta.collections.get("variables") else
               "the .meta graph does not settle it (several candidates, or the variable is not "
               "in its moving_average_variables)")
        keep = ("; keep the training .meta (model.ckpt.meta) next to the checkpoint"
                if ckpt.meta is None or not ckpt.meta.collections.get("variables") else "")
        if keep:  # no statement reads <scope>/w/<name> as w's: the names prove nothing (r72 F3)
            from .unstored_heads import raw_route  # it reads roles, which import this module

            refused = raw_route(ckpt, variables)
            keep += ("; without it no option of ckpt decides: --ema-name (the scope's "
                     "name scope too), --averages-only and --allow-missing read these keys by "
                     "name, which cannot tell; "
                     + (refused if refused else "ckpt export --raw writes the raw weights"))
        return (f"{ckpt.path}: {counted(len(scoped), 'average')} "
                f"{agreeing(len(scoped), 'is', 'are')} stored under a scope "
                f"(ema.apply() called inside tf.compat.v1.variable_scope): {examples}{more}; "
                f"the name alone could also be the average of a tensor or an unsaved variable, "
                f"and {why}{keep}")

    examples = "; ".join(f"{show(v.name)} may average {' or '.join(map(show, v.ema_candidates))}"
                         for v in unpaired[:3])
    more = f" (and {len(unpaired) - 3} more)" if len(unpaired) > 3 else ""
    if all(v.ema_style == "keras" for v in unpaired):
        # tf_keras model.save_weights() (TF format): Adam/average/<variable name>
        from .tfk_order import refusal_text

        return (f"{ckpt.path}: {counted(len(unpaired), 'average')} of the tf_keras optimizer "
                + refusal_text(ckpt.objects, variables, unpaired, apply_order,
                               examples + more))
    if spans and all(c.count("/") <= 2 and c.endswith("/.ATTRIBUTES/VARIABLE_VALUE")
                     for v in unpaired for c in v.ema_candidates):
        # variables held directly by the root object (a SavedModel of a tf.Module holding
        # them as attributes): one object's, not different objects' (review-11-attack F8)
        return (f"{ckpt.path}: {counted(len(unpaired), 'average')} cannot be paired from what the "
                f"checkpoint records: same-named variables held directly by its root object "
                f"({', '.join(apart)}) have one dtype and shape, and the checkpoint records "
                f"neither the root's type nor the order ema.apply() got them in (it lists the "
                f"root's attributes by name, as tf.Module.trainable_variables visits them, "
                f"but so does a tf.train.Checkpoint(a=..., b=...), whose arguments say "
                f"nothing of that order), so no --apply-order can tell: {examples}{more}; give "
                f"the variables distinct names when training (tf.Variable(..., name=...)), or "
                f"save tf.train.Checkpoint(model=m, ema=[...]) too, where --apply-order "
                f"trainable reads the order of m's trainable_variables")
    if optimizer is not None or disagree:  # its recorded order decides, stated (u20 F4)
        return (f"{ckpt.path}: {counted(len(unpaired), 'average')} cannot be paired from what the "
                "checkpoint records: several variables share one name, dtype and shape (a "
                "Keras 3 model names its variables like itself, net/kernel), and the "
                f"checkpoint does not record the order ema.apply() got them in: "
                f"{examples}{more}; " + (optimizer_text(optimizer, apply_order) if optimizer
                                         else optimizers_disagree_text(disagree, apply_order)))
    if spans:
        return (f"{ckpt.path}: {counted(len(unpaired), 'average')} cannot be paired from what the "
                f"checkpoint records: same-named variables of different objects "
                f"({', '.join(a + '/' for a in apart)}) have one dtype and shape, and the "
                f"checkpoint records neither the order those objects were created in nor the "
                f"order ema.apply() got them in (the root lists its objects by name), so no "
                f"order alone can tell (the file gives no proof to check a statement "
                f"against): {examples}{more}; if ema.apply() got one of these objects' "
                f"variables only, in its trainable_variables order, state which: --apply-order "
                f"trainable:PATH, PATH one of {', '.join(apart)} "
                f"(ema.apply(PATH.trainable_variables); Python: apply_order='trainable:PATH'); "
                f"if it got several, one after another, name them in the order apply() got "
                f"them (trainable:PATH1,PATH2; the names above are sorted, not that order); "
                f"your statement, not a proof; or give "
                f"the variables distinct names when training (tf.Variable(..., name=...); "
                f"Keras 3 variable paths hold the layers' names, not the model's, so name the "
                f"layers apart)" + _read_list_hint(unpaired))
    holders = module_or_dict(ckpt, unpaired) if apply_order == "trainable" else []
    contradicted = bool(holders) and not a_reading_fits(ckpt, unpaired)
    owners = several_objects(unpaired) if apply_order else []
    candidates = {c for v in unpaired for c in v.ema_candidates}
    kept_in = {root_child(v.name) for v in unpaired} - {root_child(c) for c in candidates}
    if len(kept_in) == 1 and len(unpaired) > len(candidates) and within_of(apply_order):
        return (f"{ckpt.path}: {counted(len(unpaired), 'average')} cannot be paired under "
                f"--apply-order {apply_order}: they share one name, dtype and shape with only "
                f"{counted(len(candidates), 'variable')} of the objects it names "
                f"({examples}{more}), "
                "so ema.apply() got more variables than those: if it got several objects' "
                "variables one after another (ema.apply(g.trainable_variables + "
                "d.trainable_variables)), name every object in the order apply() got them: "
                "--apply-order trainable:PATH1,PATH2 (Python: apply_order='trainable:PATH1,"
                "PATH2'; which order is yours to say: the file does not record it), your "
                "statement, not a proof (review-15-attack-r31 F4, review-16-attack-r34 F5)")
    if len(kept_in) == 1 and len(unpaired) > len(candidates):
        # more averages in one attribute than variables they could average: no order of
        # apply() explains that
        return (f"{ckpt.path}: {counted(len(unpaired), 'average')} cannot be paired from what the "
                f"checkpoint records: they share one name, dtype and shape with only "
                f"{counted(len(candidates), 'stored variable')} ({examples}{more}), so they are "
                "also "
                "averages of variables the checkpoint does not store (a Keras 3 model's "
                "layers kept in a Python list or dict are not tracked by tf.train.Checkpoint; "
                "a model saved only in part) or of several default-named EMA objects saved in "
                "one list; no --apply-order can pair them: save every averaged variable "
                "(tf.train.Checkpoint(model=model, ema=[...])), keep each EMA object's "
                "averages under its own attribute, or give the variables unique names when "
                "training")
    held = list_or_dict(ckpt, unpaired) if lists and apply_order is None else []
    also = " --numbered-lists" if held else ""
    py = ("numbered_lists('trainable') or numbered_lists('tracked')); --numbered-lists "
          f"states that {', '.join(held[:3])}{' ...' if len(held) > 3 else ''}, with more "
          "than ten children named 0, 1, 2…, is a list (self.vs = [...]), not a dict keyed "
          "'0', '1'… (visited sorted as strings: 0, 1, 10, 2…), which the file cannot tell "
          "apart" if held else "...)")
    either = list_or_dict(ckpt, unpaired) if apply_order in APPLY_ORDERS and not (
        lists_stated(apply_order)) else []
    dicts = dict_or_layer(ckpt, unpaired) if apply_order == "tracked" and not either else []
    decide = (f"--apply-order {apply_order} does not prove one order: objects with more than "
              f"ten children named 0, 1, 2… ({', '.join(either[:3])}"
              f"{' ...' if len(either) > 3 else ''}) may be lists, which "
              f"{_visitor(apply_order)} visits by index, or dicts with keys '0', '1'…, "
              "which it visits sorted as strings (0, 1, 10, 11, 2…), and a list and a dict "
              "with digit keys are indistinguishable in the file (both write the same object "
              "graph); "
              + (f"if they are lists (ema=[...], self.blocks = [...]) state it: {lists} "
                 f"(Python: apply_order=numbered_lists('{apply_order}')); if they are dicts, "
                 if lists else "")
              + "give the variables unique names (tf.Variable(..., name=...)) when "
              "training, or "
              "keep such dicts to ten entries or key them by name, "
              + _live_way(apply_order) if either else
              "--apply-order trainable does not fit this checkpoint: with the objects "
              f"holding variables ({', '.join(holders[:3])}"
              f"{' ...' if len(holders) > 3 else ''}) read all as tf.Modules or all as dicts "
              "(the file records no types), the order module.trainable_variables gives "
              "contradicts the averages' dtypes and shapes in the order their names number "
              "them (_1, _2…: the order ema.apply() got), so apply() most likely got another "
              "order (such as creation order), which no --apply-order states; give the "
              "variables unique names (tf.Variable(..., name=...)) when training, or, in "
              "Python, state the order "
              "apply() got as checkpoint keys: export_weights(path, out, apply_order=[...]) "
              "or ema_map(path, apply_order=[...])" if contradicted else
              "--apply-order trainable leaves two orders: objects holding variables ("
              f"{', '.join(holders[:3])}{' ...' if len(holders) > 3 else ''}) may be "
              "tf.Modules, whose variables module.trainable_variables visits after its "
              "parent's own, or dicts, which it flattens in place, and a checkpoint records "
              "no types (both write the same object graph); give the variables unique names "
              "(tf.Variable(..., name=...)) when training, or, in Python, pass the live "
              "module: apply_ema(module, path, apply_order='trainable') reads the order "
              "from its own trainable_variables" if holders else
              "--apply-order tracked leaves two orders: objects holding layers or variables "
              f"({', '.join(dicts[:3])}{' ...' if len(dicts) > 3 else ''}) may be dicts, "
              "whose values Keras' model.trainable_variables visits sorted by key, or layers, "
              "whose attributes it visits in the order they were assigned, and a checkpoint "
              "records no types (both write the same object graph); give the layers unique "
              "names when training, or, in Python, pass the live model: apply_ema(model, "
              "path, apply_order='tracked') reads the order from its own trainable_variables"
              if dicts else
              f"the averages are saved under {', '.join(owners)}, more of them than there "
              "are variables to average: several EMA objects (default-named ones number "
              "their averages with one counter, so the stated order fits one object's "
              f"averages at a time); pass --ema-name {owners[0]} (or another of them) with "
              "--apply-order to take that object's averages (Python: ema_name=), or name "
              "the EMA objects (ExponentialMovingAverage(decay, name='fast')) when training"
              if owners else
              "the stated --apply-order does not give one pairing that fits the dtypes and "
              "shapes (it contradicts them or leaves several: the checkpoint does not record "
              "which variables are trainable, so a non-trainable one of the same name and "
              "shape, such as a running statistic, stays a candidate); in Python, pass the live "
              "module: apply_ema(module, path, apply_order='trainable') reads its own "
              "trainable_variables; or give the variables unique names (tf.Variable(..., "
              "name=...)) when training" if apply_order else
              no_order_text() if no_order and not lists else  # r129 M3
              "only if you know how ema.apply() was called: if it got "
              f"module.trainable_variables of a tf.Module pass --apply-order trainable{also}, "
              "if it "
              "got them in the order they were tracked, as Keras' model.trainable_variables "
              "(each object's own variables, then its sub-objects', each in the order their "
              "attributes were assigned; not creation order), pass "
              f"--apply-order tracked{also} (Python: apply_order={py}; the file cannot "
              "check that "
              "statement, so a wrong one gives wrong averages; for any other order no option "
              "can tell: give the variables unique names (tf.Variable(..., name=...)) when "
              "training")
    partial = (apply_order is not None or no_order) and not owners and \
        len(candidates) > len(unpaired)
    hint = "" if within_of(apply_order) else scope_hint(candidates)  # r31 F4: by its path
    if partial:
        decide = _partial_group(len(unpaired), len(candidates), stated=apply_order is not None,
                                hint=hint)
    else:
        decide += hint
    keras = (keras_holders(ckpt.objects, candidates)
             if apply_order in (None, "trainable") and ckpt.objects is not None else [])
    alike = alike_keys(ckpt)
    if keras and not partial:  # a tf.Module's order through Keras objects is not in the file
        # (part of a group averaged: no order places them, as list says; u16 F16)
        decide = keras_trainable_text(keras, stated=apply_order is not None, tracked=not (
            tracked_in_layers(ckpt.objects, sorted(candidates), alike)))
    if ckpt.objects is not None:  # nor Keras' order of a layer's re-assignable sublayers
        decide = layer_order_text(ckpt.objects, sorted(candidates), alike, apply_order, decide,
                                  keep=bool(either or holders or dicts or owners or partial))
    return (f"{ckpt.path}: {counted(len(unpaired), 'average')} cannot be paired from what the "
            "checkpoint "
            f"records: several variables share one name, dtype and shape, and the checkpoint "
            f"does not record the order ema.apply() got them in: {examples}{more}; {decide}")


def _live_way(apply_order) -> str:
    """The Python call that reads a digit-keyed container's order from the live objects: for
    ``trainable:PATH``, the objects passed as saved, PATH naming one inside them (r33 F11)."""
    within = within_of(apply_order)
    if not within:
        return ("or, in Python, pass the live module: apply_ema(module, path, "
                f"apply_order='{apply_order}') reads the order from its own trainable_variables")
    top = within[0].split("/")[0]
    return ("or, in Python, pass the live objects placed as saved: apply_ema(tf.train."
            f"Checkpoint({top}=...), path, apply_order='{apply_order}'), the checkpoint's root "
            f"rebuilt as saved (or the object saved as {top} itself), reads the order from "
            f"the trainable_variables of the live object at {', '.join(within)}")


def _visitor(apply_order) -> str:
    """What reads the stated order: a tf.Module's or Keras' trainable_variables."""
    return ("module.trainable_variables" if apply_order == "trainable" else
            "Keras' model.trainable_variables")


def _partial_group(averages: int, variables: int, stated: bool = True, hint: str = "") -> str:
    """Why no ``--apply-order`` places an average of a group of ``variables`` same-named
    variables of which only ``averages`` have one saved (review F23); ``stated``: the caller
    stated one (else both were tried). The live module decides only where the others are not
    trainable (a running statistic); where only some averages were saved, or ``apply()`` got
    a sub-module's, its trainable_variables are the whole group and nothing decides
    (review-11-user-r11 F5) but the sub-module's path (``hint``: :func:`scope_hint`, r31 F4)."""
    order = ("the stated order (--apply-order; Python: apply_order=) places" if stated else
             "neither --apply-order (trainable, tracked; Python: apply_order=) pairs them: an "
             "order places")
    sub = "" if hint else " or apply() got a sub-module's variables"  # else: its path decides
    return (f"the averages cover only part of the group: {order} the {variables} variables "
            f"of that name, the checkpoint holds averages of only {averages} of them, so the "
            "order cannot place them, and which ones is not recorded; if the others are not "
            "trainable (a running statistic of that shape: the checkpoint does not record "
            "which variables are trainable), in Python pass the live module: "
            "apply_ema(module, path, apply_order='trainable') reads its own "
            "trainable_variables (it decides where apply() got exactly those); if only some "
            "averages were saved (tf.train.Checkpoint(ema_w=ema.average(v)) for some v, or "
            f"a dict keyed by v.name, which same-named variables collapse to one entry){sub}, "
            "no option decides, nor the live module: "
            "give the variables unique names (tf.Variable(..., name=...)) when training, or "
            "save every average in apply() order (tf.train.Checkpoint(model=m, "
            "ema=[ema.average(v) for v in m.trainable_variables]))" + hint)

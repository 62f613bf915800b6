"""Why an EMA pairing is refused, in the words of the file's own style.

:class:`UnprovenPairingError` (exit 6) and the messages :mod:`ckpt_tools.emamap` refuses with:
several averages that fit one variable, same-named variables whose ``apply()`` order the file
does not record, averages missing. A Keras file speaks of the optimizer's ``use_ema``, a TF2
file of saving ``ema.average(v)``, and only TF1 of ``Saver(var_list)`` (:func:`file_style`).
"""

from __future__ import annotations

import re

from . import roles as R
from .checkpoint import Checkpoint
from .errors import EmaError, UnprovenPairingError
from .formats.objgraph import readable_name
from .keras_graph import keras_holders, keras_trainable_text
from .keras_reassign import layer_order_text, tracked_in_layers
from .pairing import (
    list_or_dict_paths,
    open_containers,
    open_dicts,
    root_child,
    variable_orders,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .emamap import EmaMap




def require_keras(ckpt: Checkpoint) -> None:
    """Keras files: a proven pairing, or a refusal (:func:`require_keras_pairing`); an
    undecided ``use_ema`` or unpairable copies raise :class:`UnprovenPairingError`.

    keras_ema (and NumPy with it) is imported only for Keras files: ``ckpt list`` stays light.
    """
    layout = getattr(ckpt.reader, "keras", None)
    if layout is None:
        return
    from .keras_ema import require_keras_pairing

    try:
        require_keras_pairing(ckpt)
    except EmaError as exc:
        if layout.use_ema is None:
            raise UnprovenPairingError(str(exc), "--use-ema/--no-use-ema") from None
        if layout.averages and any(v is None for v in layout.averages.values()):
            # keras_ema names --trainable where the frozen set or sublayer order is open
            # (the one thing it can decide); other unpairable copies no option decides.
            option = "--trainable" if "--trainable" in str(exc) else None
            # each open average and its candidate weights: list shows '?' on both sides
            undecided = {v.name: tuple(v.ema_candidates) for v in ckpt.variables_unwarned()
                         if v.role == R.EMA and not v.ema_of and v.ema_candidates}
            raise UnprovenPairingError(str(exc), option, undecided) from None
        if layout.copies_unpaired and "--trainable" in str(exc):
            # use_ema=True and copies stored, none placed (no layout fits the weights as the
            # file records them): open, and --trainable decides, not "no shadow"
            raise UnprovenPairingError(str(exc), "--trainable") from None
        raise



def file_style(ckpt: Checkpoint) -> str:
    """Returns how the checkpoint was written, which decides how errors explain it: ``"keras"``
    (a Keras weights file), ``"tf2"`` (a ``tf.train.Checkpoint``) or ``"tf1"`` (a Saver)."""
    if ckpt.format in ("keras", "h5") or getattr(ckpt.reader, "keras", None) is not None:
        return "keras"
    if ckpt.objects is not None:
        # tf_keras model.save_weights() in TF format: the root is the model, its layers tracked
        # as layer_with_weights-N / layer-N.
        keras = any(p.startswith(("layer_with_weights-", "layer-"))
                    for p in ckpt.objects.paths.values())
        return "keras" if keras else "tf2"
    return "tf1"


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
                      no_order: bool = False) -> str:
    """Why ``unpaired`` averages (each with its candidates) are refused, and what decides.

    ``no_order``: neither ``--apply-order`` pairs any of them (the caller tried both): where
    they cover only part of their same-named group the message says no option decides.

    Returns:
        `str`: the refusal, naming the file.
    """
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
        return (f"{ckpt.path}: {len(scoped)} average(s) are stored under a scope "
                f"(ema.apply() called inside tf.compat.v1.variable_scope): {examples}{more}; "
                f"the name alone could also be the average of a tensor or an unsaved variable, "
                f"and {why}{keep}")

    examples = "; ".join(f"{show(v.name)} may average {' or '.join(map(show, v.ema_candidates))}"
                         for v in unpaired[:3])
    more = f" (and {len(unpaired) - 3} more)" if len(unpaired) > 3 else ""
    if all(v.ema_style == "keras" for v in unpaired):
        # tf_keras model.save_weights() (TF format): Adam/average/<variable name>
        from .tfk_order import refusal_text

        return (f"{ckpt.path}: {len(unpaired)} average(s) of the tf_keras optimizer "
                + refusal_text(ckpt.objects, variables, unpaired, apply_order,
                               examples + more))
    if spans and all(c.count("/") <= 2 and c.endswith("/.ATTRIBUTES/VARIABLE_VALUE")
                     for v in unpaired for c in v.ema_candidates):
        # variables held directly by the root object (a SavedModel of a tf.Module holding
        # them as attributes): one object's, not different objects' (review-11-attack F8)
        return (f"{ckpt.path}: {len(unpaired)} average(s) cannot be paired from what the "
                f"checkpoint records: same-named variables held directly by its root object "
                f"({', '.join(apart)}) have one dtype and shape, and the checkpoint records "
                f"neither the root's type nor the order ema.apply() got them in (it lists the "
                f"root's attributes by name, as tf.Module.trainable_variables visits them, "
                f"but so does a tf.train.Checkpoint(a=..., b=...), whose arguments say "
                f"nothing of that order), so no --apply-order can tell: {examples}{more}; give "
                f"the variables distinct names when training (tf.Variable(..., name=...)), or "
                f"save tf.train.Checkpoint(model=m, ema=[...]) too, where --apply-order "
                f"trainable reads the order of m's trainable_variables")
    if spans:
        return (f"{ckpt.path}: {len(unpaired)} average(s) cannot be paired from what the "
                f"checkpoint records: same-named variables of different objects "
                f"({', '.join(a + '/' for a in apart)}) have one dtype and shape, and the "
                f"checkpoint records neither the order those objects were created in nor the "
                f"order ema.apply() got them in (the root lists its objects by name), so no "
                f"--apply-order can tell, and no other ckpt option states it (the file "
                f"gives no proof to check a statement against): {examples}{more}; give the "
                f"variables distinct names when training (tf.Variable(..., name=...); Keras 3 "
                f"variable paths hold the layers' names, not the model's, so name the layers "
                f"apart)" + _read_list_hint(unpaired))
    holders = _module_or_dict(ckpt, unpaired) if apply_order == "trainable" else []
    contradicted = bool(holders) and not _a_reading_fits(ckpt, unpaired)
    owners = _several_objects(unpaired) if apply_order else []
    candidates = {c for v in unpaired for c in v.ema_candidates}
    kept_in = {root_child(v.name) for v in unpaired} - {root_child(c) for c in candidates}
    if len(kept_in) == 1 and len(unpaired) > len(candidates):
        # more averages in one attribute than variables they could average: no order of
        # apply() explains that
        return (f"{ckpt.path}: {len(unpaired)} average(s) cannot be paired from what the "
                f"checkpoint records: they share one name, dtype and shape with only "
                f"{len(candidates)} stored variable(s) ({examples}{more}), so they are also "
                "averages of variables the checkpoint does not store (a Keras 3 model's "
                "layers kept in a Python list or dict are not tracked by tf.train.Checkpoint; "
                "a model saved only in part) or of several default-named EMA objects saved in "
                "one list; no --apply-order can pair them: save every averaged variable "
                "(tf.train.Checkpoint(model=model, ema=[...])), keep each EMA object's "
                "averages under its own attribute, or give the variables unique names when "
                "training")
    either = _list_or_dict(ckpt, unpaired) if apply_order == "trainable" else []
    dicts = _dict_or_layer(ckpt, unpaired) if apply_order == "tracked" else []
    decide = ("--apply-order trainable does not prove one order: objects with more than ten "
              f"children named 0, 1, 2… ({', '.join(either[:3])}"
              f"{' ...' if len(either) > 3 else ''}) may be lists, which "
              "module.trainable_variables visits by index, or dicts with keys '0', '1'…, "
              "which it visits sorted as strings (0, 1, 10, 11, 2…), and a list and a dict "
              "with digit keys are indistinguishable in the file (both write the same object "
              "graph); give the variables unique names (tf.Variable(..., name=...)) when "
              "training, or "
              "keep such dicts to ten entries or key them by name, "
              "or, in Python, pass the live module: apply_ema(module, path, "
              "apply_order='trainable') reads the order from its own trainable_variables"
              if either else
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
              "only if you know how ema.apply() was called: if it got "
              "module.trainable_variables of a tf.Module pass --apply-order trainable, if it "
              "got them in the order they were tracked, as Keras' model.trainable_variables "
              "(each object's own variables, then its sub-objects', each in the order their "
              "attributes were assigned; not creation order), pass "
              "--apply-order tracked (Python: apply_order=...); the file cannot check that "
              "statement, so a wrong one gives wrong averages; for any other order no option "
              "can tell: give the variables unique names (tf.Variable(..., name=...)) when "
              "training")
    partial = (apply_order is not None or no_order) and not owners and \
        len(candidates) > len(unpaired)
    if partial:
        decide = _partial_group(len(unpaired), len(candidates), stated=apply_order is not None)
    keras = (keras_holders(ckpt.objects, candidates)
             if apply_order in (None, "trainable") and ckpt.objects is not None else [])
    alike = _alike(ckpt)
    if keras:  # a tf.Module's order through Keras objects is not in the file
        decide = keras_trainable_text(keras, stated=apply_order is not None, tracked=not (
            tracked_in_layers(ckpt.objects, sorted(candidates), alike)))
    if ckpt.objects is not None:  # nor Keras' order of a layer's re-assignable sublayers
        decide = layer_order_text(ckpt.objects, sorted(candidates), alike, apply_order, decide,
                                  keep=bool(either or holders or dicts or owners or partial))
    return (f"{ckpt.path}: {len(unpaired)} average(s) cannot be paired from what the checkpoint "
            f"records: several variables share one name, dtype and shape, and the checkpoint "
            f"does not record the order ema.apply() got them in: {examples}{more}; {decide}")


def _partial_group(averages: int, variables: int, stated: bool = True) -> str:
    """Why no ``--apply-order`` places an average of a group of ``variables`` same-named
    variables of which only ``averages`` have one saved (review F23); ``stated``: the caller
    stated one (else both were tried). The live module decides only where the others are not
    trainable (a running statistic); where only some averages were saved, or ``apply()`` got
    a sub-module's, its trainable_variables are the whole group and nothing decides
    (review-11-user-r11 F5)."""
    order = ("the stated order (--apply-order; Python: apply_order=) places" if stated else
             "neither --apply-order (trainable, tracked; Python: apply_order=) pairs them: an "
             "order places")
    return (f"the averages cover only part of the group: {order} the {variables} variables "
            f"of that name, the checkpoint holds averages of only {averages} of them, so the "
            "order cannot place them, and which ones is not recorded; if the others are not "
            "trainable (a running statistic of that shape: the checkpoint does not record "
            "which variables are trainable), in Python pass the live module: "
            "apply_ema(module, path, apply_order='trainable') reads its own "
            "trainable_variables (it decides where apply() got exactly those); if only some "
            "averages were saved (tf.train.Checkpoint(ema_w=ema.average(v)) for some v, or "
            "a dict keyed by v.name, which same-named variables collapse to one entry) or "
            "apply() got a sub-module's variables, no option decides, nor the live module: "
            "give the variables unique names (tf.Variable(..., name=...)) when training, or "
            "save every average in apply() order (tf.train.Checkpoint(model=m, "
            "ema=[ema.average(v) for v in m.trainable_variables]))")


def _alike(ckpt: Checkpoint):
    """Whether two keys of ``ckpt`` hold one dtype and shape (a same-named pair's rivals)."""
    entries = ckpt.entries()
    return lambda a, b: (entries[a].dtype, entries[a].shape) == (entries[b].dtype,
                                                                 entries[b].shape)


def _several_objects(unpaired) -> list[str]:
    """The root attributes holding ``unpaired`` averages when those outnumber the variables
    they may average (``fast/0…2`` and ``slow/0…2`` for three variables): then they are several
    EMA objects' averages and no single ``apply()`` order fits them all; empty otherwise."""
    averages = {v.name for v in unpaired}
    candidates = {c for v in unpaired for c in v.ema_candidates}
    owners = sorted({root_child(a) for a in averages} - {root_child(c) for c in candidates})
    return owners if len(owners) > 1 and len(averages) > len(candidates) else []


def _module_or_dict(ckpt: Checkpoint, unpaired) -> list[str]:
    """The objects holding the candidates of ``unpaired`` averages (``model/z_blocks/0``)
    when the readings of ``module.trainable_variables`` with every node-that-could-be-a-dict
    read as a dict or as a tf.Module (see :func:`~ckpt_tools.pairing.variable_orders`) order
    those candidates differently; empty when they agree (the stated order fails for another
    reason)."""
    if ckpt.objects is None:
        return []
    cands = {c for v in unpaired for c in v.ema_candidates}
    orders = variable_orders(ckpt.objects)["trainable"]
    half = len(orders) // 2  # as tf.Modules, then as dicts; lists read as lists first
    first, second = (sorted((k for k in cands if k in order), key=order.__getitem__)
                     for order in (orders[0], orders[half]))
    if first == second:  # the uniform readings agree; a container read apart may not
        entries = ckpt.entries()

        def alike(a: str, b: str) -> bool:
            return (entries[a].dtype, entries[a].shape) == (entries[b].dtype, entries[b].shape)

        return open_containers(ckpt.objects, sorted(cands), alike)
    holders = [k.removesuffix("/.ATTRIBUTES/VARIABLE_VALUE").rpartition("/")[0]
               for k in first]
    return list(dict.fromkeys(h for h in holders if h))


def _a_reading_fits(ckpt: Checkpoint, unpaired) -> bool:
    """Whether ``module.trainable_variables`` read with the objects holding variables as
    tf.Modules, or as dicts (:func:`~ckpt_tools.pairing.variable_orders`), pairs every one of
    ``unpaired`` consistently with the dtypes and shapes; False where both contradict them (the
    stated order is wrong, whatever the types)."""
    from .object_roles import pair_object_shadows

    orders = variable_orders(ckpt.objects)["trainable"]
    wanted = {v.name for v in unpaired}
    for order in (orders[0], orders[len(orders) // 2]):
        keys = sorted(order, key=order.__getitem__)
        pairing = pair_object_shadows(ckpt.entries(), ckpt.objects, ckpt.ema_names(), keys)
        if wanted <= set(pairing.pairs):
            return True
    return False


def _dict_or_layer(ckpt: Checkpoint, unpaired) -> list[str]:
    """Object paths (``model/heads``) of the nodes above the candidates of ``unpaired`` that
    Keras orders one way as a dict (sorted keys) and another as a layer (assignment order;
    see :func:`~ckpt_tools.pairing.open_dicts`)."""
    if ckpt.objects is None:
        return []
    entries = ckpt.entries()
    cands = sorted({c for v in unpaired for c in v.ema_candidates})

    def alike(a: str, b: str) -> bool:
        return (entries[a].dtype, entries[a].shape) == (entries[b].dtype, entries[b].shape)

    return open_dicts(ckpt.objects, cands, alike)


def _list_or_dict(ckpt: Checkpoint, unpaired) -> list[str]:
    """Object paths (``model/blocks``) of nodes with more than ten children named ``0``,
    ``1``… above the candidates of ``unpaired``: a list or a dict with digit keys, which
    ``module.trainable_variables`` visits in different orders."""
    if ckpt.objects is None:
        return []
    paths = list_or_dict_paths(ckpt.objects)
    cands = [c.removesuffix("/.ATTRIBUTES/VARIABLE_VALUE") for v in unpaired
             for c in v.ema_candidates]
    return [p for p in paths if any(c.startswith(p + "/") for c in cands)]


def contradiction_message(ckpt: Checkpoint, contradicted: dict[str, str]) -> str:
    sample = "; ".join(f"{s} averages {t}" for t, s in list(contradicted.items())[:3])
    more = f" (and {len(contradicted) - 3} more)" if len(contradicted) > 3 else ""
    meta = ckpt.meta.path if ckpt.meta is not None else ".meta"
    return (f"{ckpt.path}: the checkpoint stores averages of {len(contradicted)} variable(s) "
            f"that the graph in {meta} does not average (not in its trainable_variables or "
            f"moving_average_variables): {sample}{more}; the .meta is probably from another "
            f"graph (another run, or a different var_list), and following it would restore "
            f"their raw values; pass --no-meta (Python: use_meta=False) to pair by the "
            f"checkpoint's names and use the stored averages, or replace the .meta with the "
            f"training graph's")


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
    if len(options) < max(len(cs) for cs in several.values()):
        # Every average has the same attribute and EMA name: no --ema-name picks one (it
        # would loop back here). One EMA object also gives two averages here when it averaged
        # a same-named variable the checkpoint does not hold (a GAN's D beside the saved G).
        return (f"{ckpt.path}: {len(several)} variable(s) have more than one average that "
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
        return (f"{ckpt.path}: {len(several)} variable(s) have more than one average: "
                f"{examples}{more}; they share the EMA name "
                f"({suffix_base(names[0])}) and lie under the attributes "
                f"{', '.join(holders)}, so they are either several EMA objects of one name or "
                "one EMA object's averages of same-named variables of which the checkpoint "
                "holds only one (a GAN's discriminator left unsaved), and the file does not "
                f"tell which{stated}; only if each of {', '.join(holders[:4])} holds the "
                "averages of its own EMA object over these variables, pass "
                + " or ".join(f"--ema-name {n}" for n in options[:4])
                + " (Python: ema_name=...) to use that object's averages; otherwise save "
                "every averaged variable, or name the EMA objects "
                "(tf.train.ExponentialMovingAverage(decay, name='fast')) when training",
                "--ema-name", False)
    from .ema_proof import proven_ema_names  # it builds on this module

    # the names --ema-name takes here: those given to EMA objects (ema_999), else TF's
    # names without the _N it appends
    bases = set(options) if options is not names else {suffix_base(n) for n in names}
    unproven = sorted(bases - proven_ema_names(ckpt, bases)) if ema_name is None else []
    if unproven and options is not holders:
        # <weight>/<name> is also how optimizers store slots: say which names nothing proves
        # to be an EMA's, and offer them only as the caller's statement.
        proven = sorted(n for n in options if suffix_base(n) not in unproven
                        and n not in unproven)
        return (f"{ckpt.path}: {len(several)} variable(s) have more than one tensor stored "
                f"as <weight>/<name>: {examples}{more}; "
                + (f"{', '.join(proven)} {'is' if len(proven) == 1 else 'are'} TF's default "
                   "EMA name(s), while " if proven else "")
                + f"nothing recorded says that {' or '.join(repr(n) for n in unproven)} "
                "is an ExponentialMovingAverage's name: optimizers store their slots the same way "
                "(AdamOptimizer(name='Opt') writes W/Opt and W/Opt_1, BERT's optimizer "
                "W/adam_m and W/adam_v); "
                + ("pass " + " or ".join(f"--ema-name {n}" for n in proven[:3])
                   + " to use the averages under TF's default name(s), or " if proven
                   else "pass ")
                + " or ".join(f"--ema-name {n}" for n in unproven[:4])
                + " only if that is the name you gave an ExponentialMovingAverage (Python: "
                "ema_name=...)", "--ema-name", True)
    return (f"{ckpt.path}: {len(several)} variable(s) have more than one average, so the "
            f"checkpoint holds several ExponentialMovingAverage objects and does not record "
            f"which one to evaluate with: {examples}{more}; EMA names found: "
            f"{', '.join(names)}{stated}; pass "
            + " or ".join(f"--ema-name {n}" for n in options[:4])
            + f" (Python: ema_name=...) to say which EMA object's averages to use{decide}",
            "--ema-name", False)


def missing_hints(variables, name: str, detected: list[str], missing: list[str],
           unsaved: list[str]) -> list[str]:
    if not missing:
        return []
    hints = []
    if unsaved:
        hints.append(f"the .meta graph has {unsaved[0]!r} (and {len(unsaved) - 1} more) but the "
                     "checkpoint does not: the Saver's var_list left the shadows out"
                     if len(unsaved) > 1 else
                     f"the .meta graph has {unsaved[0]!r} but the checkpoint does not: the "
                     "Saver's var_list left it out")
    others = [d for d in detected if d != name]
    if others and suffix_base(others[0]) == R.DEFAULT_EMA_NAME:
        hints.append(f"the checkpoint uses EMA name {others[0]!r}: pass --ema-name {others[0]} "
                     f"(ema_name={others[0]!r} in Python)")
    elif others:  # <weight>/<name> is also how optimizers store slots: not proven an EMA's
        hints.append(f"the checkpoint also stores tensors as <weight>/{others[0]} (an EMA's "
                     "averages, or an optimizer's slots: the file does not say): pass "
                     f"--ema-name {others[0]} only if that is the name you gave an "
                     "ExponentialMovingAverage")
    return hints


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


#: Said of a TF1 key an EMA of an optimizer's name may have written (see
#: :func:`~ckpt_tools.ema_updates.slot_named_hint`).
SLOT_NAMED = "read as an optimizer's slot"


def missing_message(m: EmaMap) -> str:
    if m.hints and m.hints[0].startswith("no averages kept as"):
        return f"{m.checkpoint}: {m.hints[0]}"
    sample = ", ".join(m.shown(t) for t in m.missing[:5]) + (
        f" and {len(m.missing) - 5} more" if len(m.missing) > 5 else "")
    slotted = next((h for h in m.hints if SLOT_NAMED in h), None)
    if slotted:  # the keys may be there, read as slots: "not in the checkpoint" would be false
        return (f"{m.checkpoint}: {len(m.missing)} variable(s) have no average proven under "
                f"'<name>/{m.ema_name}': {sample}; {slotted}")
    owner = dict(m.pairs)  # <t>/<name> may be stored as another variable's average:
    taken = {f"{t}/{m.ema_name}": owner[f"{t}/{m.ema_name}"] for t in m.missing
             if owner.get(f"{t}/{m.ema_name}", t) != t}  # ema.apply() in a variable_scope
    shadow = next((f"{t}/{m.ema_name}" for t in m.missing if f"{t}/{m.ema_name}" not in taken),
                  f"{m.missing[0]}/{m.ema_name}")
    eg = (f"{shadow!r} is {taken[shadow]}'s average, made inside a variable_scope"
          if shadow in taken else f"e.g. {shadow!r} is not in the checkpoint")
    none = set(m.averaged) <= set(m.missing)  # not one shadow stored
    renamed = next((h for h in m.hints if h.startswith("the checkpoint uses EMA name")), None)
    other = next((h for h in m.hints if h.startswith("another EMA object averaged")), None)
    if other and not set(m.averaged) <= set(m.missing):
        return (f"{m.checkpoint}: {len(m.missing)} variable(s) have no EMA shadow under "
                f"'<name>/{m.ema_name}' ({eg}): {sample}; "
                + "; ".join(m.hints))
    if none and renamed:  # the shadows are there, under another name: nothing else to say
        return (f"{m.checkpoint}: no variable has an EMA shadow under '<name>/{m.ema_name}' "
                f"({eg}); {renamed}")
    if none and m.file_style == "keras" and LEGACY_SLOTS in m.hints:
        cause = ("its optimizer keeps slot variables (.OPTIMIZER_SLOT), as a tf_keras legacy "
                 "optimizer (tf_keras.optimizers.legacy, or Keras before 2.11) does, which has "
                 "no use_ema (train with e.g. tf_keras.optimizers.SGD(momentum=0.9, "
                 "use_ema=True) to keep them)")
    elif none and m.file_style == "keras":
        cause = ("the optimizer had use_ema=False (train with e.g. "
                 "keras.optimizers.SGD(..., use_ema=True) to keep them)")
    elif none and m.file_style == "tf2":
        cause = ("a tf.train.Checkpoint saves only what it is given, "
                 "so save the averages with the model, e.g. tf.train.Checkpoint(model=model, "
                 "ema=[ema.average(v) for v in model.trainable_variables]), or training never "
                 "ran ema.apply()")
    elif none:
        cause = ("no EMA shadow is stored at all: the Saver probably saved only "
                 "tf.trainable_variables() (build it with tf.compat.v1.global_variables() or "
                 "Saver() to keep the shadows), or training never ran ema.apply()")
    elif m.file_style == "keras":
        cause = ("the optimizer does not average these weights: it was not built with them "
                 "(frozen when it was built, or another model's weights, such as a target "
                 "network); pass --allow-missing (allow_missing=True) to restore their raw "
                 "values")
    elif m.file_style == "tf2":
        cause = ("these variables were probably created after ema.apply(), left out of its "
                 "var_list, or their ema.average(v) was not saved; pass --allow-missing "
                 "(allow_missing=True) to restore their raw values")
    else:
        cause = ("these variables were probably created after ema.apply() or left out of its "
                 "var_list; pass --allow-missing (allow_missing=True) to restore their raw values")
    said = [h for h in m.hints if h != LEGACY_SLOTS]  # the cause says it already
    hint = ("; " + "; ".join(said)) if said else ""
    if none:
        hint += ("; the raw weights are usable as they are (ckpt export --raw writes them to "
                 "one file)")
    if none and m.file_style != "tf1":  # no "<name>/ExponentialMovingAverage" talk here
        names = [m.names.get(t) or readable_name(t) for t in m.missing[:5]]
        sample = ", ".join(names) + (f" and {len(m.missing) - 5} more"
                                     if len(m.missing) > 5 else "")
        return (f"{m.checkpoint}: no averages are stored for any of its {len(m.missing)} "
                f"weight(s): {sample}; likely cause: {cause}{hint}")
    if m.file_style != "tf1":  # object paths: no "<name>/ExponentialMovingAverage" keys
        names = [m.names.get(t) or readable_name(t) for t in m.missing[:5]]
        what = ("EMA copy in the optimizer (use_ema=True)" if m.file_style == "keras"
                else "average (ema.average(v)) in the checkpoint")
        return (f"{m.checkpoint}: {len(m.missing)} weight(s) have no {what} while others do: "
                + ", ".join(names) + (f" and {len(m.missing) - 5} more"
                                      if len(m.missing) > 5 else "")
                + f"; likely cause: {cause}{hint}")
    return (f"{m.checkpoint}: {len(m.missing)} variable(s) have no EMA shadow under "
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
    raise EmaError(
        f"{ckpt.path}: it holds {len(orphans)} average(s) (ema.average(v)) of variables it "
        f"does not store ({', '.join(of[:4])}{' ...' if len(of) > 4 else ''}): a "
        "tf.train.Checkpoint saves only what it is given; save them with the model "
        "(tf.train.Checkpoint(model=model, ema=[ema.average(v) for v in "
        "model.trainable_variables])), or read them from a checkpoint that holds both")


def exact_names(names: set[str]) -> set[str]:
    """The recorded EMA names that are a ``name=`` given to one EMA object, not TF's ``_N``
    counter: names no other recorded name extends with ``_N`` (two objects of one name), and
    that extend no other (``ExponentialMovingAverage_1`` beside ``ExponentialMovingAverage``).
    ``ema_999`` beside ``ema_9999`` are both given names.

    Example:
        >>> sorted(exact_names({"ema_999", "ema_9999"}))
        ['ema_999', 'ema_9999']
        >>> exact_names({"ExponentialMovingAverage", "ExponentialMovingAverage_1"})
        set()
        >>> exact_names({"ExponentialMovingAverage_5", "ExponentialMovingAverage_6"})
        set()
    """
    out = set()
    for n in names:
        m = re.fullmatch(r"(.+)_\d+", n)
        if m and (m.group(1) in names or m.group(1) == "ExponentialMovingAverage"):
            # TF's default name with a number is its counter, whatever else is recorded: in
            # TF2 the counter runs over the whole process, so the plain name may be absent
            continue
        if any(re.fullmatch(re.escape(n) + r"_\d+", o) for o in names):
            continue
        out.add(n)
    return out


def suffix_base(suffix: str) -> str:
    """``ExponentialMovingAverage_1`` -> ``ExponentialMovingAverage``: the name an EMA object was
    given, without the ``_N`` TF appends to make it unique."""
    return re.sub(r"_\d+$", "", suffix)

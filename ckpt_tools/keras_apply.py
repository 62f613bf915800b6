"""Load a Keras file's ``use_ema=True`` averages into a built Keras model.

:func:`apply_keras_ema` pairs the optimizer's EMA copies with the live model's variables:
through the file's own record (a ``.keras`` of a Sequential/Functional model), the names of a
legacy ``.h5``, the caller's ``trainable``, or ``model.trainable_variables`` by position
exactly as the optimizer does; every shape and dtype is checked before anything is assigned.
"""

from __future__ import annotations

import os

import numpy as np

from .checkpoint import Checkpoint, open_checkpoint
from .errors import EmaError, OptionError, UnprovenPairingError, VariableNotFoundError
from .formats.keras.layout import KerasLayout, fitting_use_ema, infer_use_ema
from .formats.keras.optimizer_choice import custom_note
from .formats.keras.stated import LoopOrder, stated_keys
from .formats.keras.stated_names import by_position
from .formats.keras.tfk_stated_optimizer import unstated_error
from .keras_assumed import live_assumptions, refuse_assumed, warn_assumed
from .keras_ema import (
    keras_layout,
    no_copies_error,
    optimizer_named,
    require_keras_pairing,
    shown_names,
    undecided_error,
    var_path,
)
from .keras_layout_values import refuse_unproven_layout
from .keras_named import by_names, legacy_stated
from .keras_order_values import refuse_contradicted_order
from .keras_twins import explained_by_twins
from .keras_unstepped import refuse_unstepped
from .wording import agreeing, counted, noun

__all__ = ["apply_keras_ema"]


def _dtype_name(dtype) -> str:
    return str(getattr(dtype, "name", dtype))


def apply_keras_ema(model, path, *, use_ema: bool | None = None,
                    load_weights: bool = True, trainable=None,
                    loop_order: bool = False, strict: bool = False,
                    not_swapped: bool = False, fit_order: bool = False,
                    optimizer: str | None = None) -> list[str]:
    """Loads a Keras file's optimizer EMA copies into ``model``'s trainable variables.

    The model must be built with the architecture that wrote ``path``. For a ``.keras`` of a
    Sequential/Functional model the file decides: its ``config.json`` records which weights the
    optimizer held, so each weight of ``model.weights`` gets its own average (also those of
    layers frozen after training), and a model frozen differently (a trainable weight with no
    average in the file) is refused. config.json's flags are those at save time: where
    another set of layers of the same shapes fits the averages too (a layer unfrozen and
    another frozen since the optimizer was built), the file proves nothing and ``trainable``
    must say which weights the optimizer was built with (refused otherwise). For a bare
    ``.weights.h5`` (and subclassed models) **the live model decides**: copies are paired with
    ``model.trainable_variables`` by position, as the Keras optimizer pairs them, and their
    number must fit the file exactly; build the model with its layers trainable as when the
    optimizer was built. A legacy ``.h5`` names each copy after its weight: a name only one
    weight has pairs it (with the live variable at that weight's position in
    ``model.weights``), whatever order built the optimizer; ``trainable`` decides where several
    weights share a name, and is refused where the names contradict it. Every shape and dtype
    is checked. Never imports TensorFlow itself:
    the model's own backend assigns.

    Args:
        model: a built ``keras.Model`` (Keras 3) or ``tf_keras.Model`` (Keras 2; its variables'
            paths are their names without ``:0``).
        path (`str`): the ``.keras``, ``.weights.h5`` or Keras ``.h5`` file.
        use_ema (`bool`, *optional*): state whether the file's optimizer ran with
            ``use_ema=True``, for a bare ``.weights.h5`` whose layout cannot tell (nearly every
            optimizer: gradient accumulation without EMA writes the same variables).
        load_weights (`bool`, *optional*, defaults to `True`): first ``model.load_weights(path)``,
            so weights without an average (BatchNormalization statistics, frozen layers) come
            from the same file.
        trainable (*optional*): the weights the optimizer was built with, in
            ``model.trainable_variables`` order at that time: the model's variables
            (``model.trainable_variables`` with the layers trainable as then: matched by their
            position in ``model.weights`` where the file records that order, never by the
            names Keras numbers per process), variable paths or names as ``--trainable`` takes
            them (numbered layer names refused where the file does not prove them). Each of
            ``model.weights`` then gets the average of its own position in the file, whatever
            the live model's flags.
        loop_order (`bool`, *optional*, defaults to `False`): ``trainable`` lists the
            variables in a custom training loop's order (the one its first
            ``apply_gradients()`` got), which may differ from the model's; refused otherwise
            where a ``.keras`` records the model's (``--loop-order``).
        strict (`bool`, *optional*, defaults to `False`): refuse, before anything is loaded,
            a pairing that rests on an assumption the file cannot prove
            (:mod:`~ckpt_tools.keras_assumed`): ``fit()``'s build order for weights of equal
            shapes (``trainable`` states it), or that the file was not saved swapped by
            ``SwapEMAWeights(swap_on_epoch=True)`` (then its weights are the averages:
            ``model.load_weights(path)``).
        not_swapped (`bool`, *optional*, defaults to `False`): state that the file was not
            saved swapped so (``--not-swapped``): ``strict`` then does not refuse that reading.
        fit_order (`bool`, *optional*, defaults to `False`): state that ``fit()`` built the
            optimizer, from ``model.trainable_variables`` (``--fit-order``): the copies pair
            with them in that order by statement (not checked against values, not assumed);
            not with ``trainable``.
        optimizer (`str`, *optional*): a bare ``.weights.h5``: the optimizer's Keras
            built-in class and its variable-making options, ``"adam:amsgrad"`` (as
            :func:`~ckpt_tools.open_checkpoint`'s ``optimizer``).

    Returns:
        `list[str]`: paths of the variables that now hold EMA values, in order.

    Raises:
        EmaError: the model has LoRA-enabled layers (their merged kernel cannot take the
            averages), no EMA copies in the file, the file cannot tell whether it holds any
            (state ``use_ema``), the model's layers are frozen differently from a ``.keras``
            config, or the copies' number, shapes or dtypes do not match the model's trainable
            variables (all mismatches are listed, naming both sides), or a ``.keras`` whose
            flags at save do not prove the pairing and no ``trainable`` is given, or
            (``strict``) the pairing rests on an assumption.
        VariableNotFoundError: a ``trainable`` name matches no weight of the file.
        OptionError: ``trainable`` given with ``fit_order``.

    Example:
        >>> model = build_model()  # the architecture that wrote the file  # doctest: +SKIP
        >>> apply_keras_ema(model, "run/ckpt-epoch3.keras", not_swapped=True)  # doctest: +SKIP
        ['dense/kernel', 'dense/bias', ...]
    """
    try:
        live = list(model.trainable_variables)
        every = list(model.weights)
    except AttributeError:
        raise EmaError(f"expected a Keras model, got {type(model).__name__}") from None
    path = os.fspath(path)
    _refuse_lora(model, path)
    if fit_order and (trainable is not None or loop_order):
        raise OptionError(f"{path}: fit_order=True states fit()'s order "
                          "(model.trainable_variables), trainable=/loop_order= another: give one")
    with open_checkpoint(path, use_ema=use_ema, not_swapped=not_swapped,
                         fit_order=fit_order, optimizer=optimizer) as ckpt:
        layout = keras_layout(ckpt)
        # a damaged archive: exit 4 here, not Keras' BadZipFile from load_weights below
        ckpt.reader.check_member()
        stated = trainable is not None
        if stated and layout.kind == "legacy":
            # the names pair the copies; a statement is checked against them
            ckpt.reader.restate_use_ema(use_ema, trainable=legacy_stated(
                layout, every, list(trainable), loop_order))
            layout = ckpt.reader.keras
        elif stated:
            names = _stated(ckpt, layout, every, list(trainable))
            ckpt.reader.restate_use_ema(use_ema, trainable=LoopOrder(names) if loop_order
                                        else names)
            layout = ckpt.reader.keras
            require_keras_pairing(ckpt, twins=False)  # the statement must pair every average
        elif layout.frozen_unproven:
            note = next((n for n in layout.notes if "sets of layers fit" in n), "")
            said = shown_names(ckpt, note).replace(  # the API's option, not the CLI's
                "pass --trainable with the weights", "pass trainable=[...] with the variables")
            # trainable= decides, as --trainable does for ema_map/export_weights (u25 F1)
            raise UnprovenPairingError(f"{path}: {said}; the live model's flags (those "
                                       "load_model sets are config.json's) do not decide it "
                                       "either", "--trainable")
        targets, keys = (None, None) if use_ema is False else _by_file(ckpt, layout, every,
                                                                        live, stated)
        if targets is None and use_ema is not False and layout.kind == "legacy":
            targets, keys = by_names(ckpt, layout, every)
            stated = stated or targets is not None  # proven by the names, nothing assumed
        if targets is None and stated and use_ema is not False:
            targets, keys = _by_paths(ckpt, layout, every)
        if targets is None:
            own = _own_train_step(model)
            if own:
                raise EmaError(
                    f"{path}: the file does not record the order the optimizer got the "
                    f"weights in, and {own} overrides train_step, so it may have built the "
                    "optimizer in another order than model.trainable_variables: pass "
                    "trainable=[...] with the variables in the order its first apply() got "
                    "them (e.g. [v.path for v in head.trainable_variables + "
                    "body.trainable_variables])")
            if not live and every:  # built, but frozen for evaluation
                raise EmaError(
                    f"{path}: none of the model's {len(every)} weights is trainable "
                    "(model.trainable=False, as set for evaluation?), and its "
                    "trainable_variables are what the averages pair with here: set the "
                    "layers trainable as when the optimizer was built, or pass "
                    "trainable=[...] with the weights it was built with")
            targets, keys = live, _ema_keys(ckpt, layout, live, use_ema)
        problems = []
        for v, key in zip(targets, keys, strict=True):
            entry = ckpt.entry(key)
            shape, dtype = tuple(int(d) for d in v.shape), _dtype_name(v.dtype)
            if shape != entry.shape or dtype != entry.dtype_name:
                problems.append(f"{var_path(v)} {list(shape)} {dtype} vs {key} "
                                f"({layout.paths.get(key) or 'EMA copy'}) {list(entry.shape)} "
                                f"{entry.dtype_name}")
        if problems:
            raise EmaError(f"{path}: {len(problems)} of {len(targets)} EMA copies do not match "
                           f"the model's trainable variables (model vs file): {problems[0]}"
                           + (f"; also {'; '.join(problems[1:])}" if problems[1:] else ""))
        if layout.tf_keras and layout.stated_optimizer is None and \
                layout.optimizer_config is None:  # a bare tf_keras file: --optimizer decides
            raise unstated_error(path, layout)
        # the values must prove a bare .weights.h5's copies averages (a custom optimizer's slot)
        refuse_unstepped(ckpt, {k: layout.averages.get(k) for k in keys})  # iteration 0
        refuse_unproven_layout(ckpt, {k: layout.averages.get(k) for k in keys})
        if not stated:  # the copies' values may place them in another order (a custom loop)
            refuse_contradicted_order(ckpt)
        assumed = live_assumptions(ckpt, targets, stated)
        refuse_assumed(ckpt, assumed, strict=strict)  # not_swapped: always
        if load_weights and layout.kind == "legacy":
            _load_legacy_weights(model, ckpt, layout)
        elif load_weights:  # the file located (a directory names none Keras loads)
            model.load_weights(ckpt.path)
        for v, key in zip(targets, keys, strict=True):
            v.assign(np.array(ckpt.tensor(key)))
        warn_assumed(ckpt, assumed)
    return [var_path(v) for v in targets]


def _stated(ckpt: Checkpoint, layout: KerasLayout, every: list, trainable: list) -> list[str]:
    """``trainable=`` as ``--trainable`` names: the model's own variables (not their paths)
    by their position in ``model.weights`` where the file proves it (the file's keys, which no
    process numbered), each other item by its path."""
    at = {id(v): i for i, v in enumerate(every)}
    if trainable and all(not isinstance(v, str) and id(v) in at for v in trainable):
        keys = by_position(layout, [tuple(int(d) for d in v.shape) for v in every],
                           [at[id(v)] for v in trainable], lambda k: ckpt.entry(k).shape)
        if keys is not None:
            return keys
    return [v if isinstance(v, str) else var_path(v) for v in trainable]


def _own_train_step(model) -> str:
    """The class of ``model`` that overrides Keras' ``train_step`` (a GAN, a VAE, a model
    applying gradients part by part), or ``""`` where Keras' own runs."""
    for cls in type(model).__mro__:
        if "train_step" in vars(cls):
            module = cls.__module__ or ""
            return "" if module.split(".")[0] in ("keras", "tf_keras") else cls.__qualname__
    return ""


def _by_paths(ckpt: Checkpoint, layout: KerasLayout, every: list):
    """``(variables, EMA copy keys)`` for copies the caller's ``trainable`` paired with the
    file's weights, each live variable found by its path (``stated_keys``), for files whose
    weights are not in ``model.weights`` order (subclassed models).

    Raises:
        EmaError: a paired weight of the file that no live variable's path names.
    """
    var_of: dict[str, object] = {}
    try:  # all at once: a layer's n-th variable is its vars/n-1 only counted in order
        found = stated_keys(layout, [var_path(v) for v in every], set(layout.model))
    except (EmaError, VariableNotFoundError):
        found = []
    if len(found) == len(every) and len(set(found)) == len(found):
        var_of = dict(zip(found, every, strict=True))
    pairs = [(var_of.get(w), a) for a, w in layout.averages.items() if w is not None]
    unnamed = [layout.paths.get(w, w) for (v, a), w in zip(
        pairs, [w for w in layout.averages.values() if w is not None], strict=True) if v is None]
    if unnamed:
        raise EmaError(f"{ckpt.path}: no variable of the model is named like the file's "
                       f"{', '.join(unnamed[:4])}: build the model with the architecture "
                       "that wrote the file (variable paths as the file records them)")
    return [v for v, _ in pairs], [a for _, a in pairs]


def _refuse_lora(model, path: str) -> None:
    """Refuses a model with LoRA-enabled layers: Keras saves such a layer's kernel merged
    with the raw LoRA update (``base + a @ b``) and not the factors, so writing the factors'
    averages on top would count the update twice, and the base kernel is not in the file.

    Raises:
        EmaError: naming the LoRA-enabled layers.
    """
    flatten = getattr(model, "_flatten_layers", None)
    layers = list(flatten(include_self=False, recursive=True)) if callable(flatten) else list(
        getattr(model, "layers", []))
    lora = [getattr(layer, "path", None) or layer.name for layer in layers
            if getattr(layer, "lora_enabled", False)]
    lora += [str(v.path).rsplit("/", 1)[0] for v in getattr(model, "weights", [])
             if str(getattr(v, "path", "")).rsplit("/", 1)[-1].startswith("lora_")
             and str(v.path).rsplit("/", 1)[0] not in lora]
    if lora:
        raise EmaError(
            f"{path}: {noun(len(set(lora)), 'layer')} {', '.join(dict.fromkeys(lora))} "
            f"{agreeing(len(set(lora)), 'has', 'have')} LoRA enabled: Keras saves "
            "their kernel merged with the LoRA update and not the factors, so their EMA "
            "copies cannot be applied from a Keras file (the update would count twice); "
            "restore the run's tf.train.Checkpoint with apply_ema instead")


def _by_file(ckpt: Checkpoint, layout: KerasLayout, every: list, live: list,
             stated: bool = False):
    """``(variables, EMA copy keys)`` paired through the file's own record, or ``(None, None)``.

    A ``.keras`` of a Sequential/Functional model records each layer's ``trainable`` flag and
    the order of ``model.weights``, so its averages are already paired with weight keys (those
    of layers frozen after the optimizer was built included). Position ``i`` of the live
    model's ``weights`` is then the file's weight ``i``, and each gets its own average whatever
    the live model's trainable flags: never another layer's, as pairing by position with
    ``model.trainable_variables`` would give a model frozen differently. ``stated``: the
    averages were paired through the caller's ``trainable`` (then also for a bare
    ``.weights.h5``, and the live flags are not checked).

    Raises:
        EmaError: the live model has another number of weights, or a weight trainable in the
            model has no EMA copy in the file (its layers are frozen differently from the
            file's config.json: the error names them).
    """
    if layout.kind != "keras3" or not (layout.configured or stated) or not layout.ordered:
        return None, None
    if not layout.averages or any(t is None for t in layout.averages.values()):
        return None, None
    name = ckpt.path  # the whole path: a directory may have led to this file
    if len(every) != len(layout.model) and explained_by_twins(ckpt, every):
        return None, None  # a tied variable, listed once: the live model pairs it
    if len(every) != len(layout.model):
        raise EmaError(f"{name} holds {len(layout.model)} model weights but the model has "
                       f"{len(every)}: build the model with the architecture that wrote it")
    averaged = set(layout.averages.values())
    mine = {id(v) for v in live}
    stray = [(v, k) for v, k in zip(every, layout.model, strict=True)
             if id(v) in mine and k not in averaged]
    if stray and not stated:
        odd = [f"{var_path(v)} is {'trainable' if v.trainable else 'frozen'} here, "
               f"{'trainable' if layout.trainable.get(k) else 'frozen'} in the file"
               for v, k in zip(every, layout.model, strict=True)
               if bool(v.trainable) != bool(layout.trainable.get(k))]
        raise EmaError(
            f"{name}: the optimizer kept no EMA copy of {counted(len(stray), 'weight')} "
            "trainable in the "
            f"model ({', '.join(var_path(v) for v, _ in stray[:4])}"
            + (" ..." if len(stray) > 4 else "") + ")"
            + (f"; layers frozen differently from config.json: {'; '.join(odd[:4])}"
               if odd else "")
            + ": set layer.trainable as when the file was saved (keras.models.load_model(path) "
            "does) before applying; the file pairs the averages it holds itself")
    copy_of = {t: k for k, t in layout.averages.items()}
    pairs = [(v, copy_of[k]) for v, k in zip(every, layout.model, strict=True) if k in copy_of]
    return [v for v, _ in pairs], [k for _, k in pairs]


def _load_legacy_weights(model, ckpt: Checkpoint, layout: KerasLayout) -> None:
    """``model.load_weights`` for a legacy ``.h5``, by position like Keras' legacy loader.

    Done here because Keras 3.15 cannot read back the bfloat16 weights its legacy writer
    stores (untagged 2-byte opaque values: "No cast function available").
    """
    weights = list(model.weights)
    if len(weights) != len(layout.model):
        raise EmaError(f"{ckpt.path} holds {len(layout.model)} model weights but the model has "
                       f"{len(weights)}: build the model with the architecture that wrote it")
    problems = []
    for v, key in zip(weights, layout.model, strict=True):
        entry = ckpt.entry(key)
        if tuple(int(d) for d in v.shape) != entry.shape or _dtype_name(v.dtype) != \
                entry.dtype_name:
            problems.append(f"{var_path(v)} {list(v.shape)} {_dtype_name(v.dtype)} vs {key} "
                            f"{list(entry.shape)} {entry.dtype_name}")
    if problems:
        raise EmaError(f"{ckpt.path}: {counted(len(problems), 'weight')} "
                       f"{agreeing(len(problems), 'does', 'do')} not match the model (model vs "
                       f"file): {'; '.join(problems)}")
    for v, key in zip(weights, layout.model, strict=True):
        v.assign(np.array(ckpt.tensor(key)))


def _ema_keys(ckpt: Checkpoint, layout: KerasLayout, live: list, use_ema: bool | None):
    if not live:
        raise EmaError("the model has no trainable variables: build it (call it on data, or "
                       "model.build(shape)) before applying EMA weights")
    if layout.kind == "legacy":
        if not layout.averages:
            raise no_copies_error(ckpt, layout)
        keys = list(layout.averages)
    elif layout.nested:  # a MultiOptimizer's averages: nothing pairs them by position
        raise no_copies_error(ckpt, layout)
    else:
        specs = [(tuple(int(d) for d in v.shape), _enum(v.dtype)) for v in live]
        decided = use_ema if use_ema is not None else infer_use_ema(
            layout, ckpt.entries(), specs)
        if decided is None:
            raise undecided_error(ckpt, layout)
        if not decided:
            raise no_copies_error(ckpt, layout)
        if layout.custom_optimizer:  # averages first is Keras' built-in order only
            raise EmaError(f"{ckpt.path}: {custom_note(layout, len(layout.optimizer_vars))}")
        keys = layout.optimizer_vars[layout.ema_offset : layout.ema_offset + len(live)]
        proven = bool(layout.averages) and None not in layout.averages.values()
        if layout.averages and len(layout.averages) != len(live):
            keys = list(layout.averages)
        elif not proven and True not in fitting_use_ema(layout, ckpt.entries(), specs):
            # A bare .weights.h5 whose count of averages the file leaves open: it must be
            # exactly one per trainable variable of this model, or position pairs wrongly.
            raise EmaError(
                f"{ckpt.path}: its {len(layout.optimizer_vars)} optimizer variables do not fit "
                f"EMA copies of exactly the model's {len(live)} trainable variables (plus the "
                f"{optimizer_named(layout)}'s own slots, whose number ckpt does not "
                "prove for every optimizer class, e.g. Muon's by each weight's rank): if the "
                "model is the architecture that wrote the file, its layers trainable as when "
                "the optimizer was built, state it: trainable=model.trainable_variables (the "
                "weights the optimizer was built with, in that order)")
    if len(keys) != len(live):
        raise EmaError(f"{ckpt.path} holds {len(keys)} EMA copies but the model has {len(live)} "
                       "trainable variables: build the model with the architecture that "
                       "wrote the file, its layers trainable as when the optimizer was built "
                       "(a layer frozen after training keeps its average in the file)")
    return keys


def _enum(dtype) -> int:
    from .formats.dtypes import enum_of

    try:
        return enum_of(_dtype_name(dtype))
    except Exception:
        return -1

"""What each tensor of a Keras 3 weight file (``.weights.h5``, ``.keras``) is:
:func:`analyze_keras3`, which :func:`~ckpt_tools.formats.keras.layout.analyze` calls, and the
config.json readings it rests on (a custom optimizer or model class, attached optimizers,
LoRA layers).

Keras 3 stores values by position, never by name. What Keras 3.15 writes (checked by
``fixtures/make_keras_fixtures.py``):

- a layer's ``vars/<i>``: its trainable variables, then its non-trainable ones
  (BatchNormalization: ``gamma``, ``beta``, ``moving_mean``, ``moving_variance``; ``gamma``/``beta``
  absent when ``scale``/``center`` is off);
- the layers of a Sequential/Functional model sit in ``layers/<snake_case class name>[_N]``
  (``dense``, ``dense_1``…; ``_N`` counts per class, in model order); other sublayers sit under
  their attribute name (``query_dense``), visited alphabetically, which can differ from the
  order of ``model.trainable_variables``: such sublayers are paired by shape only;
- ``optimizer/vars/<i>`` is ``optimizer.variables``: ``iteration``, ``learning_rate`` (only when it
  is a float, not a schedule), then with ``use_ema=True`` one ``<path>_average`` per trainable
  variable in ``model.trainable_variables`` order, then ``gradient_accumulator`` copies (with
  ``gradient_accumulation_steps``), then the slots: SGD ``momentum`` per variable, Adam
  ``momentum`` and ``velocity`` interleaved per variable, and so on (``_SLOTS``).

Whether ``use_ema`` was on comes from ``config.json`` in a ``.keras`` archive; for a bare
``.weights.h5`` it is inferred from the count and shapes of the optimizer variables, and left
unknown (``None``) when two settings would write the same layout. Legacy ``.h5`` files name
every variable (``adam/dense_kernel_average``), so they are paired by name
(:mod:`~ckpt_tools.formats.keras.legacy_layout`).
"""

from __future__ import annotations

import re

from ...wording import agreeing, counted, noun
from .custom_order import mark_loose, note_loose_layers
from .layer_names import distinct_paths, name_vars
from .layout import KerasLayout
from .loss_scale import name_repeats, read_outer
from .model_tree import build_tree, flatten_tree, to_snake_case
from .nested_optimizers import nested_owners, refuse_nested
from .optimizer import plan_optimizer
from .optimizer_slots import OPTIMIZER_NAMES
from .stated import check_proven, check_stated, refuse_layer_count, stated_keys
from .stated_flags import contradicted
from .stated_pairs import paired_by_order, stated_pairs
from .submodel_order import note_nested

_BUILTIN_MODULES = ("keras.optimizers", "keras.src.optimizers", "tf_keras.optimizers",
                    "tf_keras.src.optimizers", "tf_keras.src.mixed_precision.loss_scale_optimizer",
                    "tf_keras.mixed_precision")
# LossScaleOptimizer (Keras 3) and tf_keras' LossScaleOptimizerV3, as config.json names them
_LOSS_SCALE = ("loss_scale_optimizer", "loss_scale_optimizer_v3")


def custom_optimizer(serialized: dict) -> str:
    """The class of a serialized optimizer (config.json's ``compile_config.optimizer``) that
    is not a Keras built-in, or of the one it wraps (LossScaleOptimizer); ``""`` for a
    built-in.

    Example:
        >>> custom_optimizer({"module": None, "class_name": "LookaheadSGD",
        ...                   "registered_name": "my>LookaheadSGD"})
        'my>LookaheadSGD'
        >>> custom_optimizer({"module": "keras.optimizers", "class_name": "SGD"})
        ''
    """
    module = serialized.get("module") or ""
    registered = serialized.get("registered_name")
    if registered not in (None, serialized.get("class_name")) or not module.startswith(
            _BUILTIN_MODULES):
        return str(serialized.get("registered_name") or serialized.get("class_name") or "?")
    inner = (serialized.get("config") or {}).get("inner_optimizer")
    return custom_optimizer(inner) if isinstance(inner, dict) else ""


def custom_model(config: dict) -> str:
    """The class config.json records for a model that is not Keras' own Functional or
    Sequential (``a9>FNet``: a subclass, which may override ``train_step``), or ``""``.

    Example:
        >>> custom_model({"module": None, "class_name": "FNet", "registered_name": "a9>FNet"})
        'a9>FNet'
        >>> custom_model({"module": "keras.src.models.functional", "class_name": "Functional",
        ...               "registered_name": "Functional"})
        ''
    """
    cls = config.get("class_name")
    if cls not in ("Functional", "Sequential", "Model"):
        return str(config.get("registered_name") or cls or "")
    registered = config.get("registered_name")
    if registered not in (None, cls) or not str(config.get("module") or "keras").startswith(
            ("keras", "tf_keras")):
        return str(registered or cls)
    return ""


def _optimizer_config(config: dict | None) -> tuple[str | None, dict | None]:
    opt = ((config or {}).get("compile_config") or {}).get("optimizer")
    if isinstance(opt, dict) and "class_name" in opt:
        return to_snake_case(opt["class_name"]), opt.get("config") or {}
    return None, None


_INNER = "optimizer/inner_optimizer"  # LossScaleOptimizer (mixed_float16) wraps the optimizer


def analyze_keras3(entries, config, owner_names, read, use_ema, tf_keras,
                    trainable=None, optimizer=None) -> KerasLayout:
    lay = KerasLayout("keras3")
    lay.attached = _attached_optimizers(entries, owner_names)
    model = {k: e for k, e in entries.items() if e.extra.get("section") == "model"
             and _owner_of(e.extra.get("owner"), lay.attached) is None
             and not (tf_keras and _is_metric(e))}
    owner_names = {o: n for o, n in owner_names.items()
                   if _owner_of(o, lay.attached) is None}
    root = build_tree(model, config, owner_names, lay.notes)
    lay.loose = mark_loose(root, model, config)
    model_class = custom_model(config) if config else ""
    if model_class and len(root.ordered) > 1 and isinstance((root.cfg or {}).get("layers"),
                                                              list):
        # A model class that is not Keras' own, built functionally (its config lists its
        # layers), may override train_step and build its optimizer from its layers in another
        # order than model.weights: the file orders the layers, not the optimizer's list, so
        # their order is read as unknown (a bag), as a subclassed model's sublayers are.
        root.bag, root.ordered = root.ordered + root.bag, []
        lay.notes.append(f"the model's class is {model_class}, not Keras' own (config.json): "
                         "it may override train_step and build its optimizer with its layers "
                         "in another order than model.weights")
    segments: list[tuple[str, list[str]]] = []
    groups: dict[int, list[list[str]]] = {}
    flatten_tree(root, segments, groups, tf_keras)
    lay.model = [k for _, keys in segments for k in keys]
    lay.ordered = all(kind == "seq" for kind, _ in segments)
    for seg, (kind, keys) in enumerate(segments):
        if kind == "bag":
            part = {k: i for i, ks in enumerate(groups.get(seg) or []) for k in ks}
            for k in keys:  # unknown sublayers: a layer's own weights keep their order
                lay.unordered[k] = (seg, part.get(k, model[k].extra.get("owner")))
    lay.configured = config is not None
    lay.flags = isinstance((root.cfg or {}).get("layers"), list)
    name_vars(root, model, lay, prefix=[root.name] if root.cls == "sequential" and root.name
               else [])
    if not tf_keras:  # tf_keras names its nested models' weights its own way (tf_keras.py)
        distinct_paths(lay, model)
        lay.tree = root
    lay.named = root
    lay.shapes = {k: (tuple(e.shape), e.dtype_name) for k, e in model.items()}
    lay.optimizer, lay.optimizer_config = _optimizer_config(config)
    module = (((config or {}).get("compile_config") or {}).get("optimizer") or {})
    if isinstance(module, dict):
        lay.optimizer_module = f"{module.get('module') or ''}.{module.get('class_name') or ''}"
        lay.custom_optimizer = custom_optimizer(module) if module.get("class_name") else ""
    # mixed_float16: LossScaleOptimizer's own vars/ repeat the wrapped optimizer's variables
    # after its loss-scale state; the wrapped optimizer's vars/ hold them in the plain layout.
    owner = _INNER if any(e.extra.get("owner") == _INNER for e in entries.values()) \
        else "optimizer"
    if owner == _INNER:
        lay.loss_scaled = True
        lay.notes.append("LossScaleOptimizer (mixed precision): the wrapped "
                         f"{owner_names.get(_INNER) or 'optimizer'}'s variables are used")
        if lay.optimizer in _LOSS_SCALE:
            inner = (lay.optimizer_config or {}).get("inner_optimizer") or {}
            lay.optimizer = to_snake_case(inner.get("class_name", "")) or None
            lay.optimizer_config = inner.get("config") if lay.optimizer else None
    if lay.optimizer is None and owner_names.get(owner):
        lay.optimizer = re.sub(r"_\d+$", "", owner_names[owner])
    if optimizer is not None:
        from .stated_optimizer import apply as apply_stated

        apply_stated(lay, optimizer, tf_keras)
    opt = sorted((k for k, e in entries.items() if e.extra.get("owner") == owner),
                 key=lambda k: entries[k].extra.get("index") or 0)
    lay.optimizer_vars = opt
    lay.other = [k for k, e in entries.items()
                 if (e.extra.get("section") == "optimizer" and k not in opt)
                 or _owner_of(e.extra.get("owner"), lay.attached) is not None]
    if lay.attached:
        lay.notes.append(
            f"the model keeps {counted(len(lay.attached), 'optimizer')} as attributes ("
            + ", ".join(f"{a} ({n})" for a, n in lay.attached.items())
            + "): which weights each was built with is not recorded in a Keras weight file, "
            "so their variables (EMA copies with use_ema=True) are not paired from it; "
            "save them in a tf.train.Checkpoint (model=..., and each optimizer), which "
            "records it")
    elif lay.other and owner != _INNER and not nested_owners(entries):
        lay.notes.append(f"{counted(len(lay.other), 'variable')} of nested optimizers "
                         f"{agreeing(len(lay.other), 'is', 'are')} not interpreted")
    elif owner == _INNER and not tf_keras:
        outer = sorted((k for k in lay.other if entries[k].extra.get("owner") == "optimizer"),
                       key=lambda k: entries[k].extra.get("index") or 0)
        read_outer(lay, entries, opt, outer, owner_names.get("optimizer")
                   or "loss_scale_optimizer")
    # Every weight the optimizer may have been built with, in model.weights order: the
    # trainable ones and those of layers frozen since (config.json records trainable as saved).
    frozen = set(lay.frozen)
    trained = [(k, seg) for seg, (_kind, keys) in enumerate(segments) for k in keys
               if lay.trainable[k] or k in frozen]
    if tf_keras:
        lay.other = [k for k, e in entries.items() if _is_metric(e)] + lay.other
        lay.order = lay.model + opt + lay.other
        return lay
    found = None
    if trainable:
        lay.loop_order = bool(getattr(trainable, "loop_order", False))
        lay.trainable_stated = True
        by_layer: list[str] = []
        keys = stated_keys(lay, trainable, {k for k, _ in trained}, by_layer, read)
        found = analyze_keras3(entries, config, owner_names, read, use_ema, tf_keras,
                               optimizer=optimizer)
        if lay.flags and lay.ordered:
            proven = list(found.averages.values()) if found.averages and None not in \
                found.averages.values() else None
            check_stated(lay, keys, [k for k, _ in trained], proven)
        lay.stated_flags = contradicted(lay, keys, entries)
        lay.trainable.update({k: k in set(keys) for k in lay.model})
        lay.frozen_left_out = [k for k in lay.frozen if k not in set(keys)]
        lay.frozen, segments, groups = [], [("seq", keys)], {}
        trained = [(k, 0) for k in keys]
        lay.notes.append(f"the {len(keys)} weights the optimizer was built with, in order, "
                         "were stated by the caller (--trainable)")
    plan_optimizer(lay, opt, entries, trained, segments, read=read, use_ema=use_ema,
                   bag_groups=groups, stated=bool(trainable),
                   layers=_layers(trained, segments, groups))
    if not lay.attached and owner != _INNER:
        refuse_nested(lay, entries)
    if found is not None:
        if config is not None:
            # Only a config.json naming the model's class proves the order (fit()'s
            # train_step builds the optimizer in model.weights order); a bare .weights.h5
            # records no class, so a --trainable moving its pairing is the caller's
            # statement (noted below).
            check_proven(lay, found.averages)
        lay.stated_pairs = stated_pairs(lay.averages, found.averages, entries)
        if config is None and lay.use_ema:
            refuse_layer_count(lay, found.copy_counts, by_layer)
    if lay.loose and None in lay.averages.values():
        note_loose_layers(lay)
    note_nested(lay, root)
    lora = _lora_layers(config)
    if lora and lay.use_ema and (not lay.averages or None in lay.averages.values()):
        # Keras saves a LoRA layer's kernel merged with a_raw @ b_raw and not its factors:
        # no --trainable (nor apply_keras_ema) can give base + a_ema @ b_ema from this file.
        lay.notes = [n for n in lay.notes if "apply_keras_ema" not in n] + [
            f"{noun(len(lora), 'layer')} {', '.join(lora[:4])} "
            f"{agreeing(len(lora), 'has', 'have')} LoRA enabled (lora_rank in config.json): "
            "Keras saves their kernel merged with the LoRA update and not its factors, so the "
            "EMA copies cannot be paired with weights they apply to from this file (no "
            "--trainable fits, and "
            "apply_keras_ema refuses); use the run's tf.train.Checkpoint (ckpt restore-ema, "
            "apply_ema), which keeps the base kernel and the factors"]
    opt_name = (owner_names.get(owner) or (lay.optimizer_config or {}).get("name")
                or "optimizer")
    by_order = paired_by_order(lay, entries)
    for key, name in lay.var_names.items():
        src = (lay.averages | lay.slots).get(key)
        if src or name in ("iteration", "learning_rate"):
            # Keras' name follows the fit() order where only that order pairs it (u15 F6):
            # marked '?', one naming scheme for the optimizer all the same (u32 F6)
            lay.paths[key] = (f"{opt_name}/{lay.paths[src].replace('/', '_')}_{name}" if src
                              else f"{opt_name}/{name}") + ("?" if src in by_order else "")
            if src in by_order:  # the mark is display: the name is the path without it (u33 F2)
                lay.order_marked.add(key)
    name_repeats(lay, owner_names.get("optimizer") or "loss_scale_optimizer")
    lay.order_marked |= {k for k, of in getattr(lay, "repeats", {}).items()
                         if of in lay.order_marked}
    lay.order = lay.model + opt + lay.other
    return lay


def _is_metric(entry) -> bool:
    """A tf_keras archive's compiled-metric state (``metrics/mean/vars/0``): not a layer."""
    return (entry.extra.get("owner") or "").split("/")[0] == "metrics"


def _attached_optimizers(entries, owner_names: dict[str, str]) -> dict[str, str]:
    """Optimizers a model keeps as attributes (outside ``optimizer/``): attribute path ->
    name. An optimizer's ``vars/0`` is its int64 scalar ``iteration`` and Keras names it
    after its class (``adam``, ``adam_1``); a layer with an int64 first variable and such
    a name is not told apart (nor is one needed: it would hold a step, not a weight)."""
    found: dict[str, str] = {}
    for e in entries.values():
        owner = e.extra.get("owner") or ""
        name = owner_names.get(owner) or ""
        if (e.extra.get("index") == 0 and owner and owner.split("/")[0] != "optimizer"
                and e.extra.get("section") == "model" and tuple(e.shape) == ()
                and e.dtype_name == "int64"
                and re.sub(r"_\d+$", "", name) in OPTIMIZER_NAMES):
            found[owner] = name
    return found


def _owner_of(owner: str | None, attached: dict[str, str]) -> str | None:
    """The attached optimizer ``owner`` belongs to (itself or a wrapped inner optimizer)."""
    if not owner or not attached:
        return None
    return next((a for a in attached if owner == a or owner.startswith(a + "/")), None)


def _lora_layers(config) -> list[str]:
    """Names of the layers config.json records with LoRA enabled (a ``lora_rank``)."""
    found: list[str] = []

    def walk(node) -> None:
        if isinstance(node, dict):
            cfg = node.get("config")
            if isinstance(cfg, dict) and cfg.get("lora_rank"):
                found.append(str(cfg.get("name", node.get("class_name", "?"))))
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(config)
    return found


def _layers(trained, segments, groups) -> list[list[int]]:
    """Indexes into ``trained`` of each layer's weights, in model order: a ``seq`` segment is
    one layer's weights; a bag's sublayers where known, else each weight alone."""
    pos = {k: i for i, (k, _) in enumerate(trained)}
    out = []
    for seg, (kind, keys) in enumerate(segments):
        parts = [keys] if kind == "seq" else (groups.get(seg) or [[k] for k in keys])
        for part in parts:
            idx = [pos[k] for k in part if k in pos]
            if idx:
                out.append(idx)
    return out

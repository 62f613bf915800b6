"""``.keras`` archives written by tf_keras (Keras 2, ``metadata.json`` says ``keras_version``
2.x): what differs from Keras 3, applied on top of the Keras 3 analysis.

- Compiled metrics are saved (``metrics/mean/vars/0``): metric state, not model weights.
- The optimizer saves ``optimizer.variables`` of the tf_keras optimizers (``tf.keras.optimizers``
  since TF 2.11): ``iteration``, then, with ``use_ema=True``, one average per trainable variable
  in ``model.trainable_variables`` order, then the slots of each variable in turn
  (``Adam``: ``m``, ``v``). There is no ``learning_rate`` variable.
- The variable groups carry no names, so readable paths come from the layer directories.
"""

from __future__ import annotations

import re

from ...wording import counted
from .optimizer_choice import custom_note
from .optimizer_slots import spec
from .stated_optimizer import config
from .tf_keras_bags import bag_targets, only_count
from .tfk_stated_optimizer import refuse_count
from .tfk_stated_optimizer import sizes as stated_sizes

# Slots tf_keras optimizers create per variable (config -> groups): each group is one loop over
# the variables in build(), creating its names in turn for each variable. SGD creates "m" even
# without momentum.
_ADAM = lambda c: [["m", "v"]] + ([["vhat"]] if c.get("amsgrad") else [])  # noqa: E731
_SLOTS = {
    "adam": _ADAM,
    "adam_w": _ADAM,
    "nadam": lambda c: [["m", "v"]],
    "adamax": lambda c: [["m", "u"]],
    "sgd": lambda c: [["m"]],
    "lion": lambda c: [["m"]],
    "adagrad": lambda c: [["accumulator"]],
    "ftrl": lambda c: [["accumulator", "linear"]],
    "adadelta": lambda c: [["accumulated_grad", "accumulated_delta_var"]],
    "rmsprop": lambda c: [["velocity"]] + ([["momentum"]] if c.get("momentum") else []) + (
        [["average_gradient"]] if c.get("centered") else []),
}


def slot_groups(cls: str, cfg: dict) -> list[list[str]]:
    """The slot groups (:data:`_SLOTS`) the tf_keras built-in ``cls`` makes with ``cfg``."""
    return _SLOTS[cls](cfg)


def is_tf_keras(metadata: dict | None) -> bool:
    """Returns whether a ``.keras`` archive's ``metadata.json`` names a Keras 2 (tf_keras)."""
    version = str((metadata or {}).get("keras_version", ""))
    return re.match(r"2\.\d", version) is not None


def is_tf_keras_weights(entries) -> bool:
    """Whether a bare ``.weights.h5`` (no config) was written by tf_keras: its compiled
    metrics' state sits in a top-level ``metrics/<metric>/vars`` group, which Keras 3 never
    writes, and its optimizer has no ``learning_rate`` variable after ``iteration`` (Keras 3's
    ``vars/1`` where the rate is a float)."""
    if not any((e.extra.get("owner") or "").startswith("metrics/") for e in entries.values()):
        return False
    opt = sorted((e for e in entries.values() if e.extra.get("owner") == "optimizer"),
                 key=lambda e: e.extra.get("index") or 0)
    return not (len(opt) > 1 and opt[1].shape == () and opt[1].dtype_name.startswith("float"))


# Settings that change which slots a built-in tf_keras optimizer creates (see _SLOTS)
_SETTINGS = ({}, {"amsgrad": True}, {"momentum": 0.9}, {"centered": True},
             {"momentum": 0.9, "centered": True})


def fitting_use_ema(shapes: list, rest: list, accept=None, only=None) -> set[bool]:
    """``use_ema`` from a tf_keras optimizer's variables when no config records it: with
    averages, ``rest`` (the variables after ``iteration``) is one per weight (in
    ``model.trainable_variables`` order), then the slots of a built-in optimizer
    (:data:`_SLOTS`: each group a loop over the weights creating its slots for each in turn,
    Adam ``m``, ``v``; ``only``: the groups' sizes of a stated class); without, only the
    slots. ``shapes``/``rest`` are specs
    (:func:`~.optimizer.spec`); ``accept(order)`` says whether a sequence of specs is an order
    the weights may have been trained in (default: ``shapes``' own; a subclassed model's
    sublayers, whose order the file does not record, allow several). Returns the ``use_ema``
    values of the readings that fit (both: e.g. SGD with averages and RMSprop with momentum
    without; none: a custom optimizer, another model)."""
    n = len(shapes)
    if accept is None:
        def accept(order: list) -> bool:
            return order == list(shapes)
    groups = only or {tuple(len(g) for g in slots(cfg)) for slots in _SLOTS.values()
                      for cfg in _SETTINGS}
    found = set()
    for use_ema in (True, False):
        for sizes in groups:
            g = 1 if use_ema else sizes[0]
            order = list(rest[: g * n : g])  # the first loop's variables: the weights' order
            writes = (order if use_ema else []) + [
                s for size in sizes for s in order for _ in range(size)]
            if n and writes == list(rest) and accept(order):
                found.add(use_ema)
    return found


def legacy_name(lay) -> str:
    """The class path of a tf_keras legacy optimizer (``tf_keras.optimizers.legacy.Adam``)."""
    return "tf_keras.optimizers.legacy." + lay.optimizer_module.rsplit(".", 1)[-1]


def is_legacy(lay) -> bool:
    """Whether config.json names a tf_keras legacy optimizer (no ``use_ema``)."""
    return lay.optimizer_module.rsplit(".", 1)[0].endswith(".legacy")


def adjust(lay, entries, use_ema: bool | None = None, trainable=None) -> None:
    """Rewrites a Keras 3 :class:`~ckpt_tools.formats.keras.layout.KerasLayout` of a tf_keras
    archive in place: metric state leaves the model, the optimizer's variables get their
    tf_keras meaning, model weights get ``<layer>/<weight>`` paths. ``use_ema`` is the caller's
    statement (``--use-ema``/``--no-use-ema``), which overrides the config; ``trainable`` the
    caller's statement of the weights the optimizer was built with (``--trainable``, names as
    :func:`~ckpt_tools.formats.keras.layout.stated_keys` reads them).

    Raises:
        VariableNotFoundError: a ``trainable`` name matches no weight.
        EmaError: ``trainable`` contradicts what the file proves (order or set).
    """
    lay.tf_keras = True
    # metric state (layout.analyze left it out of the model's layers)
    for key in lay.other:
        if entries[key].extra.get("owner", "").startswith("metrics"):
            lay.paths[key] = entries[key].extra.get("owner", "metrics") + "/" + str(
                entries[key].extra.get("index"))
    for key in lay.model:
        owner = entries[key].extra.get("owner", "")
        layer = owner.rsplit("/", 1)[-1] if owner.startswith("layers/") else owner
        name = lay.paths.get(key, "").rsplit("/", 1)[-1]
        if layer and "/" not in lay.paths.get(key, ""):
            lay.paths[key] = f"{layer}/{name}"
    from .layer_names import distinct_paths

    distinct_paths(lay, entries)  # sublayers the file names alike (att/0): by attribute
    stated = None
    if trainable:
        from .stated import check_stated, stated_keys
        from .stated_flags import contradicted

        lay.loop_order = bool(getattr(trainable, "loop_order", False))
        lay.trainable_stated = True
        every = [k for k in lay.model if lay.trainable.get(k) or k in set(lay.frozen)]
        stated = stated_keys(lay, trainable, set(every))
        _optimizer(lay, entries, use_ema)  # what the file proves without the statement
        proven = list(lay.averages.values()) if lay.averages and not lay.frozen_unproven \
            and None not in lay.averages.values() else None
        check_stated(lay, stated, every, proven)
        alone = dict(lay.averages) if proven is not None else {}
        lay.notes = [n for n in lay.notes if "tf_keras optimizer variables" not in n
                     and "sets of layers fit" not in n]
        lay.frozen_unproven = False
        lay.stated_flags = contradicted(lay, stated, entries)
        lay.trainable.update({k: k in set(stated) for k in every})  # as stated, not as saved
    _optimizer(lay, entries, use_ema, stated)
    if stated is not None:
        from .stated_pairs import stated_pairs

        lay.stated_pairs = stated_pairs(lay.averages, alone, entries)
    lay.order = lay.model + lay.optimizer_vars + lay.other


def _optimizer(lay, entries, stated: bool | None, trainable: list[str] | None = None) -> None:
    keys = lay.optimizer_vars
    lay.averages, lay.slots, lay.learning_rate = {}, {}, None
    lay.var_names = {}
    for key in keys:  # the Keras 3 reading named them; start over
        lay.paths.pop(key, None)
    if not keys:
        lay.use_ema, lay.ema_source = False, "layout"
        lay.ema_evidence = "no optimizer variables"
        if is_legacy(lay):  # a .keras saves no legacy optimizer state
            lay.use_ema, lay.ema_source = False, "config"
            lay.ema_evidence = (f"config.json: {legacy_name(lay)} (a legacy optimizer, no "
                                "use_ema)")
        return
    off = 0
    if entries[keys[0]].shape == () and entries[keys[0]].dtype_name in ("int64", "int32"):
        lay.iteration, off = keys[0], 1
        lay.var_names[keys[0]] = "iteration"
    lay.ema_offset = off
    cfg = lay.optimizer_config or {}
    rest = keys[off:]
    stated_opt = lay.stated_optimizer  # a bare file's, or a custom class' build order
    if stated is not None and "use_ema" not in cfg:  # a recorded one is checked, not replaced
        use_ema, lay.ema_source = stated, "stated"
        lay.ema_evidence = (f"stated by the caller ({'--use-ema' if stated else '--no-use-ema'}; "
                             f"Python: use_ema={stated})")
    elif lay.optimizer_config is not None:
        use_ema, lay.ema_source = bool(cfg.get("use_ema")), "config"
        lay.ema_evidence = "config.json (optimizer use_ema), tf_keras variable layout"
    else:
        now = [k for k in lay.model if lay.trainable.get(k)]
        found = fitting_use_ema([spec(entries[k]) for k in now], [spec(entries[k]) for k in rest],
                                lambda order: bag_targets(lay, entries, now,
                                                          [s for s, _ in order]) is not None,
                                only=stated_sizes(stated_opt))
        use_ema = found.pop() if len(found) == 1 else None
        lay.ema_source = "layout" if use_ema is not None else ""
        lay.ema_evidence = ("no optimizer config; tf_keras variable layout (iteration, "
                            f"{'one average per trainable weight, then ' if use_ema else ''}"
                            "the slots: the shapes fit no other reading)"
                            if use_ema is not None else "no optimizer config")
        if use_ema is None:
            lay.notes.append("cannot tell whether the tf_keras optimizer kept EMA copies (no "
                             "compile config, and its variables' shapes fit "
                             + ("both" if found else "no built-in tf_keras optimizer's layout "
                                "for all the weights the file holds: layers frozen when it was "
                                "built have no copies, and the file records no trainable "
                                "flags")
                             + "): pass --use-ema or --no-use-ema"
                             + ("" if found else " (with --use-ema, --trainable naming the "
                                "weights it was built with, in model order)"))
    if use_ema and lay.custom_optimizer and stated_opt is None:
        lay.use_ema = True
        lay.notes.append(custom_note(lay, len(rest)))
        return
    slot_names = _SLOTS[lay.optimizer](config(stated_opt) if stated_opt else cfg) \
        if lay.optimizer in _SLOTS else None
    trained = _built_with(lay, entries, rest, use_ema, slot_names, trainable)
    per = sum(map(len, slot_names or []))
    held = len([k for k in lay.model if lay.trainable.get(k)])
    fewer = not trainable and not len(rest) % (1 + per) and len(rest) // (1 + per) < held
    if use_ema and stated_opt and not fewer and (
            not trained or len(rest) != len(trained) * (1 + per)):
        # a stated class: its layout decides the count (unless it fits fewer weights than
        # the file holds: layers frozen when it was built, which --trainable states)
        refuse_count(lay, len(rest), len(trainable or trained) or held, per)
    if use_ema and lay.frozen_unproven:  # averages first, one per weight trainable at save
        lay.averages = dict.fromkeys(rest[:len([k for k in lay.model
                                                if lay.trainable.get(k)])])
    n = len(trained)
    averages = rest[:n] if use_ema and trained else []
    targets = list(trained)
    if averages and not trainable and len(averages) == n:
        # sublayers whose order the file does not record: tracking order, proven by shapes
        targets = bag_targets(lay, entries, trained, [entries[k].shape for k in averages]) \
            or [None] * n
        _note_unproven(lay, trained, targets)
    if len(averages) < n and averages:  # fewer variables than one average per weight: the
        # layout does not fit, so none is paired (refused, never shifted onto other weights)
        lay.averages.update(dict.fromkeys(averages))
        lay.notes.append(f"the tf_keras optimizer holds {len(rest)} variables, fewer than "
                         f"one EMA copy for each of the {n} weights it was built with")
        averages = []
    # without use_ema (or before the optimizer was built) there are no averages to pair
    for key, target in zip(averages, targets if averages else [], strict=True):
        lay.averages[key] = target
        if target is not None:
            lay.var_names[key] = "average"
    slots = rest[len(averages):]
    order = [(i, name) for group in slot_names or [] for i in range(n) for name in group]
    shapes = [entries[k].shape for k in (averages or trained)]
    named = slot_names is not None and len(slots) == len(order) and all(
        entries[key].shape == shapes[i] for key, (i, _) in zip(slots, order, strict=True))
    if use_ema and stated_opt and averages and not named:
        refuse_count(lay, len(rest), n, per)  # the count fits, the shapes do not
    for key, (i, name) in zip(slots, order if named else [], strict=False):
        if targets[i] is not None:
            lay.slots[key] = targets[i]
            lay.var_names[key] = name
    for key in slots:
        if key not in lay.averages:
            lay.slots.setdefault(key, None)
    lay.use_ema = bool(use_ema) if use_ema is not None else None
    opt_name = cfg.get("name") or lay.optimizer or "optimizer"
    for key, what in lay.var_names.items():
        src = (lay.averages | lay.slots).get(key)
        lay.paths[key] = f"{opt_name}/{what}/{lay.paths[src]}" if src else f"{opt_name}/{what}"
    for key in rest:
        lay.paths.setdefault(key, f"{opt_name}/{keys.index(key)}")


def _built_with(lay, entries, rest, use_ema, slot_names, stated=None) -> list[str]:
    """The weights the optimizer was built with (one average and one set of slots each, in
    ``model.trainable_variables`` order): ``stated`` by the caller, else those trainable at
    save, or every weight when layers were frozen after it was built (config.json records
    ``trainable`` as saved). Empty, with a note, when none fits the stored variables (never
    the first averages shifted onto the weights trainable now), or when the weights trainable
    at save fit but so does another set of layers of the same shapes (the flags may have
    changed since the optimizer was built: ``lay.frozen_unproven``)."""
    now = [k for k in lay.model if lay.trainable.get(k)]
    every = [k for k in lay.model if lay.trainable.get(k) or k in set(lay.frozen)]
    if not use_ema:
        return now
    per = sum(map(len, slot_names)) if slot_names is not None else None
    for keys in ([stated] if stated else [now] if every == now else [now, every]):
        count = len(keys) * (1 + per) if per is not None else None
        shapes = [entries[k].shape for k in keys]
        got = [entries[k].shape for k in rest[:len(keys)]]
        if (count is None or count == len(rest)) and (
                got == shapes if stated else bag_targets(lay, entries, keys, got) is not None):
            if per is None and every != now:
                break  # unknown slots: how many averages there are is unknown
            if per is None and not stated and not only_count(
                    shapes, [entries[k].shape for k in rest]):
                # unknown slots: fewer weights with more slots each fit as well
                named = (lay.optimizer_config or {}).get("name")  # a .keras names the class
                lay.notes.append(
                    f"the {len(rest)} tf_keras optimizer variables do not fit one average and "
                    f"the same slots for each of the {len(keys)} weights the file holds alone "
                    "(fewer weights with more slots each fit too, or none reads so), and "
                    + (f"ckpt does not know the slots per weight of its {named} (config.json)"
                       ", nor does the file record" if named else "the file records neither "
                       "the optimizer's class (its slots per weight) nor")
                    + " which layers were frozen when it was built (or held where it does "
                    "not save them): pass --trainable with the weights it was built with, in "
                    "model order, or use apply_keras_ema(model, path) (use_ema=True) with the "
                    "live model")
                return []
            if keys is now and every != now and not stated and _other_layers(lay, entries,
                                                                              now, every):
                return []
            if keys is every and every != now:
                lay.notes.append(
                    f"{counted(len(every) - len(now), 'weight')} of layers frozen after the "
                    "optimizer was "
                    f"built (trainable=False in config.json, e.g. "
                    f"{lay.paths.get(lay.frozen[0], lay.frozen[0])}) keep their EMA copies")
            return keys
    if stated:
        lay.notes.append(
            f"the {len(stated)} weights stated with --trainable do not fit the {len(rest)} "
            "tf_keras optimizer variables (one "
            "average" + (f" and {counted(per, 'slot')}" if per else "")
            + " per weight): state every weight the optimizer was built with, in model order")
        return []
    lay.notes.append(
        f"the {len(rest)} tf_keras optimizer variables do not fit one average"
        + (f" and {counted(per, 'slot')}" if per else "")
        + " per weight it may have been built with "
        f"({len(now)} {'trainable at save' if lay.configured else 'weights in the file'}"
        + (f", {len(every)} with the layers frozen since" if every != now else "")
        + "): EMA copies cannot be paired from the file; apply_keras_ema(model, path) with the "
        "model's layers trainable as when training ran pairs them"
        + ("" if lay.configured else "; or pass --trainable with the weights it was built "
           "with, in model order (this file records no trainable flags: layers frozen then "
           "have no copies)"))
    return []


def _other_layers(lay, entries, now: list[str], every: list[str]) -> bool:
    """Whether another set of whole layers than ``now`` (config.json's flags at save) has the
    same shapes, in model order; if so, notes the refusal and sets ``lay.frozen_unproven``."""
    from .optimizer_fit import layer_sets
    from .optimizer_slots import spec

    owners: dict[str, list[int]] = {}
    for i, k in enumerate(every):
        owners.setdefault(entries[k].extra.get("owner", ""), []).append(i)
    specs = [spec(entries[k]) for k in every]
    sub = [spec(entries[k]) for k in now]
    mine = tuple(every.index(k) for k in now)
    sets = [s for s in layer_sets(sub, specs, list(owners.values()), 64) if s != mine]
    if not sets:
        return False
    lay.frozen_unproven = True
    cands = sorted({lay.paths.get(every[i], every[i]) for s in sets + [mine] for i in s})
    lay.notes.append(
        f"{len(sets) + 1} sets of layers fit the EMA copies' shapes, so they cannot be "
        "paired (candidate weights: "
        f"{', '.join(cands[:6])}" + (" ..." if len(cands) > 6 else "") + "): config.json "
        "records the trainable flags at save time, which may differ from those when the "
        "optimizer was built (a layer unfrozen and another frozen since, same shapes), so it "
        "does not prove which weights the averages belong to: pass --trainable with the "
        "weights the optimizer was built with")
    return True


def _walk_label(key: str, shown: str) -> bool:
    """Whether ``key`` is shown by a name the saver made up (``layers/dense_1/vars/0`` shown
    as ``dense_1/kernel``): a list's layers numbered by class, not the layer's own name."""
    m = re.search(r"(?:^|/)layers/([^/]+)/vars/\d+$", key)
    return bool(m) and (shown == m.group(1) or shown.startswith(m.group(1) + "/"))


def _note_unproven(lay, trained: list[str], targets: list[str | None]) -> None:
    """Notes the refusal of the averages ``bag_targets`` could not pair."""
    open_ = [k for k in trained if k not in set(targets)]  # weights no average is proven of
    if not open_:
        if any(k in lay.unordered for k in trained):
            lay.ema_evidence += "; sublayer order proven by their shapes"
        return
    from .custom_order import note_loose

    if note_loose(lay, "", open_, f"{len(open_)} EMA copies average"):
        return
    subs = sorted({lay.paths.get(k, k).rsplit("/", 1)[0] for k in open_})
    made_up = [k for k in open_ if _walk_label(k, lay.paths.get(k, k))]
    lay.notes.append(
        f"{len(open_)} EMA copies belong to weights of sublayers of equal shapes ("
        f"{', '.join(subs[:4])}{' ...' if len(subs) > 4 else ''}) whose order the file does "
        "not record (tf_keras trains a layer's sublayers in the order it tracks them: "
        "attributes as assigned, a list by index, a dict by sorted key, and a Model's own "
        "weights after its sublayers' (save the variables it holds in a list or dict "
        "attribute, visited where that attribute was assigned: the .keras stores them as its "
        "own), a Layer's before; the .keras saves them "
        "alphabetically or by insertion), so they cannot be paired from it: pass --trainable "
        "with the weights the optimizer was built with, in model.trainable_variables order "
        + ("as the file's keys (layers/<layer>/vars/<i>, as 'ckpt list --json' shows them; "
           "the file names a list's layers by class in the order it saved them, not as Keras "
           "named them) " if made_up else "")
        + "(Python: apply_keras_ema(model, path))")
